"""One Hydra job, alone or in a sweep: validated into its plan, a sweep's duplicate skipped, the run, its objective.

Contract: `job(cfg)` returns the job's objective as a plain float (what sweepers optimise), None where it has none.
A single run's bad input exits EXIT_BAD_INPUT; a sweep's records the job FAILED and goes on. A job that never
launched (refused, stopped before it began, its host unreachable) still gets a child run saying why. For a sweeper
that scores jobs (Optuna, Nevergrad), a failed job raises JobFailed and a stopped sweep SweepStopped, both compact
Hydra errors (one line, no traceback).
"""
from __future__ import annotations

import math
import sys
import threading
import uuid
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from remote.events import read_json

from ..config.errors import ConfigError
from ..config.runspec import build_spec
from ..config.validate import validate
from ..locks import try_following
from ..run.monitor import Outcome
from ..run.pipeline import BadInput, record_start, run_job
from ..signals import JobInterrupted, handling, sweep_stopped
from ..tracking.names import RUN_TAG, what_ran
from ..tracking.tracker import RECORD, Status
from .callback import job_tracker
from .dedupe import skip_if_ran


def job(cfg: DictConfig) -> float | None:
    """One job; its objective as a plain float, or None."""
    if threading.current_thread() is not threading.main_thread():   # signals reach the main thread only
        return _job(cfg)
    try:
        with handling():     # in a parallel sweep's worker process too: SIGTERM there stops this job's runner
            return _job(cfg)
    except JobInterrupted as exc:
        return _interrupted(exc)


EXIT_BAD_INPUT = 2



class JobFailed(CompactHydraException):
    """A sweep job that did not produce its objective: raised for sweepers that score jobs (Optuna marks the
    trial failed, Nevergrad scores it +inf), never for the basic sweeper, which would stop the sweep. Compact:
    where the sweeper ends the sweep on it (Optuna past max_failure_rate, 0 by default) Hydra prints its one line,
    not a traceback of our code for a job that failed as jobs do."""


class SweepStopped(CompactHydraException):
    """A scored sweep's job stopped by a signal (or not started after it): raised to end the optimiser's sweep,
    which would otherwise go on asking for trials. One line, no traceback (Hydra prints a compact exception so);
    sweep.close_orphan_sweep closes the sweep KILLED with its summary and __main__ exits 128 + the signal."""


def _interrupted(exc: JobInterrupted) -> None:
    """A joblib worker's job that a signal reached outside its run (signals.handling). A scored sweep's trial fails
    saying so (Optuna's plugin logs `Failed experiment: job N interrupted ...` and tells the trial FAIL; None made
    it refuse the value as not float-castable); where the signal stopped the sweep, the sweep ends, as for a job
    stopped in its run. Raised from here it is a job's result, which leaves joblib's pool running."""
    hydra_cfg = HydraConfig.get()
    what = f"job {hydra_cfg.job.num} interrupted by {exc.how} outside its run"
    if not _scored(hydra_cfg):
        Console().print(f"[yellow]{what}[/]")
        return None
    if stopped_by := sweep_stopped(Path(str(hydra_cfg.sweep.dir))):
        raise SweepStopped(f"sweep stopped ({stopped_by}): {what}")
    raise JobFailed(what)


def _scored(hydra_cfg) -> bool:
    """A sweeper that optimises the jobs' objective (Optuna, Nevergrad), not Hydra's basic grid."""
    return hydra_cfg.mode.name == "MULTIRUN" and \
        "BasicSweeper" not in str(OmegaConf.select(hydra_cfg, "sweeper._target_", default=""))


