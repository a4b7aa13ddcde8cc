"""`specbench resume <sweep>`: a sweep's jobs that did not finish, run again under the same parent run.

Contract: `<sweep>` is a sweep's dir, its id (`<date>/<time>-<tag>`) or its parent's MLflow id. `main` runs the
sweep's multirun again as it was given (Hydra's multirun.yaml in the sweep dir: its overrides and config dirs) in
the same sweep dir, with RESUME_ENV set, in this process (exec: its exit status and signals are the sweep's). Under
RESUME_ENV the sweep callback reopens the parent (`reopen`: its record's end cleared, its MLflow run RUNNING again)
and each job (`settled`) that finished before (FINISHED, or a skipped duplicate) returns its result without running,
while one that did not keeps its earlier attempt under `<job>/attempts/<n>/` (`set_aside`) and runs again, its new
run tagged `supersedes` (compare leaves the superseded one out). Refused with one line (exit 1): a sweep that is not
there, one still running (its lock is held), one of an optimising sweeper (its trials are not a fixed grid), one
with nothing left to run.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

RESUME_ENV = "SPECBENCH_RESUME"       # the sweep dir being resumed
ATTEMPTS = "attempts"
FINISHED = ("FINISHED",)


def _record(job_dir: Path) -> dict:
    from ..tracking.tracker import RECORD

    try:
        return json.loads((job_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def settled(job_dir: Path) -> bool:
    """Whether the job in `job_dir` ended well before: FINISHED (a skipped duplicate is FINISHED too)."""
    return (_record(job_dir).get("final") or {}).get("status") in FINISHED


def set_aside(job_dir: Path) -> str | None:
    """Move an unfinished job's earlier attempt into `<job>/attempts/<n>/` (Hydra's own .hydra and log stay: they
    are this attempt's); the MLflow id of the run it superseded, if it had one."""
    old = _record(job_dir).get("mlflow_run_id")
    own = (".hydra", ATTEMPTS, "orchestrator.log")   # Hydra's, written (and open) for this attempt already
    kept = [p for p in job_dir.iterdir() if p.name not in own] if job_dir.is_dir() else []
    if kept:
        target = job_dir / ATTEMPTS / str(len(list((job_dir / ATTEMPTS).glob("*"))) if (job_dir / ATTEMPTS).is_dir()
                                           else 0)
        target.mkdir(parents=True)
        for path in kept:
            shutil.move(str(path), str(target / path.name))
    return old


def reopen(parent) -> None:
    """The sweep's parent record (a Tracker over it) open again: its end and its stop cleared, so that its jobs run
    and the sweep's end closes it anew (`open_again` sets its MLflow run RUNNING)."""
    from ..signals import STOP_MARKER
    from ..tracking.tracker import Step

    (parent.run_dir / STOP_MARKER).unlink(missing_ok=True)   # a signal stopped it before: this run goes on
    parent.record.pop("end", None)
    parent.keep(logged=[s for s in parent.record.get("logged", []) if s != Step.FINAL.value])


def open_again(parent) -> None:
    """The parent's MLflow run RUNNING again (where MLflow has it), then the record sent as at a sweep's start."""
    from ..tracking.tracker import mlflow_client, mlflow_error

    if parent.run_id:
        try:
            mlflow_client(parent.uri).update_run(parent.run_id, status="RUNNING")
        except Exception as exc:   # said by the callback, as an outage at a sweep's start
            parent.warning = f"MLflow at {parent.uri} unavailable ({mlflow_error(exc)})"
            return
    parent.send(quiet=True)


def argv_of(sweep_dir: Path) -> list[str]:
    """The command line that ran the sweep (from its multirun.yaml), into the same sweep dir."""
    from omegaconf import OmegaConf

    saved = OmegaConf.load(sweep_dir / "multirun.yaml").hydra
    dirs = [f"--config-dir={s.path}" for s in saved.runtime.config_sources if s.provider == "command-line"]
    extra = [o for o in saved.overrides.hydra if not o.startswith(("hydra.mode=", "hydra.sweep.dir="))]
    return ["-m", *dirs, *extra, *saved.overrides.task, f"hydra.sweep.dir={sweep_dir}"]


def _refusal(sweep_dir: Path | None, ref: str) -> str | None:
    from omegaconf import OmegaConf

    from ..locks import SWEEP_LOCK, free
    from ..tracking.sweeps import PLANNED_TAG, SWEEP_RECORD

    if sweep_dir is None or not (sweep_dir / "multirun.yaml").is_file():
        return f"resume: no sweep {ref!r} (give its dir, its id or its parent's MLflow id; `specbench runs` lists them)"
    if not free(sweep_dir / SWEEP_LOCK):
        return f"resume: sweep {sweep_dir} is still running (its process holds {SWEEP_LOCK})"
    sweeper = str(OmegaConf.load(sweep_dir / "multirun.yaml").hydra.sweeper.get("_target_", ""))
    if "BasicSweeper" not in sweeper:
        return f"resume: sweep {sweep_dir} ran {sweeper.rsplit('.', 1)[-1]}, whose trials are no fixed grid to finish"
    planned = int(json.loads((sweep_dir / SWEEP_RECORD).read_text())["start"]["tags"].get(PLANNED_TAG) or 0)
    done = sum(settled(p.parent) for p in sweep_dir.glob("*/.hydra"))
    if planned and done >= planned:
        return f"resume: every job of sweep {sweep_dir} finished; nothing to run again"
    return None


def main(argv: list[str]) -> int:
    import argparse

    from ..program import program
    from ..tracking.listing import find_sweep

    parser = argparse.ArgumentParser(prog=f"{program()} resume", description=__doc__.split("\n")[0])
    parser.add_argument("sweep", help="a sweep's dir, its id (<date>/<time>-<tag>) or its parent's MLflow id")
    args = parser.parse_args(argv)
    sweep_dir = find_sweep(args.sweep)
    if (why := _refusal(sweep_dir, args.sweep)) is not None:
        print(why, file=sys.stderr)
        return 1
    print(f"resuming sweep {sweep_dir}: its unfinished jobs run again under its parent run", flush=True)
    env = {**os.environ, RESUME_ENV: str(sweep_dir)}
    os.execve(sys.executable, [sys.executable, "-m", "orchestrator", *argv_of(sweep_dir)], env)   # its signals too
