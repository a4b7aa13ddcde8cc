"""What the user sees while a run goes: runner log lines, a progress bar per method, a results table.

Contract: `LiveDisplay` consumes the runner's log lines and JSON events (never scraping the log for numbers)
and renders them with rich; `results_table(metrics)` is the short summary printed at the end.
"""
from __future__ import annotations

import json
from typing import Mapping

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

SUMMARY_KEYS = ("tau", "tau_prompt_mean", "tpot_ms", "tokens_per_s", "ttft_ms", "speedup_vs_ar",
                "exact_match_vs_ar", "ar_tpot_ms", "draft_ms", "tree_build_ms", "verify_ms", "commit_ms",
                "peak_mem_gb")


class LiveDisplay:
    def __init__(self, console: Console | None = None, show_log: bool = True):
        self.console = console or Console()
        self.show_log = show_log
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=self.console,
        )
        self._tasks: dict[str, int] = {}

    def __enter__(self) -> "LiveDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def note(self, text: str, style: str = "cyan") -> None:
        self.console.print(f"[{style}]{escape(text)}[/]")

    def feed(self, log_lines: list[str], event_lines: list[str]) -> None:
        if self.show_log:
            for line in log_lines:
                self.console.print(f"[dim]{escape(line)}[/]", highlight=False)
        for line in event_lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            self._on_event(event)

    def _on_event(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "progress":
            method = str(event.get("method", "run"))
            if method not in self._tasks:
                self._tasks[method] = self.progress.add_task(method, total=event.get("total"), rate="")
            rate = event.get("tokens_per_s")
            self.progress.update(self._tasks[method], completed=event.get("done", 0), total=event.get("total"),
                                 rate=f"{rate:.1f} tok/s" if isinstance(rate, (int, float)) else "")
        elif kind == "warning":
            self.note(f"warning: {event.get('message')}", "yellow")
        elif kind == "start":
            keys = ("device", "gpu_name", "dtype", "kernel_path", "decode_path", "device_split")
            facts = {k: event.get(k) for k in keys if event.get(k)}
            self.note("runner started: " + ", ".join(f"{k}={v}" for k, v in facts.items()))


def results_table(metrics: Mapping[str, float], title: str) -> Table:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    gpu = "peak_mem_gb_gpu"
    per_gpu = sorted((k for k in metrics if k.startswith(gpu)), key=lambda k: int(k.removeprefix(gpu)))
    for key in (*SUMMARY_KEYS, *per_gpu):
        if key in metrics:
            value = metrics[key]
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    return table
