"""A multirun is one MLflow parent run with a child per job, and a summary logged on the parent.

Contract: `SweepCallback.on_multirun_start` opens the parent and exports its id (children read
SPECBENCH_PARENT_RUN_ID, also in joblib workers, which inherit the environment). `on_multirun_end` logs the
summary table, CSV and plots on the parent and closes it FAILED if any child did not finish, FINISHED
otherwise; a failed sweep then exits non-zero, once, at the end. Hydra skips `on_multirun_end` when a job
raises, so jobs never raise (run_job turns every error into a FAILED child) and `close_orphan_parent` closes
the parent from `__main__` if the sweep died anyway.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .locks import SWEEP_LOCK, take
from .tracking import Status, Tracker, mlflow_client

PARENT_ENV = "SPECBENCH_PARENT_RUN_ID"
URI_ENV = "SPECBENCH_PARENT_TRACKING_URI"
_SWEEP_LOCKS: list = []   # this process's sweep locks, held until it exits


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Held for the sweep's lifetime: once it is free, `reap` may close a parent this process left RUNNING.
        # Not on self: the callback travels to joblib workers, and a lock does not pickle.
        _SWEEP_LOCKS.append(take(Path(str(config.hydra.sweep.dir)) / SWEEP_LOCK))
        tracker = Tracker(config.tracking.uri, config.tracking.experiment)
        overrides = " ".join(config.hydra.overrides.task)
        tracker.start(run_name=f"sweep {overrides}"[:200], params={"sweep.overrides": overrides},
                      tags={"sweep": "parent", "sweep_dir": str(config.hydra.sweep.dir)})
        if tracker.run_id:
            os.environ[PARENT_ENV] = tracker.run_id
            os.environ[URI_ENV] = tracker.uri

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        parent = os.environ.pop(PARENT_ENV, None)
        uri = os.environ.pop(URI_ENV, None)
        if not parent:
            return
        failed = finish_parent(uri, parent, Path(str(config.hydra.sweep.dir)))
        if failed:
            raise SystemExit(f"sweep: {failed} job(s) did not finish; see the parent run {parent}")


def finish_parent(uri: str, parent: str, sweep_dir: Path) -> int:
    """Log the summary on the parent and close it; returns the number of children that did not finish."""
    from rich.console import Console

    from .compare import render_table, row_of, select_runs, summarize

    client = mlflow_client(uri)
    children = select_runs(client, parent=parent)
    rows = [row_of(r) for r in children]
    failed = sum(r["status"] != "FINISHED" for r in rows)
    Console().print(render_table(rows, f"sweep: {len(rows)} jobs, {failed} not finished"))
    out = sweep_dir / "summary" if sweep_dir.exists() else Path(tempfile.mkdtemp())
    for path in summarize(rows, out):
        client.log_artifact(parent, str(path))
    client.set_tag(parent, "sweep.jobs", str(len(rows)))
    client.set_tag(parent, "sweep.compare_url", compare_url(client.get_run(parent).info.experiment_id,
                                                            [r.info.run_id for r in children]))
    client.set_tag(parent, "sweep.failed", str(failed))
    status = Status.FAILED if failed or not rows else Status.FINISHED
    client.set_terminated(parent, status.value)
    return failed


def compare_url(experiment_id: str, run_ids: list[str]) -> str:
    """The MLflow UI page comparing a sweep's children (relative to the server's root)."""
    ids = ",".join(f'"{r}"' for r in run_ids)
    return f'#/compare-runs?runs=[{ids}]&experiments=["{experiment_id}"]'


def close_orphan_parent() -> None:
    """The sweep ended without on_multirun_end (a job raised): the parent must not stay RUNNING."""
    parent, uri = os.environ.pop(PARENT_ENV, None), os.environ.pop(URI_ENV, None)
    if parent:
        mlflow_client(uri).set_terminated(parent, Status.FAILED.value)
