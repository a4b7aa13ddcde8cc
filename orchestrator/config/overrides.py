"""Checks on the command line, before anything is composed for a run: one line naming the key and what is allowed.

Contract: `check_group_choices(overrides, configs)` refuses an unknown option of a config group (method=foo, over the
shipped conf/ and the user's dirs); `check_keys(overrides, configs)` refuses a key nothing reads (tree_budgt=64,
+tree_budgt=64) with the closest known key and returns the overrides Hydra must force (a key a user's file leaves
out); `check_sweep(overrides, configs, multirun)` composes and validates every job (of a multirun, or the one run)
before the first starts (a bad value in job 3 would otherwise stop the sweep after jobs 1-2 ran), an optimiser's
intervals at both ends. All happen before a host is contacted, Hydra writes a run dir or an MLflow run exists, so
bad input loses nothing.
"""
from __future__ import annotations

import itertools

from omegaconf import DictConfig, ListConfig, OmegaConf

from .errors import ConfigError, did_you_mean
from .sections import complete, knows
from .sources import Configs, user_dir
from .validate import check_objective, validate

# Sections whose keys are the user's to choose (env var names, transformers config fields, module names, script
# arguments): `+host.env.HF_HOME=/data/hf` adds a key there; anywhere else `+key=` names a key nothing reads.
FREE_FORM = ("host.env", "runner.args", "model.random", "drafter.random", "model.device_map")


def _parse(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides)


def _group_of(override) -> str:
    return override.key_or_group.split("@", 1)[0]


def check_group_choices(overrides: list[str], configs: Configs) -> None:
    """Refuse `group=option` overrides whose option no config source has (sweeps `a,b` are checked per value)."""
    groups = configs.groups()
    for override in _parse(overrides):
        group = _group_of(override)
        if group not in groups or override.is_delete():
            continue
        values = _sweep_values(override, configs) if override.is_sweep_override() else [override.value()]
        options = configs.options(group)
        for value in values:
            if str(value) not in options:
                raise ConfigError(group, f"unknown option {value!r}{did_you_mean(str(value), options)} "
                                         f"(choose one of {', '.join(options)}; add your own in {user_dir()}/{group}/)")


def _sweep_values(override, configs: Configs) -> list[str]:
    """A sweep's values; a group's `glob(...)` matched against that group's options, user dirs included (Hydra
    expands it only with its config loader, which a check outside its app does not have)."""
    from hydra.core.override_parser.types import Glob

    if isinstance(override.value(), Glob):
        return override.value().filter(configs.options(_group_of(override)))
    return list(override.sweep_string_iterator())


def _keys(node, prefix: str = "") -> list[str]:
    """Every dotted key of a composed config, containers included."""
    out = []
    for key, value in node.items_ex(resolve=False) if isinstance(node, DictConfig) else []:
        out.append(f"{prefix}{key}")
        out.extend(_keys(value, f"{prefix}{key}."))
    return out


