"""Where a job runs: its plan as given, on the node and GPUs its host's scheduler chose (Ray), or on the host and
GPUs a lease from the plan's pool gives.

Contract: `placement(plan, console)` is a context manager that yields the placed plan and holds a pool's lease (or
the scheduler's hold) until it exits; it raises NoHostReachable when no host of the pool that could take the job
answers (or the scheduler's cluster cannot take it), and waits (saying what for, once) while they are merely busy.
`held_on_host` is the pool's question to a host: which of its GPUs a runner of ours holds there now.
"""
from __future__ import annotations

import contextlib

from rich.console import Console
from rich.markup import escape

from ..config.plan import Plan
from ..hosts import HostError
from ..hosts.connect import open_host, scheduler_placement
from ..hosts.leases import GpuPool, NoHostReachable, Unreachable
from ..hosts.settings import HostSettings
from .job import held_gpus

__all__ = ["NoHostReachable", "held_on_host", "placement"]


@contextlib.contextmanager
def placement(plan: Plan, console: Console):
    """The plan as placed: as it is, on the node and GPUs the host's scheduler (Ray) chose, or on the host and GPUs
    a lease from the pool gives (held until the end)."""
    def tell(why: str) -> None:
        console.print(f"[yellow]{escape(why)}[/]", soft_wrap=True)

    scheduled = scheduler_placement(plan.host, len(plan.gpus), plan.spec.run_id, tell)
    if scheduled is not None:
        with scheduled as (host, gpus):
            yield plan.placed(host, gpus)
        return
    if plan.pool is None:
        yield plan
        return
    pool = GpuPool(list(plan.pool.entries), plan.pool.lock_dir)
    with pool.acquire(len(plan.gpus), held=held_on_host, tell=tell) as lease:
        yield plan.placed(lease.host, lease.gpus)


def held_on_host(settings: HostSettings, gpus: list[int]) -> set[int]:
    """GPUs of the pool host that a runner of ours holds (one that outlived its sweep). A host that cannot be asked
    is Unreachable: placed there, the job would only fail to connect, while another host may be free."""
    try:
        with open_host(settings) as host:
            return held_gpus(host, gpus)
    except (HostError, ValueError, OSError) as exc:
        raise Unreachable(str(exc).removeprefix(f"{settings.name}: ")) from None
