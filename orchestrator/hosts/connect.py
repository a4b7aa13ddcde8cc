"""A host's settings opened as its Host (orchestrator.hosts.base): the one place a kind of settings becomes a kind of
Host. Nothing connects until the Host's first operation; paramiko is imported only for an SSH host, Ray only for a Ray
host. `host_of` opens a `host` mapping as a run's job.json keeps it. `scheduler_placement` is the placement of a host
kind whose own scheduler chooses the node and GPUs (Ray), None for the others."""
from __future__ import annotations

from typing import Any, Callable, ContextManager, Mapping

from .base import Host
from .settings import HostSettings, RaySettings, SSHSettings, host_settings


def open_host(settings: HostSettings) -> Host:
    if isinstance(settings, SSHSettings):
        from .ssh import SSHHost

        return SSHHost(settings)
    if isinstance(settings, RaySettings):
        from .ray import RayHost

        return RayHost(settings)
    from .local import LocalHost

    return LocalHost(name=settings.name or settings.kind, workdir=settings.workdir, python=settings.python)


def host_of(mapping: Mapping[str, Any]) -> Host:
    return open_host(host_settings(mapping))


def scheduler_placement(settings: HostSettings, count: int, run_id: str,
                        tell: Callable[[str], None]) -> ContextManager[tuple[HostSettings, list[int]]] | None:
    """The placement by the host's own scheduler (a context manager yielding the placed settings and GPU ids, held
    until it exits), or None where the plan's host and GPUs are where the job runs."""
    if isinstance(settings, RaySettings) and not settings.node:
        from .ray_place import ray_placement

        return ray_placement(settings, count, run_id, tell)
    return None
