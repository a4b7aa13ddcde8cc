"""A multirun is one MLflow parent run with a child per job, and a summary logged on the parent.

Contract: `SweepCallback.on_multirun_start` records the parent in the sweep dir (SWEEP_RECORD, a tracking record as a
run's: orchestrator.tracking.sweeps) and opens it in MLflow, bounded as a run's logging is; the jobs read its id from
SPECBENCH_PARENT_RUN_ID (PARENT_ENV; joblib workers inherit it). Where it could not be opened, the jobs (`job_tracker`)
keep their records without trying MLflow (AWAY_ENV says why), for `sync <sweep dir>` (orchestrator.tracking.sync). The
parent is named `sweep-<model> <swept overrides>`; SWEPT_ENV (orchestrator.tracking.names) tells the jobs which keys
vary, so their names tell them apart. `on_multirun_end` closes the sweep from its jobs' local records (`close_sweep`,
orchestrator.tracking.sweeps: table, summary, status); a failed sweep then exits non-zero, once, at the end; under
`specbench resume` (RESUME_ENV, orchestrator.sweep.resume) the sweep's parent is reopened, not made anew; a stopped
one (orchestrator.signals: the jobs not started yet do not run) exits 128 + the signal, its planned jobs without a
record KILLED (they never ran). Hydra skips `on_multirun_end` when a job raises: the basic sweeper's jobs never do
(orchestrator.sweep.job turns every error into a FAILED child); an optimising sweeper's do (a failed trial, and a
stopped one, which ends the sweep), and `close_orphan_sweep` then closes the sweep from orchestrator.cli.main.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .. import signals
from ..config.plan import Tracking
from ..locks import SWEEP_LOCK, take
from ..tracking.names import SWEPT_ENV, sweep_name, swept_keys
from ..tracking.sweeps import PLANNED_TAG, SWEEP_RECORD, close_sweep, sweep_id
from ..tracking.tracker import Status, Tracker, close_within, sync_command
from .resume import RESUME_ENV, open_again, reopen

PARENT_ENV = "SPECBENCH_PARENT_RUN_ID"
AWAY_ENV = "SPECBENCH_SWEEP_MLFLOW_AWAY"   # why the sweep's jobs do not try MLflow (its parent could not be opened)
SWEEP_DIR_ENV = "SPECBENCH_SWEEP_DIR"   # for close_orphan_sweep, which Hydra's config no longer reaches
_SWEEP_LOCKS: list = []   # this process's sweep locks, held until it exits


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        # Held for the sweep's lifetime: once it is free, `reap` may close a parent this process left RUNNING.
        # Not on self: the callback travels to joblib workers, and a lock does not pickle.
        _SWEEP_LOCKS.append(take(sweep_dir / SWEEP_LOCK))
        signals.stop_sweep_at(sweep_dir)
        if "joblib" in str(config.hydra.launcher.get("_target_", "")):
            signals.quiet_idle_workers()
        task = list(config.hydra.overrides.task)
        os.environ[SWEPT_ENV] = ",".join(swept_keys(task))
        os.environ[SWEEP_DIR_ENV] = str(sweep_dir)
        resumed = os.environ.get(RESUME_ENV) == str(sweep_dir)
        if resumed:   # `specbench resume`: the parent it had, open again
            tracker = Tracker.load(sweep_dir, name=SWEEP_RECORD)
            reopen(tracker)
        else:
            tracker = Tracker(config.tracking.uri, config.tracking.experiment, run_dir=sweep_dir, name=SWEEP_RECORD)
            planned = planned_jobs(config)
            tracker.record_start(run_name=sweep_name(str(config.model.name), task),
                                 params={"sweep.overrides": " ".join(task)},
                                 tags={"sweep": "parent", "sweep_dir": str(sweep_dir),
                                       "run_id_local": sweep_id(sweep_dir), **({PLANNED_TAG: str(planned)} if planned
                                                                              else {})})
        # Bounded as a run's logging is: a server that is away now would cost every job that bound at its end.
        # Quiet: the line below says the outage, and what it means for the jobs (Hydra's log said it a second time).
        within = close_within(tracker.uri)
        opener = functools.partial(open_again, tracker) if resumed else functools.partial(tracker.send, quiet=True)
        if tracker.open_async(opener).wait(within) and tracker.run_id and not tracker.warning:
            os.environ[PARENT_ENV] = tracker.run_id
            return
        why = tracker.warning or f"MLflow at {tracker.uri} did not answer within {within:g} s"
        tracker.keep(error=why)
        os.environ[AWAY_ENV] = f"{why} at the sweep's start"
        from rich.console import Console

        Console().print(f"[yellow]{why}: the sweep's jobs keep their results locally, without trying MLflow; log "
                        f"them later: {sync_command(sweep_dir)}[/]", soft_wrap=True, highlight=False)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        for name in (SWEPT_ENV, PARENT_ENV, SWEEP_DIR_ENV, AWAY_ENV, RESUME_ENV):
            os.environ.pop(name, None)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        # every job ran or was stopped (a KILLED child): a planned job without a record failed before it began
        failed = close_sweep(Tracker.load(sweep_dir, name=SWEEP_RECORD),
                             missing=Status.KILLED if signals.pending else Status.FAILED)
        if failed and not signals.pending:   # stopped: orchestrator.cli.main exits 128 + the signal
            raise SystemExit(f"sweep: {failed} job(s) did not finish; see {sweep_dir}")


def job_tracker(tracking: Tracking, run_dir: Path) -> Tracker:
    """A job's tracker; in a sweep whose parent MLflow could not open, one that does not try MLflow."""
    return Tracker(tracking.uri, tracking.experiment, run_dir=run_dir, away=os.environ.get(AWAY_ENV),
                   sweep_job=SWEEP_DIR_ENV in os.environ, parent_run_id=os.environ.get(PARENT_ENV))


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the sweep is to run: the basic sweeper's combinations, an optimiser's trial budget (Optuna's
    n_trials); None where the sweeper does not say."""
    sweeper = config.hydra.sweeper
    if "BasicSweeper" not in str(sweeper.get("_target_", "")):
        return sweeper.get("n_trials")
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    try:
        return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
    except HydraException:   # glob(...): expanded with the config loader, which the sweeper holds, not we
        return None


def close_orphan_sweep() -> None:
    """The sweep ended without on_multirun_end (a job raised): it must not stay RUNNING. Closed as on_multirun_end
    would, with its summary: KILLED if the sweep was stopped (an optimiser's stopped trial raised to end it)."""
    for name in (SWEPT_ENV, PARENT_ENV, AWAY_ENV):
        os.environ.pop(name, None)
    sweep_dir = os.environ.pop(SWEEP_DIR_ENV, None)
    if sweep_dir and (Path(sweep_dir) / SWEEP_RECORD).is_file():
        parent = Tracker.load(Path(sweep_dir), name=SWEEP_RECORD)
        if parent.record.get("end") is None:
            close_sweep(parent, missing=Status.KILLED if signals.pending else Status.FAILED)
