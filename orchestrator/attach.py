"""`python -m orchestrator attach <run dir | run id>`: follow a run that is still going, and finish its logging.

For when the laptop slept or the terminal closed: the runner went on (it runs detached on the host); this
re-opens the host from the run's `job.json`, resumes the tail where the local mirror ends, and then does what
the original command would have done (collect, MLflow status, metrics, artifacts).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from .hosts import make_host
from .lifecycle import Job
from .monitor import Outcome, follow, report
from .paths import runs_dir
from .tracking import Tracker

JOB_FILE = "job.json"


def find_run_dir(ref: str) -> Path:
    path = Path(ref).expanduser()
    if (path / JOB_FILE).is_file():
        return path.resolve()
    for job_file in runs_dir().rglob(JOB_FILE):
        if json.loads(job_file.read_text()).get("run_id") == ref or job_file.parent.name == ref:
            return job_file.parent
    raise SystemExit(f"error: run {ref!r}: no run dir with {JOB_FILE} here or under {runs_dir()}")


def attach(run_dir: Path, console: Console | None = None, fail_fast: bool = True) -> Outcome:
    console = console or Console()
    meta = json.loads((run_dir / JOB_FILE).read_text())
    host = make_host(meta["host"])
    tracker = Tracker(meta.get("tracking_uri"), meta.get("experiment", "specbench"))
    tracker.resume(meta.get("mlflow_run_id"))
    job = Job(host, meta["run_id"], run_dir)
    outcome = Outcome(job)
    # What was already mirrored is scanned too, so the final report covers the whole log.
    log = run_dir / "runner.log"
    if log.exists():
        outcome.detector.feed(log.read_bytes())
    try:
        job.attach()
        console.print(f"[cyan]attached to {meta['run_id']} on {host.name}[/]")
        follow(job, outcome, console, fail_fast=fail_fast, needs_results=meta.get("needs_results", True))
    finally:
        host.close()
    report(outcome, tracker, run_dir, console, title=f"run {meta['run_id']}")
    return outcome


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator attach", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="the run's local directory, its run id, or its directory name")
    parser.add_argument("--no-fail-fast", action="store_true", help="do not stop the run on a fatal signature")
    args = parser.parse_args(argv)
    return attach(find_run_dir(args.run), fail_fast=not args.no_fail_fast).exit_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
