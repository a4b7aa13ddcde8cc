"""Every knob of a run, described once: a field of RunKnobs (the top-level knobs) or of a section's class (model,
drafter, dataset, method, tracking, runner, pool; a host's are in orchestrator.hosts.settings), with its default,
its rule and the sentence `--help` shows (orchestrator.knob).

Contract: SECTIONS maps each config group to its class; RunKnobs' defaults are the config node `specbench_knobs`
that conf/config.yaml's defaults list starts with (registered here, in Hydra's ConfigStore), so adding a knob is one
field here plus the code that reads it. Defaults that the runner's spec also has are read from it (remote.spec).
Bounds are constants here, each with its reason. Non-goal: checks across keys (orchestrator.config.validate).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from hydra.core.config_store import ConfigStore

from remote.spec import ATTN_IMPLEMENTATIONS, DATASETS, DTYPES, DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, \
    RunSpec

from ..knob import ANY, FLAG, LIST, MAPPING, NAME, REQUIRED, TEXT, defaults_of, gpu_list, gpus_or_count, integer, \
    is_int, knob, nullable, number, one_of, rule
from .arms import AR, ENGINE_KINDS, METHODS, Script

# Non-root tree nodes: the largest tree the code is written for. remote.decoding.tree_build ranks at most
# RANK_LIMIT = 4096 candidates a level (budgets to ~600; above, topk); the Triton search sorts all ~35K candidates
# of a 4096 budget in one CTA (64K keys: inside Triton's 2^20-element block limit, unmeasured; measured budgets
# go to 512); the verify has budget + 1 rows. Far past it the CPU plan's Python lists alone exhaust the host's
# memory (tree_budget=100000000000000 was killed for it).
TREE_BUDGET_LIMIT = 4096
# Tokens per prompt where the target's max_position_embeddings cannot be read here (a hub id, a local directory):
# 256x the longest generation in the benches and docs (128), within every configured target's positions (Qwen3:
# 40960, Qwen3.6-27B: 262144). max_new_tokens=100000000000000 decoded until it was killed.
MAX_NEW_TOKENS_LIMIT = 32768
BLOCK_SIZE_LIMIT = TREE_BUDGET_LIMIT   # a DFlash block is verified as one chain of block_size rows
DRAFT_VOCAB_LIMIT = 2**24              # above every tokenizer's vocabulary; the runner checks it against the target's
WARMUP_LIMIT = 100                     # warm-up generations per method (of <= 32 tokens); tests use 1-3
SEED_LIMIT = 2**63 - 1                 # torch seeds are 64-bit; seed + prompt index must stay within them
STALL_LIMIT = 7 * 86400.0              # stall_warning, stall_timeout: a week of silence; null says never
# Metrics a job can return to a sweeper (each is in remote.metrics.DEFINITIONS; a test checks it).
OBJECTIVES = ("speedup_vs_ar", "tokens_per_s", "tau", "tau_prompt_mean", "tpot_ms", "ttft_ms",
              "exact_match_vs_ar", "peak_mem_gb")
_STALL = nullable(number(0, STALL_LIMIT, above=True))
# Streams at once for an engine arm: beyond it a level is a load test, not a benchmark of decoding.
CONCURRENCY_LIMIT = 1024


def _levels(value) -> list[int] | None:
    """The concurrency levels a value gives ([1] for 1), None for anything else."""
    values = list(value) if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig" else [value]
    ok = values and all(is_int(v) and 1 <= v <= CONCURRENCY_LIMIT for v in values)
    return [int(v) for v in values] if ok else None


def concurrency_levels(value) -> list[int]:
    return _levels(value) or [1]


@dataclass(frozen=True)
class RunKnobs:
    """The top-level knobs users type most (`specbench tree_budget=31 max_new_tokens=128`)."""

    tree_budget: int | str = knob(
        DecodingSpec.tree_budget, rule(f"an integer from 1 to {TREE_BUDGET_LIMIT} or auto", lambda v: v == "auto" or (
            is_int(v) and 1 <= v <= TREE_BUDGET_LIMIT)),
        "DDTree node budget (non-root nodes): with the root, a verify of budget + 1 rows (see README); auto: chosen "
        "per step for the most tokens per second (measured costs, drafter confidence)")
    tree_budget_max: int = knob(DecodingSpec.tree_budget_max, integer(
        7, TREE_BUDGET_LIMIT, " (tree_budget=auto chooses among 7, 15, 31, ... up to it)"),
        "tree_budget=auto: the largest budget it may choose (among 7, 15, 31, ... up to this)")
    max_new_tokens: int = knob(DecodingSpec.max_new_tokens, integer(1, MAX_NEW_TOKENS_LIMIT),
                               "tokens generated per prompt (at most the target's max_position_embeddings)")
    temperature: float = knob(DecodingSpec.temperature, number(0),
                              "0 = greedy; > 0 samples the target at every node (lossless at any temperature)")
    num_prompts: int | None = knob(8, nullable(integer(1)), "the dataset's first N prompts; null = all of them")
    seed: int = knob(RunSpec.seed, integer(0, SEED_LIMIT),
                     "seeds sampling (temperature > 0) and random weights; prompt i uses seed + i")
    gpus: list = knob([0], gpus_or_count, "GPU indices on the host, exported as CUDA_VISIBLE_DEVICES; with host=ray "
                                         "or a pool only their number counts, and gpus=2 asks for any two")
    baseline: str = knob(DecodingSpec.baseline, one_of((AR.tag, "none")),
                         "ar: also run AR on the same prompts, in turns (speedup_vs_ar, exact_match_vs_ar); none: skip")
    device: str = knob(RunSpec.device, one_of(("auto", "cpu", "cuda")), "auto | cpu | cuda")
    warmup: int = knob(DecodingSpec.warmup, integer(0, WARMUP_LIMIT), "warm-up generations per method before timing")
    repeats: int = knob(DecodingSpec.repeats, integer(1, 100),
                        "timed passes over all prompts (every method); > 1 reports the spread across them")
    cuda_graphs: bool = knob(DecodingSpec.cuda_graphs, FLAG,
                             "on CUDA (any temperature): replay each decoding step as one CUDA graph (all methods)")
    compile_steps: bool = knob(DecodingSpec.compile_steps, FLAG,
                               "with cuda_graphs: torch.compile each step first (fused kernels; ~1 min compile per "
                               "shape)")
    compile_drafter: bool = knob(DecodingSpec.compile_drafter, FLAG,
                                 "with cuda_graphs: torch.compile the drafter and the target's elementwise glue "
                                 "(fewer kernels)")
    force: bool = knob(False, FLAG, "run even on GPUs that preflight finds in use")
    fail_fast: bool = knob(True, FLAG, "stop the job at the first fatal failure signature in its log")
    stall_warning: float | None = knob(
        300, _STALL, "seconds without a byte of runner log or event before one warning that the runner is silent, "
        "with its state on the host (ps) and how to stop it; null = never (loading, compiles and CUDA-graph captures "
        "can be silent for minutes, each prompt's decode is not)")
    stall_timeout: float | None = knob(
        None, _STALL, "seconds of that silence after which the runner is stopped and the run ends FAILED "
        "(runner_stalled), its log kept; null = never; e.g. 1800 for an unattended sweep")
    concurrency: object = knob(1, rule(
        f"an integer from 1 to {CONCURRENCY_LIMIT} or a list of them such as [1,4,16]",
        lambda v: _levels(v) is not None), "engine arms: streams sent at once (a list: one level after another, "
        "each reported as <metric>_c<N>); our runner's methods decode one stream and ignore it")
    objective: str = knob("speedup_vs_ar", TEXT,
                          "the metric a job returns to a sweeper that optimises (hydra/sweeper=optuna, ...): "
                          "speedup_vs_ar, tokens_per_s, tau, tpot_ms, ttft_ms (set the sweeper's direction)")


# MLflow's own variables, honoured as MLflow's fluent API honours them: a tracking.uri / tracking.experiment given
# explicitly comes first, then these, then the embedded defaults (orchestrator.tracking.tracker resolves them). The
# client reads the credentials (MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN) and the TLS settings itself.
URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
EXPERIMENT_ID_ENV = "MLFLOW_EXPERIMENT_ID"
DEFAULT_EXPERIMENT = "specbench"


def tracking_uri(value) -> str | None:
    """A URI with no password in it: the URI is logged with every run (params, job.json, the terminal), the
    environment is not, and MLflow's client reads its credentials from there."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        return f"must be a URI such as http://mlflow.example.com:5000, or null, got {value!r}"
    try:
        password = urlsplit(value).password
    except ValueError as exc:   # the value itself is not echoed: it may hold a password urlsplit could not find
        return f"is not a URI ({exc})"
    if password is None:
        return _file_store(value)
    shown = value.replace(f":{password}@", ":***@", 1)
    return (f"{shown} carries a password, which would be logged with the run; leave it out of the URI and set "
            f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment, "
            f"where MLflow's client reads them")


