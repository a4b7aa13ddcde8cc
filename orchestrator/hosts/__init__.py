"""Hosts: this machine (local), boxes reached by SSH (Fabric), nodes of a Ray cluster; their settings, GPU leases and
preflight."""
from __future__ import annotations

from .base import CommandFailed, Host, HostError, HostGone, HostMismatch, LinkLost, Result

__all__ = ["CommandFailed", "Host", "HostError", "HostGone", "HostMismatch", "LinkLost", "Result"]
