"""Checks on the composed config before anything starts: one line naming the key and what is allowed.

Contract: `validate(cfg, choices, source)` fills what each section's file leaves out and refuses a key no reader
knows (orchestrator.config.sections), then raises ConfigError for the first bad value; `check_group_choices(overrides, configs)`
refuses an unknown option of a config group (method=foo, over the shipped conf/ and the user's dirs);
`check_keys(overrides, configs)` refuses a key nothing reads (tree_budgt=64, +tree_budgt=64) with the closest
known key; `check_sweep(overrides, configs, multirun)` composes and validates every job (of a multirun, or the one
run) before the first starts (a bad value in job 3 would otherwise stop the sweep after jobs 1-2 ran); an
optimiser's intervals at both ends. All happen before a host
is contacted, Hydra writes a run dir or an MLflow run exists, so bad input loses nothing.
`validate` also makes the local paths of a job that runs here absolute (against the working directory it started
in): the runner reads them from its own run dir, so what is checked here is then what the runner opens.
What each knob allows is orchestrator.config.knobs' tables (every knob the runner and the host settings read); the
checks across keys (GPUs within host.gpus, device_map indices, paths that must exist) are here.
"""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from remote import assets
from remote.spec import DEVICE_MAP_PRESETS

from ..hosts.leases import pool_entries
from ..paths import CONF_DIR
from . import knobs
from . import sections as schemas
from .errors import ConfigError, did_you_mean
from .sources import Configs, user_dir

# Sections whose keys are the user's to choose (env var names, transformers config fields, module names, script
# arguments): `+host.env.HF_HOME=/data/hf` adds a key there; anywhere else `+key=` names a key nothing reads.
FREE_FORM = ("host.env", "runner.args", "model.random", "drafter.random", "model.device_map")


