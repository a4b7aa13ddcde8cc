"""What each config knob allows: a table of `(key, rule)` per part of the config, read by orchestrator.config.validate.

Contract: a rule is a function of the value that returns None when the value is allowed, else "must be <what is
allowed>, got <value>" (the ConfigError message after `key: `). Bounds are constants here, each with its reason.
Tables: RUN (top-level knobs; `max_new_tokens` is bounded per model, see `max_new_tokens`), TRACKING, MODEL
(model, drafter and dataset: what the builtin runner reads), HOST (any host) and SSH (kind ssh: what SSHSettings
reads).
Non-goals: checks across keys (gpus within host.gpus, a device_map's indices, paths that must exist), which stay
in validate; importing torch, transformers or paramiko (this is imported before every run).
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Callable
from urllib.parse import urlsplit

from omegaconf import DictConfig, ListConfig

from remote import assets
from remote.spec import ATTN_IMPLEMENTATIONS, DATASETS, DTYPES, METHODS

Rule = Callable[[Any], "str | None"]

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
WARMUP_LIMIT = 100                     # warm-up generations per method (of <= 32 tokens); tests use 1-3
SEED_LIMIT = 2**63 - 1                 # torch seeds are 64-bit; seed + prompt index must stay within them
TIMEOUT_LIMIT = 3600.0                 # connect_timeout, io_timeout, keepalive: an hour of silence is a dead link
RECONNECT_LIMIT = 86400.0              # reconnect_timeout: a day
STALL_LIMIT = 7 * 86400.0              # stall_warning, stall_timeout: a week of silence; null says never


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rule(allowed: str, ok: Callable[[Any], bool]) -> Rule:
    return lambda value: None if ok(value) else f"must be {allowed}, got {value!r}"


def integer(low: int, high: int | None = None, why: str = "") -> Rule:
    span = f">= {low}" if high is None else f"from {low} to {high}"
    return rule(f"an integer {span}{why}", lambda v: _is_int(v) and low <= v and (high is None or v <= high))


def number(low: float, high: float | None = None, *, above: bool = False) -> Rule:
    """A finite int or float >= low (> low with `above`), at most `high`."""
    span = f"{'>' if above else '>='} {low:g}" + ("" if high is None else f" and <= {high:g}")

    def ok(v) -> bool:
        finite = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return finite and (v > low if above else v >= low) and (high is None or v <= high)
    return rule(f"a finite number {span}", ok)


def one_of(options) -> Rule:
    return rule(f"one of {', '.join(options)}", lambda v: isinstance(v, str) and v in options)


def nullable(inner: Rule) -> Rule:
    def check(value) -> str | None:
        problem = None if value is None else inner(value)
        if problem is None:
            return None
        allowed, _, got = problem.partition(", got ")
        return f"{allowed} or null, got {got}"
    return check


def gpu_list(value) -> str | None:
    if not isinstance(value, (list, ListConfig)) or not all(_is_int(g) and g >= 0 for g in value):
        return f"must be a list of non-negative integers such as [0,1], got {value!r}"
    twice = sorted({g for g in value if list(value).count(g) > 1})
    if twice:
        return f"lists GPU {', '.join(map(str, twice))} more than once in {list(value)}; name each GPU once"
    return None


def _names(value) -> bool:
    return all(isinstance(n, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in value)


FLAG = rule("true or false", lambda v: isinstance(v, bool))
TEXT = rule("a non-empty string", lambda v: isinstance(v, str) and v != "")
MAPPING = rule("a mapping {field: value}", lambda v: isinstance(v, (dict, DictConfig)))
RANDOM_TARGET = rule("a mapping of transformers config fields with a model_type (e.g. qwen3)",
                     lambda v: isinstance(v, (dict, DictConfig)) and isinstance(v.get("model_type"), str))
ENV = rule("a mapping {NAME: value} whose names are shell identifiers",
           lambda v: isinstance(v, (dict, DictConfig)) and _names(v.keys()))
# Names that usually hold a credential (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, ...)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.IGNORECASE)


def env(value) -> str | None:
    """ENV, and no name that looks like a secret's: host.env is logged with the run (a param each), while
    host.forward_env sends a value from the user's shell to the runner alone. The value is never echoed."""
    problem = nullable(ENV)(value)
    if problem is not None or value is None:
        return problem
    secret = next((str(name) for name in value if _SECRET_NAME.search(str(name))), None)
    return None if secret is None else (
        f"{secret} looks like a secret, and host.env is logged with the run; leave it out of host.env and put its "
        f"name in host.forward_env=[{secret}] (the value then goes from your shell to the runner, never logged)")


ENV_NAMES = rule("a list of environment variable names such as [HF_TOKEN]",
                 lambda v: isinstance(v, (list, ListConfig)) and _names(v))

# Metrics a job can return to a sweeper (each is in remote.metrics.DEFINITIONS; a test checks it).
OBJECTIVES = ("speedup_vs_ar", "tokens_per_s", "tau", "tau_prompt_mean", "tpot_ms", "ttft_ms",
              "exact_match_vs_ar", "peak_mem_gb")

