"""Bad input the runner can see only once it has loaded things (a drafter that does not fit its target, an empty
prompt set, ...). Contract: raised before any decoding starts, with a one-line message that names the evidence
and, where there is one, the valid choice. `python -m remote` prints it as `error: <message>` and exits 2.
`first_line(exc)` is how a caught exception goes into such a message or an event.
"""


class SpecError(ValueError):
    """The run spec, or what it points at, cannot be run as asked."""


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`: one line, also for multi-line errors (transformers', Triton's)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
