"""Who is still there: OS file locks that a process holds for as long as it does a thing, dropped by the kernel
when it dies (`kill -9`, a closed laptop), so a free lock means nobody does it any more.

Contract: `take(path)` holds a lock or returns None; `try_following(run_dir)` is the lock a job
(orchestrator.sweep.job) and attach hold while they follow a run (FOLLOW_LOCK); a sweep process holds SWEEP_LOCK in
its sweep dir; `free(path)` says whether nobody holds one. orchestrator.run.reap reads them to find what was left
behind.
"""
from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout

FOLLOW_LOCK = ".follow.lock"
SWEEP_LOCK = ".sweep.lock"


def take(path: Path) -> FileLock | None:
    """The lock file `path`, held by this process until released (or until it dies); None if another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def try_following(run_dir: Path) -> FileLock | None:
    """The follow lock of the run in `run_dir` (orchestrator.sweep.job and attach hold it while they follow it)."""
    return take(run_dir / FOLLOW_LOCK)


def free(path: Path) -> bool:
    """Whether nobody holds the lock file `path` (a directory that is gone holds nothing)."""
    if not path.parent.is_dir():
        return True
    lock = take(path)
    if lock is not None:
        lock.release()
    return lock is not None