RUN: tuple[tuple[str, Rule], ...] = (
    ("method.name", one_of(METHODS)),
    ("tree_budget", rule(f"an integer from 1 to {TREE_BUDGET_LIMIT} or auto",
                         lambda v: v == "auto" or (_is_int(v) and 1 <= v <= TREE_BUDGET_LIMIT))),
    ("tree_budget_max", integer(7, TREE_BUDGET_LIMIT, " (tree_budget=auto chooses among 7, 15, 31, ... up to it)")),
    ("seed", integer(0, SEED_LIMIT)),
    ("num_prompts", nullable(integer(1))),
    ("warmup", integer(0, WARMUP_LIMIT)),
    ("repeats", integer(1, 100)),
    *((key, FLAG) for key in ("cuda_graphs", "compile_steps", "compile_drafter", "force", "fail_fast")),
    *((key, nullable(number(0, STALL_LIMIT, above=True))) for key in ("stall_warning", "stall_timeout")),
    ("temperature", number(0)),
    ("gpus", gpu_list),
    ("baseline", one_of(("ar", "none"))),
    ("device", one_of(("auto", "cpu", "cuda"))),
)


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
    if scheme not in ("", "file") or os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true"):
        return None
    return (f"{value} is MLflow's file store, which MLflow keeps only in maintenance mode and refuses to open unless "
            f"MLFLOW_ALLOW_FILE_STORE=true; use a database, e.g. tracking.uri=sqlite:///mlflow.db")


TRACKING: tuple[tuple[str, Rule], ...] = (
    ("tracking.uri", tracking_uri),
    # MLflow refuses a number (and an empty name) once the run is under way: the run went on outside MLflow, and
    # `sync` failed the same way
    ("tracking.experiment", rule("a non-empty string (quote a numeric one: tracking.experiment=\"'2024'\")",
                                 lambda v: isinstance(v, str) and v.strip() != "")),
)
MODEL: tuple[tuple[str, Rule], ...] = (
    ("model.path", nullable(TEXT)),
    ("model.random", nullable(RANDOM_TARGET)),
    ("model.tokenizer", nullable(TEXT)),
    ("model.dtype", one_of(DTYPES)),
    ("model.attn_implementation", nullable(one_of(ATTN_IMPLEMENTATIONS))),
    ("model.trust_remote_code", FLAG),
    ("model.revision", nullable(rule("a string (quote a numeric one: model.revision=\"'1234'\")",
                                     lambda v: isinstance(v, str)))),
    ("drafter.path", nullable(TEXT)),
    ("drafter.random", nullable(MAPPING)),
    ("drafter.block_size", nullable(integer(2, BLOCK_SIZE_LIMIT))),
    ("dataset.name", one_of(DATASETS)),
    ("dataset.field", TEXT),
    ("dataset.chat_template", FLAG),
    ("dataset.split", nullable(TEXT)),
    ("dataset.subset", nullable(TEXT)),
)
HOST: tuple[tuple[str, Rule], ...] = (
    ("kind", one_of(("local", "ssh"))),
    *((key, nullable(TEXT)) for key in ("name", "workdir", "python")),
    ("gpus", nullable(gpu_list)),
    ("env", env),
    ("forward_env", nullable(ENV_NAMES)),
)
SSH: tuple[tuple[str, Rule], ...] = (   # null: SSHSettings' default (or ~/.ssh/config's)
    ("hostname", rule("a host name or ~/.ssh/config alias, e.g. host.hostname=gpu1.example.com",
                      lambda v: isinstance(v, str) and v != "")),
    ("port", nullable(integer(1, 65535))),
    *((key, nullable(TEXT)) for key in ("user", "identity_file", "known_hosts", "ssh_config")),
    ("connect_timeout", nullable(number(0, TIMEOUT_LIMIT, above=True))),
    ("io_timeout", nullable(number(0, TIMEOUT_LIMIT, above=True))),
    ("keepalive", nullable(number(0, TIMEOUT_LIMIT))),
    ("reconnect_timeout", nullable(number(0, RECONNECT_LIMIT, above=True))),
    ("strict_host_key_checking", rule("true, false or null", lambda v: v is None or isinstance(v, bool))),
    # Relative, it would name another folder once a command cds into the run's (the bundle install did, and
    # failed); the host expands ~ (SSHHost).
    ("workdir", nullable(rule("an absolute path on the host or one under ~/, e.g. ~/specbench",
                              lambda v: isinstance(v, str) and (v == "~" or v.startswith(("/", "~/")))))),
)


def max_new_tokens(model: DictConfig | None) -> Rule:
    """At most the target's max_position_embeddings where it can be read here (model.random, a shipped model's
    config.json), else MAX_NEW_TOKENS_LIMIT."""
    positions = _positions(model) if model is not None else None
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
    return positions if _is_int(positions) and positions > 0 else None
