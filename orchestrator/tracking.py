"""MLflow as a view over a run's local directory.

Contract: everything is written to the local run dir first; `Tracker` mirrors it to MLflow (params at start,
metrics, tags and artifacts at the end, a final status FINISHED / FAILED / KILLED). If MLflow is unreachable
the run goes on and `Tracker.warning` says so; nothing is lost, since the run dir holds it all. Uses the
client API (no fluent global "active run") so parallel jobs in one process cannot mix their runs.
"""
from __future__ import annotations

import enum
import logging
import math
from pathlib import Path
from typing import Any, Mapping

from .paths import default_artifact_root, default_tracking_uri

log = logging.getLogger(__name__)


class Status(enum.Enum):
    """Final state of a run, as MLflow shows it."""

    FINISHED = "FINISHED"   # the runner exited 0 and its results were collected
    FAILED = "FAILED"       # the runner or the orchestrator failed; failure.* tags say why
    KILLED = "KILLED"       # stopped by the user (Ctrl-C) or by fail-fast


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts/lists to dotted keys (`model.random.hidden_size`, `gpus.0`) with string values."""
    out: dict[str, str] = {}
    if isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        return {prefix: str(obj)}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, (Mapping, list, tuple)) and len(value):
            out.update(flatten(value, name))
        else:
            out[name] = str(value)
    return out


def resolve_uri(uri: str | None) -> str:
    return uri or default_tracking_uri()


class Tracker:
    def __init__(self, uri: str | None, experiment: str):
        self.uri = resolve_uri(uri)
        self.experiment = experiment
        self.run_id: str | None = None
        self.warning: str | None = None
        self._client = None

    def _connect(self):
        from mlflow.tracking import MlflowClient

        if self.uri.startswith("sqlite:///"):
            Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        client = MlflowClient(tracking_uri=self.uri)
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            # A local database gets local artifacts in runs/, wherever the command was started from.
            location = default_artifact_root() if self.uri.startswith("sqlite:") else None
            exp_id = client.create_experiment(self.experiment, artifact_location=location)
        else:
            exp_id = exp.experiment_id
        return client, exp_id

    def start(self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str],
              parent_run_id: str | None = None) -> None:
        try:
            self._client, exp_id = self._connect()
            all_tags = dict(tags)
            if parent_run_id:
                all_tags["mlflow.parentRunId"] = parent_run_id
            run = self._client.create_run(exp_id, run_name=run_name, tags=all_tags)
            self.run_id = run.info.run_id
            self._log_params(params)
        except Exception as exc:  # tracking must never cost the run
            self.warning = f"MLflow at {self.uri} unavailable ({type(exc).__name__}: {exc}); results kept locally"
            log.warning(self.warning)
            self._client = None

    def resume(self, run_id: str | None) -> None:
        """Continue logging to an existing run (attach); without one, the run is only kept locally."""
        if not run_id:
            return
        try:
            self._client, _ = self._connect()
            self.run_id = run_id
        except Exception as exc:
            self.warning = f"MLflow at {self.uri} unavailable ({type(exc).__name__}: {exc}); results kept locally"
            self._client = None

    def _log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self._client.log_batch(self.run_id, params=items[i:i + 100])

    def finish(self, status: Status, metrics: Mapping[str, float], tags: Mapping[str, str],
               artifacts: list[Path], history: list[tuple[str, float, int]] = ()) -> None:
        """Final metrics (step 0), per-step `history` (name, value, step), tags, artifacts and the status."""
        if self._client is None or self.run_id is None:
            return
        try:
            import time

            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            points = [(k, v, 0) for k, v in metrics.items()] + list(history)
            ms = [Metric(k, float(v), now, step) for k, v, step in points
                  if isinstance(v, (int, float)) and math.isfinite(float(v))]
            ts = [RunTag(k, str(v)[:8000]) for k, v in tags.items()]
            for i in range(0, max(len(ms), len(ts)), 500):
                self._client.log_batch(self.run_id, metrics=ms[i:i + 500], tags=ts[i:i + 500])
            for path in artifacts:
                if path.exists():
                    self._client.log_artifact(self.run_id, str(path))
            self._client.set_terminated(self.run_id, status.value)
        except Exception as exc:
            self.warning = f"MLflow logging failed ({type(exc).__name__}: {exc}); results kept locally"
            log.warning(self.warning)
            try:
                self._client.set_terminated(self.run_id, Status.FAILED.value)
            except Exception:
                pass
