"""Hosts: this machine (local) and boxes reached by SSH (Fabric), their settings, GPU leases and preflight."""
from __future__ import annotations

from .base import CommandFailed, Host, HostError, HostMismatch, LinkLost, Result

__all__ = ["CommandFailed", "Host", "HostError", "HostMismatch", "LinkLost", "Result"]