def _file_store(value: str) -> str | None:
    """MLflow 3's file store (a directory, file:...) refuses to open unless MLFLOW_ALLOW_FILE_STORE is set: said
    here, before the run, rather than as a `not in MLflow` at its end (and at every `sync`)."""
    scheme = urlsplit(value).scheme
    if scheme not in ("", "file") or value in ("databricks", "databricks-uc") or \
            os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true"):
        return None
    return (f"{value} is MLflow's file store, which MLflow keeps only in maintenance mode and refuses to open unless "
            f"MLFLOW_ALLOW_FILE_STORE=true; use a database, e.g. tracking.uri=sqlite:///mlflow.db")


_NAME = knob(NAME, TEXT, "the option's name, in run names and the `model` column")
_OPTIONAL_TEXT = nullable(TEXT)


@dataclass(frozen=True)
class ModelKnobs:
    """The target model: a hub id or local path, or a random model built from `random` config fields."""

    name: str = _NAME
    path: str | None = knob(ModelSpec.path, _OPTIONAL_TEXT, "a hub id, a local directory or assets:<shipped>; null "
                            "with `random`")
    random: dict | None = knob(ModelSpec.random, nullable(rule(
        "a mapping of transformers config fields with a model_type (e.g. qwen3)",
        lambda v: MAPPING(v) is None and isinstance(v.get("model_type"), str))),
        "transformers config fields (with model_type) of a random-weight target, seeded by `seed`")
    tokenizer: str | None = knob(ModelSpec.tokenizer, _OPTIONAL_TEXT, "null = the target's own (random targets: "
                                 "the shipped one)")
    dtype: str = knob(ModelSpec.dtype, one_of(tuple(DTYPES)), "float32 | bfloat16 | float16")
    attn_implementation: str | None = knob(ModelSpec.attn_implementation, nullable(one_of(ATTN_IMPLEMENTATIONS)),
                                           "as from_pretrained takes it (sdpa, eager, flash_attention_2, ...)")
    device_map: object = knob(ModelSpec.device_map, ANY, "null (one GPU), auto, balanced, sequential or {module: "
                              "GPU index among the run's gpus}: the target spread over the run's GPUs")
    trust_remote_code: bool = knob(ModelSpec.trust_remote_code, FLAG, "as from_pretrained takes it")
    revision: str | None = knob(ModelSpec.revision, nullable(rule(
        "a string (quote a numeric one: model.revision=\"'1234'\")", lambda v: isinstance(v, str))),
        "a hub revision (branch, tag or commit)")


