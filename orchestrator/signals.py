"""SIGTERM and SIGHUP (what `timeout`, SLURM, systemd and a closed terminal send) are handled as Ctrl-C is.

Contract: `install()` (main thread, once) makes both, and SIGINT unless it was ignored, raise `Interrupted`, a
KeyboardInterrupt, so every place that stops the runner on Ctrl-C does so for them too; `exit_code(exc)` is what the CLI
then exits with (128 + the signal: 130, 143, 129). A second signal while the first is handled is ignored, and a first
one during a run's final report (`deferred`) waits for the report's end: stopping the runner
(orchestrator.run.monitor.STOP_BOUND) and the report are bounded, and cut off halfway would leave the run RUNNING.
Sweeps: with `forward_to_workers()`, a parallel sweep's main process (which runs no job itself) passes the first signal
on to its joblib workers and waits for them to stop their runners and close their runs; a second raises there as
anywhere. `quiet_idle_workers()` (a joblib sweep's main process) starts loky's workers ignoring the three signals, and
`handling()` spans a job: handled within it, ignored again after it in a worker; one that reaches a worker's job outside
its run's handling raises `JobInterrupted`, which Hydra keeps as the job's failed result. `stop_sweep_at(sweep_dir)`:
the first signal writes STOP_MARKER there before it is passed on; each job checks `sweep_stopped` before it starts
anything and, stopped, does not run. `pending`: that first signal, for the CLI's exit code.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

HANDLED = (signal.SIGTERM, signal.SIGHUP)
_SIGNALS = (*HANDLED, signal.SIGINT)
pending: list[int] = []        # the signal a sweep's main process passed on to its workers
_forwarding = [False]
_marker: list[Path] = []       # a sweep's main process: its sweep dir's STOP_MARKER
_worker = [False]              # a joblib sweep's worker process
_busy = [False]                # ... running a job
ORPHAN_POLL_S = 1.0            # how often an idle worker looks whether its sweep's main process is still there
STOP_MARKER = ".stopped"


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self):   # rebuilt from the number (args hold the name): a joblib worker's result may carry one
        return type(self), (self.signum,)


class JobInterrupted(Exception):
    """A worker's job that a signal reached outside its run's own handling (before its runner launched, after its
    report). An Exception, unlike the Interrupted it replaces: Hydra's run_job keeps what the job raises of it as
    the job's failed result, where a KeyboardInterrupt would pass through run_job and end joblib's pool, killing the
    workers still stopping their runners."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def how(self) -> str:
        return describe(Interrupted(self.signum))


def _raise(signum, frame) -> None:
    if _worker[0] and not _busy[0]:   # a worker's job just ended (or has not begun): nothing of ours to stop
        _ignore()
        return
    first = not pending
    if first and _marker:   # before the workers hear of it: no job starts after this
        _marker[0].write_text("user" if signum == signal.SIGINT else signal.Signals(signum).name)
    if first and (_marker or _forwarding[0]):
        pending.append(signum)
    if first and _forwarding[0] and _forward(signum):
        return
    # Signals from now on are ignored: stopping the runner is bounded (orchestrator.run.monitor.STOP_BOUND), and
    # breaking it off halfway would leave the run RUNNING.
    _ignore()
    raise Interrupted(signum)


def install() -> None:
    for sig in HANDLED:
        signal.signal(sig, _raise)
    # a background job may ignore SIGINT; a worker ignores it between jobs (`handling`)
    if _worker[0] or signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise)


@contextlib.contextmanager
def handling():
    """One job: signals handled (`install`) while it runs; in a worker, ignored again once it ended. A worker's
    job that a signal reached outside its run's own handling raises JobInterrupted."""
    _busy[0] = True
    try:
        install()
        yield
    except KeyboardInterrupt as exc:
        if not _worker[0]:
            raise
        raise JobInterrupted(exc.signum if isinstance(exc, Interrupted) else signal.SIGINT) from None
    finally:
        # Not busy first: a signal whose handler runs from here on (Python runs it at its next check, which may
        # be in this block) finds the job ended and is dropped, where it used to raise out of the job: joblib
        # then took the worker's KeyboardInterrupt for the sweep's and killed the workers stopping their runners.
        _busy[0] = False
        if _worker[0]:
            _ignore()


