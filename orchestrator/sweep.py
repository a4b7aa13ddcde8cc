"""A multirun is one MLflow parent run with a child per job, and a summary logged on the parent.

Contract: `SweepCallback.on_multirun_start` opens the parent and exports its id (children read
SPECBENCH_PARENT_RUN_ID, also in joblib workers, which inherit the environment). `on_multirun_end` logs the
summary table, CSV and plots on the parent and closes it FAILED if any child did not finish (or a job of its plan,
`sweep.planned` tag, left no child: it failed), KILLED if every job that did not finish was stopped, FINISHED
otherwise; a failed sweep then exits non-zero, once, at the end. A signal stops the sweep (orchestrator.signals:
the jobs not started yet do not run). Hydra skips `on_multirun_end` when a job raises, so jobs of the basic
sweeper never raise (run_job turns every error into a FAILED child); an optimising sweeper's jobs do (a failed
trial, and a stopped one, which ends the sweep), and `close_orphan_parent` closes the parent from `__main__`:
with its summary, KILLED, if the sweep was stopped. For `reap` (the sweep process died) and a stopped sweep,
planned jobs without a child never ran: KILLED.
The parent is named `sweep-<model> <swept overrides>`; SWEPT_ENV (orchestrator.naming) tells the jobs which keys vary,
so their names tell them apart. The summary (also the parent's description, as markdown) ends with the absolute
compare URL of the children that ran (also the parent's `sweep.compare_url` tag); each skipped duplicate
(orchestrator.dedupe) is resolved to the run that holds its result (`duplicate_of` tag; `sweep.skipped` counts
them).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from . import signals
from .locks import SWEEP_LOCK, take
from .naming import SWEPT_ENV, sweep_name, swept_keys
from .tracking import Status, Tracker, mlflow_client
from .ui_links import compare_url, where

PARENT_ENV = "SPECBENCH_PARENT_RUN_ID"
URI_ENV = "SPECBENCH_PARENT_TRACKING_URI"
PLANNED_TAG = "sweep.planned"   # on the parent: how many jobs the sweep was to run (so a killed one shows the gap)
_SWEEP_LOCKS: list = []   # this process's sweep locks, held until it exits


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Held for the sweep's lifetime: once it is free, `reap` may close a parent this process left RUNNING.
        # Not on self: the callback travels to joblib workers, and a lock does not pickle.
        _SWEEP_LOCKS.append(take(Path(str(config.hydra.sweep.dir)) / SWEEP_LOCK))
        signals.stop_sweep_at(Path(str(config.hydra.sweep.dir)))
        tracker = Tracker(config.tracking.uri, config.tracking.experiment)
        task = list(config.hydra.overrides.task)
        overrides = " ".join(task)
        os.environ[SWEPT_ENV] = ",".join(swept_keys(task))
        planned = planned_jobs(config)
        tracker.start(run_name=sweep_name(str(config.model.name), task), params={"sweep.overrides": overrides},
                      tags={"sweep": "parent", "sweep_dir": str(config.hydra.sweep.dir),
                            **({PLANNED_TAG: str(planned)} if planned else {})})
        if tracker.run_id:
            os.environ[PARENT_ENV] = tracker.run_id
            os.environ[URI_ENV] = tracker.uri

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ.pop(SWEPT_ENV, None)
        parent = os.environ.pop(PARENT_ENV, None)
        uri = os.environ.pop(URI_ENV, None)
        if not parent:
            return
        # every job ran or was stopped (a KILLED child): a planned job without a child failed before MLflow had it
        failed = finish_parent(uri, parent, Path(str(config.hydra.sweep.dir)),
                               missing=Status.KILLED if signals.pending else Status.FAILED)
        if failed and not signals.pending:   # stopped: __main__ exits 128 + the signal
            raise SystemExit(f"sweep: {failed} job(s) did not finish; see the parent run {parent}")


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the sweep is to run: the basic sweeper's combinations, an optimiser's trial budget (Optuna's
    n_trials); None where the sweeper does not say."""
    sweeper = config.hydra.sweeper
    if "BasicSweeper" not in str(sweeper.get("_target_", "")):
        return sweeper.get("n_trials")
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))


