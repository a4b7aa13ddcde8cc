"""GPU leases over a pool of hosts: no two jobs share a GPU, also across orchestrator processes.

Contract: `GpuPool.acquire(count, held=...)` blocks until `count` GPUs of one host are free, then holds one lock
file per GPU until the lease is released. The locks are OS file locks (filelock), so a crashed or interrupted
orchestrator releases its GPUs when its process ends; nothing needs cleaning up. These local locks only keep
orchestrators of this machine from picking the same GPU at once: what makes a GPU taken is the lease a runner
holds on the host (orchestrator.lifecycle), which `held(host config)` reports, so a GPU whose runner outlived a
killed sweep is skipped until that runner ends.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout


Held = Callable[[dict[str, Any], list[int]], set[int]]   # (host config, its pool GPUs) -> GPUs held there now


def pool_entries(cfg) -> list:
    """A job config's pool entries ({host, gpus} each, as configured); none where it has no pool."""
    pool = cfg.get("pool")
    return list(pool.hosts) if pool and pool.get("hosts") else []


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
        self.held_on_hosts: dict[str, set[int]] = {}   # what `held` said at the last try, by host name

    def _lock(self, host_name: str, gpu: int) -> FileLock:
        return FileLock(str(self.lock_dir / f"{host_name}.gpu{gpu}.lock"))

    def try_acquire(self, count: int, held: Held | None = None) -> Lease | None:
        for entry in self.entries:
            host = entry["host"]
            if len(entry["gpus"]) < count:
                continue
            busy = held(host, entry["gpus"]) if held is not None else set()
            self.held_on_hosts[host["name"]] = busy
            stack, taken = ExitStack(), []
            for gpu in entry["gpus"]:
                if gpu in busy:
                    continue
                lock = self._lock(host["name"], gpu)
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    continue
                stack.callback(lock.release)
                taken.append(gpu)
                if len(taken) == count:
                    return Lease(host, taken, stack)
            stack.close()
        return None

    def acquire(self, count: int, timeout: float | None = None, poll: float = 0.5, held: Held | None = None,
                on_wait: Callable[[str], None] = lambda message: None) -> Lease:
        """`on_wait(message)` is told once, when the first try finds no free GPUs, what it waits for."""
        if not any(len(e["gpus"]) >= count for e in self.entries):
            raise ValueError(f"gpus: no host in the pool has {count} GPUs")
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while (lease := self.try_acquire(count, held)) is None:
            if not told:
                on_wait(self._waiting_for(count))
                told = True
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {count} free GPU(s) in the pool after {timeout:.0f} s")
            time.sleep(poll)   # waiting for another job to release its lease
        return lease

    def _waiting_for(self, count: int) -> str:
        on_hosts = "; ".join(f"{name} GPU {', '.join(map(str, sorted(gpus)))}"
                             for name, gpus in self.held_on_hosts.items() if gpus)
        return (f"waiting for {count} free GPU(s) of the pool: the others are leased by jobs of this machine"
                + (f"; held on the host by runners of ours: {on_hosts}" if on_hosts else ""))
