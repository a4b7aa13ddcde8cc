"""Telling a hung runner from a quiet one: the follower's stall warning and its optional bound.

Contract:
- `StallWatch(limits).check(received)`, after every poll of the tail, with the bytes tailed so far (Job.received: any
  byte counts, a progress bar redrawn with \\r too), returns what to tell, or None: WARN once the runner has been silent
  `stall_warning` s, again only at AGAIN times that silence (4x, 16x, ...); RESUMED when bytes come after a warning;
  STOP once silent `stall_timeout` s. `limits` is a StallLimits (orchestrator.config.plan). Silence is measured on this
  machine's clock from the last byte this follower saw; the bytes of the first check are what was there already (after
  `attach`, the log written while nobody followed), and the silence then is `silent_for` (after `attach`, how long the
  host says the runner had written nothing: a run hung for an hour is said to be at once).
- `runner_state(job)`: what `ps` on the host says of the runner's processes (a RunnerState: "stopped (T in ps)"), None
  where it cannot tell; the texts (`warning`, `resumed`, `diagnosis`) are built here too.
Non-goals: calling a silent runner hung (loading, compiles and CUDA-graph captures are quiet for minutes: the warning
says silent, with the state and what to do); stopping it (the follower does, orchestrator.run.monitor).
"""
from __future__ import annotations

import enum
import shlex
import time
from dataclasses import dataclass

from ..hosts.base import HostError
from ..program import program
from ..config.plan import TIMEOUT_KEY, StallLimits
from .progress import STARTING

AGAIN = 4.0      # a warning is repeated only once the silence is this many times longer than at the last one


class Say(enum.Enum):
    """What the follower tells after a poll."""

    WARN = "warn"          # silent stall_warning s (or AGAIN times as long as at the last warning)
    RESUMED = "resumed"    # output again after a warning
    STOP = "stop"          # silent stall_timeout s: stop the runner


# Silence, not a heartbeat: a heartbeat thread in the runner beats on while its main thread hangs in an NCCL
# collective or a GPU wait (those C calls release the GIL), and whether the process group lives is asked of the
# host already (Job.poll). Only output that moves tells a working runner from a hung one.
class StallWatch:
    """The silence of one followed run, and what to say about it (see the module's contract)."""

    def __init__(self, limits: StallLimits, clock=time.monotonic, silent_for: float = 0.0):
        self.limits = limits
        self._clock = clock
        self._received = -1                  # bytes at the last advance; -1: none seen yet
        self._since = clock() - silent_for   # when output last advanced (or the watch began, less silent_for)
        self._next = limits.warning          # silence at which the next warning is due
        self._warned = False
        self.silent = 0.0                    # seconds of silence, as of the last check

    def check(self, received: int) -> Say | None:
        now = self._clock()
        self.silent = now - self._since
        if self._received < 0:   # what was there when the watch began: no sign of life now
            self._received = received
        if received != self._received:   # self.silent is then the silence that just ended
            self._received, self._since, self._next = received, now, self.limits.warning
            if self._warned:
                self._warned = False
                return Say.RESUMED
            return None
        if self.limits.timeout is not None and self.silent >= self.limits.timeout:
            return Say.STOP
        if self._next is not None and self.silent >= self._next:
            self._warned, self._next = True, self.silent * AGAIN
            return Say.WARN
        return None


# ps of the runner's session (launch.sh runs it under setsid: session = process group = launch.sh's pid), less
# launch.sh itself, which only waits: one `PID STAT` line a process
_STATE = ("pg=$(cat {pid} 2>/dev/null) && [ -n \"$pg\" ] && command -v ps >/dev/null && echo pg $pg && "
          "ps -o pid=,stat= -s \"$pg\" 2>/dev/null | awk -v pg=\"$pg\" '$1 != pg'; true")
_MEANING = {   # by ps's first STAT letter, the likeliest first
    "T": "stopped (T in ps: a SIGSTOP or job control)",
    "t": "held by a debugger (t in ps)",
    "D": "in uninterruptible sleep (D in ps: waiting on a device, a disk or a network filesystem)",
    "R": "running (R in ps: busy without output, e.g. spinning in an NCCL collective or a GPU wait)",
    "S": "sleeping (S in ps: waiting, e.g. on a lock, a socket or the GPU)",
    "Z": "a zombie (Z in ps)",
}


@dataclass(frozen=True)
class RunnerState:
    """What ps on the host says of the runner's processes."""

    text: str          # in words, e.g. "stopped (T in ps: ...)"
    pgid: str          # the runner's process group
    stopped: bool      # every one of them is stopped (T): SIGCONT resumes it


def runner_state(job) -> RunnerState | None:
    """Asked of the host now; None if it did not say (no answer, no ps, no runner process)."""
    try:
        answer = job.host.run(_STATE.format(pid=shlex.quote(job.files.pid)), check=False, timeout=30).stdout
    except HostError:
        return None
    rows = [line.split() for line in answer.splitlines()]
    pgid = next((fields[1] for fields in rows if fields[:1] == ["pg"] and len(fields) == 2), "")
    letters = [fields[1][0] for fields in rows if len(fields) == 2 and fields[0].isdigit() and fields[1]]
    first = next((letter for letter in _MEANING if letter in letters), None)
    if first is None:
        return None if not letters else RunnerState(f"in ps state {', '.join(sorted(set(letters)))}", pgid, False)
    others = sorted(set(letters) - {first})
    return RunnerState(_MEANING[first] + (f"; others: {', '.join(others)}" if others else ""), pgid,
                       set(letters) == {"T"})


def _doing(stages) -> str:
    """What the runner was at when it fell silent (progress.RunnerStages), and whether that is quiet."""
    if stages.ended:
        return "since its result (exiting: freeing the GPU, closing NCCL)"
    if stages.label is None:
        return "while decoding (each prompt ends with a progress event)"
    if stages.label == STARTING:   # no event yet: our runner importing, or a user's script that sends none
        return "before its first event (imports and model loading can be silent for minutes)"
    return (f"while {stages.label.rstrip('…')} (model loading, compiles and CUDA-graph captures can be silent for "
            f"minutes)")


def warning(silent: float, state: RunnerState | None, stages, limits: StallLimits, run_dir) -> str:
    """One line: silent how long, doing what (`stages`: the display's RunnerStages), in which state, and what to do
    about it."""
    seen = state.text if state else "in a state ps did not tell"
    if state and state.stopped:
        seen += f"; `kill -CONT -- -{state.pgid}` there resumes it"
    bound = (f"{TIMEOUT_KEY}={limits.timeout:g} stops it after {limits.timeout:g} s of silence"
             if limits.timeout is not None else f"{TIMEOUT_KEY}=<seconds> would stop a run this silent by itself")
    return (f"the runner is alive but has written nothing for {silent:.0f} s {_doing(stages)}; on the host it is "
            f"{seen}. `{program()} stop {run_dir}` (or Ctrl-C) stops it, its log kept; {bound}")


def resumed(silent: float) -> str:
    return f"the runner resumed after {silent:.0f} s of silence"


def diagnosis(silent: float, state: RunnerState | None, limits: StallLimits) -> str:
    """The line fed to the failure detector: the catalog's runner_stalled entry matches it."""
    return (f"[specbench] The runner stalled: no output for {silent:.0f} s ({TIMEOUT_KEY}={limits.timeout:g}), "
            f"{state.text if state else 'its state unknown'}; its process group was stopped")