def finish_parent(uri: str, parent: str, sweep_dir: Path, missing: Status = Status.KILLED) -> int:
    """Log the summary on the parent and close it; returns the number of planned jobs that did not finish. A planned
    job without a child counts as `missing`: KILLED where the sweep was killed or stopped before it (`reap`),
    FAILED at a sweep's normal end (it failed before MLflow had it)."""
    from rich.console import Console

    from .compare import markdown, render_table, row_of, select_runs, summarize
    from .run_note import NOTE_TAG

    client = mlflow_client(uri)
    children = select_runs(client, parent=parent)
    _resolve_skipped(client, children)
    rows = [row_of(r) for r in children]
    run = client.get_run(parent)
    planned = int(run.data.tags.get(PLANNED_TAG) or 0)
    absent = max(0, planned - len(rows))
    failed = sum(r["status"] not in ("FINISHED", "SKIPPED") for r in rows) + absent
    skipped = sum(r["status"] == "SKIPPED" for r in rows)
    console = Console()
    jobs = f"{len(rows)} of {planned}" if absent else f"{len(rows)}"
    title = f"sweep: {jobs} jobs, {failed} not finished, {skipped} skipped"
    console.print(render_table(rows, title))
    out = sweep_dir / "summary" if sweep_dir.exists() else Path(tempfile.mkdtemp())
    for path in summarize(rows, out):
        client.log_artifact(parent, str(path))
    ran = [r.info.run_id for r in children if r.data.tags.get("skipped") != "true"]
    url = compare_url(uri, run.info.experiment_id, ran)
    for key, value in (("sweep.jobs", len(rows)), ("sweep.compare_url", url), ("sweep.failed", failed),
                       ("sweep.skipped", skipped), (NOTE_TAG, markdown(rows, title, url))):
        client.set_tag(parent, key, str(value))
    ended = {r["status"] for r in rows} - {"FINISHED", "SKIPPED"} | ({missing.value} if absent else set())
    # a sweep stopped by the user or a scheduler (every job that did not finish was KILLED) is KILLED too
    status = Status.FINISHED if rows and not ended else Status.KILLED if ended == {"KILLED"} else Status.FAILED
    client.set_terminated(parent, status.value)
    console.print(f"compare the sweep in MLflow: {where(uri, url)}", soft_wrap=True, highlight=False)
    return failed


def _resolve_skipped(client, children) -> None:
    """A skipped child names its holder by local run id (the holder's MLflow run may not have existed yet):
    point it at the holder's MLflow run, and give it the holder's host and GPU tags."""
    by_local = {r.data.tags.get("run_id_local"): r for r in children}
    for child in children:
        tags = child.data.tags
        holder = by_local.get(tags.get("duplicate_of.run_id_local")) if tags.get("skipped") == "true" else None
        if holder is None or tags.get("duplicate_of") == holder.info.run_id:
            continue
        resolved = {"duplicate_of": holder.info.run_id, **{k: holder.data.tags[k] for k in ("host", "gpu")
                                                           if k in holder.data.tags}}
        for key, value in resolved.items():
            client.set_tag(child.info.run_id, key, value)
            tags[key] = value   # the summary below reads the same run objects


def close_orphan_parent() -> None:
    """The sweep ended without on_multirun_end (a job raised): the parent must not stay RUNNING. A stopped sweep
    (an optimiser's stopped trial raised to end it) is closed as on_multirun_end would, with its summary."""
    os.environ.pop(SWEPT_ENV, None)
    parent, uri = os.environ.pop(PARENT_ENV, None), os.environ.pop(URI_ENV, None)
    if not parent:
        return
    client = mlflow_client(uri)
    if signals.pending:
        sweep_dir = Path(client.get_run(parent).data.tags.get("sweep_dir") or tempfile.mkdtemp())
        finish_parent(uri, parent, sweep_dir, missing=Status.KILLED)
    else:
        client.set_terminated(parent, Status.FAILED.value)
