"""GPU leases over a pool of hosts: no two jobs share a GPU, also across orchestrator processes.

Contract: `GpuPool.acquire(count, held=...)` blocks until `count` GPUs of one host are free, then holds one lock file
per GPU until the lease is released. The locks are OS file locks (filelock), so a crashed or interrupted orchestrator
releases its GPUs when its process ends; nothing needs cleaning up. They only keep orchestrators of this machine from
picking the same GPU at once: what makes a GPU taken is the lease a runner holds on the host (orchestrator.run.job),
which `held(host settings, gpus)` reports, so a GPU whose runner outlived a killed sweep is skipped until that runner
ends. A GPU freed on an SSH host, or a host back up, is seen within `recheck` seconds; on this machine (kind local), at
the next poll. A host whose `held` raises Unreachable is skipped (said once per outage) and, for DOWN_MEMORY_S, asked
last by every job of this machine (a `<host>.down` file beside the lock files, gone at its next answer). Hosts merely
busy are waited for; when every host that could take the job is unreachable, `acquire` raises NoHostReachable.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from filelock import FileLock, Timeout

from .settings import HostSettings, host_settings

Held = Callable[[HostSettings, list[int]], set[int]]   # (a pool host, its pool GPUs) -> GPUs held there now
RECHECK_S = 10.0   # a GPU held on an SSH host freed by a runner ending, or a host back up, is seen this late at most
DOWN_MEMORY_S = 600.0   # a host found unreachable is asked last this long (placement prefers the listed order again)


class Unreachable(Exception):
    """Raised by `held` for a host that cannot be used now (down, refused key); the message says why."""


class NoHostReachable(RuntimeError):
    """Every host of the pool that could take the job is unreachable: waiting would not end on its own."""

    def __init__(self, message: str, reasons: dict[str, str]):
        super().__init__(message)
        self.reasons = reasons   # why, by host name

    def detail(self) -> str:
        reasons = "; ".join(f"{name}: {why}" for name, why in self.reasons.items())
        return f"{self}: {reasons}" if reasons else str(self)


@dataclass(frozen=True)
class PoolEntry:
    """A host of the pool and the GPUs of it the pool may lease."""

    host: HostSettings
    gpus: tuple[int, ...]

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> "PoolEntry":
        """From a `pool.hosts` entry ({host: {...}, gpus: [...]}, validated)."""
        return cls(host_settings(entry["host"]), tuple(entry["gpus"]))

    @property
    def name(self) -> str:
        return str(self.host.name)


@dataclass(frozen=True)
class Pool:
    """The `pool` section: hosts whose GPUs jobs lease, and where this machine keeps its lock files."""

    entries: tuple[PoolEntry, ...]
    lock_dir: str


@dataclass
class Lease:
    host: HostSettings      # the host of the leased GPUs
    gpus: list[int]
    _locks: ExitStack = field(default_factory=ExitStack, repr=False)

    def release(self) -> None:
        self._locks.close()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass
class _Answer:
    """A host's last answer: the GPUs it held, or why it could not be asked; `free`: ours that were free then."""

    at: float
    free: tuple[int, ...]
    held: set[int] = field(default_factory=set)
    down: str | None = None


