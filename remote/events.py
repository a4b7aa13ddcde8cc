"""The runner speaks in JSON lines: one event per line in `events.jsonl`, flushed as written.

Events (field `event`): `start` (versions, device, kernel paths; sent once the models are loaded), `stage` (field
`stage`, a RunnerStage value, and an optional `detail`: what the runner is doing before and between progress
events), `progress` (method, done, total, tokens_per_s), `prompt` (one prompt's result), `warning` (message),
`result` (final aggregate metrics). Every event carries `time` (Unix seconds). The orchestrator never scrapes the
log for numbers. `EventWriter(path, echo)` also writes each event but `progress` to `echo` (the runner's stdout,
which the launcher sends to runner.log) as one readable line starting with ECHO, so that runner.log tells the
run's story by itself; the orchestrator shows the events, not these lines, and its failure catalog skips them.
"""
from __future__ import annotations

import contextlib
import enum
import json
import os
import sys
import threading
import time
from typing import Any, Callable

from .files import RunFiles


class RunnerStage(enum.Enum):
    """What the runner is busy with while it sends no progress (the `stage` event's `stage` field)."""

    LOADING = "loading"      # building or loading the target, the drafter, the tokenizer and the prompts
    WARMUP = "warmup"        # untimed warm-up forwards and generations (`detail`: the methods warmed up)
    DECODING = "decoding"    # the timed generations begin: `progress` events follow, one per prompt per method


ECHO = "[runner] "       # starts each line the runner writes to its log beside an event
_ECHOED = ("tau", "speedup_vs_ar", "speedup_vs_ar_ci_low", "speedup_vs_ar_ci_high", "tokens_per_s", "tpot_ms",
           "exact_match_vs_ar", "timing_noise", "num_prompts")


def echo_line(event: str, fields: dict[str, Any]) -> str | None:
    """The readable line of an event in runner.log (None for `progress`: `prompt` says as much, per prompt)."""
    if event == "stage":
        return f"{ECHO}{fields.get('stage')}" + (f": {fields['detail']}" if fields.get("detail") else "")
    if event == "warning":
        return f"{ECHO}warning: {fields.get('message')}"
    if event == "prompt":
        tpot = f", {fields['tpot_ms']:.4g} ms a token" if "tpot_ms" in fields else ""
        return (f"{ECHO}{fields.get('method')} prompt {fields.get('index')} (repeat {fields.get('repeat')}): "
                f"{fields.get('new_tokens', 0):.0f} tokens{tpot}, {fields.get('tokens_per_s', 0):.4g} tokens/s")
    if event == "result":
        metrics = fields.get("metrics") or {}
        return f"{ECHO}result: " + ", ".join(f"{k}={metrics[k]:.4g}" for k in _ECHOED if k in metrics)
    if event == "progress":
        return None
    return f"{ECHO}{event}: " + ", ".join(f"{k}={v}" for k, v in fields.items())


class EventWriter:
    def __init__(self, path: str, echo=None):
        self._f = open(path, "a", encoding="utf-8")
        self._echo = echo                 # a text stream (the runner's stdout), or None
        self._lock = threading.Lock()     # remote.downloads' watch thread emits beside the main thread

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "time": time.time(), **fields}, default=str) + "\n"
        said = echo_line(event, fields) if self._echo is not None else None
        with self._lock:
            self._f.write(line)
            self._f.flush()
            if said is not None:
                print(said, file=self._echo, flush=True)

    def stage(self, stage: RunnerStage, detail: str | None = None) -> None:
        self.emit("stage", stage=stage.value, **({"detail": detail} if detail else {}))

    def close(self) -> None:
        self._f.close()


def recorded(spec, run_dir: str, body: Callable[[Any, RunFiles, EventWriter], dict]) -> dict:
    """`body(spec, files, events)` with the run dir's files and its events.jsonl open, closed on every path; each
    event but progress is also said as one `[runner]` line on stdout, which the launcher sends to runner.log."""
    files = RunFiles(run_dir)
    events = EventWriter(files.events, echo=sys.stdout)
    try:
        return body(spec, files, events)
    finally:
        events.close()


def write_json_atomic(path: str, obj: Any) -> None:
    """Write `obj` as JSON so that readers see either nothing or the whole file (temp file, then rename)."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str))


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` so that readers see the old file or the whole new one, never a part: on a full disk the write
    raises and leaves nothing behind (no temp file, no truncated file that looks whole)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path) -> dict:
    """A JSON file's object, {} where it is absent or unreadable (a run that ended before writing it)."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}
