"""Bad input the runner can see only once it has loaded things (a drafter that does not fit its target, an empty
prompt set, ...). Contract: raised before any decoding starts, with a one-line message that names the evidence
and, where there is one, the valid choice. `python -m remote` prints it as `error: <message>` and exits 2.
An engine arm's server that cannot start is an EngineStartError: `error: <its first line>`, then the server's last
lines, exit 1 (no traceback of ours: the cause is in the server's lines).
`first_line(exc)` is how a caught exception goes into such a message or an event.
"""


class SpecError(ValueError):
    """The run spec, or what it points at, cannot be run as asked."""


class EngineStartError(RuntimeError):
    """An engine's server exited or never answered; the message's first line says which, the rest its last lines."""


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`: one line, also for multi-line errors (transformers', Triton's)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
