"""One job's plan: the composed config validated once and turned into typed, immutable parts that every later step
reads (the run spec, the arm, the host or pool, the GPUs, tracking and the follower's options).

Contract: `make_plan(cfg, choices, run_id, source)` validates `cfg` (orchestrator.config.validate: ConfigError for
the first bad value) and returns a Plan; nothing after it reads the raw config. `plan.config` is the resolved config
as it is logged and written (config.yaml), never read for a decision. The run spec (remote.spec.RunSpec) is what the
runner reads; a drafter is in it only for an arm that uses one.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, EngineSpec, ModelSpec, RunSpec

from ..hosts.leases import Pool, PoolEntry
from ..hosts.settings import HostSettings, host_settings
from ..knob import defaults_of
from .arms import Arm
from .knobs import RunKnobs, concurrency_levels
from .validate import pool_hosts, validate

WARNING_KEY, TIMEOUT_KEY = "stall_warning", "stall_timeout"


@dataclass(frozen=True)
class StallLimits:
    warning: float | None    # seconds of silence before the warning; None: never
    timeout: float | None    # seconds of silence before the run is stopped (FAILED, runner_stalled); None: never

    @classmethod
    def of(cls, cfg: Mapping[str, Any] | None) -> "StallLimits":
        """From a run's config (a DictConfig or a dict; None: none), the knobs' defaults for a key it lacks (a run
        launched before the key existed)."""
        cfg = cfg if cfg is not None else {}
        defaults = defaults_of(RunKnobs)
        values = [cfg.get(key, defaults[key]) for key in (WARNING_KEY, TIMEOUT_KEY)]
        return cls(*(None if value is None else float(value) for value in values))


@dataclass(frozen=True)
class Tracking:
    uri: str | None            # None: $MLFLOW_TRACKING_URI, else the embedded default store
    experiment: str | None     # None: $MLFLOW_EXPERIMENT_NAME (or _ID), else specbench


@dataclass(frozen=True)
class Plan:
    arm: Arm
    spec: RunSpec                  # what our runner reads (written as spec.json for a script too)
    model: str                     # the model's name, in titles and run names
    dataset: str                   # the dataset option's name (`code`: its loader's name, `jsonl`, is in the spec)
    host: HostSettings             # where it runs, unless a pool places it
    gpus: tuple[int, ...]
    pool: Pool | None
    tracking: Tracking
    stall: StallLimits
    force: bool                    # run on GPUs preflight finds busy
    fail_fast: bool                # stop at the first fatal failure signature
    objective: str                 # the metric returned to a sweeper
    config: Mapping[str, Any]      # the resolved config: logged (params) and written (config.yaml) as it is

    def params(self) -> dict[str, Any]:
        """What the run logs as params: the resolved config as its arm reads it (orchestrator.config.arms), with the
        dataset option's name as `dataset.option`."""
        params = self.arm.params(self.config)
        if isinstance(params.get("dataset"), Mapping):
            params["dataset"] = {**params["dataset"], "option": self.dataset}
        return params

    @property
    def spread(self) -> bool:
        """Whether the target is spread over the run's GPUs (model.device_map)."""
        return self.spec.model.device_map is not None

    def placed(self, host: HostSettings, gpus: list[int]) -> "Plan":
        """The plan on a pool's host and GPUs: its config says where it ran."""
        config = {**self.config, "host": host.as_dict(), "gpus": list(gpus)}
        return replace(self, host=host, gpus=tuple(gpus), config=config)


def make_plan(cfg: DictConfig, choices: Mapping[str, Any] | None = None, run_id: str = "",
              source=None) -> Plan:
    arm = validate(cfg, choices, source)
    entries = pool_hosts(cfg)
    pool = Pool(tuple(PoolEntry.of(e) for e in entries), str(cfg.pool.lock_dir)) if entries else None
    dataset = str((choices or {}).get("dataset") or cfg.dataset.name)
    return Plan(arm=arm, spec=build_spec(cfg, arm, run_id), model=str(cfg.model.name), dataset=dataset,
                host=host_settings(cfg.host),
                gpus=tuple(cfg.gpus), pool=pool, tracking=Tracking(cfg.tracking.uri, cfg.tracking.experiment),
                stall=StallLimits.of(cfg), force=bool(cfg.force), fail_fast=bool(cfg.fail_fast),
                objective=str(cfg.objective), config=OmegaConf.to_container(cfg, resolve=True))


def _plain(node):
    """Config nodes as plain dicts/lists; scalars (device_map: auto) as they are."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def build_spec(cfg: DictConfig, arm: Arm, run_id: str) -> RunSpec:
    """The run spec of a validated config (every key filled)."""
    m, d, ds = cfg.model, cfg.drafter, cfg.dataset
    model = ModelSpec(path=m.path, random=_plain(m.random), tokenizer=m.tokenizer, dtype=m.dtype,
                      attn_implementation=m.attn_implementation, device_map=_plain(m.device_map),
                      trust_remote_code=bool(m.trust_remote_code), revision=m.revision)
    drafter = DrafterSpec(path=d.path if arm.uses_drafter else None,
                          random=_plain(d.random) if arm.uses_drafter else None, block_size=d.block_size,
                          draft_vocab=d.draft_vocab if arm.uses_drafter else None, calibration=d.calibration)
    decoding = DecodingSpec(
        method=str(cfg.method.name), tree_budget=cfg.tree_budget, tree_budget_max=cfg.tree_budget_max,
        max_new_tokens=cfg.max_new_tokens, temperature=float(cfg.temperature), baseline=cfg.baseline,
        warmup=cfg.warmup, repeats=cfg.repeats, cuda_graphs=bool(cfg.cuda_graphs),
        compile_steps=bool(cfg.compile_steps), compile_drafter=bool(cfg.compile_drafter))
    dataset = DatasetSpec(name=ds.name, path=ds.path, split=ds.split, field=ds.field, num_prompts=cfg.num_prompts,
                          chat_template=bool(ds.chat_template), subset=ds.subset)
    return RunSpec(run_id=run_id, model=model, drafter=drafter, decoding=decoding, dataset=dataset, seed=cfg.seed,
                   device=cfg.device, engine=engine_spec(cfg) if arm.engine else None)


def engine_spec(cfg: DictConfig) -> EngineSpec:
    """An engine arm's part of the spec: the method file's engine and speculative config, the engine flags, the
    host's engine interpreter; tensor parallel over the run's GPUs unless set."""
    m, e = cfg.method, cfg.engine
    return EngineSpec(kind=str(m.engine), speculative=_plain(m.speculative), drafter_into=m.drafter_into,
                      command=[str(a) for a in m.command] if m.get("command") else None, url=m.get("url"),
                      python=cfg.host.get("engine_python") or cfg.host.get("python"), port=e.port,
                      tensor_parallel=e.tensor_parallel or max(len(cfg.gpus), 1), dtype=e.dtype,
                      max_model_len=e.max_model_len, enforce_eager=bool(e.enforce_eager),
                      extra_args=[str(a) for a in e.extra_args], start_timeout=float(e.start_timeout),
                      concurrency=concurrency_levels(cfg.concurrency), ignore_eos=bool(e.ignore_eos),
                      reference=bool(e.reference))
