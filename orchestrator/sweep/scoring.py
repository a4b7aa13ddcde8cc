"""What a job returns to a sweeper: its objective as a plain float, and the compact errors that tell an optimising
sweeper (Optuna, Nevergrad) that a trial failed (JobFailed) or that the sweep was stopped (SweepStopped)."""
from __future__ import annotations

import math
from pathlib import Path

from hydra.errors import CompactHydraException

from remote.events import read_json


class JobFailed(CompactHydraException):
    """A sweep job that did not produce its objective: raised for sweepers that score jobs (Optuna marks the
    trial failed, Nevergrad scores it +inf), never for the basic sweeper, which would stop the sweep. Compact:
    where the sweeper ends the sweep on it (Optuna past max_failure_rate, 0 by default) Hydra prints its one line,
    not a traceback of our code for a job that failed as jobs do."""


class SweepStopped(CompactHydraException):
    """A scored sweep's job stopped by a signal (or not started after it): raised to end the optimiser's sweep,
    which would otherwise go on asking for trials. One line, no traceback (Hydra prints a compact exception so);
    orchestrator.sweep.callback.close_orphan_sweep closes the sweep KILLED with its summary and the CLI exits
    128 + the signal."""


def objective_of(name: str, run_dir: Path, history=()) -> float | None:
    """The run's metric `name` as a plain float (sweepers reject numpy scalars and NaN), None when absent;
    `history`: a user script's metrics, (name, value, step) from its JSON lines, the last of `name` counting."""
    metrics = read_json(run_dir / "results.json").get("metrics", {})
    value = metrics.get(name)
    if value is None:
        value = next((v for metric, v, _ in reversed(list(history)) if metric == name), None)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
