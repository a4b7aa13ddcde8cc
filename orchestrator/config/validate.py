"""Checks on a composed config before anything starts: one line naming the key and what is allowed.

Contract: `validate(cfg, choices, source)` fills what each section's file leaves out and refuses a key no reader
knows (orchestrator.config.sections), checks every knob's rule (orchestrator.config.knobs, and a host's by its kind),
then the checks across keys (GPUs within host.gpus, device_map indices, the target's positions, paths that must
exist), and raises ConfigError for the first bad value; it returns the run's arm. It also makes the local paths of a
job that runs here absolute (against the working directory it started in): the runner reads them from its own run
dir, so what is checked here is then what the runner opens.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from remote import assets
from remote.spec import CALIBRATION, DEVICE_MAP_PRESETS

from ..hosts.settings import KIND_RULE, settings_class
from ..knob import Knob, gpu_list, integer, is_int, knobs_of, one_of
from ..paths import CONF_DIR
from .arms import METHODS, Arm, arm_of
from .errors import ConfigError
from .knobs import MAX_NEW_TOKENS_LIMIT, NO_DRAFTER, OBJECTIVES, SECTIONS, URI_ENV, RunKnobs, TrackingKnobs, \
    tracking_uri
from .sections import complete, host_knobs
from .sources import user_dir


def check_knobs(node: DictConfig, knobs: dict[str, Knob], prefix: str = "") -> None:
    """Every knob's rule against its value in `node`; the error names `prefix + key`."""
    for key, k in knobs.items():
        value = OmegaConf.select(node, key, default=None, throw_on_missing=False)
        if (problem := k.rule(value)) is not None:
            raise ConfigError(f"{prefix}{key}", problem)


def validate(cfg: DictConfig, choices=None, source=None) -> Arm:
    """`choices`: the option of each group (Hydra's runtime.choices), `source(group, option)` its file, for the
    sections' checks (orchestrator.config.sections)."""
    unset = sorted(k for k in OmegaConf.missing_keys(cfg) if k.startswith("method."))   # complete() fills them
    if unset:
        raise ConfigError(unset[0], f"is required by method={cfg.method.get('name')} (it is ??? in its file); set it "
                                    f"on the command line")
    if (problem := complete(cfg, choices or {}, source)) is not None:
        raise ConfigError(*problem)
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra"))
    if missing:
        raise ConfigError(missing[0], "is required (it is ??? in the config); set it on the command line")
    arm = arm_of(cfg)
    check_knobs(cfg.method, knobs_of(SECTIONS["method"]), "method.")
    _check_arm(cfg, arm)
    check_knobs(cfg, knobs_of(RunKnobs))
    check_knobs(cfg.tracking, knobs_of(TrackingKnobs), "tracking.")
    if cfg.tracking.uri is None and (problem := tracking_uri(os.environ.get(URI_ENV) or None)) is not None:
        raise ConfigError(URI_ENV, f"{problem} (or set tracking.uri, which comes first)")
    if arm.ours:
        check_knobs(cfg, {"max_new_tokens": Knob("max_new_tokens", None, max_new_tokens(cfg.model), "")})
    _gpu_count(cfg)
    _check_hosts(cfg)
    allowed = cfg.host.get("gpus")
    if allowed is not None and not set(cfg.gpus) <= set(allowed):
        raise ConfigError("gpus", f"{list(cfg.gpus)} is not within host.gpus={list(allowed)} of host {cfg.host.name}")
    if not arm.ours:
        if not arm.path or not Path(arm.path).expanduser().is_file():
            raise ConfigError("runner.path", f"runner=script needs an existing script file, got {arm.path!r}")
        return arm   # a user's script brings its own model and method
    check_knobs(cfg, {"objective": Knob("objective", None, one_of(OBJECTIVES), "")})
    for group in ("model", "drafter", "dataset"):
        check_knobs(cfg[group], knobs_of(SECTIONS[group]), f"{group}.")
    _check_model(cfg, arm, choices or {})
    return arm


