"""GPU leases over a pool of hosts: no two jobs share a GPU, also across orchestrator processes.

Contract: `GpuPool.acquire(count)` blocks until `count` GPUs of one host are free, then holds one lock file per
GPU until the lease is released. The locks are OS file locks (filelock), so a crashed or interrupted
orchestrator releases its GPUs when its process ends; nothing needs cleaning up.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout


@dataclass
class Lease:
    host: dict[str, Any]      # the host config of the leased GPUs
    gpus: list[int]
    _locks: ExitStack = field(default_factory=ExitStack, repr=False)

    def release(self) -> None:
        self._locks.close()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class GpuPool:
    def __init__(self, entries: list[dict[str, Any]], lock_dir: str | Path):
        """`entries`: [{"host": <host config>, "gpus": [0, 1]}, ...]."""
        if not entries:
            raise ValueError("pool.hosts: the pool lists no hosts")
        self.entries = entries
        self.lock_dir = Path(lock_dir).expanduser()
        self.lock_dir.mkdir(parents=True, exist_ok=True)

    def _lock(self, host_name: str, gpu: int) -> FileLock:
        return FileLock(str(self.lock_dir / f"{host_name}.gpu{gpu}.lock"))

    def try_acquire(self, count: int) -> Lease | None:
        for entry in self.entries:
            host = entry["host"]
            stack, held = ExitStack(), []
            for gpu in entry["gpus"]:
                lock = self._lock(host["name"], gpu)
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    continue
                stack.callback(lock.release)
                held.append(gpu)
                if len(held) == count:
                    return Lease(host, held, stack)
            stack.close()
        return None

    def acquire(self, count: int, timeout: float | None = None, poll: float = 0.5) -> Lease:
        if not any(len(e["gpus"]) >= count for e in self.entries):
            raise ValueError(f"gpus: no host in the pool has {count} GPUs")
        deadline = None if timeout is None else time.monotonic() + timeout
        while (lease := self.try_acquire(count)) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {count} free GPU(s) in the pool after {timeout:.0f} s")
            time.sleep(poll)   # waiting for another job to release its lease
        return lease
