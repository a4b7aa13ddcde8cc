"""What MLflow gets for one Hydra job: its run id, the tracker of its run (a sweep job's under the sweep's parent),
its MLflow run to be (`start`), and, for a job that never launched (refused, stopped before it began, its host
unreachable), a child run closed with its reason, so that the sweep's table shows every job (`sync` logs it where
MLflow was away). A refused job has no plan: it is named by its arm and overrides and logged with its config as
composed.
"""
from __future__ import annotations

import os
import uuid

from omegaconf import DictConfig, OmegaConf

from ..config.arms import arm_of
from ..config.plan import Plan, Tracking
from ..hosts.settings import LocalSettings
from ..tracking.names import RUN_TAG, run_name, swept_from_env, what_ran
from ..tracking.run_start import RunStart, record_start
from ..tracking.tracker import Status, Tracker, flatten
from .callback import job_tracker
from .context import JobContext
from .resume import RESUME_ENV, set_aside, settled


class JobRecords:
    def __init__(self, ctx: JobContext):
        self.ctx = ctx
        # a single run's id is its dir's name (ending in this process's tag); a sweep job's, its number and a tag
        name = ctx.run_dir.name
        self.run_id = name if name.endswith(RUN_TAG) else f"{name}-{uuid.uuid4().hex[:6]}"
        self.supersedes: str | None = None    # `specbench resume`: the MLflow run of this job's earlier attempt

    def finished_before(self) -> bool:
        """Under `specbench resume` (orchestrator.sweep.resume): True for a job that finished before, which is not
        run again; a job that did not has its earlier attempt set aside (its MLflow run, `supersedes`)."""
        if not (self.ctx.multirun and os.environ.get(RESUME_ENV) == str(self.ctx.sweep_dir)):
            return False
        if settled(self.ctx.run_dir):
            return True
        self.supersedes = set_aside(self.ctx.run_dir)
        return False

    def name(self, plan: Plan) -> str:
        return run_name(plan, self.ctx.overrides, swept_from_env())

    def start(self, plan: Plan) -> RunStart:
        return RunStart(plan, self.ctx.run_dir, job_tracker(plan.tracking, self.ctx.run_dir), self.name(plan),
                        self._superseding())

    def _superseding(self) -> dict[str, str]:
        return {"supersedes": self.supersedes} if self.supersedes else {}

    def unlaunched(self, plan: Plan, status: Status, tags: dict[str, str], note: str) -> None:
        tracker = self._tracker(plan.tracking)
        tags = {**what_ran(plan), **self._own(note), **tags}
        record_start(tracker, plan, self.name(plan), tags)
        self._close(tracker, status, tags)

    def refused(self, cfg: DictConfig, status: Status, tags: dict[str, str], note: str) -> None:
        tracking = cfg.get("tracking") or {}
        tracker = self._tracker(Tracking(tracking.get("uri"), tracking.get("experiment")))
        arm, host = arm_of(cfg), cfg.get("host") or {}
        tags = {**arm.tags(), "host": str(host.get("name") or host.get("kind") or LocalSettings.kind),
                **self._own(note), **tags}
        tracker.record_start(run_name=f"{arm.label()} (refused: {' '.join(self.ctx.overrides)})"[:250],
                             params=flatten(arm.params(OmegaConf.to_container(cfg, resolve=True))), tags=tags)
        self._close(tracker, status, tags)

    def _tracker(self, tracking: Tracking) -> Tracker:
        self.ctx.run_dir.mkdir(parents=True, exist_ok=True)
        return job_tracker(tracking, self.ctx.run_dir)

    def _own(self, note: str) -> dict[str, str]:
        return {"run_dir": str(self.ctx.run_dir), "run_id_local": self.run_id, "mlflow.note.content": note,
                **self._superseding()}

    @staticmethod
    def _close(tracker: Tracker, status: Status, tags: dict[str, str]) -> None:
        tracker.send()
        tracker.finish(status, {}, {**tags, "status": status.value}, [])
