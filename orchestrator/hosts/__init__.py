"""Hosts: Local (this machine) and SSH (Fabric). `make_host` picks one from the `host` config group."""
from __future__ import annotations

from typing import Any, Mapping

from .base import CommandFailed, Host, HostError, LinkLost, Result

__all__ = ["CommandFailed", "Host", "HostError", "LinkLost", "Result", "make_host"]


def make_host(cfg: Mapping[str, Any]) -> Host:
    kind = cfg.get("kind", "local")
    if kind == "local":
        from .local import LocalHost

        return LocalHost(name=cfg.get("name") or "local", workdir=cfg.get("workdir"), python=cfg.get("python"))
    if kind == "ssh":
        from .ssh import SSHHost

        return SSHHost.from_config(cfg)
    raise HostError(f"host.kind: unknown kind {kind!r}; choose local or ssh")
