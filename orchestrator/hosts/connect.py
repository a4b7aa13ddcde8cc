"""A host's settings opened as its Host (orchestrator.hosts.base): the one place a kind of settings becomes a kind of
Host. Nothing connects until the Host's first operation; paramiko is imported only for an SSH host. `host_of` opens
a `host` mapping as a run's job.json keeps it."""
from __future__ import annotations

from typing import Any, Mapping

from .base import Host
from .settings import HostSettings, SSHSettings, host_settings


def open_host(settings: HostSettings) -> Host:
    if isinstance(settings, SSHSettings):
        from .ssh import SSHHost

        return SSHHost(settings)
    from .local import LocalHost

    return LocalHost(name=settings.name or settings.kind, workdir=settings.workdir, python=settings.python)


def host_of(mapping: Mapping[str, Any]) -> Host:
    return open_host(host_settings(mapping))
