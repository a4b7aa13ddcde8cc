"""Checks on the composed config before anything starts: one line naming the key and what is allowed.

Contract: `validate(cfg)` raises ConfigError for the first bad value; `check_group_choices(argv)` refuses an
unknown option of a config group (method=foo) before Hydra composes anything; `check_sweep(argv)` composes and
validates every job of a multirun before the first starts (a bad value in job 3 would otherwise stop the sweep
after jobs 1-2 ran). All happen before a host is contacted or an MLflow run exists, so bad input loses nothing.
What each knob allows is orchestrator.knobs' tables (every knob the runner and the host settings read); the
checks across keys (GPUs within host.gpus, device_map indices, paths that must exist) are here.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from remote import assets
from remote.spec import DEVICE_MAP_PRESETS

from . import knobs
from .paths import CONF_DIR


class ConfigError(ValueError):
    """A bad config value. `str()` is the one line shown to the user."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


def group_options(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def check_group_choices(overrides: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Refuse `group=option` overrides whose option file does not exist (sweeps `a,b` are checked per value)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups = {p.name for p in conf_dir.iterdir() if p.is_dir() and not p.name.startswith("_")}
    for override in OverridesParser.create().parse_overrides(overrides):
        group = override.key_or_group
        if group not in groups or override.is_delete():
            continue
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.value()]
        for value in values:
            if str(value) not in group_options(group, conf_dir):
                allowed = ", ".join(group_options(group, conf_dir))
                raise ConfigError(group, f"unknown option {value!r}; choose one of {allowed}")


def check_sweep(overrides: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Compose every job of the multirun `overrides` (Hydra's basic-sweeper expansion) and `validate` it; the
    error names the key and the job's overrides. Hydra's own settings (hydra.*, hydra/...) are left to Hydra."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    axes = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.key_or_group.startswith("hydra"):
            continue
        if override.is_sweep_override():
            prefix = override.get_key_element()
            axes.append([f"{prefix}={value}" for value in override.sweep_string_iterator()])
        else:
            axes.append([override.input_line])
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        for job in itertools.product(*axes):
            try:
                validate(compose(config_name="config", overrides=list(job)))
            except ConfigError as exc:
                raise ConfigError(exc.key, f"{str(exc).split(': ', 1)[1]} (sweep job: {' '.join(job)})") from None


def check_table(node: DictConfig, table, prefix: str = "") -> None:
    """Every `(key, rule)` of a knobs table against `node`; the error names `prefix + key`."""
    for key, rule in table:
        value = OmegaConf.select(node, key, default=None, throw_on_missing=False)
        if (problem := rule(value)) is not None:
            raise ConfigError(f"{prefix}{key}", problem)


def validate(cfg: DictConfig) -> None:
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra"))
    if missing:
        raise ConfigError(missing[0], "is required (it is ??? in the config); set it on the command line")
    script = cfg.get("runner") is not None and cfg.runner.kind == "script"
    check_table(cfg, knobs.RUN)
    check_table(cfg, [("max_new_tokens", knobs.max_new_tokens(None if script else cfg.model))])
    _check_hosts(cfg)
    allowed = cfg.host.get("gpus")
    if allowed is not None and not set(cfg.gpus) <= set(allowed):
        raise ConfigError("gpus", f"{list(cfg.gpus)} is not within host.gpus={list(allowed)} of host {cfg.host.name}")
    if script:
        path = OmegaConf.select(cfg.runner, "path", throw_on_missing=False)
        if not path or not Path(str(path)).expanduser().is_file():
            raise ConfigError("runner.path", f"runner=script needs an existing script file, got {path!r}")
        return   # a user's script brings its own model and method
    check_table(cfg, knobs.MODEL)
    _check_model(cfg)


def _check_hosts(cfg: DictConfig) -> None:
    """Every host this job may run on: `host`, and each entry of the pool (which then places the job)."""
    pool = cfg.get("pool")
    entries = list(pool.hosts) if pool and pool.get("hosts") else []
    for index, entry in enumerate(entries):
        check_table(entry, [("gpus", knobs.gpu_list)], f"pool.hosts[{index}].")
    hosts = [("host.", cfg.host)] + [(f"pool.hosts[{index}].host.", entry.host) for index, entry in enumerate(entries)]
    for prefix, host in hosts:
        check_table(host, knobs.HOST, prefix)
        if host.get("kind", "local") == "ssh":
            check_table(host, knobs.SSH, prefix)


def _check_model(cfg: DictConfig) -> None:
    model, drafter = cfg.model, cfg.drafter
    if model.path is None and not model.get("random"):
        raise ConfigError("model.path", "set a hub id or local path, or model.random for a random model")
    if method_needs_drafter(cfg.method.name) and drafter.path is None and drafter.get("random") is None:
        raise ConfigError("drafter", f"method {cfg.method.name} needs a drafter; choose drafter=<name> "
                          f"(one of {', '.join(group_options('drafter'))})")
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
        if (cfg.dataset.name == "jsonl" and not assets.is_asset(cfg.dataset.path)
                and not Path(str(cfg.dataset.path)).expanduser().is_file()):
            raise ConfigError("dataset.path", f"JSONL file {cfg.dataset.path!r} does not exist")


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
    pool = cfg.get("pool")
    hosts = [entry.host for entry in pool.hosts] if pool and pool.get("hosts") else [cfg.host]
    return all(h.get("kind", "local") == "local" for h in hosts)


def method_needs_drafter(method: str) -> bool:
    return method in ("dflash", "ddtree")


def _looks_local(value) -> bool:
    """Hub ids look like `org/name`; a path starts with /, ., ~ or has more than one slash."""
    if not isinstance(value, str):
        return False
    return value.startswith(("/", ".", "~")) or value.count("/") > 1