def _has(cfg: DictConfig, key: str) -> bool:
    """Whether `key` (dotted) is in the config, set or left ??? (OmegaConf.select cannot tell ??? from absent)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, throw_on_missing=False) if parent_key else cfg
    if isinstance(parent, ListConfig):
        return leaf.isdigit() and int(leaf) < len(parent)
    return isinstance(parent, DictConfig) and leaf in parent.keys()


def check_keys(overrides: list[str], configs: Configs) -> set[str]:
    """Refuse an override of a key the composed config lacks (a typo: with "did you mean"), and `+key=` that adds
    a key nothing reads, unless it is under a FREE_FORM section. Group choices decide which keys exist (host=ssh has
    host.hostname), so sweeps of groups are checked per combination; other sweep values do not change the keys.
    Returns the overrides of keys a section's schema has but its file leaves out (`host.user=me` for a user's
    minimal host file): Hydra refuses to set those unless forced (`++host.user=me`)."""
    forced = set()
    parsed = _parse(overrides)
    groups = configs.groups()
    hydra_groups = [o.input_line for o in parsed if o.key_or_group.startswith("hydra/")]   # hydra/launcher=joblib
    axes = []
    for override in parsed:
        if _group_of(override) in groups:
            prefix = override.get_key_element()
            values = (_sweep_values(override, configs) if override.is_sweep_override()
                      else [override.get_value_element_as_str()])
            axes.append([f"{prefix}={value}" for value in values] if not override.is_delete()
                        else [override.input_line])
    for choice in itertools.product(*axes):
        base = configs.compose(list(choice))
        known = None
        for override in parsed:
            key = override.key_or_group
            if key.startswith("hydra.launcher.") and not override.is_add():
                _check_launcher_key(key, [*choice, *hydra_groups], configs)
            if key.startswith("hydra") or _group_of(override) in groups:
                continue
            if any(key == section or key.startswith(section + ".") for section in FREE_FORM):
                continue
            if _has(base, key):
                continue
            if knows(base, key) and not override.is_add():
                forced.add(override.input_line)
                continue
            known = known or [k for k in _keys(_completed(base)) if not k.startswith("hydra")]
            hint = did_you_mean(key, known)
            if override.is_add() or override.is_force_add():
                raise ConfigError(key, f"no part of specbench reads this key{hint} (`+` adds keys only under "
                                       f"{', '.join(FREE_FORM)}; `specbench --help` lists the knobs)")
            raise ConfigError(key, f"unknown key{hint} (`specbench --help` lists the knobs)")
    return forced


def _completed(cfg: DictConfig) -> DictConfig:
    """A copy of `cfg` with the keys each section's file leaves out (its knobs' defaults), for "did you mean"."""
    import copy

    filled = copy.deepcopy(cfg)
    complete(filled, {})
    return filled


def _check_launcher_key(key: str, overrides: list[str], configs: Configs) -> None:
    """`hydra.launcher.n_jobs=4` without a parallel launcher: Hydra's own error advises `+hydra.launcher.n_jobs`,
    which runs the jobs one at a time all the same."""
    composed = configs.compose(overrides, with_hydra=True)
    if not _has(composed, key):
        launcher = composed.hydra.runtime.choices.get("hydra/launcher")
        raise ConfigError(key, f"the {launcher} launcher has no such setting (it runs a sweep's jobs one at a time); "
                               f"for jobs in parallel choose hydra/launcher=joblib (docs/sweeps.md)")


OPTIMISED = "hydra.sweeper.params."   # an optimising sweeper's search space on the command line


def check_sweep(overrides: list[str], configs: Configs, multirun: bool = True) -> None:
    """Compose every job of the multirun `overrides` (Hydra's basic-sweeper expansion) and `validate` it; the
    error names the key and the job's overrides. An interval an optimiser samples from is checked at both ends
    (also given as `hydra.sweeper.params.KEY=...`, or in the sweeper's config files, read for a `multirun`);
    Hydra's own settings (hydra.*, hydra/...) are left to Hydra."""
    from hydra.core.override_parser.types import IntervalSweep

    parsed = _parse(overrides)
    given = {o.key_or_group.removeprefix(OPTIMISED) for o in parsed}
    axes, scored, shown = [], False, {}
    space = _search_space(parsed, configs) if multirun else []
    for override in parsed + [o for o in space if o.key_or_group not in given]:
        if override.key_or_group == "hydra/sweeper":
            scored = override.value() != "basic"
        key = override.key_or_group.removeprefix(OPTIMISED)   # an optimiser's search space, by its key
        if key.startswith("hydra"):
            continue
        if isinstance(override.value(), IntervalSweep):   # sampled by the sweeper: both ends must be allowed
            ends = [f"{key}={end}" for end in (override.value().start, override.value().end)]
            shown.update(dict.fromkeys(ends, override.input_line.removeprefix(OPTIMISED)))
            axes.append(ends)
        elif override.is_sweep_override():
            axes.append([f"{key}={value}" for value in _sweep_values(override, configs)])
        elif key == override.key_or_group:    # (an optimiser's fixed value is its own business)
            axes.append([override.input_line])
    jobs = list(itertools.product(*axes))
    for job in jobs:
        try:
            composed = configs.compose(list(job), with_hydra=True)   # Hydra's node says each group's option
            cfg = OmegaConf.masked_copy(composed, [key for key in composed if key != "hydra"])
            arm = validate(cfg, composed.hydra.runtime.choices, configs.source)
            if scored and arm.ours:
                check_objective(cfg)
        except ConfigError as exc:
            if len(jobs) == 1:
                raise
            job = " ".join(dict.fromkeys(shown.get(part, part) for part in job))
            raise ConfigError(exc.key, f"{str(exc).split(': ', 1)[1]} (sweep job: {job})") from None


def _search_space(parsed, configs: Configs) -> list:
    """The optimising sweeper's own search space (`hydra.sweeper.params` of its config files) as overrides."""
    fixed = [o.input_line for o in parsed if o.key_or_group.startswith("hydra") and not o.is_sweep_override()]
    try:
        params = OmegaConf.select(configs.compose(fixed, with_hydra=True), "hydra.sweeper.params") or {}
        return _parse([f"{key}={value}" for key, value in params.items()])
    except Exception:   # Hydra reports its own config's problems when it runs
        return []
