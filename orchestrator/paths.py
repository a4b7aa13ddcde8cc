"""Where the project lives on this machine and where its local outputs go, as absolute paths.

Absolute so that the working directory never matters: `cd /tmp && python -m orchestrator` writes to the
same database as a run started from the project root.
"""
from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REMOTE_PACKAGE = PROJECT_ROOT / "remote"
CONF_DIR = PROJECT_ROOT / "conf"


def runs_dir() -> Path:
    """Local outputs: Hydra run dirs, the MLflow database and artifacts. SPECBENCH_RUNS_DIR overrides it."""
    return Path(os.environ.get("SPECBENCH_RUNS_DIR") or PROJECT_ROOT / "runs").resolve()


def default_tracking_uri() -> str:
    return f"sqlite:///{runs_dir() / 'mlflow.db'}"


def default_artifact_root() -> str:
    return (runs_dir() / "mlartifacts").as_uri()