def _check_arm(cfg: DictConfig, arm: Arm) -> None:
    """A method name our runner knows, or an engine arm's file with its engine flags."""
    if arm.engine is None and arm.ours and cfg.method.name not in METHODS:
        raise ConfigError("method", f"must be one of {', '.join(METHODS)} or an engine arm (a method file with "
                                    f"`engine:`, such as vllm, vllm-dflash, sglang-mtp, openai), got "
                                    f"{cfg.method.name!r}")
    if arm.engine is None:   # engine.* and concurrency are engine arms' (a sweep mixes both kinds)
        return
    check_knobs(cfg.engine, knobs_of(SECTIONS["engine"]), "engine.")
    if cfg.drafter.get("draft_vocab"):      # the engine drafts over its drafter's own head, as its files give it
        raise ConfigError("drafter.draft_vocab", "our runner cuts the draft head; an engine arm drafts over the head "
                                                 "its checkpoint ships (a speculators checkpoint's own vocabulary)")
    if cfg.model.get("random") or cfg.model.path is None:
        raise ConfigError("model.path", f"an engine arm serves a model from its files (a hub id, a directory or "
                                        f"assets:<shipped>); {cfg.model.name} has none (random weights)")
    if arm.needs_command and not (cfg.method.get("command") and cfg.method.get("url")):
        raise ConfigError("method.command", "method=openai needs the server's command and base URL, e.g. "
                                            "'method.command=[my-server,--port,\"{port}\"]' method.url=http://"
                                            "127.0.0.1:{port}")


def max_new_tokens(model: DictConfig):
    """At most the target's max_position_embeddings where it can be read here (model.random, a shipped model's
    config.json), else MAX_NEW_TOKENS_LIMIT."""
    positions = _positions(model)
    if positions is not None and positions < MAX_NEW_TOKENS_LIMIT:
        return integer(1, positions, " (the target's max_position_embeddings)")
    return integer(1, MAX_NEW_TOKENS_LIMIT)


def _positions(model: DictConfig) -> int | None:
    random = model.get("random")
    if isinstance(random, DictConfig):
        fields = random
    elif assets.is_asset(model.get("path")) and assets.problem(model.path) is None:
        try:
            with open(f"{assets.resolve(model.path)}/config.json", encoding="utf-8") as file:
                fields = json.load(file)
        except (OSError, ValueError):
            return None
    else:
        return None
    positions = fields.get("max_position_embeddings")
    return positions if is_int(positions) and positions > 0 else None


