"""A sweep runs each effective config once: `-m method=ar,dflash,ddtree tree_budget=8,32` runs ar and dflash once.

Contract: the effective config of a job is what its runner reads: the plan's run spec less its run id, as the runner
reads it (`as_read`), plus where it runs (the host's settings and the GPUs, which reach the runner as its
environment). Jobs of one sweep claim their effective config in the sweep dir (`<sweep dir>/effective/<parent
run>/<hash>.json`, created whole by a hard link, so parallel joblib or submitit workers cannot both win);
`skip_if_ran` returns None to the job that holds the claim (it runs) and, to any later one, a `Skipped` outcome
after recording it: a FINISHED child run tagged `status=skipped`, named `<base> (skipped: <its swept values>)`,
whose `duplicate_of.*` tags name the job that holds the result (the sweep's summary resolves it to that run's MLflow
id, orchestrator.tracking.sweeps). Its run dir gets `skipped.json`. `as_read` leaves out the fields the arm's runner
does not read (orchestrator.config.arms `unread`). Only under Hydra's basic sweeper (a grid); an optimising
sweeper's trials all run. Non-goals: skipping across sweeps (a new sweep measures again), a user's script
(`runner=script` reads what it likes, so it always runs), reusing a duplicate's numbers as an optimising sweeper's
objective.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from remote.events import write_json_atomic

from ..config.plan import Plan
from ..tracking.names import skipped_name, swept_from_env, what_ran
from ..tracking.sweeps import SKIPPED_FILE
from ..tracking.tracker import Status, flatten
from .callback import PARENT_ENV, job_tracker
from .context import JobContext

REGISTRY = "effective"


def as_read(plan: Plan) -> dict:
    """The spec as the runner reads it, without its run id: what the arm does not read (`Arm.unread`: a budget
    without a tree, tree_budget_max without tree_budget=auto, AR's drafter and baseline) left out."""
    data = dataclasses.asdict(plan.spec)
    data.pop("run_id")
    unread = plan.arm.unread(plan.config)
    for key in ("tree_budget", "tree_budget_max", "baseline"):
        if key in unread:
            data["decoding"][key] = None
    if "drafter" in unread:
        data["drafter"] = None
    return data


def effective_config(plan: Plan) -> dict:
    """What decides a job's result: the spec as read, the host it runs on and its GPUs (or the pool that places
    it). The host's settings name env vars only: secrets never enter them."""
    return {"spec": as_read(plan), "host": plan.host.as_dict(), "gpus": list(plan.gpus),
            "pool": [(entry.host.as_dict(), list(entry.gpus)) for entry in plan.pool.entries] if plan.pool else None}


def key_of(effective: dict) -> str:
    text = json.dumps(effective, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def claim(registry: Path, key: str, mine: dict) -> dict | None:
    """Claim `key` for the job described by `mine`: None if this job got it, else the holder's record."""
    registry.mkdir(parents=True, exist_ok=True)
    target = registry / f"{key}.json"
    fd, tmp = tempfile.mkstemp(dir=registry, prefix=".claim-")
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(mine, file)
        os.link(tmp, target)   # atomic and exclusive: whoever links first holds it, with its record complete
        return None
    except FileExistsError:
        return json.loads(target.read_text())
    finally:
        os.unlink(tmp)


@dataclass
class Skipped:
    """The outcome of a job skipped as a duplicate: it counts as done (its result is the holder's)."""

    holder: dict
    status: Status = Status.FINISHED
    history: list = field(default_factory=list)
    ok: bool = True
    exit_status: int = 0


def skip_if_ran(plan: Plan, ctx: JobContext, name: str, console: Console | None = None) -> Skipped | None:
    """In a grid sweep: None if this job's effective config is new to the sweep (run it), else a recorded skip.
    `name`: the job's run name, which a later duplicate names as its holder."""
    if not ctx.multirun or not ctx.grid or not plan.arm.ours:
        return None
    overrides = list(ctx.overrides)
    registry = ctx.sweep_dir / REGISTRY / (os.environ.get(PARENT_ENV) or "no-parent")
    mine = {"job": ctx.num, "run_id_local": plan.spec.run_id, "run_dir": str(ctx.run_dir), "name": name,
            "overrides": overrides}
    holder = claim(registry, key_of(effective_config(plan)), mine)
    if holder is None or holder.get("job") == ctx.num:   # its own claim: an earlier attempt (`specbench resume`)
        return None
    record_skip(plan, ctx.run_dir, holder, skipped_name(plan, overrides, swept_from_env()), overrides)
    (console or Console()).print(
        f"[yellow]skipped job {ctx.num} ({escape(' '.join(overrides))}): same effective config as job "
        f"{holder['job']} ({escape(holder['name'])}), whose run holds the result[/]")
    return Skipped(holder)


def record_skip(plan: Plan, run_dir: Path, holder: dict, name: str, overrides: list[str]) -> None:
    """skipped.json in the run dir and a FINISHED MLflow child `status=skipped` pointing to the holder."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(str(run_dir / SKIPPED_FILE), {"duplicate_of": holder, "overrides": overrides})
    note = (f"**Skipped**: this job's effective config (the run spec as the runner reads it, host and GPUs) equals "
            f"that of job {holder['job']}, `{holder['name']}`; that run holds the result. Overrides: "
            f"`{' '.join(overrides)}`.")
    tags = {**what_ran(plan), "run_id_local": plan.spec.run_id, "run_dir": str(run_dir), "skipped": "true",
            "duplicate_of.run_id_local": holder["run_id_local"], "duplicate_of.name": holder["name"],
            "duplicate_of.job": str(holder["job"]), "mlflow.note.content": note}
    tracker = job_tracker(plan.tracking, run_dir)
    tracker.start(run_name=name, params=flatten(plan.params()), tags=tags)
    tracker.finish(Status.FINISHED, {}, {"status": "skipped"}, [run_dir / SKIPPED_FILE])
