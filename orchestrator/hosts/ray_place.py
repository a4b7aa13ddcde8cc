"""A job placed by Ray: `ray_placement(settings, count, run_id, tell)` asks the cluster for `count` GPUs on one node
and yields the settings of the node Ray chose (node id, address, the pid of the hold) and the GPU ids it gave.

The GPUs are held by a detached GpuHold actor (orchestrator.hosts.ray_node), SPREAD over the nodes (jobs of a sweep
disturb each other's timings least on different boxes); it outlives this process so that a runner whose orchestrator
died keeps its GPUs to its end (`reap` or `attach` collect it later), and ends by itself with the runner. While no
node has the GPUs free the job waits (said once, Ctrl-C ends the wait with nothing started); a cluster none of whose
nodes has `count` GPUs at all, or whose head does not answer, raises NoHostReachable at once. Leaving the context
releases the hold where no runner started (within ray_node.RELEASE_GRACE s).
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator

from .base import HostError
from .leases import NoHostReachable
from .ray import connect, ray_node
from .settings import RaySettings

HOLD_START = 600.0   # seconds from placement a hold waits for its runner before it lets the GPUs go
SAY_WAITING_AFTER = 3.0   # seconds of waiting for GPUs before the job says so


@contextlib.contextmanager
def ray_placement(settings: RaySettings, count: int, run_id: str,
                  tell: Callable[[str], None]) -> Iterator[tuple[RaySettings, list[int]]]:
    try:
        ray = connect(settings)
        _feasible(ray, settings, count)
    except HostError as exc:
        raise NoHostReachable(f"the Ray cluster at {settings.address} cannot take this job: {exc}", {}) from None
    root = f"{settings.workdir}/runs/{run_id}"
    hold = ray.remote(ray_node.GpuHold).options(
        num_gpus=count, num_cpus=0, resources=dict(settings.resources or {}), max_concurrency=2,
        lifetime="detached", name=f"gpus-{run_id}", scheduling_strategy="SPREAD", max_restarts=0,
    ).remote(root, HOLD_START)
    try:
        where = _placed(ray, hold, count, tell)
    except BaseException:   # Ctrl-C while it waited: it must not take GPUs later
        ray.kill(hold)
        raise
    hold.hold.remote()
    placed = dataclasses.replace(settings, node=where["node_id"], node_ip=where["node_ip"], hold_pid=where["pid"],
                                 name=f"{settings.name}@{where['node_ip']}")
    try:
        yield placed, where["gpus"]
    finally:
        with contextlib.suppress(Exception):   # already ended with its runner, or its node is gone
            ray.get(hold.release.remote(), timeout=10)


def _feasible(ray, settings: RaySettings, count: int) -> None:
    """One line where no node of the cluster could ever take the job (Ray would wait for ever)."""
    asked = {"GPU": count, **(settings.resources or {})}
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if not any(all(n.get("Resources", {}).get(k, 0) >= v for k, v in asked.items()) for n in nodes):
        have = "; ".join(f"{n['NodeManagerAddress']}: " + ", ".join(f"{k} {n.get('Resources', {}).get(k, 0):g}"
                                                                   for k in asked) for n in nodes) or "no node"
        what = " and ".join(f"{v:g} {k}" for k, v in asked.items())
        raise HostError(f"no node of it has {what} (by node: {have})")


def _placed(ray, hold, count: int, tell: Callable[[str], None]) -> dict:
    from ray.exceptions import GetTimeoutError

    ref = hold.where.remote()
    waited, said = 0.0, False
    while True:
        try:
            return ray.get(ref, timeout=1.0)
        except GetTimeoutError:
            waited += 1.0
        if waited >= SAY_WAITING_AFTER and not said:
            free = int(ray.available_resources().get("GPU", 0))
            tell(f"waiting for {count} free GPU{'s' if count > 1 else ''} on one node of the Ray cluster "
                 f"({free} free in all now)")
            said = True
