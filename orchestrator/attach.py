"""`python -m orchestrator attach <run dir | run id>`: follow a run that is still going, and finish its logging.

For when the laptop slept or the terminal closed: the runner went on (it runs detached on the host); this
re-opens the host from the run's `job.json`, resumes the tail where the local mirror ends, and then does what
the original command would have done (collect, MLflow status, metrics, artifacts). It says how long the run has
been going by the host's own files (Job.started_at), and the display replays the run's events so far, so its
stage, bars and ETA are the run's, not this command's. `find_run_dir` is the lookup `show` uses too: a run dir,
its run id, its directory name or its MLflow run id.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console

from .hosts import make_host
from .lifecycle import CANCELLED_EXIT, Job
from .monitor import Outcome, follow, report
from .paths import runs_dir
from .progress import clock
from .locks import try_following
from .tracking import Status, Tracker

JOB_FILE = "job.json"
STOP_DOC = ("`python -m orchestrator stop <run dir | run id>`: stop a run's process group on its host (also one "
            "whose orchestrator died) and close its MLflow run KILLED.")


def find_run_dir(ref: str) -> Path:
    path = Path(ref).expanduser()
    if (path / JOB_FILE).is_file():
        return path.resolve()
    for job_file in runs_dir().rglob(JOB_FILE):
        meta = json.loads(job_file.read_text())
        if ref in (meta.get("run_id"), meta.get("mlflow_run_id"), job_file.parent.name):
            return job_file.parent
    raise SystemExit(f"error: run {ref!r}: no run dir with {JOB_FILE} here or under {runs_dir()} (give a run dir, "
                     f"a run id or an MLflow run id)")


def attach(run_dir: Path, console: Console | None = None, fail_fast: bool = True, stop: bool = False) -> Outcome:
    """Follow the run to its end and log it; with `stop`, first stop its process group on the host (KILLED)."""
    console = console or Console()
    meta = json.loads((run_dir / JOB_FILE).read_text())
    host = make_host(meta["host"])
    job = Job(host, meta["run_id"], run_dir)
    outcome = Outcome(job)
    lock = try_following(run_dir)
    if lock is None:   # its orchestrator is alive and follows it: it closes the run itself
        if not stop:
            raise SystemExit(f"error: run {meta['run_id']} is followed by another orchestrator on this machine")
        job.cancel()
        console.print(f"[yellow]stopped {meta['run_id']} on {host.name}; the orchestrator following it closes "
                      f"its run[/]")
        outcome.status, outcome.stopped_by = Status.KILLED, "user"
        return outcome
    with lock:
        tracker = Tracker(meta.get("tracking_uri"), meta.get("experiment", "specbench"), run_dir=run_dir)
        tracker.resume(meta.get("mlflow_run_id"))
        # What was already mirrored is scanned too, so the final report covers the whole log.
        log = run_dir / "runner.log"
        if log.exists():
            outcome.detector.feed(log.read_bytes())
        try:
            job.attach()
            if stop:
                console.print(f"[yellow]stopping {meta['run_id']} on {host.name}[/]")
                job.cancel()
            console.print(f"[cyan]attached to {meta['run_id']} on {host.name}{_age(job.started_at)}[/]")
            follow(job, outcome, console, fail_fast=fail_fast, needs_results=meta.get("needs_results", True))
            if stop and job.exit_code == CANCELLED_EXIT:
                outcome.status, outcome.stopped_by = Status.KILLED, "user"
        finally:
            host.close()
        report(outcome, tracker, run_dir, console, title=f"run {meta['run_id']}")
    return outcome


def _age(started_at: float | None) -> str:
    if started_at is None:
        return ""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started_at))
    return f": {clock(time.time() - started_at)} elapsed since the runner started ({since})"


def main(argv: list[str]) -> int:
    """`attach <run>` or `stop <run>` (argv[0] says which)."""
    command, argv = argv[0], argv[1:]
    what = {"attach": __doc__.split("\n")[0], "stop": STOP_DOC}[command]
    parser = argparse.ArgumentParser(prog=f"python -m orchestrator {command}", description=what)
    parser.add_argument("run", help="the run's local directory, its run id, or its directory name")
    if command == "attach":
        parser.add_argument("--no-fail-fast", action="store_true", help="do not stop the run on a fatal signature")
    args = parser.parse_args(argv)
    return attach(find_run_dir(args.run), fail_fast=not getattr(args, "no_fail_fast", False),
                  stop=command == "stop").exit_status


if __name__ == "__main__":
    sys.exit(main(["attach", *sys.argv[1:]]))
