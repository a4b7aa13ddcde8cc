"""The keys each config group's section holds and their defaults, whichever file the section comes from.

Why: Hydra composes a user's own file (a box, a pool, a model under ~/.config/specbench) as it is written. A
misspelt key (`workdr:`, `hostz:`) was ignored, so the job ran with the default workdir or on no pool at all,
and a key left out failed where it was first read, as a traceback (`Key 'path' is not in struct`).
`complete(cfg, choices, source)` fills every key a section leaves out with its default (so a minimal file works,
and what a run logs is whole), then names a key its schema lacks: one line with the file and the closest key.
The schemas are the readers' own: remote.spec's ModelSpec / DrafterSpec / DatasetSpec, SSHSettings for an SSH
host, plus the keys only the orchestrator reads (names, a local host's, the pool's, tracking's, the runner's).
Values are left to orchestrator.config.knobs' rules; free-form values (host.env, model.random, ...) are not looked into.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, ListConfig, open_dict

from remote.spec import DatasetSpec, DrafterSpec, ModelSpec

from ..hosts.settings import SSHSettings


class Required:
    """A key a section must set (no default would mean anything)."""

    def __init__(self, example: str):
        self.example = example


def _defaults(spec, *drop: str) -> dict[str, Any]:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(spec) if f.name not in drop}


NAME = object()   # the default name: the option's (host=mybox: mybox)
LOCAL_HOST = {"name": NAME, "kind": "local", "workdir": None, "python": None, "gpus": None, "env": {},
              "forward_env": []}
SSH_HOST = {**_defaults(SSHSettings, "hostname"), "name": NAME,
            "hostname": Required("hostname: gpu1.example.com (or an alias of ~/.ssh/config)")}
HOSTS = {"local": LOCAL_HOST, "ssh": SSH_HOST}
SECTIONS: dict[str, dict[str, Any]] = {
    "model": {"name": NAME, **_defaults(ModelSpec)},
    "drafter": {"name": NAME, **_defaults(DrafterSpec)},
    "dataset": {**_defaults(DatasetSpec, "num_prompts"), "name": Required("name: jsonl (builtin, humaneval, "
                                                                          "jsonl or hub)")},
    "method": {"name": NAME},
    "tracking": {"uri": None, "experiment": "specbench"},
    "runner": {"kind": "builtin", "path": None, "args": []},
    "pool": {"hosts": [], "lock_dir": "~/.cache/specbench/leases"},
}
POOL_ENTRY = {"host": Required("host: {name: gpu1, kind: ssh, hostname: gpu1}"), "gpus": Required("gpus: [0, 1]")}
NO_DRAFTER = "none"   # the drafter of a model that has no drafter/<model>.yaml (config.yaml: `optional`)


def complete(cfg: DictConfig, choices: Mapping[str, Any],
             source: Callable[[str, str], str] | None = None) -> tuple | None:
    """Fill what each group's section leaves out; then (key, why) of the first key left out that has no default or
    that no reader knows, None if there is none.
    `choices`: the option chosen in each group (Hydra's runtime.choices); `source(group, option)`: its file, as
    the error names it."""
    source = source or (lambda group, option: f"{group}/{option}.yaml")
    problems: list[tuple[str, str]] = []
    with open_dict(cfg):
        for group, schema in SECTIONS.items():
            option = str(choices.get(group) or group)
            if cfg.get(group) is None:
                cfg[group] = {}
                if group == "drafter":   # a model without a drafter file of its name: no drafter
                    option = NO_DRAFTER
            where = source(group, option)
            _fill(cfg[group], schema, group, option, where, problems)
            if group == "pool":
                for index, entry in enumerate(cfg.pool.hosts if isinstance(cfg.pool.hosts, ListConfig) else []):
                    if isinstance(entry, DictConfig):
                        _fill(entry, POOL_ENTRY, f"pool.hosts[{index}]", option, where, problems)
                        if isinstance(entry.host, DictConfig):
                            _host(entry.host, f"pool.hosts[{index}].host", None, where, problems)
                        elif "host" in entry:   # a host file's name (host: box1) is not looked up here
                            problems.append((f"pool.hosts[{index}].host", f"must be a host's settings, e.g. "
                                             f"`{POOL_ENTRY['host'].example}` (in {where}), got {entry.host!r}"))
        option = str(choices.get("host") or "host")
        _host(cfg.host, "host", option, source("host", option), problems)
    return problems[0] if problems else None


def _host(node: DictConfig, prefix: str, option: str | None, where: str, problems: list) -> None:
    """A host by its kind (an unknown kind is knobs' to refuse); a pool's host is named by its hostname."""
    kind = node.get("kind") or "local"
    schema = HOSTS.get(kind)
    if schema is None:
        return
    default = option or (node.get("hostname") if kind == "ssh" else None) or kind
    _fill(node, schema, prefix, default, where, problems, kind)


def _fill(node: DictConfig, schema: dict, prefix: str, name: str, where: str, problems: list,
          kind: str | None = None) -> None:
    for key in node:     # first: a misspelt key is also a missing one, and its hint is the useful line
        if key not in schema:
            problems.append((f"{prefix}.{key}", _unknown(str(key), schema, where, kind)))
    for key, default in schema.items():
        if key in node:
            continue
        if isinstance(default, Required):
            problems.append((f"{prefix}.{key}", f"missing in {where}; set it, e.g. `{default.example}`"))
        else:
            node[key] = name if default is NAME else default


def _unknown(key: str, schema: dict, where: str, kind: str | None) -> str:
    from .errors import did_you_mean  # (validate imports this module)

    hint = did_you_mean(key, schema)
    if kind == "local" and key in SSH_HOST:
        return f"a local host has no {key} (in {where}); for a box reached by SSH add `kind: ssh` there"
    kinds = f"a {kind} host reads" if kind else "it reads"
    return f"unknown key in {where}{hint} ({kinds} {', '.join(schema)})"


def knows(cfg: DictConfig, key: str) -> bool:
    """Whether `key` is one of its section's keys, as `complete` would fill it (host.user of an SSH host whose
    file leaves it out), though the composed `cfg` lacks it."""
    group, _, leaf = key.partition(".")
    section = cfg.get(group) if group in SECTIONS or group == "host" else None
    if not isinstance(section, DictConfig) or "." in leaf:
        return False
    schema = HOSTS.get(section.get("kind") or "local", {}) if group == "host" else SECTIONS[group]
    return leaf in schema
