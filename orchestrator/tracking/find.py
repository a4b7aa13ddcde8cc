"""A run by reference: a run dir, its run id, its directory name or its MLflow run id.

Contract: `find_run_dir(ref)` returns the run dir (one with JOB_FILE, written at launch) or exits 2 with one line:
a ref that names several runs (job 0 of two sweeps) is refused with the matches; a skipped sweep job, one that never
launched or a sweep itself is named as such with what to give instead. `tracking_of(run_dir, meta)` is where the
run's MLflow run is.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..paths import runs_dir
from ..program import program
from .sweeps import SKIPPED_FILE, SWEEP_RECORD
from .tracker import RECORD

JOB_FILE = "job.json"


def find_run_dir(ref: str) -> Path:
    path = Path(ref).expanduser()
    if (path / JOB_FILE).is_file():
        return path.resolve()
    if (why := _not_a_run(path, ref)) is not None:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)
    found = sorted({f.parent for f in runs_dir().rglob(JOB_FILE) if ref in _names(f)})
    if len(found) > 1:   # e.g. job 0 of two sweeps: picking one would act on a run the user may not mean
        print(f"error: run {ref!r} is ambiguous: {len(found)} runs match ({', '.join(map(str, found))}); give "
              f"one of these dirs", file=sys.stderr)
        raise SystemExit(2)
    if found:
        return found[0]
    if (why := _not_a_run(None, ref)) is not None:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(f"error: run {ref!r}: no run dir with {JOB_FILE} here or under {runs_dir()} (give a run dir, "
                     f"a run id or an MLflow run id)")


def _not_a_run(path: Path | None, ref: str) -> str | None:
    """Why `ref` names something of a sweep that no runner ran, with what to give instead: by its dir `path`, a
    skipped job, one that never launched or the sweep itself; with no dir, a sweep by its parent's MLflow id.
    None if it names none of these."""
    if path is None:
        sweeps = [r.parent for r in runs_dir().rglob(SWEEP_RECORD)
                  if json.loads(r.read_text()).get("mlflow_run_id") == ref]
    elif (path / SKIPPED_FILE).is_file():
        holder = json.loads((path / SKIPPED_FILE).read_text())["duplicate_of"]
        return (f"{ref} is a skipped sweep job: its effective config is job {holder['job']}'s ({holder['name']}), "
                f"whose run holds the result: {holder['run_dir']}")
    elif (path / RECORD).is_file():
        return f"{ref} is a sweep job that never launched: {path / RECORD} says why; there is no runner"
    else:
        sweeps = [path] if (path / SWEEP_RECORD).is_file() else []
    if not sweeps:
        return None
    parent = json.loads((sweeps[0] / SWEEP_RECORD).read_text()).get("mlflow_run_id") or "<its parent run id>"
    return (f"{ref} is a sweep ({sweeps[0]}), not a run: give one of its jobs' dirs (its numbered subdirs); its "
            f"table: {program()} compare --parent {parent}")


def _names(job_file: Path) -> tuple:
    meta = json.loads(job_file.read_text())
    return meta.get("run_id"), meta.get("mlflow_run_id"), job_file.parent.name


def tracking_of(run_dir: Path, meta: dict) -> tuple[str | None, str | None]:
    """(tracking URI, MLflow run id) of a run: its tracking record's, which `sync --tracking-uri` moves, else
    job.json's (a run dir from before the record)."""
    record = json.loads((run_dir / RECORD).read_text()) if (run_dir / RECORD).is_file() else {}
    uri = record.get("tracking_uri") or meta.get("tracking_uri")
    same = uri == meta.get("tracking_uri")   # job.json's run id belongs to job.json's URI only
    return uri, record.get("mlflow_run_id") or (meta.get("mlflow_run_id") if same else None)


def one_line(exc: BaseException) -> str:
    """An error as one line of bounded length (MLflow's and paramiko's run over several, or pages)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]