@contextlib.contextmanager
def deferred(note: Callable[[str], None]):
    """The block runs to its end: bounded work that a signal must not cut off (a run's final MLflow upload, cut,
    left the run RUNNING). A first signal waits for the block's end (`note` gets its name, to say so) and then
    acts as it would have; a second leaves at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame) -> None:
        if held:
            _ignore()
            raise Interrupted(signum)
        held.append(signum)
        note(describe(Interrupted(signum)))

    ours = [sig for sig in _SIGNALS if signal.getsignal(sig) is _raise]
    for sig in ours:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig in ours:
            if signal.getsignal(sig) is hold:
                signal.signal(sig, _raise)
    if held:
        _raise(held[0], None)


def _ignore() -> None:
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


# A worker between jobs, and before its first, has nothing of ours to stop, yet Ctrl-C in a terminal reaches it (it
# shares the sweep's process group) and the main process passes signals on to every worker: one that died of it
# broke joblib's pool, which killed the workers still stopping their runners (their runs left RUNNING) and ended the
# sweep in a traceback. So loky's workers start ignoring the three signals, and `handling()` spans a job: handled
# within it, ignored again after it in a worker (the next job's start finds the sweep stopped, `stop_sweep_at`); a
# signal that reaches a worker's job outside its run's handling raises JobInterrupted there, an ordinary exception
# that Hydra keeps as the job's failed result (orchestrator.sweep.job says so).
def quiet_idle_workers() -> None:
    """This process starts a joblib sweep: its loky workers ignore signals until a job runs (module docstring).
    They are spawned with the signals blocked (a mask survives fork and exec; loky spawns them in `submit`, and
    later from a thread started there, which keeps its mask), so none dies of one before it ignores them."""
    from multiprocessing import resource_tracker

    from joblib import register_parallel_backend
    from joblib.parallel import BACKENDS

    loky = BACKENDS["loky"]
    if getattr(loky, "quiet", False):   # once
        return

    class QuietLoky(loky):
        quiet = True

        def __init__(self, **kwargs):
            super().__init__(**{"initializer": _worker_started, **kwargs})

        def submit(self, func, callback=None):
            # launched before a worker: CPython 3.11's launch unblocks SIGINT and SIGTERM where it should restore
            resource_tracker.ensure_running()
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            try:
                return super().submit(func, callback=callback)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    register_parallel_backend("loky", QuietLoky)


def _worker_started() -> None:
    _worker[0] = True
    _ignore()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)   # what came meanwhile is dropped: ignored
    threading.Thread(target=_leave_when_orphaned, args=(os.getppid(),), name="orphan-watch", daemon=True).start()


def _leave_when_orphaned(parent: int) -> None:
    """An idle worker whose sweep's main process is gone (`kill -9`) exits: it ignores the signals that would
    end it, and loky left it waiting for work for ever. A worker running a job finishes it first (its run is
    logged; `reap` closes the sweep)."""
    while True:
        time.sleep(ORPHAN_POLL_S)
        if os.getppid() != parent and not _busy[0]:
            os._exit(0)


# A parallel sweep's main process runs no job itself: its joblib workers do. `timeout` and many schedulers signal
# that one process, and a worker killed by a default SIGTERM would leave its runner going. So the first signal is
# passed on to the workers (each installs these handlers when its job starts) and the main process waits for them
# to stop their runners and close their runs; `pending` holds it, for the CLI's exit code. A second signal raises
# there as anywhere.
def forward_to_workers() -> None:
    """This process is a parallel sweep's main process (see the module docstring)."""
    _forwarding[0] = True


# STOP_MARKER is written before the signal is passed on: the launcher would otherwise go on starting the jobs it
# has not started yet (joblib in new or idle workers, the basic launcher in this process), and only the job itself
# sees the sweep dir on every launcher. `pending` then holds the signal for the exit code also where no worker took
# it (the basic launcher runs the job in this process).
def stop_sweep_at(sweep_dir: Path) -> None:
    """This process runs a sweep in `sweep_dir`: a signal marks it stopped (see the module docstring)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _marker[:] = [sweep_dir / STOP_MARKER]


def sweep_stopped(sweep_dir: Path) -> str | None:
    """What stopped the sweep in `sweep_dir` (`stopped_by`: "user" or the signal's name), None while it runs."""
    try:
        return (sweep_dir / STOP_MARKER).read_text() or "user"
    except FileNotFoundError:
        return None


def _forward(signum: int) -> bool:
    workers = multiprocessing.active_children()        # joblib's loky workers are among them
    for worker in workers:
        try:
            os.kill(worker.pid, signum)
        except OSError:     # ended meanwhile
            pass
    return bool(workers)


def exit_code(exc: BaseException) -> int:
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def describe(exc: BaseException) -> str:
    """`Ctrl-C` or the signal's name, for messages and the `stopped_by` tag."""
    if isinstance(exc, Interrupted) and exc.signum != signal.SIGINT:
        return signal.Signals(exc.signum).name
    return "Ctrl-C"
