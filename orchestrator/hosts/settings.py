"""Where a job runs, as settings: one frozen class per host kind (LocalSettings, SSHSettings), each field a knob
(orchestrator.knob: default, rule and help together), apart from the connection code so that the config room reads
them without importing paramiko.

Contract: `settings_class(kind)` is the class of a host kind (None for an unknown one): the one place a kind's name
becomes a type. `host_settings(mapping)` builds settings from a `host` section or a run's job.json (HostError naming an
unknown key or a missing hostname); orchestrator.hosts.connect opens them as a Host; `settings.as_dict()` is what
job.json keeps (names of forwarded variables, never their values); `settings.local`: whether the host is this machine.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Mapping

from ..knob import ENV_NAMES, FLAG, REQUIRED, TEXT, gpu_list, integer, knob, knobs_of, names, nullable, number, \
    one_of, rule
from .base import HostError

TIMEOUT_LIMIT = 3600.0       # connect_timeout, io_timeout, keepalive: an hour of silence is a dead link
RECONNECT_LIMIT = 86400.0    # reconnect_timeout: a day
# Names that usually hold a credential (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, ...)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.IGNORECASE)


def env_rule(value) -> str | None:
    """A mapping {NAME: value} whose names are shell identifiers, none of which looks like a secret's: host.env is
    logged with the run (a param each), while host.forward_env sends a value from the user's shell to the runner
    alone. The value is never echoed."""
    if value is None:
        return None
    if not (isinstance(value, dict) or type(value).__name__ == "DictConfig") or not names(value.keys()):
        return f"must be a mapping {{NAME: value}} whose names are shell identifiers or null, got {value!r}"
    secret = next((str(name) for name in value if _SECRET_NAME.search(str(name))), None)
    return None if secret is None else (
        f"{secret} looks like a secret, and host.env is logged with the run; leave it out of host.env and put its "
        f"name in host.forward_env=[{secret}] (the value then goes from your shell to the runner, never logged)")


@dataclass(frozen=True)
class HostSettings:
    """What every host kind reads."""

    kind: ClassVar[str]
    local: ClassVar[bool]
    name: str | None = knob(None, nullable(TEXT), "shown in output and in MLflow's `host` tag")
    workdir: str | None = knob(None, nullable(TEXT), "where bundles/ and runs/ go on the host")
    python: str | None = knob(None, nullable(TEXT), "the host's interpreter, e.g. a venv's bin/python (needs torch, "
                                                    "transformers)")
    engine_python: str | None = knob(None, nullable(TEXT), "engine arms: the interpreter with the engine installed "
                                     "(e.g. a vLLM venv's bin/python); null = host.python")
    gpus: tuple[int, ...] | None = knob(None, nullable(gpu_list), "GPUs of this host the project may use; null = "
                                                                   "all it has")
    env: dict = knob({}, env_rule, "exported for the runner, e.g. {HF_HOME: /data/hf}; logged as params, so no "
                                   "secrets (refused)")
    forward_env: list = knob([], nullable(ENV_NAMES), "NAMES of local env vars (e.g. [HF_TOKEN]) whose values go "
                             "along to the run; values are never logged or written locally; on the host they sit in "
                             "a 0600 file that launch.sh reads and deletes before the runner starts")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"kind": self.kind, **{k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}}


@dataclass(frozen=True)
class LocalSettings(HostSettings):
    """This machine: jobs run as detached subprocesses."""

    kind: ClassVar[str] = "local"
    local: ClassVar[bool] = True
    workdir: str | None = knob(None, nullable(TEXT), "null = <runs dir>/.host")
    python: str | None = knob(None, nullable(TEXT), "null = this interpreter")


@dataclass(frozen=True)
class SSHSettings(HostSettings):
    """A box reached by SSH (orchestrator.hosts.ssh says how keys and aliases are handled)."""

    kind: ClassVar[str] = "ssh"
    local: ClassVar[bool] = False
    hostname: str | None = knob(REQUIRED, rule(
        "a host name or ~/.ssh/config alias, e.g. host.hostname=gpu1.example.com", lambda v: isinstance(v, str) and v),
                                "a DNS name, an IP, or a Host alias of ~/.ssh/config",
                                example="hostname: gpu1.example.com (or an alias of ~/.ssh/config)")
    name: str | None = knob(None, nullable(TEXT), "shown in output and in MLflow's `host` tag; null = hostname")
    # Relative, it would name another folder once a command cds into the run's (the bundle install did, and
    # failed); the host expands ~ (SSHHost).
    workdir: str | None = knob(None, nullable(rule(
        "an absolute path on the host or one under ~/, e.g. ~/specbench",
        lambda v: isinstance(v, str) and (v == "~" or v.startswith(("/", "~/"))))),
                               "absolute or ~/... on the host; null = ~/specbench (bundles/ and runs/ go there)")
    python: str = knob("python3", TEXT, "the host's interpreter, e.g. /opt/venv/bin/python (needs torch, transformers)")
    user: str | None = knob(None, nullable(TEXT), "null = the alias's User, else your local user name")
    port: int | None = knob(None, nullable(integer(1, 65535)), "null = the alias's Port, else 22")
    identity_file: str | None = knob(None, nullable(TEXT), "null = the alias's IdentityFile, else ~/.ssh/id_* and "
                                     "the ssh agent", local_file=True)
    known_hosts: str | None = knob(None, nullable(TEXT), "null = the alias's UserKnownHostsFile, else "
                                   "~/.ssh/known_hosts")
    ssh_config: str | None = knob(None, nullable(TEXT), "null = ~/.ssh/config (if present)", local_file=True)
    strict_host_key_checking: bool = knob(True, FLAG, "false accepts ANY host key for this host (never the default)")
    connect_timeout: float = knob(10.0, number(0, TIMEOUT_LIMIT, above=True), "seconds for TCP connect and SSH "
                                  "handshake")
    io_timeout: float = knob(15.0, number(0, TIMEOUT_LIMIT, above=True), "seconds of silence after which the "
                             "connection counts as dead")
    keepalive: float = knob(15.0, number(0, TIMEOUT_LIMIT), "seconds between SSH keepalives (0 = off)")
    reconnect_timeout: float = knob(120.0, number(0, RECONNECT_LIMIT, above=True), "while tailing, how long to keep "
                                    "reconnecting before the run is given up")


KINDS: dict[str, type[HostSettings]] = {cls.kind: cls for cls in (LocalSettings, SSHSettings)}
KIND_RULE = one_of(tuple(KINDS))


def settings_class(kind: str | None) -> type[HostSettings] | None:
    """The settings class of `kind` (a section without one is this machine)."""
    return KINDS.get(kind or LocalSettings.kind) if isinstance(kind, str) or kind is None else None


def host_settings(cfg: Mapping[str, Any]) -> HostSettings:
    """Settings from a `host` mapping (a DictConfig or a plain dict, e.g. job.json's); keys it leaves out take their
    defaults. HostError for an unknown kind, an unknown key or an SSH host without a hostname."""
    data = _plain(cfg)
    cls = settings_class(data.pop("kind", None))
    if cls is None:
        raise HostError(f"host.kind: unknown kind {cfg.get('kind')!r}; choose {' or '.join(KINDS)}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise HostError(f"host: unknown key(s) {', '.join(unknown)} for kind {cls.kind}; "
                        f"valid keys: {', '.join(sorted(known))}")
    if knobs_of(cls).get("hostname") is not None and not data.get("hostname"):
        raise HostError("host.hostname: set it, e.g. `host=ssh host.hostname=gpu1.example.com` "
                        "(an alias of ~/.ssh/config works too)")
    defaults = {k.key: k.default for k in knobs_of(cls).values() if not k.required}
    data = {k: (defaults[k] if v is None and defaults.get(k) is not None else v) for k, v in data.items()}
    data["env"] = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
    data["forward_env"] = [str(n) for n in (data.get("forward_env") or [])]
    if data.get("gpus") is not None:
        data["gpus"] = tuple(data["gpus"])
    return cls(**data)


def _plain(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A DictConfig (what Hydra hands over) or a plain mapping, as a plain dict."""
    if type(cfg).__name__ == "DictConfig":
        from omegaconf import OmegaConf

        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg)