@dataclass(frozen=True)
class DrafterKnobs:
    """A DFlash drafter in the published format, or a random one whose shape is derived from the target."""

    name: str = _NAME
    path: str | None = knob(DrafterSpec.path, _OPTIONAL_TEXT, "a hub id, a local directory or assets:<shipped>")
    random: dict | None = knob(DrafterSpec.random, nullable(MAPPING), "drafter config overrides of a random drafter "
                               "(num_hidden_layers, block_size, ...)")
    block_size: int | None = knob(DrafterSpec.block_size, nullable(integer(2, BLOCK_SIZE_LIMIT)),
                                  "tokens a DFlash draft proposes at once; null = the checkpoint's")
    draft_vocab: int | None = knob(DrafterSpec.draft_vocab, nullable(integer(2, DRAFT_VOCAB_LIMIT)),
                                   "the drafter's head over only the N target tokens most frequent in `calibration` "
                                   "(lossless: the target verifies every token); null = the drafter's own vocabulary "
                                   "(the target's, or a speculators checkpoint's)")
    calibration: str = knob(DrafterSpec.calibration, TEXT,
                            "the text draft_vocab counts token frequencies on: a text file on the host (a relative "
                            "path as for dataset.path) or assets:<shipped>; never the evaluated prompts (refused). "
                            "Default: stdlib, 1 MB of the host Python's standard-library sources read at run time")


@dataclass(frozen=True)
class DatasetKnobs:
    """Where the prompts come from."""

    name: str = knob(REQUIRED, one_of(DATASETS), "builtin | humaneval | jsonl | hub",
                     example="name: jsonl (builtin, humaneval, jsonl or hub)")
    path: str | None = knob(DatasetSpec.path, _OPTIONAL_TEXT, "the JSONL file, or the hub dataset id")
    split: str | None = knob(DatasetSpec.split, _OPTIONAL_TEXT, "a hub dataset's split")
    field: str = knob(DatasetSpec.field, TEXT, "the field that holds the prompt text")
    chat_template: bool = knob(DatasetSpec.chat_template, FLAG, "wrap each prompt with the tokenizer's chat template")
    subset: str | None = knob(DatasetSpec.subset, _OPTIONAL_TEXT, "a hub dataset's subset")


