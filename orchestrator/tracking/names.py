"""Run names a reader can tell apart: `ddtree-b63-demo-qwen3`, `dflash-bs16-demo-qwen3`, `ar-demo-qwen3`,
`script-run_ddtree`.

Contract: a run's base name is its arm's words (orchestrator.config.arms: the method, then ddtree's `b<budget>` or
dflash's `bs<n>`; a user's script is `script-<stem>` alone) and, for our runner, the model; the arm's `label()` ends
the run dir's name (the `run_label` resolver of conf/config.yaml). `run_name(plan, job_overrides, swept)` adds, in a
sweep, the job's swept overrides that the base does not already say (`ar-tiny-qwen3 seed=1`), so the jobs of a sweep
are named apart; a skipped duplicate (orchestrator.sweep.dedupe) is `skipped_name`: the base and all its swept
values. `swept_keys(overrides)` names the keys a multirun sweeps over; `sweep_name` names the parent. SWEPT_ENV
carries the keys from the sweep callback to its jobs. `gpu_label(preflight tags, gpus, local)` is the `gpu` tag a run
opens with. Non-goal: uniqueness across sweeps (MLflow's run id is that).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid

from omegaconf import OmegaConf

from ..config.arms import arm_of
from ..config.plan import Plan

SWEPT_ENV = "SPECBENCH_SWEPT_KEYS"
# Keys whose value the base name already shows (the group and its `name` field are one choice); tree_budget: in the
# name of a ddtree run; the other methods do not read it, and a sweep skips their copies under other budgets
# (orchestrator.sweep.dedupe), so the one that runs needs no budget in its name.
_NAMED = {"method", "method.name", "model", "model.name"}


def what_ran(plan: Plan) -> dict[str, str]:
    """The `method` tag (and a script's file), the `dataset` option our runner read, and the `host` tag as the plan
    names it (for a run recorded without reaching its host; a pool's job before its lease names the pool's hosts)."""
    pool = [entry.name for entry in plan.pool.entries] if plan.pool else []
    host = f"pool:{','.join(pool)}" if pool else str(plan.host.name or plan.host.kind)
    return {**plan.arm.tags(), **({"dataset": plan.dataset} if plan.arm.ours else {}), "host": host}


# Hydra names the run dir before validation: `runner=script` without a path must still get a name.
OmegaConf.register_new_resolver("run_label", lambda *, _root_: arm_of(_root_).label(), replace=True)
# This process's tag, the end of its run dir's (or sweep dir's) name: two runs started in the same second (a
# script launching several, two terminals) would otherwise share one dir and mix their records. A single run's
# dir name is then its run id.
RUN_TAG = uuid.uuid4().hex[:6]
OmegaConf.register_new_resolver("run_tag", lambda: RUN_TAG, replace=True)


def base_name(plan: Plan) -> str:
    parts = plan.arm.name_parts(plan.spec)
    return "-".join([*parts, plan.model] if plan.arm.ours else parts)


def _named_by_base(plan: Plan) -> set[str]:
    return {*_NAMED, "tree_budget", *plan.arm.named_keys}


def _parse(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides)


def swept_keys(overrides: list[str]) -> list[str]:
    """Keys of a multirun's overrides that take several values (`tree_budget=8,32`, `seed=range(0,3)`)."""
    try:
        return [o.key_or_group for o in _parse(overrides) if o.is_sweep_override()]
    except Exception:   # noqa: BLE001 - an exotic override: Hydra's sweeper reports it; names just stay short
        return []


def sweep_name(model: str, overrides: list[str]) -> str:
    """A sweep parent's name: `sweep-<model> <its sweeping overrides>` (`sweep <...>` when the model is swept);
    every override is in its `sweep.overrides` param."""
    try:
        swept = [o for o in _parse(overrides) if o.is_sweep_override()]
    except Exception:   # noqa: BLE001 - see swept_keys
        swept = []
    what = " ".join(o.input_line for o in swept) if swept else " ".join(overrides)
    named = "" if any(o.key_or_group in ("model", "model.name") for o in swept) else f"-{model}"
    return f"sweep{named} {what}"[:250]


def swept_from_env() -> set[str]:
    return {k for k in os.environ.get(SWEPT_ENV, "").split(",") if k}


def job_extras(plan: Plan, job_overrides: list[str], swept: set[str], every: bool = False) -> list[str]:
    """`key=value` of the job's swept overrides that the base name does not show (`every`: all but method and
    model)."""
    try:
        parsed = _parse(job_overrides)
    except Exception:   # noqa: BLE001 - see swept_keys
        return []
    named = set(_NAMED) if every else _named_by_base(plan)
    return [f"{o.key_or_group}={o.get_value_element_as_str()}" for o in parsed
            if o.key_or_group in swept and o.key_or_group not in named and not o.is_sweep_override()]


def run_name(plan: Plan, job_overrides: list[str] = (), swept: set[str] = frozenset()) -> str:
    return " ".join([base_name(plan), *job_extras(plan, list(job_overrides), swept)])[:250]


def skipped_name(plan: Plan, job_overrides: list[str], swept: set[str]) -> str:
    """A skipped duplicate's name: the base, then every swept value of the job (what made it look different)."""
    extras = job_extras(plan, list(job_overrides), swept, every=True)
    return f"{base_name(plan)} (skipped: {' '.join(extras) or 'duplicate'})"[:250]


_PREFLIGHT_GPU = re.compile(r"(\d+): (.+) \d+/\d+ MiB")


def gpu_label(preflight_tags: dict[str, str], gpus: list[int], local: bool) -> str:
    """The GPUs a run was given, by name (`NVIDIA H200`, `2x NVIDIA H200`), from a remote host's preflight tags
    (`preflight.gpus`) or, on this machine, nvidia-smi; `cpu` where there is none. The closing logging replaces
    it with what the runner used (orchestrator.tracking.tracker)."""
    if local:
        names = _local_gpus()
    else:
        names = {}
        for entry in preflight_tags.get("preflight.gpus", "").split("; "):
            if found := _PREFLIGHT_GPU.fullmatch(entry.strip()):
                names[int(found.group(1))] = found.group(2)
    used = [names[g] for g in gpus if g in names]
    if not used:
        return "cpu"
    kinds = sorted(set(used))
    return kinds[0] if len(used) == 1 else f"{len(used)}x {kinds[0]}" if len(kinds) == 1 else " + ".join(used)


def _local_gpus() -> dict[int, str]:
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = (line.split(",", 1) for line in text.splitlines() if "," in line)
    return {int(i): name.strip() for i, name in pairs if i.strip().isdigit()}
