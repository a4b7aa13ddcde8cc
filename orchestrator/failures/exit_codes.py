"""What a runner's exit code says by itself: the signal behind it, and the catalog entry it means.

Contract: `exit_signal(code)` reads a shell's 128+N and Python subprocess's -N as signal N; `classify_exit_code(code)`
gives the entry that claims the code in the catalog (137 / -9 -> process_killed), None for None or an unclaimed code.

Non-goals: exit codes the catalog does not list (a failed run that nothing explains is the scanner's unknown_crash).
"""
from __future__ import annotations

import signal

from .catalog import Catalog, Entry, load_catalog


def exit_signal(code: int | None) -> signal.Signals | None:
    """The signal behind an exit code: a shell reports signal N as 128+N, Python's subprocess as -N."""
    if code is None or 0 <= code <= 128:
        return None
    try:
        return signal.Signals(-code if code < 0 else code - 128)
    except ValueError:
        return None


def classify_exit_code(code: int | None, catalog: Catalog | None = None) -> Entry | None:
    """The catalog entry an exit code means by itself (137 / -9 -> process_killed), else None."""
    if code is None:
        return None
    return (catalog or load_catalog()).by_exit_code.get(code)
