"""GPU leases over a pool of hosts: no two jobs share a GPU, also across orchestrator processes.

Contract: `GpuPool.acquire(count, held=...)` blocks until `count` GPUs of one host are free, then holds one lock
file per GPU until the lease is released. The locks are OS file locks (filelock), so a crashed or interrupted
orchestrator releases its GPUs when its process ends; nothing needs cleaning up. These local locks only keep
orchestrators of this machine from picking the same GPU at once: what makes a GPU taken is the lease a runner
holds on the host (orchestrator.run.job), which `held(host config)` reports, so a GPU whose runner outlived a
killed sweep is skipped until that runner ends.

Asking a host costs an SSH login, so a host is asked only when enough of its GPUs are free here, and an answer that
left too few is reused for `recheck` seconds while that local state is unchanged: a lease is granted only on an
answer of the same try. This machine (kind local) costs no login and is asked at every try: a GPU its runner frees
is taken at the next poll, not up to `recheck` seconds later. A host that cannot be asked (`held` raises
Unreachable) is skipped, said once per outage, and asked again after `recheck` seconds; when every host that could
take the job is unreachable, `acquire` raises NoHostReachable rather than wait for hosts that may never come back.
Hosts merely busy are waited for. A host found unreachable goes last in the order for every job of this machine for
DOWN_MEMORY_S (a `<host>.down` file beside the lock files, gone at its next answer): the jobs after the first do not
each pay its connect timeout (10 s a try where it drops packets) and say it again while another host can take them,
and it is still asked where none can.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout

Held = Callable[[dict[str, Any], list[int]], set[int]]   # (host config, its pool GPUs) -> GPUs held there now
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
        return f"{self}: " + "; ".join(f"{name}: {why}" for name, why in self.reasons.items())


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


@dataclass
class _Answer:
    """A host's last answer: the GPUs it held, or why it could not be asked; `free`: ours that were free then."""

    at: float
    free: tuple[int, ...]
    held: set[int] = field(default_factory=set)
    down: str | None = None


def _login(host: dict[str, Any]) -> bool:
    """Whether asking `host` costs a login (an SSH host); this machine's answer is a local command."""
    return host.get("kind", "local") != "local"


class GpuPool:
    def __init__(self, entries: list[dict[str, Any]], lock_dir: str | Path, recheck: float = RECHECK_S):
        """`entries`: [{"host": <host config>, "gpus": [0, 1]}, ...]."""
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
        for entry in sorted(self.entries, key=lambda e: self._recently_down(e["host"]["name"])):
            name = entry["host"]["name"]
            if len(entry["gpus"]) < count or self._down(name):
                continue
            free = tuple(gpu for gpu in entry["gpus"] if self._free_here(name, gpu))
            if len(free) < count:
                continue   # our other jobs lease them: nothing the host could say would change that
            busy = self._ask(entry, free, count, held, tell)
            if busy is not None and (lease := self._take(entry, [g for g in free if g not in busy], count)):
                return lease
        capable = [e["host"]["name"] for e in self.entries if len(e["gpus"]) >= count]
        if all(self._down(name) for name in capable):
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

    def _ask(self, entry: dict, free: tuple[int, ...], count: int, held: Held | None,
             tell: Callable[[str], None]) -> set[int] | None:
        """The GPUs `entry`'s host holds, None if it is unreachable. A recent "too few" answer for the same free GPUs
        stands in for asking; one that left enough is never reused (the GPUs went to another job of ours since)."""
        name, last, now = entry["host"]["name"], self.answers.get(entry["host"]["name"]), time.monotonic()
        if (_login(entry["host"]) and last is not None and last.down is None and last.free == free
                and now - last.at < self.recheck and len(set(free) - last.held) < count):
            return last.held
        try:
            busy = held(entry["host"], entry["gpus"]) if held is not None else set()
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

    def _take(self, entry: dict, candidates: list[int], count: int) -> Lease | None:
        stack, taken = ExitStack(), []
        for gpu in candidates:
            lock = self._lock(entry["host"]["name"], gpu)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue   # another job of this machine took it since
            stack.callback(lock.release)
            taken.append(gpu)
            if len(taken) == count:
                return Lease(entry["host"], taken, stack)
        stack.close()
        return None

    def acquire(self, count: int, timeout: float | None = None, poll: float = 0.5, held: Held | None = None,
                tell: Callable[[str], None] = lambda message: None) -> Lease:
        """`tell(message)` is told once, when the first try finds no free GPUs, what it waits for; and once per
        outage of a host, that it is skipped and why (and when it answers again). Raises NoHostReachable."""
        if not any(len(e["gpus"]) >= count for e in self.entries):
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
