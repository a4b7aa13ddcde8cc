"""Room on a host's disk, for the one-line error of a write that found none: where, what it needed, what is free.

Contract: `free_space(host, path)` is (free, total) bytes of the filesystem holding `path` (or its nearest existing
parent) as an unprivileged write sees it, None when the host does not say; `no_room(host, path, need, what)` is the
message, which starts with the host's name and contains NO_SPACE (what the failure catalog's disk_full matches).
(This machine's runs dir: orchestrator.paths.) Non-goals: checking room ahead of a write: the write itself is the
test, this only explains its failure.
"""
from __future__ import annotations

import shlex

from ..paths import NO_SPACE
from .base import Host, HostError

STATFS = "stat -f -c '%a %S %b'"   # free blocks (unprivileged), block size, total blocks


def free_space(host: Host, path: str) -> tuple[int, int] | None:
    q = shlex.quote(path)
    try:
        answer = host.run(f"p={q}; while [ ! -e \"$p\" ] && [ \"$p\" != / ]; do p=$(dirname \"$p\"); done; "
                          f"{STATFS} \"$p\"", check=False, timeout=30).stdout.split()
    except HostError:   # the link went too: the message goes without the figure
        return None
    if len(answer) != 3 or not all(word.isdigit() for word in answer):
        return None
    avail, block, total = map(int, answer)
    return avail * block, total * block


def no_room(host: Host, path: str, need: int, what: str) -> str:
    space = free_space(host, path)
    free = f"{_mb(space[0])} free of {_mb(space[1])}" if space else "free space unknown"
    return (f"{host.name}: {NO_SPACE} in {path}: {what} needs about {_mb(need)}, {free}; free space there "
            f"(`df -h {shlex.quote(path)}`; old runs are in {host.workdir}/runs, old bundles in "
            f"{host.workdir}/bundles) or set host.workdir to a bigger disk")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
