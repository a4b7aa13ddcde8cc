"""What the user sees while a run goes: runner log lines and a progress bar per method (the final table:
orchestrator.tracking.results_table).

Contract: `LiveDisplay` consumes the runner's log lines and JSON events (never scraping the log for numbers)
and renders them with rich: a line naming the runner's stage (orchestrator.run.progress.RunnerStages) until it
decodes, then one bar per method with prompts done / total, tokens/s, the ETA and the run's elapsed time (since
`started_at`: the runner's start, also after `attach`; by default when the display opened). Off a terminal each
stage is printed once as it begins, since nothing live is drawn there. What the runner wrote is untrusted: it is
shown printable (orchestrator.untrusted), never as escape sequences for the terminal.
"""
from __future__ import annotations

import json
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.spinner import Spinner
from rich.text import Text

from remote.events import ECHO

from ..failures import shorten
from ..untrusted import printable
from .progress import STAGE_STYLE, EtaColumn, Pace, RunElapsedColumn, RunnerStages, clock


class _Bars(Progress):
    """The bars, under the stage line while there is one (`stage_line()` returns it, or None)."""

    def __init__(self, *columns, stage_line, **kwargs):
        self._stage_line = stage_line   # before Progress's own init, which renders already
        super().__init__(*columns, **kwargs)

    def get_renderables(self):
        if (line := self._stage_line()) is not None:
            yield line
        yield from super().get_renderables()


class LiveDisplay:
    def __init__(self, console: Console | None = None, show_log: bool = True, started_at: float | None = None):
        self.console = console or Console()
        self.show_log = show_log
        self.started_at = started_at if started_at is not None else time.time()
        self.stages = RunnerStages()
        self._closed = False
        self._spinner = Spinner("dots", style=STAGE_STYLE)
        self.progress = _Bars(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), EtaColumn(), RunElapsedColumn(self.started_at),
            console=self.console, stage_line=self.stage_line,
        )
        self._tasks: dict[str, int] = {}
        self._paces: dict[str, Pace] = {}

    def __enter__(self) -> "LiveDisplay":
        self.progress.start()
        self._announce()
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True   # the last frame stays on screen: a spinner frozen mid-stage would claim it goes on
        self.progress.stop()

    def stage_line(self) -> Spinner | None:
        """The runner's stage and the run's elapsed time, as a spinner line; None while it decodes or once the
        display is closed."""
        if self.stages.label is None or self._closed:
            return None
        self._spinner.update(text=Text(f"{printable(self.stages.label)}  {clock(time.time() - self.started_at)}",
                                       style=STAGE_STYLE))
        return self._spinner

    def _announce(self) -> None:
        if self.stages.label is not None and not self.console.is_terminal:
            self.note(self.stages.label, STAGE_STYLE)

    def note(self, text: str, style: str = "cyan") -> None:
        """A line of the runner's own words (its events'): untrusted, shown printable."""
        self.console.print(f"[{style}]{escape(printable(text))}[/]")

    def feed(self, log_lines: list[str], event_lines: list[str]) -> None:
        """Log lines as the tail hands them out (printable already: orchestrator.untrusted.log_line), events parsed."""
        if self.show_log:
            for line in log_lines:
                if line.startswith(ECHO):   # the runner's copy of an event, which is shown as such below
                    continue
                self.console.print(f"[dim]{escape(shorten(line))}[/]", highlight=False)
        for line in event_lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                self._on_event(event)

    def _on_event(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "warning":
            self.note(f"warning: {event.get('message')}", "yellow")
        elif kind == "start":
            keys = ("device", "gpu_name", "dtype", "kernel_path", "decode_path", "device_split")
            facts = {k: event.get(k) for k in keys if event.get(k)}
            self.note("runner started: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
        if self.stages.on_event(event):
            self._announce()
        if kind == "progress":
            self._on_progress(event)

    def _on_progress(self, event: dict) -> None:
        method = str(event.get("method", "run"))
        if method not in self._tasks:
            self._tasks[method] = self.progress.add_task(method, total=event.get("total"), rate="")
            self._paces[method] = Pace()
        left = self._paces[method].update(event, self.stages.decoding_since)
        now = time.time()
        done, total = event.get("done", 0), event.get("total")
        rate = event.get("tokens_per_s")
        self.progress.update(self._tasks[method], completed=done, total=total,
                             rate=f"{rate:.1f} tok/s" if isinstance(rate, (int, float)) else "",
                             eta_at=None if left is None else now + left,
                             ended_at=now if isinstance(total, int) and done >= total else None)
