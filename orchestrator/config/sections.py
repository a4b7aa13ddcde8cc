"""The keys each config group's section holds, whichever file it comes from: what is left out gets its default,
and a key no reader knows is refused.

Why: Hydra composes a user's own file (a box, a pool, a model under ~/.config/specbench) as it is written. A
misspelt key (`workdr:`, `hostz:`) was ignored, so the job ran with the default workdir or on no pool at all,
and a key left out failed where it was first read, as a traceback (`Key 'path' is not in struct`).
Contract: `complete(cfg, choices, source)` fills every key a section leaves out with its knob's default (so a minimal
file works, and what a run logs is whole), then returns (key, why) of the first key its class lacks or a REQUIRED
one left out: the file and the closest key. The classes are orchestrator.config.knobs' and, for a host by its kind,
orchestrator.hosts.settings'. `knows(cfg, key)` says whether `complete` would fill `key`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from omegaconf import DictConfig, ListConfig, open_dict

from ..hosts.settings import KIND_RULE, KINDS, SSHSettings, settings_class
from ..knob import NAME, REQUIRED, Knob, knobs_of
from .errors import did_you_mean
from .knobs import NO_DRAFTER, SECTIONS, PoolEntryKnobs

def host_knobs(node) -> dict[str, Knob] | None:
    """The knobs of a host section by its kind (None for an unknown kind, which the kind's rule refuses)."""
    cls = settings_class(node.get("kind"))
    return None if cls is None else {"kind": Knob("kind", cls.kind, KIND_RULE, " | ".join(KINDS)), **knobs_of(cls)}


def complete(cfg: DictConfig, choices: Mapping[str, Any],
             source: Callable[[str, str], str] | None = None) -> tuple | None:
    """Fill what each group's section leaves out; then (key, why) of the first key left out that has no default or
    that no reader knows, None if there is none.
    `choices`: the option chosen in each group (Hydra's runtime.choices); `source(group, option)`: its file, as
    the error names it."""
    source = source or (lambda group, option: f"{group}/{option}.yaml")
    problems: list[tuple[str, str]] = []
    with open_dict(cfg):
        for group, cls in SECTIONS.items():
            option = str(choices.get(group) or group)
            if cfg.get(group) is None:
                cfg[group] = {}
                if group == "drafter":   # a model without a drafter file of its name: no drafter
                    option = NO_DRAFTER
            where = source(group, option)
            _fill(cfg[group], knobs_of(cls), group, option, where, problems)
            if group == "pool":
                _pool_hosts(cfg.pool, where, problems)
        option = str(choices.get("host") or "host")
        _host(cfg.host, "host", option, source("host", option), problems)
    return problems[0] if problems else None


def _pool_hosts(pool: DictConfig, where: str, problems: list) -> None:
    entry_knobs = knobs_of(PoolEntryKnobs)
    for index, entry in enumerate(pool.hosts if isinstance(pool.hosts, ListConfig) else []):
        if not isinstance(entry, DictConfig):
            continue
        _fill(entry, entry_knobs, f"pool.hosts[{index}]", "", where, problems)
        if isinstance(entry.host, DictConfig):
            _host(entry.host, f"pool.hosts[{index}].host", None, where, problems)
        elif "host" in entry:   # a host file's name (host: box1) is not looked up here
            problems.append((f"pool.hosts[{index}].host", f"must be a host's settings, e.g. "
                             f"`{entry_knobs['host'].example}` (in {where}), got {entry.host!r}"))


def _host(node: DictConfig, prefix: str, option: str | None, where: str, problems: list) -> None:
    """A host by its kind (an unknown kind is the rules' to refuse); a pool's host is named by its hostname."""
    knobs = host_knobs(node)
    if knobs is None:
        return
    default = option or node.get("hostname") or knobs["kind"].default
    _fill(node, knobs, prefix, default, where, problems, host=settings_class(node.get("kind")))


def _fill(node: DictConfig, knobs: dict[str, Knob], prefix: str, name: str, where: str, problems: list,
          host=None) -> None:
    """`host`: the settings class of a host section."""
    for key in node:     # first: a misspelt key is also a missing one, and its hint is the useful line
        if key not in knobs:
            problems.append((f"{prefix}.{key}", _unknown(str(key), knobs, where, host)))
    for key, k in knobs.items():
        if key in node:
            continue
        if k.default is REQUIRED:
            problems.append((f"{prefix}.{key}", f"missing in {where}; set it, e.g. `{k.example}`"))
        else:
            node[key] = name if k.default is NAME else k.default


def _unknown(key: str, knobs: dict[str, Knob], where: str, host) -> str:
    hint = did_you_mean(key, knobs)
    if host is not None and host.local and key in knobs_of(SSHSettings):
        return (f"a {host.kind} host has no {key} (in {where}); for a box reached by SSH add `kind: "
                f"{SSHSettings.kind}` there")
    reads = f"a {host.kind} host reads" if host is not None else "it reads"
    return f"unknown key in {where}{hint} ({reads} {', '.join(knobs)})"


def knows(cfg: DictConfig, key: str) -> bool:
    """Whether `key` is one of its section's keys, as `complete` would fill it (host.user of an SSH host whose
    file leaves it out), though the composed `cfg` lacks it."""
    group, _, leaf = key.partition(".")
    section = cfg.get(group) if group in SECTIONS or group == "host" else None
    if not isinstance(section, DictConfig) or "." in leaf:
        return False
    knobs = (host_knobs(section) or {}) if group == "host" else knobs_of(SECTIONS[group])
    return leaf in knobs
