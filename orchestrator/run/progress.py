"""What a job is doing while nothing else moves: one line naming its stage, and each decoding bar's ETA.

Contract:
- `StageLine(console).show(text)`: the orchestrator's own stages (connect and preflight, bundle sync, launch) before the
  runner speaks: on a terminal one spinner line, rewritten at each stage; elsewhere (a log, CI, captured output) one
  printed line per stage. `close()` ends it (idempotent); it must end before LiveDisplay starts.
- `RunnerStages`: the runner's stage from its events: `starting runner` until an event arrives, then what its `stage`
  events say (remote.events.RunnerStage); a runner that sends none (an older bundle) is `warming up` from its `start`
  event to its first `progress` event. None while it decodes. `ended`: its `result` event came.
- `Pace`: a method's ETA: prompts left times seconds per prompt since decoding began (its `decoding` stage event, or an
  older runner's first `prompt` less its own time), by its `progress` events' `time` (runner clock).
- `EtaColumn` and `RunElapsedColumn`: progress columns for the ETA and the run's own elapsed time (since `started_at`,
  the runner's start where known: `Job.started_at`).
Non-goals: time estimates for loading or warm-up (nothing says how long they take before they end).
"""
from __future__ import annotations

import time
from datetime import timedelta

from rich.console import Console
from rich.markup import escape
from rich.progress import ProgressColumn, Task
from rich.text import Text

from remote.events import RunnerStage

STAGE_STYLE = "cyan"
LABELS = {RunnerStage.LOADING: "loading target", RunnerStage.WARMUP: "warming up"}   # DECODING: the bars say it
STARTING = "starting runner…"   # the label until the runner's first event


def clock(seconds: float | None) -> str:
    return "-:--:--" if seconds is None else str(timedelta(seconds=max(0, int(seconds))))


class StageLine:
    """The orchestrator's stage, on one line, until the runner is launched."""

    def __init__(self, console: Console):
        self.console = console
        self._status = None

    # Either way the stages are in the output, in order: one spinner line on a terminal, printed lines elsewhere.
    def show(self, text: str) -> None:
        if not self.console.is_terminal:
            self.console.print(f"[{STAGE_STYLE}]{escape(text)}[/]", highlight=False)
        elif self._status is None:
            self._status = self.console.status(f"[{STAGE_STYLE}]{escape(text)}[/]")
            self._status.start()
        else:
            self._status.update(f"[{STAGE_STYLE}]{escape(text)}[/]")

    # Called before LiveDisplay starts: rich runs one live display at a time.
    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


class RunnerStages:
    """The runner's stage as its events tell it (`label`: the text to show, None while decoding)."""

    def __init__(self):
        self.label: str | None = STARTING
        self.decoding_since: float | None = None   # the `decoding` stage event's time (runner clock)
        self._told = False                         # the runner sends stage events
        self.ended = False                         # the `result` event came (what it does after is exit)

    def on_event(self, event: dict) -> bool:
        """Update from one event; True when the label changed."""
        before = self.label
        kind = event.get("event")
        if kind == "stage":
            self._told = True
            try:
                stage = RunnerStage(event.get("stage"))
            except ValueError:   # a stage of a newer runner: say it as it is
                self.label = f"{event.get('stage')}…"
            else:
                if stage is RunnerStage.DECODING:
                    self.label, self.decoding_since = None, _time(event)
                else:
                    detail = event.get("detail")
                    self.label = f"{LABELS[stage]}{f' {detail}' if detail else ''}…"
        elif kind == "start" and not self._told:   # no stage events so far: `start` is sent once loading is done
            self.label = "warming up…"
        elif kind in ("progress", "result"):
            self.label = None
            self.ended = self.ended or kind == "result"
        if kind == "prompt" and self.decoding_since is None and _time(event) is not None:
            # no `decoding` event (an older runner): decoding began when the first generation did
            took = sum(v for k in ("ttft_ms", "decode_ms") if isinstance(v := event.get(k), (int, float)))
            self.decoding_since = _time(event) - took / 1000.0
        return self.label != before


# From the events' own times, not their arrival: a burst of lines (attach catching up) gives the same figure as
# lines that came one by one.
class Pace:
    """One method's seconds left, from its progress events' times (runner clock)."""

    def __init__(self):
        self._anchor: tuple[float, int] | None = None   # (time, done) decoding is measured from

    def update(self, event: dict, decoding_since: float | None) -> float | None:
        """Seconds left after this `progress` event; None until two points say how fast it goes."""
        now, done, total = _time(event), event.get("done"), event.get("total")
        if now is None or not isinstance(done, int) or not isinstance(total, int):
            return None
        if self._anchor is None:
            self._anchor = (decoding_since, 0) if decoding_since is not None else (now, done)
        since, done_then = self._anchor
        if done <= done_then:
            return None
        return (now - since) / (done - done_then) * max(0, total - done)


def _time(event: dict) -> float | None:
    value = event.get("time")
    return float(value) if isinstance(value, (int, float)) else None


class EtaColumn(ProgressColumn):
    """`eta H:MM:SS`, counting down from the last estimate (task field `eta_at`, local epoch seconds)."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("done", style="progress.remaining")
        eta_at = task.fields.get("eta_at")
        return Text(f"eta {clock(None if eta_at is None else eta_at - time.time())}", style="progress.remaining")


class RunElapsedColumn(ProgressColumn):
    """The run's elapsed time (since `started_at`, local epoch seconds), frozen when the task ends (task field
    `ended_at`)."""

    def __init__(self, started_at: float):
        super().__init__()
        self.started_at = started_at

    def render(self, task: Task) -> Text:
        end = task.fields.get("ended_at") or time.time()
        return Text(clock(end - self.started_at), style="progress.elapsed")