def group_options(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    """The shipped options of `group` (user dirs add more: `Configs.options`)."""
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def pool_hosts(cfg: DictConfig) -> list:
    """A job config's pool entries ({host, gpus} each, as configured); none where it has no pool."""
    pool = cfg.get("pool")
    return list(pool.hosts) if pool and isinstance(pool.get("hosts"), ListConfig) else []


def check_objective(cfg: DictConfig) -> None:
    """For a sweeper that scores jobs: the objective must be a metric this run computes."""
    if cfg.objective in ("speedup_vs_ar", "exact_match_vs_ar") and cfg.baseline == "none":
        raise ConfigError("objective", f"{cfg.objective} needs the AR baseline (baseline=ar), got "
                                       f"baseline={cfg.baseline}; choose e.g. objective=tokens_per_s")


def _gpu_count(cfg: DictConfig) -> None:
    """gpus=N: any N GPUs, where a pool or the host's scheduler (Ray) chooses them; written as [0..N-1] until then
    (only their number counts there). A host with fixed GPUs needs them named."""
    if not is_int(cfg.gpus):
        return
    kind = settings_class(cfg.host.get("kind"))
    if not pool_hosts(cfg) and not (kind is not None and kind.scheduled):
        raise ConfigError("gpus", f"a count (gpus={cfg.gpus}) is for host=ray or a pool, which choose the GPUs; name "
                                  f"this host's, e.g. gpus=[{','.join(map(str, range(max(int(cfg.gpus), 1))))}]")
    cfg.gpus = list(range(int(cfg.gpus)))


def _check_hosts(cfg: DictConfig) -> None:
    """Every host this job may run on: `host`, and each entry of the pool (which then places the job)."""
    entries = pool_hosts(cfg)
    for index, entry in enumerate(entries):
        check_knobs(entry, {"gpus": Knob("gpus", None, gpu_list, "")}, f"pool.hosts[{index}].")
    if entries and not any(len(entry.gpus) >= len(cfg.gpus) for entry in entries):   # it would wait for ever
        sizes = ", ".join(f"{entry.host.get('name')}: {len(entry.gpus)}" for entry in entries)
        raise ConfigError("gpus", f"a job of {len(cfg.gpus)} GPUs (gpus={list(cfg.gpus)}), but no host of the pool "
                                  f"has that many ({sizes}); the pool gives each job len(gpus) GPUs of one host")
    hosts = [("host.", cfg.host)] + [(f"pool.hosts[{index}].host.", entry.host) for index, entry in enumerate(entries)]
    for prefix, host in hosts:
        knobs = host_knobs(host)
        if knobs is None:   # an unknown kind
            raise ConfigError(f"{prefix}kind", KIND_RULE(host.get("kind")))
        if settings_class(host.get("kind")).scheduled and entries:   # two placements at once: Ray's and the pool's
            raise ConfigError(f"{prefix}kind", "a Ray cluster places its jobs itself: use host=ray without a pool "
                                               "(pool=none), or a pool of SSH hosts")
        check_knobs(host, knobs, prefix)
        for key, k in knobs.items():   # files of this machine: a typo read as "is the host up?"
            if k.local_file and host.get(key) and not Path(str(host[key])).expanduser().is_file():
                raise ConfigError(f"{prefix}{key}", f"{host[key]!r} is not a file on this machine")
        if settings_class(host.get("kind")).local and host.get("workdir"):
            host.workdir = _here(host.workdir)   # LocalHost takes it as it is: ~ unexpanded, relative to its cwd


def _check_model(cfg: DictConfig, arm: Arm, choices) -> None:
    model, drafter = cfg.model, cfg.drafter
    if model.path is None and not model.get("random"):
        raise ConfigError("model.path", "set a hub id or local path, or model.random for a random model")
    if arm.uses_drafter and drafter.path is None and drafter.get("random") is None:
        chosen = choices.get("drafter")
        why = (f" (there is no drafter/{chosen}.yaml to go with model={chosen})"
               if drafter.name == NO_DRAFTER and chosen not in (None, NO_DRAFTER) else "")
        raise ConfigError("drafter", f"method {cfg.method.name} needs a drafter{why}; choose drafter=<name> "
                          f"(one of {', '.join(group_options('drafter'))}, or your own in {user_dir()}/drafter/)")
    _check_device_map(model.get("device_map"), list(cfg.gpus))
    paths = (("model.path", model.path), ("drafter.path", drafter.path), ("model.tokenizer", model.get("tokenizer")),
             ("dataset.path", cfg.dataset.get("path")), ("drafter.calibration", drafter.get("calibration")))
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
        calibration = drafter.get("calibration")
        if (arm.uses_drafter and drafter.get("draft_vocab") and not assets.is_asset(calibration)
                and calibration != CALIBRATION):
            if not Path(str(calibration)).expanduser().is_file():
                raise ConfigError("drafter.calibration", f"text file {calibration!r} does not exist")
            drafter.calibration = _here(calibration)


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
    hosts = [entry.host for entry in pool_hosts(cfg)] or [cfg.host]
    return all(settings_class(h.get("kind")).local for h in hosts)


def _here(path: str) -> str:
    """`path` as an absolute path of this machine (~ expanded, relative to the working directory)."""
    return os.path.abspath(os.path.expanduser(path))


def _looks_local(value) -> bool:
    """Hub ids look like `org/name`; a path starts with /, ., ~ or has more than one slash."""
    if not isinstance(value, str):
        return False
    return value.startswith(("/", ".", "~")) or value.count("/") > 1