class GpuPool:
    def __init__(self, entries: list[PoolEntry], lock_dir: str | Path, recheck: float = RECHECK_S):
        if not entries:
            raise ValueError("pool.hosts: the pool lists no hosts")
        self.entries = entries
        self.lock_dir = Path(lock_dir).expanduser()
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.recheck = recheck
        self.answers: dict[str, _Answer] = {}   # by host name

    def _lock(self, host_name: str, gpu: int) -> FileLock:
        return FileLock(str(self.lock_dir / f"{host_name}.gpu{gpu}.lock"))

    def try_acquire(self, count: int, held: Held | None = None,
                    tell: Callable[[str], None] = lambda message: None) -> Lease | None:
        """A lease of `count` GPUs of one host, or None; `tell(message)`: a host skipped as unreachable, or back."""
        # A host found unreachable goes last for DOWN_MEMORY_S (its `.down` file): the jobs after the first do not
        # each pay its connect timeout (10 s a try where it drops packets) and say it again while another host can
        # take them, and it is still asked where none can.
        for entry in sorted(self.entries, key=lambda e: self._recently_down(e.name)):
            name = entry.name
            if len(entry.gpus) < count or self._down(name):
                continue
            free = tuple(gpu for gpu in entry.gpus if self._free_here(name, gpu))
            if len(free) < count:
                continue   # our other jobs lease them: nothing the host could say would change that
            busy = self._ask(entry, free, count, held, tell)   # an SSH login: only where enough are free here
            if busy is not None and (lease := self._take(entry, [g for g in free if g not in busy], count)):
                return lease
        capable = [e.name for e in self.entries if len(e.gpus) >= count]
        if all(self._down(name) for name in capable):   # rather than wait for hosts that may never come back
            raise NoHostReachable(f"no host of the pool can take this job: {', '.join(capable)} (every one with "
                                  f"{count}+ GPU(s)) unreachable", {n: str(self.answers[n].down) for n in capable})
        return None

    def _down(self, name: str) -> bool:
        """Whether `name` was unreachable when last asked, less than `recheck` s ago. An older verdict does not
        count: the host is asked again, or, where our jobs lease its GPUs since, is not asked and may well be up."""
        answer = self.answers.get(name)
        return answer is not None and answer.down is not None and time.monotonic() - answer.at < self.recheck

    def _recently_down(self, name: str) -> bool:
        """Whether a job of this machine found `name` unreachable less than DOWN_MEMORY_S ago, and nothing since
        heard it answer."""
        try:
            return time.time() - (self.lock_dir / f"{name}.down").stat().st_mtime < DOWN_MEMORY_S
        except OSError:
            return False

    def _free_here(self, host_name: str, gpu: int) -> bool:
        """Whether no job of this machine leases `gpu` now (the lock is taken and dropped at once)."""
        lock = self._lock(host_name, gpu)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return False
        lock.release()
        return True

    def _ask(self, entry: PoolEntry, free: tuple[int, ...], count: int, held: Held | None,
             tell: Callable[[str], None]) -> set[int] | None:
        """The GPUs `entry`'s host holds, None if it is unreachable. A recent "too few" answer for the same free GPUs
        stands in for asking; one that left enough is never reused (the GPUs went to another job of ours since)."""
        name, last, now = entry.name, self.answers.get(entry.name), time.monotonic()
        # Asking costs an SSH login: an answer that left too few is reused for `recheck` s while the local state is
        # unchanged, and a lease is granted only on an answer of the same try. This machine (kind local) costs no
        # login and is asked at every try: a GPU its runner frees is taken at the next poll, not `recheck` s later.
        if (not entry.host.local and last is not None and last.down is None and last.free == free
                and now - last.at < self.recheck and len(set(free) - last.held) < count):
            return last.held
        try:
            busy = held(entry.host, list(entry.gpus)) if held is not None else set()
        except Unreachable as exc:
            if last is None or last.down is None:
                tell(f"skipping pool host {name}: {exc}")
            self.answers[name] = _Answer(time.monotonic(), free, down=str(exc))
            (self.lock_dir / f"{name}.down").write_text(f"{exc}\n")
            return None
        if last is not None and last.down is not None:
            tell(f"pool host {name} answers again: it can take jobs")
        self.answers[name] = _Answer(time.monotonic(), free, held=busy)
        (self.lock_dir / f"{name}.down").unlink(missing_ok=True)
        return busy

    def _take(self, entry: PoolEntry, candidates: list[int], count: int) -> Lease | None:
        stack, taken = ExitStack(), []
        for gpu in candidates:
            lock = self._lock(entry.name, gpu)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue   # another job of this machine took it since
            stack.callback(lock.release)
            taken.append(gpu)
            if len(taken) == count:
                return Lease(entry.host, taken, stack)
        stack.close()
        return None

    def acquire(self, count: int, timeout: float | None = None, poll: float = 0.5, held: Held | None = None,
                tell: Callable[[str], None] = lambda message: None) -> Lease:
        """`tell(message)` is told once, when the first try finds no free GPUs, what it waits for; and once per
        outage of a host, that it is skipped and why (and when it answers again). Raises NoHostReachable."""
        if not any(len(e.gpus) >= count for e in self.entries):
            raise ValueError(f"gpus: no host in the pool has {count} GPUs")
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while (lease := self.try_acquire(count, held, tell)) is None:
            if not told:
                tell(self._waiting_for(count))
                told = True
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {count} free GPU(s) in the pool after {timeout:.0f} s")
            time.sleep(poll)   # waiting for another job to release its lease
        return lease

    def _waiting_for(self, count: int) -> str:
        on_hosts = "; ".join(f"{name} GPU {', '.join(map(str, sorted(answer.held)))}"
                             for name, answer in self.answers.items() if answer.held)
        skipped = ", ".join(name for name, answer in self.answers.items() if answer.down is not None)
        return (f"waiting for {count} free GPU(s) of the pool: the others are leased by jobs of this machine"
                + (f"; held on the host by runners of ours: {on_hosts}" if on_hosts else "")
                + (f"; skipped as unreachable (asked again every {self.recheck:g} s): {skipped}" if skipped else ""))
