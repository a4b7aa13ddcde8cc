"""Bad input the runner can see only once it has loaded things (a drafter that does not fit its target, an empty
prompt set, ...). Contract: raised before any decoding starts, with a one-line message that names the evidence
and, where there is one, the valid choice. `python -m remote` prints it as `error: <message>` and exits 2.
"""


class SpecError(ValueError):
    """The run spec, or what it points at, cannot be run as asked."""
