"""Download progress while a run loads from the hub: a model's first run on a host fetches tens of GB, and with
transformers' progress bars off (carriage-return noise in runner.log) that was minutes of silence, which the
orchestrator cannot tell from a hung runner (its stall warning fires after `stall_warning` s).

Contract:
- `HubWatch(names, cache=None)`: the hub cache folders of `names` (hub ids; None, local directories and names that
  are not `owner/name` are skipped), in `cache` (default: huggingface_hub's HF_HUB_CACHE). `poll()` returns one line
  ("Qwen/Qwen3-8B: downloading, 12.3 GB so far, 95 MB/s") where their files grew since the last poll that said
  something, else None; `downloaded` is the bytes they grew by since the watch began.
- `watching(names, say, every=EVERY)`: a context manager running `poll` on a daemon thread every `every` s and
  handing each line to `say`; it yields the watch (None where no name is a hub id) and stops the thread on exit.
Why the cache folder and not the hub's progress bars: their classes and hooks differ across huggingface_hub
versions and between its HTTP and Xet transfers, while both write into the repo's `blobs` folder (as
`<etag>.<id>.incomplete` until done). Why only when bytes moved, not a heartbeat: a stalled download says nothing,
so the orchestrator's stall warning still fires for it (orchestrator.stall).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

EVERY = 10.0     # seconds between looks at the cache: a line at most this often in events.jsonl


class HubWatch:
    def __init__(self, names: Iterable[str | None], cache: str | os.PathLike | None = None):
        if cache is None:
            from huggingface_hub.constants import HF_HUB_CACHE
            cache = HF_HUB_CACHE
        ids = [name for name in dict.fromkeys(names) if name and name.count("/") == 1 and not os.path.isdir(name)]
        self.label = ", ".join(ids)
        self.folders = [Path(cache) / f"models--{name.replace('/', '--')}" / "blobs" for name in ids]
        self._start = self._last = self._size()
        self._at = time.monotonic()

    @property
    def downloaded(self) -> int:
        return max(0, self._size() - self._start)

    def poll(self) -> str | None:
        size, now = self._size(), time.monotonic()
        if size <= self._last:
            return None
        rate = (size - self._last) / max(now - self._at, 1e-6)
        self._last, self._at = size, now
        return f"{self.label}: downloading, {gigabytes(size - self._start)} so far, {rate / 1e6:.0f} MB/s"

    def _size(self) -> int:
        total = 0
        for folder in self.folders:
            with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
                for entry in entries:
                    with contextlib.suppress(FileNotFoundError):   # renamed from .incomplete since the listing
                        total += entry.stat(follow_symlinks=False).st_size
        return total


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


@contextlib.contextmanager
def watching(names: Iterable[str | None], say: Callable[[str], None], every: float = EVERY,
             cache: str | os.PathLike | None = None) -> Iterator[HubWatch | None]:
    watch = HubWatch(names, cache)
    if not watch.folders:
        yield None
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            if (line := watch.poll()) is not None:
                say(line)

    thread = threading.Thread(target=loop, name="hub-download-watch", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join()
