"""One Hydra job, alone or in a sweep: validated into its plan, a sweep's duplicate skipped, the run, its objective.

Contract: `job(cfg)` returns the job's objective as a plain float (what sweepers optimise), None where it has none.
Under `specbench resume` a job that finished before returns its result without running, and one that did not runs
again, its earlier attempt set aside (orchestrator.sweep.resume).
A single run's bad input exits EXIT_BAD_INPUT; a sweep's records the job FAILED and goes on. A job that never
launched (refused, stopped before it began, its host unreachable) still gets a child run saying why
(orchestrator.sweep.records). For a sweeper that scores jobs (Optuna, Nevergrad), a failed job raises JobFailed and
a stopped sweep SweepStopped (orchestrator.sweep.scoring).
"""
from __future__ import annotations

import sys
import threading

from omegaconf import DictConfig
from rich.console import Console

from ..config.errors import ConfigError
from ..config.plan import Plan, make_plan
from ..locks import try_following
from ..run.pipeline import BadInput, run_job
from ..signals import JobInterrupted, handling, sweep_stopped
from ..tracking.tracker import RECORD, Status
from .context import JobContext
from .dedupe import skip_if_ran
from .records import JobRecords
from .scoring import JobFailed, SweepStopped, objective_of

EXIT_BAD_INPUT = 2


def job(cfg: DictConfig) -> float | None:
    """One job; its objective as a plain float, or None."""
    if threading.current_thread() is not threading.main_thread():   # signals reach the main thread only
        return _job(cfg, JobContext.current())
    try:
        with handling():     # in a parallel sweep's worker process too: SIGTERM there stops this job's runner
            return _job(cfg, JobContext.current())
    except JobInterrupted as exc:
        return _interrupted(exc, JobContext.current())


def _interrupted(exc: JobInterrupted, ctx: JobContext) -> None:
    """A joblib worker's job that a signal reached outside its run (signals.handling). A scored sweep's trial fails
    saying so (Optuna's plugin logs `Failed experiment: job N interrupted ...` and tells the trial FAIL; None made
    it refuse the value as not float-castable); where the signal stopped the sweep, the sweep ends, as for a job
    stopped in its run. Raised from here it is a job's result, which leaves joblib's pool running."""
    what = f"job {ctx.num} interrupted by {exc.how} outside its run"
    if not ctx.scored:
        Console().print(f"[yellow]{what}[/]")
        return None
    if stopped_by := sweep_stopped(ctx.sweep_dir):
        raise SweepStopped(f"sweep stopped ({stopped_by}): {what}")
    raise JobFailed(what)


def _job(cfg: DictConfig, ctx: JobContext) -> float | None:
    records = JobRecords(ctx)
    if records.finished_before():   # `specbench resume`
        Console().print(f"job {ctx.num} finished before: kept, not run again")
        return objective_of(_plan(cfg, ctx, records.run_id).objective, ctx.run_dir, [])
    if ctx.multirun and (stopped_by := sweep_stopped(ctx.sweep_dir)):
        return _not_started(cfg, ctx, records, stopped_by)
    following = try_following(ctx.run_dir)   # held until the run is reported, so `reap` leaves it alone
    try:
        plan = _plan(cfg, ctx, records.run_id)
        outcome = skip_if_ran(plan, ctx, records.name(plan)) or run_job(plan, records.start(plan))
    except BadInput as exc:
        return _refused(cfg, ctx, records, exc)
    finally:
        if following is not None:
            following.release()
    if ctx.multirun and not outcome.ok and not (ctx.run_dir / RECORD).exists():
        _ended_before_launch(plan, records, outcome)   # failed before MLflow had it (host unreachable)
    return _result(plan, ctx, outcome)


def _plan(cfg: DictConfig, ctx: JobContext, run_id: str) -> Plan:
    """Checked before the sweep began; what changed since (a file moved by an earlier job) fails this job only."""
    try:
        return make_plan(cfg, ctx.choices, run_id)
    except ConfigError as exc:
        raise BadInput(str(exc)) from None


def _result(plan: Plan, ctx: JobContext, outcome) -> float | None:
    """The job's objective (`outcome`: the run's Outcome, or a skipped duplicate's); for a scored sweep, the
    exception that tells the sweeper it failed or that the sweep stopped."""
    if not ctx.multirun and not outcome.ok:
        raise SystemExit(outcome.exit_status)
    if not outcome.ok:
        if ctx.scored and outcome.status is Status.KILLED and sweep_stopped(ctx.sweep_dir):   # not a failed trial
            raise SweepStopped(f"sweep stopped ({outcome.stopped_by}): job {ctx.num} ended KILLED")
        if ctx.scored:
            raise JobFailed(f"job {ctx.num} ended {outcome.status.value}: {ctx.run_dir}")
        return None
    value = objective_of(plan.objective, ctx.run_dir, outcome.history)
    if value is None and ctx.scored:
        raise JobFailed(f"job {ctx.num} reported no {plan.objective} (objective): {ctx.run_dir}")
    return value


def _ended_before_launch(plan: Plan, records: JobRecords, outcome) -> None:
    why = "; ".join(outcome.errors) or outcome.stopped_by or "see the sweep's log"
    stage = outcome.job.stage.value if outcome.job else "waiting for GPUs"
    records.unlaunched(plan, outcome.status,
                       {"stopped_by": why} if outcome.status is Status.KILLED else
                       {"failure.id": "not_launched", "failure.stage": stage, "failure.hint": why},
                       f"**Ended before launch** ({stage}): {why}")


def _not_started(cfg: DictConfig, ctx: JobContext, records: JobRecords, stopped_by: str) -> None:
    """The sweep was stopped before this job started: it does not run (no runner, no host contact)."""
    tags = {"stopped_by": stopped_by}
    note = f"**Not started**: the sweep was stopped ({stopped_by}) before this job began."
    try:
        records.unlaunched(make_plan(cfg, ctx.choices, records.run_id), Status.KILLED, tags, note)
    except ConfigError:
        records.refused(cfg, Status.KILLED, tags, note)
    Console().print(f"[yellow]job {ctx.num} not started: the sweep was stopped ({stopped_by})[/]")
    if ctx.scored:
        raise SweepStopped(f"sweep stopped ({stopped_by}): job {ctx.num} not started")
    return None


def _refused(cfg: DictConfig, ctx: JobContext, records: JobRecords, exc: BadInput) -> None:
    """Raised on as SystemExit in a sweep, it ended the whole sweep there (a joblib pool killing the jobs still
    running): a single run exits EXIT_BAD_INPUT, a sweep's job is recorded FAILED."""
    print(f"error: {exc}", file=sys.stderr)
    if not ctx.multirun:
        raise SystemExit(EXIT_BAD_INPUT) from None
    records.refused(cfg, Status.FAILED, {"failure.id": "not_launched", "failure.stage": "validate",
                                         "failure.hint": str(exc)}, f"**Refused before launch**: {exc}")
    if ctx.scored:
        raise JobFailed(f"job {ctx.num}: {exc}") from None
    return None
