"""The settings of an SSH host (the `host` config group with `kind: ssh`), apart from the connection code so that
validation reads them without importing paramiko."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .base import HostError


@dataclass
class SSHSettings:
    """The `host` config group for `kind: ssh` (conf/host/ssh.yaml documents each key)."""

    hostname: str
    name: str | None = None                 # shown in messages and MLflow's `host` tag; default: hostname
    kind: str = "ssh"
    user: str | None = None                 # default: ssh config User, else the local user name
    port: int | None = None                 # default: ssh config Port, else 22
    identity_file: str | None = None        # default: ssh config IdentityFile, else ~/.ssh/id_* and the agent
    known_hosts: str | None = None          # default: ssh config UserKnownHostsFile, else ~/.ssh/known_hosts
    ssh_config: str | None = None           # default: ~/.ssh/config (if present)
    strict_host_key_checking: bool = True   # false: accept any host key for this host (explicit opt-out)
    workdir: str | None = None              # absolute path on the host; default ~/specbench; ~ is expanded there
    python: str = "python3"                 # the host's interpreter (e.g. a venv's bin/python)
    gpus: list[int] | None = None           # GPUs on this host the project may use; None = all
    env: dict[str, str] = field(default_factory=dict)        # exported for the runner (HF_HOME=...)
    forward_env: list[str] = field(default_factory=list)     # local env var NAMES whose values go along
    connect_timeout: float = 10.0           # seconds for TCP connect + SSH handshake
    io_timeout: float = 15.0                # seconds of silence before a connection is considered dead
    keepalive: float = 15.0                 # seconds between SSH keepalives (0 = off)
    reconnect_timeout: float = 120.0        # total seconds spent re-connecting before giving up

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "SSHSettings":
        data = _plain(cfg)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HostError(f"host: unknown key(s) {', '.join(unknown)} for kind ssh; "
                            f"valid keys: {', '.join(sorted(known))}")
        if not data.get("hostname"):
            raise HostError("host.hostname: set it, e.g. `host=ssh host.hostname=gpu1.example.com` "
                            "(an alias of ~/.ssh/config works too)")
        data = {k: v for k, v in data.items() if v is not None or k in ("name", "workdir", "gpus")}
        data["env"] = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
        data["forward_env"] = [str(n) for n in (data.get("forward_env") or [])]
        return cls(**data)


def _plain(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A DictConfig (what Hydra hands over) or a plain mapping, as a plain dict."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf comes with hydra
        pass
    return dict(cfg)