@dataclass(frozen=True)
class MethodKnobs:
    """Our runner's method (ar, dflash, ddtree), or an engine arm: a method file with an `engine`."""

    name: str = knob(NAME, TEXT, f"ours: {' | '.join(METHODS)}; an engine arm: its file's name (vllm, vllm-dflash, "
                     "vllm-spec, sglang, sglang-mtp, sglang-dflash, openai, ...)")
    engine: str | None = knob(None, nullable(one_of(ENGINE_KINDS)), "null: our runner; vllm | sglang | openai: that "
                              "engine's server, started by the runner on the host")
    speculative: dict | None = knob(None, nullable(MAPPING), "engine arms: the engine's speculative config, passed "
                                    "through as it is (vLLM: --speculative-config; SGLang: --speculative-<key>); "
                                    "null: none (the engine's own AR)")
    drafter_into: str | None = knob(None, _OPTIONAL_TEXT, "engine arms: the speculative key that gets our drafter's "
                                    "path (vLLM: model); null: the config names its own draft model")
    command: list | None = knob(None, nullable(LIST), "method=openai: the server's command, {port} and {model} "
                                "filled in (quoted), e.g. '[my-server,-m,\"{model}\",--port,\"{port}\"]'")
    url: str | None = knob(None, _OPTIONAL_TEXT, "method=openai: its base URL, e.g. http://127.0.0.1:{port}")


@dataclass(frozen=True)
class EngineKnobs:
    """Engine arms' server flags (ignored by our runner's methods)."""

    port: int | None = knob(None, nullable(integer(1, 65535)), "the server's port; null = a free one")
    tensor_parallel: int | None = knob(None, nullable(integer(1)), "null = the run's GPUs (len(gpus))")
    dtype: str | None = knob(None, nullable(one_of(tuple(DTYPES))), "null = model.dtype")
    max_model_len: int | None = knob(None, nullable(integer(16)), "the engine's context length; null = its default")
    enforce_eager: bool = knob(False, FLAG, "no CUDA graphs / compile in the engine (vLLM --enforce-eager, SGLang "
                               "--disable-cuda-graph); ~20 s to start on CPU instead of 60-110 s")
    extra_args: list = knob([], LIST, "more server flags, as they are, e.g. [--no-enable-prefix-caching]")
    start_timeout: float = knob(600.0, number(0, 86400, above=True), "seconds the server may take to answer; then "
                                "the run fails with its last lines")
    ignore_eos: bool = knob(False, FLAG, "generate max_new_tokens whatever the stop token (lengths that match)")
    reference: bool = knob(True, FLAG, "where the engine drafts with our drafter: also decode the prompts with our "
                           "runner's DFlash and compare taus per position (engine_low_acceptance)")


@dataclass(frozen=True)
class TrackingKnobs:
    uri: str | None = knob(None, tracking_uri, "null = $MLFLOW_TRACKING_URI where set, else sqlite:///<runs dir>/"
                           "mlflow.db (checkout: runs/; installed: ./runs; or $SPECBENCH_RUNS_DIR)")
    experiment: str | None = knob(None, nullable(rule(
        "a non-empty string (quote a numeric one: tracking.experiment=\"'2024'\")",
        # MLflow refuses a number (and an empty name) once the run is under way: the run went on outside MLflow
        lambda v: isinstance(v, str) and v.strip() != "")),
        "the MLflow experiment runs go to; null = $MLFLOW_EXPERIMENT_NAME (or $MLFLOW_EXPERIMENT_ID) where set, "
        "else specbench")


@dataclass(frozen=True)
class RunnerKnobs:
    kind: str = knob("builtin", one_of(("builtin", Script.tag)), "builtin: our runner; script: runner.path, your own")
    path: str | None = knob(None, _OPTIONAL_TEXT, "runner=script: the script, synced and launched like ours")
    args: list = knob([], LIST, "runner=script: its arguments")


@dataclass(frozen=True)
class PoolKnobs:
    hosts: list = knob([], LIST, "[{host: {...}, gpus: [...]}, ...]: each job leases len(gpus) free GPUs of one "
                       "host; [] = no pool, the job runs on `host` with `gpus`")
    lock_dir: str = knob("~/.cache/specbench/leases", TEXT, "this machine's lease files")


@dataclass(frozen=True)
class PoolEntryKnobs:
    host: dict = knob(REQUIRED, MAPPING, "the host's settings", example="host: {name: gpu1, kind: ssh, hostname: gpu1}")
    gpus: list = knob(REQUIRED, gpu_list, "the GPUs of it the pool may lease", example="gpus: [0, 1]")


SECTIONS = {"model": ModelKnobs, "drafter": DrafterKnobs, "dataset": DatasetKnobs, "method": MethodKnobs,
            "engine": EngineKnobs, "tracking": TrackingKnobs, "runner": RunnerKnobs, "pool": PoolKnobs}
NO_DRAFTER = "none"   # the drafter of a model that has no drafter/<model>.yaml (config.yaml: `optional`)
DEFAULTS_NODE = "specbench_knobs"
ConfigStore.instance().store(name=DEFAULTS_NODE, node=defaults_of(RunKnobs))
