"""Where the project lives on this machine and where its local outputs go, as absolute paths.

From a source checkout (pyproject.toml beside the packages) outputs stay in the checkout's runs/; installed from a
wheel, they go to ./runs of the working directory at start (as Hydra's outputs/ and MLflow's mlruns/ do), never
into site-packages; SPECBENCH_RUNS_DIR overrides both. Absolute, so that Hydra changing the working directory
never matters. Their room: `room_to_start(runs dir)` refuses a command that writes runs with under START_ROOM free,
`no_room_here` is the one line of a write on this machine that found none (`this machine: No space left on device
in PATH: ...`, the failure catalog's runs_dir_full).
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
REMOTE_PACKAGE = PROJECT_ROOT / "remote"
SOURCE_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file()
# conf/ in the checkout; a wheel installs it as orchestrator/conf (no top-level `conf` to collide with).
CONF_DIR = PROJECT_ROOT / "conf" if SOURCE_CHECKOUT else PACKAGE_DIR / "conf"
_START_DIR = Path.cwd()
NO_SPACE = "No space left on device"   # in every message of a write that found no room (the catalog matches it)
# Free bytes a run needs in the local runs dir to start: its run dir's records (~0.1 MB with the demo pair and
# num_prompts=1, more with its log), RESERVE, MLflow's rows and artifact copies (~0.3 MB), a new database (1.0 MB).
# Below it a run used to die half-way: a traceback, its MLflow run left RUNNING, a 0-byte definitions.md.
START_ROOM = 4 << 20
RESERVE = 256 << 10   # bytes a job sets aside in its run dir as it starts, freed for its closing writes on a full disk


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


def room_here(path: str | os.PathLike) -> tuple[int, int]:
    """(free, total) bytes of this machine's filesystem holding `path` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def no_room_here(path: str | os.PathLike, need: int | None, what: str) -> str:
    """The one line for a write on this machine (a run's local dir, the MLflow database) that found no room."""
    free, total = room_here(path)
    needs = f"needs about {_megabytes(need)}" if need else "found no room"
    return (f"this machine: {NO_SPACE} in {path}: {what} {needs}, {_megabytes(free)} free of "
            f"{_megabytes(total)}; free space there (`df -h {shlex.quote(str(path))}`) or set SPECBENCH_RUNS_DIR to a "
            f"bigger disk")


def room_to_start(path: str | os.PathLike) -> str | None:
    """Why a command that writes runs may not start in the runs dir `path` (None: it may): under START_ROOM free,
    its records, MLflow's rows or a new database would find no room part way, and leave a run half-written."""
    if room_here(path)[0] >= START_ROOM:
        return None
    return no_room_here(path, START_ROOM, "a run's records (run dir, MLflow database and artifacts)")


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