def _job(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    scored = _scored(hydra_cfg)
    sweep_dir = Path(str(hydra_cfg.sweep.dir))
    if multirun and (stopped_by := sweep_stopped(sweep_dir)):
        # the sweep was stopped before this job started: it does not run (no runner, no host contact)
        _record_unlaunched(cfg, run_dir, _run_id(run_dir), Status.KILLED, {"stopped_by": stopped_by},
                           f"**Not started**: the sweep was stopped ({stopped_by}) before this job began.")
        Console().print(f"[yellow]job {hydra_cfg.job.num} not started: the sweep was stopped ({stopped_by})[/]")
        if scored:
            raise SweepStopped(f"sweep stopped ({stopped_by}): job {hydra_cfg.job.num} not started")
        return None
    run_id = _run_id(run_dir)
    following = try_following(run_dir)   # held until the run is reported, so `reap` leaves it alone
    try:
        try:
            validate(cfg, hydra_cfg.runtime.choices)
        except ConfigError as exc:
            raise BadInput(str(exc)) from None
        spec = build_spec(cfg, run_id)
        if (skipped := skip_if_ran(cfg, spec, run_id, run_dir)) is not None:
            outcome = skipped   # a sweep's duplicate: recorded as skipped, pointing to the job that holds the result
        else:
            outcome = run_job(cfg, spec, run_dir, job_tracker(cfg, run_dir))
    except BadInput as exc:
        # checked before the sweep began; what changed since (a file moved by an earlier job) fails this job only:
        # raised on as SystemExit, it ended the whole sweep there (a joblib pool killing the jobs still running)
        print(f"error: {exc}", file=sys.stderr)
        if not multirun:
            raise SystemExit(EXIT_BAD_INPUT) from None
        _record_unlaunched(cfg, run_dir, run_id, Status.FAILED, {"failure.id": "not_launched",
                           "failure.stage": "validate", "failure.hint": str(exc)},
                           f"**Refused before launch**: {exc}")
        if scored:
            raise JobFailed(f"job {hydra_cfg.job.num}: {exc}") from None
        return None
    finally:
        if following is not None:
            following.release()
    if not multirun:
        if not outcome.ok:
            raise SystemExit(outcome.exit_status)
        return objective_of(cfg.objective, run_dir, outcome)
    if not outcome.ok and not (run_dir / RECORD).exists():   # failed before MLflow had it (host unreachable)
        why = "; ".join(outcome.errors) or outcome.stopped_by or "see the sweep's log"
        stage = outcome.job.stage.value if outcome.job else "waiting for GPUs"
        _record_unlaunched(cfg, run_dir, run_id, outcome.status,
                           {"stopped_by": why} if outcome.status is Status.KILLED else
                           {"failure.id": "not_launched", "failure.stage": stage, "failure.hint": why},
                           f"**Ended before launch** ({stage}): {why}")
    if not outcome.ok:
        if scored and outcome.status is Status.KILLED and sweep_stopped(sweep_dir):   # not a failed trial
            raise SweepStopped(f"sweep stopped ({outcome.stopped_by}): job {hydra_cfg.job.num} ended KILLED")
        if scored:
            raise JobFailed(f"job {hydra_cfg.job.num} ended {outcome.status.value}: {run_dir}")
        return None
    value = objective_of(cfg.objective, run_dir, outcome)
    if value is None and scored:
        raise JobFailed(f"job {hydra_cfg.job.num} reported no {cfg.objective} (objective): {run_dir}")
    return value


def _run_id(run_dir: Path) -> str:
    """A single run's id is its dir's name (ending in this process's tag); a sweep job's, its number and a tag."""
    return run_dir.name if run_dir.name.endswith(RUN_TAG) else f"{run_dir.name}-{uuid.uuid4().hex[:6]}"


def _record_unlaunched(cfg: DictConfig, run_dir: Path, run_id: str, status: Status, tags: dict[str, str],
                       note: str) -> None:
    """A sweep job that never launched gets a record and a child run anyway, closed `status` with its reason: the
    sweep's table then shows every job (`sync` logs it where MLflow was away)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tracker = job_tracker(cfg, run_dir)
    tags = {**what_ran(cfg), "run_dir": str(run_dir), "run_id_local": run_id, "mlflow.note.content": note, **tags}
    record_start(tracker, cfg, OmegaConf.to_container(cfg, resolve=True), tags)
    tracker.send()
    tracker.finish(status, {}, {**tags, "status": status.value}, [])


def objective_of(name: str, run_dir: Path, outcome: Outcome) -> float | None:
    """The run's metric `name` as a plain float (sweepers reject numpy scalars and NaN), None when absent."""
    metrics = read_json(run_dir / "results.json").get("metrics", {})
    value = metrics.get(name)
    if value is None:   # a user script's metrics are its JSON lines: the last value of that name
        value = next((v for metric, v, _ in reversed(outcome.history) if metric == name), None)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
