"""Where the project lives on this machine and where its local outputs go, as absolute paths.

From a source checkout (pyproject.toml beside the packages) outputs stay in the checkout's runs/; installed from a
wheel, they go to ./runs of the working directory at start (as Hydra's outputs/ and MLflow's mlruns/ do), never
into site-packages; SPECBENCH_RUNS_DIR overrides both. Absolute, so that Hydra changing the working directory
never matters.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
REMOTE_PACKAGE = PROJECT_ROOT / "remote"
SOURCE_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file()
# conf/ in the checkout; a wheel installs it as orchestrator/conf (no top-level `conf` to collide with).
CONF_DIR = PROJECT_ROOT / "conf" if SOURCE_CHECKOUT else PACKAGE_DIR / "conf"
_START_DIR = Path.cwd()


def runs_dir() -> Path:
    """Local outputs: Hydra run dirs, the MLflow database and artifacts."""
    if os.environ.get("SPECBENCH_RUNS_DIR"):
        return Path(os.environ["SPECBENCH_RUNS_DIR"]).expanduser().resolve()
    return (PROJECT_ROOT if SOURCE_CHECKOUT else _START_DIR) / "runs"


def default_tracking_uri() -> str:
    return f"sqlite:///{runs_dir() / 'mlflow.db'}"


def default_artifact_root() -> str:
    return (runs_dir() / "mlartifacts").as_uri()


def foreign_remote() -> str | None:
    """Why `import remote` would not load our runner (another project's `remote` earlier on sys.path, e.g. a
    remote/ folder in the working directory); None when it is ours. The name is generic, the folder is the
    bundle the hosts run as `python -m remote`, so it keeps its name and we check instead."""
    import importlib.util

    spec = importlib.util.find_spec("remote")
    origin = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
    if origin == REMOTE_PACKAGE:
        return None
    return (f"`import remote` finds {origin or 'nothing'}, not specbench's runner at {REMOTE_PACKAGE}: another "
            f"package named `remote` shadows it (rename that folder or run from another directory)")
