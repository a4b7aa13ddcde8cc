"""How a job's MLflow run begins: `RunStart(plan, run_dir, tracker, name)` records it locally first (name, params,
tags; job.json, which attach and reap find the run by), then opens it in MLflow in the background once the runner is
started (the `gpu` and `project_commit` tags, which cost subprocesses). It ends with `Tracker.finish`
(orchestrator.tracking.tracker), called by the follower's report.
"""
from __future__ import annotations

import functools
import subprocess
import threading
from pathlib import Path
from typing import Callable

from remote.events import write_json_atomic

from ..config.plan import Plan
from ..paths import PROJECT_ROOT, SOURCE_CHECKOUT
from .find import JOB_FILE
from .names import gpu_label, what_ran
from .tracker import Tracker, flatten


def project_commit() -> str:
    if not SOURCE_CHECKOUT:   # installed from a wheel: its version is what was run
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"specbench-{version('specbench')}"
        except PackageNotFoundError:
            return "unknown"
    try:
        sha = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return f"{sha}-dirty" if sha and dirty else (sha or "unknown")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record_start(tracker: Tracker, plan: Plan, name: str, tags: dict[str, str]) -> None:
    """Record the MLflow run to open, locally (no subprocess, no MLflow): `name` (orchestrator.tracking.names), the
    plan's params (the resolved config as its arm reads it; secrets are never in it) and `tags`."""
    tracker.record_start(run_name=name, params=flatten(plan.params()), tags=tags)


def open_run(tracker: Tracker, plan: Plan, tags: dict[str, str], then: Callable[[], None] | None = None) -> None:
    """Open the recorded run in MLflow, then call `then`; in the background once the runner is started, so git's two
    calls (and nvidia-smi's, for the `gpu` tag of a local run) do not delay it either."""
    tracker.send(tags={"gpu": gpu_label(tags, list(plan.gpus), local=plan.host.local),
                       "project_commit": project_commit()})
    if then is not None:
        then()


class RunStart:
    """A job's MLflow run, from its tags (known once the host is surveyed) to its opening in the background."""

    def __init__(self, plan: Plan, run_dir: Path, tracker: Tracker, name: str, tags: dict[str, str] | None = None):
        self.plan, self.run_dir, self.tracker, self.name = plan, run_dir, tracker, name
        self.extra = dict(tags or {})                  # tags of the job's own (a resumed attempt's `supersedes`)
        self.tags: dict[str, str] | None = None        # known once the host is surveyed
        self.opening: threading.Event | None = None    # set once MLflow opened the run

    def surveyed(self, plan: Plan, host_name: str, facts: dict[str, str]) -> None:
        """The run's tags, once its host (as `plan` places it) answered preflight with `facts`."""
        self.plan = plan
        self.tags = {**what_ran(plan), "host": host_name, "run_dir": str(self.run_dir),
                     "run_id_local": plan.spec.run_id, "gpus": ",".join(map(str, plan.gpus)),
                     "host_kind": plan.host.kind, **plan.host.placement_tags(), **facts, **self.extra}

    def record(self) -> None:
        """A kill from here on must leave the run findable and loggable: job.json (attach, reap) and what its MLflow
        run is to show (tracking.json: sync) are written before MLflow is touched. MLflow opens the run once the
        runner is started, not while the job is placed (its import holds the GIL, and the placement's round trips
        took 2-3x longer beside it), and in the background: its import, database work and an unreachable server's
        timeouts never delay the tail; the report waits for it, bounded. job.json is written again once the MLflow
        run is open (or failed to), so that it names the run."""
        record_start(self.tracker, self.plan, self.name, self.tags)
        self.save_job()
        self.opening = self.tracker.open_async(functools.partial(open_run, self.tracker, self.plan, self.tags,
                                                                 then=self.save_job))

    def open_late(self) -> None:
        """Placing the job failed after preflight: the run is logged in MLflow too."""
        if self.opening is None and self.tags is not None:
            record_start(self.tracker, self.plan, self.name, self.tags)
            self.tracker.open_async(functools.partial(open_run, self.tracker, self.plan, self.tags))

    def save_job(self) -> None:
        """What `attach` needs to find the run again; the host's settings hold env var names, never secret values."""
        write_json_atomic(str(self.run_dir / JOB_FILE), {   # attach may read it at any moment
            "run_id": self.plan.spec.run_id, "host": self.plan.host.as_dict(), "mlflow_run_id": self.tracker.run_id,
            "tracking_uri": self.tracker.uri, "experiment": self.tracker.experiment,
            "needs_results": self.plan.arm.ours,
        })
