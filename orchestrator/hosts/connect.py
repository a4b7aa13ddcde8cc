"""A host's settings opened as its Host (orchestrator.hosts.base): the one place a kind of settings becomes a kind of
Host. Nothing connects until the Host's first operation; paramiko is imported only for an SSH host."""
from __future__ import annotations

from .base import Host
from .settings import HostSettings, SSHSettings


def open_host(settings: HostSettings) -> Host:
    if isinstance(settings, SSHSettings):
        from .ssh import SSHHost

        return SSHHost(settings)
    from .local import LocalHost

    return LocalHost(name=settings.name or settings.kind, workdir=settings.workdir, python=settings.python)
