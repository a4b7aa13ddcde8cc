"""Room on a host's disk, for the one-line error of a write that found none: where, what it needed, what is free.

Contract: `free_space(host, path)` is (free, total) bytes of the filesystem holding `path` (or its nearest existing
parent) as an unprivileged write sees it, None when the host does not say; `no_room(host, path, need, what)` is the
message, which starts with the host's name and contains NO_SPACE (what the failure catalog's disk_full matches).
This machine's runs dir likewise: `room_here`, `no_room_here` (starting `this machine:`, the catalog's
runs_dir_full) and `room_to_start` (under START_ROOM free, a command that writes runs is refused before it starts).
Non-goals: checking room ahead of each write (the write itself is the test; this explains its failure), but for the
start of a command that writes runs.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from .base import Host, HostError

NO_SPACE = "No space left on device"
# Free bytes a run needs in the local runs dir to start: its run dir's records (~0.1 MB with the demo pair and
# num_prompts=1, more with its log), RESERVE, MLflow's rows and artifact copies (~0.3 MB), a new database (1.0 MB).
# Below it a run used to die half-way: a traceback, its MLflow run left RUNNING, a 0-byte definitions.md.
START_ROOM = 4 << 20
RESERVE = 256 << 10   # bytes a job sets aside in its run dir as it starts, freed for its closing writes on a full disk
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


def room_here(path: str | os.PathLike) -> tuple[int, int]:
    """(free, total) bytes of this machine's filesystem holding `path` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def no_room_here(path: str | os.PathLike, need: int | None, what: str) -> str:
    """The one line for a write on this machine (a run's local dir, the MLflow database) that found no room."""
    free, total = room_here(path)
    needs = f"needs about {_mb(need)}" if need else "found no room"
    return (f"this machine: {NO_SPACE} in {path}: {what} {needs}, {_mb(free)} free of {_mb(total)}; free space "
            f"there (`df -h {shlex.quote(str(path))}`) or set SPECBENCH_RUNS_DIR to a bigger disk")


def room_to_start(path: str | os.PathLike) -> str | None:
    """Why a command that writes runs may not start in the runs dir `path` (None: it may): under START_ROOM free,
    its records, MLflow's rows or a new database would find no room part way, and leave a run half-written."""
    if room_here(path)[0] >= START_ROOM:
        return None
    return no_room_here(path, START_ROOM, "a run's records (run dir, MLflow database and artifacts)")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
