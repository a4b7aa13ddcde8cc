"""SIGTERM and SIGHUP (what `timeout`, SLURM, systemd and a closed terminal send) are handled as Ctrl-C is.

Contract: `install()` (main thread, once) makes both, and SIGINT unless it was ignored, raise `Interrupted`, a
KeyboardInterrupt, so every place that stops the runner on Ctrl-C does so for them too; `exit_code(exc)` is what the
CLI then exits with (128 + the signal: 130, 143, 129). A second signal while the first is handled is ignored: stopping
the runner is bounded (monitor.STOP_BOUND), and breaking it off halfway would leave the run RUNNING.
"""
from __future__ import annotations

import signal

HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum, frame) -> None:
    for sig in (*HANDLED, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def install() -> None:
    for sig in HANDLED:
        signal.signal(sig, _raise)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # a background job may ignore it
        signal.signal(signal.SIGINT, _raise)


def exit_code(exc: BaseException) -> int:
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def describe(exc: BaseException) -> str:
    """`Ctrl-C` or the signal's name, for messages and the `stopped_by` tag."""
    if isinstance(exc, Interrupted) and exc.signum != signal.SIGINT:
        return signal.Signals(exc.signum).name
    return "Ctrl-C"