def group_options(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    """The shipped options of `group` (user dirs add more: `Configs.options`)."""
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


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
    import itertools

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
            if schemas.knows(base, key) and not override.is_add():
                forced.add(override.input_line)
                continue
            known = known or [k for k in _keys(base) if not k.startswith("hydra")]
            hint = did_you_mean(key, known)
            if override.is_add() or override.is_force_add():
                raise ConfigError(key, f"no part of specbench reads this key{hint} (`+` adds keys only under "
                                       f"{', '.join(FREE_FORM)}; `specbench --help` lists the knobs)")
            raise ConfigError(key, f"unknown key{hint} (`specbench --help` lists the knobs)")
    return forced


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
    import itertools

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
            validate(cfg, composed.hydra.runtime.choices, configs.source)
            if scored and cfg.runner.kind != "script":
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


def check_table(node: DictConfig, table, prefix: str = "") -> None:
    """Every `(key, rule)` of a knobs table against `node`; the error names `prefix + key`."""
    for key, rule in table:
        value = OmegaConf.select(node, key, default=None, throw_on_missing=False)
        if (problem := rule(value)) is not None:
            raise ConfigError(f"{prefix}{key}", problem)


def validate(cfg: DictConfig, choices=None, source=None) -> None:
    """`choices`: the option of each group (Hydra's runtime.choices), `source(group, option)` its file, for the
    sections' checks (orchestrator.config.sections)."""
    if (problem := schemas.complete(cfg, choices or {}, source)) is not None:
        raise ConfigError(*problem)
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra"))
    if missing:
        raise ConfigError(missing[0], "is required (it is ??? in the config); set it on the command line")
    script = cfg.get("runner") is not None and cfg.runner.kind == "script"
    check_table(cfg, knobs.RUN)
    check_table(cfg, knobs.TRACKING)
    check_table(cfg, [("max_new_tokens", knobs.max_new_tokens(None if script else cfg.model))])
    _check_hosts(cfg)
    allowed = cfg.host.get("gpus")
    if allowed is not None and not set(cfg.gpus) <= set(allowed):
        raise ConfigError("gpus", f"{list(cfg.gpus)} is not within host.gpus={list(allowed)} of host {cfg.host.name}")
    check_table(cfg, [("objective", knobs.TEXT if script else knobs.one_of(knobs.OBJECTIVES))])
    if script:
        path = OmegaConf.select(cfg.runner, "path", throw_on_missing=False)
        if not path or not Path(str(path)).expanduser().is_file():
            raise ConfigError("runner.path", f"runner=script needs an existing script file, got {path!r}")
        return   # a user's script brings its own model and method
    check_table(cfg, knobs.MODEL)
    _check_model(cfg, choices or {})


def check_objective(cfg: DictConfig) -> None:
    """For a sweeper that scores jobs: the objective must be a metric this run computes."""
    if cfg.objective in ("speedup_vs_ar", "exact_match_vs_ar") and cfg.baseline != "ar":
        raise ConfigError("objective", f"{cfg.objective} needs the AR baseline (baseline=ar), got "
                                       f"baseline={cfg.baseline}; choose e.g. objective=tokens_per_s")


def _check_hosts(cfg: DictConfig) -> None:
    """Every host this job may run on: `host`, and each entry of the pool (which then places the job)."""
    entries = pool_entries(cfg)
    for index, entry in enumerate(entries):
        check_table(entry, [("gpus", knobs.gpu_list)], f"pool.hosts[{index}].")
    if entries and not any(len(entry.gpus) >= len(cfg.gpus) for entry in entries):   # it would wait for ever
        sizes = ", ".join(f"{entry.host.get('name')}: {len(entry.gpus)}" for entry in entries)
        raise ConfigError("gpus", f"a job of {len(cfg.gpus)} GPUs (gpus={list(cfg.gpus)}), but no host of the pool "
                                  f"has that many ({sizes}); the pool gives each job len(gpus) GPUs of one host")
    hosts = [("host.", cfg.host)] + [(f"pool.hosts[{index}].host.", entry.host) for index, entry in enumerate(entries)]
    for prefix, host in hosts:
        check_table(host, knobs.HOST, prefix)
        if host.get("kind", "local") == "ssh":
            check_table(host, knobs.SSH, prefix)
            for key in ("identity_file", "ssh_config"):   # files of this machine: a typo read as "is the host up?"
                if host.get(key) and not Path(str(host[key])).expanduser().is_file():
                    raise ConfigError(f"{prefix}{key}", f"{host[key]!r} is not a file on this machine")
        elif host.get("workdir"):   # LocalHost takes it as it is: ~ unexpanded, relative to wherever it cds
            host.workdir = _here(host.workdir)


def _check_model(cfg: DictConfig, choices) -> None:
    model, drafter = cfg.model, cfg.drafter
    if model.path is None and not model.get("random"):
        raise ConfigError("model.path", "set a hub id or local path, or model.random for a random model")
    if method_needs_drafter(cfg.method.name) and drafter.path is None and drafter.get("random") is None:
        chosen = choices.get("drafter")
        why = (f" (there is no drafter/{chosen}.yaml to go with model={chosen})"
               if drafter.name == schemas.NO_DRAFTER and chosen not in (None, schemas.NO_DRAFTER) else "")
        raise ConfigError("drafter", f"method {cfg.method.name} needs a drafter{why}; choose drafter=<name> "
                          f"(one of {', '.join(group_options('drafter'))}, or your own in {user_dir()}/drafter/)")
    _check_device_map(model.get("device_map"), list(cfg.gpus))
    paths = (("model.path", model.path), ("drafter.path", drafter.path), ("model.tokenizer", model.get("tokenizer")),
             ("dataset.path", cfg.dataset.get("path")))
    for key, value in paths:   # shipped with the bundle, so checkable here whatever the host
        if (reason := assets.problem(value)) is not None:
            raise ConfigError(key, reason)
    if _runs_locally(cfg):
        for key, value in paths[:3]:
            if _looks_local(value) and not Path(value).expanduser().exists():
                raise ConfigError(key, f"local path {value!r} does not exist")
            # transformers, too, prefers a local folder over a hub id of the same name
            if isinstance(value, str) and (_looks_local(value) or Path(value).exists()):
                OmegaConf.update(cfg, key, _here(value))
        if cfg.dataset.name == "jsonl" and not assets.is_asset(cfg.dataset.path):
            if not Path(str(cfg.dataset.path)).expanduser().is_file():
                raise ConfigError("dataset.path", f"JSONL file {cfg.dataset.path!r} does not exist")
            cfg.dataset.path = _here(cfg.dataset.path)


def _check_device_map(device_map, gpus: list[int]) -> None:
    """null, a preset, or {module name: index among the run's GPUs} (CUDA_VISIBLE_DEVICES renumbers them)."""
    if device_map is None or device_map in DEVICE_MAP_PRESETS:
        return
    if not isinstance(device_map, DictConfig) or not device_map:
        raise ConfigError("model.device_map", f"must be null, one of {', '.join(DEVICE_MAP_PRESETS)} or a mapping "
                          f"{{module: GPU index}}, got {device_map!r}")
    for module, index in device_map.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < max(len(gpus), 1):
            raise ConfigError("model.device_map", f"{module}: {index!r} is not an index among the run's "
                              f"{len(gpus)} GPUs (gpus={gpus}; 0 is the first of them)")


def _runs_locally(cfg: DictConfig) -> bool:
    """Local paths can be checked here only when the job runs here (the pool, if any, decides the host)."""
    hosts = [entry.host for entry in pool_entries(cfg)] or [cfg.host]
    return all(h.get("kind", "local") == "local" for h in hosts)


def method_needs_drafter(method: str) -> bool:
    return method in ("dflash", "ddtree")


def _here(path: str) -> str:
    """`path` as an absolute path of this machine (~ expanded, relative to the working directory)."""
    return os.path.abspath(os.path.expanduser(path))


def _looks_local(value) -> bool:
    """Hub ids look like `org/name`; a path starts with /, ., ~ or has more than one slash."""
    if not isinstance(value, str):
        return False
    return value.startswith(("/", ".", "~")) or value.count("/") > 1
