"""The runner speaks in JSON lines: one event per line in `events.jsonl`, flushed as written.

Events (field `event`): `start` (versions, device, kernel paths; sent once the models are loaded), `stage` (field
`stage`, a RunnerStage value, and an optional `detail`: what the runner is doing before and between progress
events), `progress` (method, done, total, tokens_per_s), `prompt` (one prompt's result), `warning` (message),
`result` (final aggregate metrics). Every event carries `time` (Unix seconds). The orchestrator never scrapes the
log for numbers.
"""
from __future__ import annotations

import contextlib
import enum
import json
import os
import threading
import time
from typing import Any, Callable

from .files import RunFiles


class RunnerStage(enum.Enum):
    """What the runner is busy with while it sends no progress (the `stage` event's `stage` field)."""

    LOADING = "loading"      # building or loading the target, the drafter, the tokenizer and the prompts
    WARMUP = "warmup"        # untimed warm-up forwards and generations (`detail`: the methods warmed up)
    DECODING = "decoding"    # the timed generations begin: `progress` events follow, one per prompt per method


class EventWriter:
    def __init__(self, path: str):
        self._f = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()     # remote.downloads' watch thread emits beside the main thread

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "time": time.time(), **fields}, default=str) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()

    def stage(self, stage: RunnerStage, detail: str | None = None) -> None:
        self.emit("stage", stage=stage.value, **({"detail": detail} if detail else {}))

    def close(self) -> None:
        self._f.close()


def recorded(spec, run_dir: str, body: Callable[[Any, RunFiles, EventWriter], dict]) -> dict:
    """`body(spec, files, events)` with the run dir's files and its events.jsonl open, closed on every path."""
    files = RunFiles(run_dir)
    events = EventWriter(files.events)
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
