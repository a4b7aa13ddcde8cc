"""A run's local record (tracking.json) read as its MLflow run would show it.

Contract: `as_run(record)` has the shape of an MLflow Run that orchestrator.tracking.compare reads (`info`: run_id,
run_name, status, start_time; `data`: params, metrics, tags): params and tags as recorded (the final tags over
the start's), each metric at its highest step as MLflow reports it, status RUNNING while no final outcome is
recorded; run_id is the MLflow run's id once there is one, else the local run id. `job_records(sweep_dir)` are a
sweep's jobs as their records say, oldest first. So a sweep's table and status come from what was kept locally,
the same whether or not MLflow had the runs (orchestrator.tracking.sweeps).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from .tracker import RECORD, Step


def as_run(record: dict) -> SimpleNamespace:
    """The run `record` describes, shaped as an MLflow Run, with `logged`: whether MLflow has all of it."""
    start, final = record.get("start") or {}, record.get("final") or {}
    tags = {**start.get("tags", {}), **final.get("tags", {})}
    latest: dict[str, tuple[int, int, float]] = {}   # MLflow's latest value: highest step, then newest
    for key, value, timestamp, step in final.get("metrics", []):
        latest[key] = max(latest.get(key, (step, timestamp, value)), (step, timestamp, value))
    info = SimpleNamespace(run_id=record.get("mlflow_run_id") or tags.get("run_id_local", ""),
                           run_name=start.get("run_name", ""), status=final.get("status", "RUNNING"),
                           start_time=start.get("start_time"))
    data = SimpleNamespace(params=dict(start.get("params", {})), tags=tags,
                           metrics={k: v for k, (_, _, v) in latest.items()})
    logged = bool(record.get("mlflow_run_id")) and Step.FINAL.value in record.get("logged", [])
    return SimpleNamespace(info=info, data=data, logged=logged)


def job_records(sweep_dir: Path) -> list[dict]:
    """The records of the sweep's jobs (`<sweep_dir>/<job>/tracking.json`), oldest first; one that cannot be read
    (a job killed while writing it) is left out, as a job without a record."""
    records = []
    for path in sweep_dir.glob(f"*/{RECORD}"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("start"):
            records.append(record)
    return sorted(records, key=lambda r: r["start"].get("start_time") or 0)
