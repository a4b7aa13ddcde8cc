"""`python -m orchestrator attach <run dir | run id>`: follow a run that is still going, and finish its logging.

For when the laptop slept or the terminal closed: the runner went on (it runs detached on the host); this re-opens the
host from the run's `job.json`, resumes the tail where the local mirror ends, and then does what the original command
would have done (collect, MLflow status, metrics, artifacts). It says how long the run has been going by the host's own
files (Job.started_at), and the display replays the run's events so far, so its stage, bars and ETA are the run's, not
this command's. `find_run_dir` (orchestrator.tracking.find) is the lookup `show` uses too: a run dir, its run id, its
directory name or its MLflow run id (one that names several runs, as job 0 of two sweeps, is refused with the matches).
`stop` leaves a run whose runner already ended as it is; a host that does not answer is one line (with the `kill` to
type there), never a guess about the runner.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml
from rich.console import Console

from ..config.plan import StallLimits
from ..hosts import HostError
from ..hosts.connect import host_of
from ..locks import try_following
from ..program import program
from ..tracking.find import JOB_FILE, find_run_dir, one_line, tracking_of
from ..tracking.tracker import Status, Tracker
from .job import READ_AT_MOST, Job
from .monitor import Outcome, follow, report
from .progress import clock

STOP_DOC = ("`python -m orchestrator stop <run dir | run id>`: stop a run's process group on its host (also one "
            "whose orchestrator died) and close its MLflow run KILLED.")


def job_of(run_dir: Path, meta: dict) -> Job:
    """The job of a run dir, on the host its job.json names (not yet connected)."""
    return Job(host_of(meta["host"]), meta["run_id"], run_dir)


def follow_again(host_name: str, run_dir: Path) -> str:
    """What to do when the link to a runner's host is lost while it runs."""
    return (f"the runner may still be running on {host_name}: `{program()} attach {run_dir}` follows it again and "
            f"logs the run at its end (`{program()} stop {run_dir}` stops it)")


def attach(run_dir: Path, console: Console | None = None, fail_fast: bool = True, stop: bool = False) -> Outcome:
    """Follow the run to its end and log it; with `stop`, first stop its process group on the host (KILLED).
    HostError if the host does not answer (the runner may well still be going there)."""
    console = console or Console()
    meta = json.loads((run_dir / JOB_FILE).read_text())
    job = job_of(run_dir, meta)
    outcome = Outcome(job)
    with job.host:
        if stop and not job.running():   # nothing to stop: its record stays as it is, and no stale pgid is hit
            code = job.host.read_from(job.files.exit_code, 0).decode().strip() or "none"
            console.print(f"{meta['run_id']} already finished (exit {code}); nothing stopped (if its MLflow run still "
                          f"shows RUNNING, `{program()} reap` closes it)")
            outcome.status = Status.FINISHED
            return outcome
        lock = try_following(run_dir)
        if lock is None:   # its orchestrator is alive and follows it: it closes the run itself, KILLED
            if not stop:
                raise SystemExit(f"error: run {meta['run_id']} is followed by another orchestrator on this machine")
            job.cancel(by="user")
            console.print(f"[yellow]stopped {meta['run_id']} on {job.host.name}; the orchestrator following it "
                          f"closes its run KILLED[/]")
            outcome.status, outcome.stopped_by = Status.KILLED, "user"
            return outcome
        with lock:
            uri, mlflow_run_id = tracking_of(run_dir, meta)
            tracker = Tracker(uri, meta.get("experiment", "specbench"), run_dir=run_dir)
            tracker.resume(mlflow_run_id)
            # What was already mirrored is scanned too, so the final report covers the whole log.
            log = run_dir / "runner.log"
            if log.exists():
                with open(log, "rb") as mirrored:   # in pieces: a log may be gigabytes
                    for piece in iter(lambda: mirrored.read(READ_AT_MOST), b""):
                        outcome.detector.feed(piece)
            job.attach()
            if stop:
                console.print(f"[yellow]stopping {meta['run_id']} on {job.host.name}[/]")
                job.cancel(by="user")
            console.print(f"[cyan]attached to {meta['run_id']} on {job.host.name}{_age(job.started_at)}[/]")
            follow(job, outcome, console, fail_fast=fail_fast, needs_results=meta.get("needs_results", True),
                   stall=_stall_limits(run_dir))
            report(outcome, tracker, run_dir, console, title=f"run {meta['run_id']}")
    return outcome


def _stall_limits(run_dir: Path) -> StallLimits:
    """The stall limits the run was launched with (its config.yaml), conf/config.yaml's where it names none."""
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        cfg = None
    return StallLimits.of(cfg if isinstance(cfg, dict) else None)


def _age(started_at: float | None) -> str:
    if started_at is None:
        return ""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started_at))
    return f": {clock(time.time() - started_at)} elapsed since the runner started ({since})"


def main(argv: list[str]) -> int:
    """`attach <run>` or `stop <run>` (argv[0] says which)."""
    command, argv = argv[0], argv[1:]
    what = {"attach": __doc__.split("\n")[0], "stop": STOP_DOC}[command]
    parser = argparse.ArgumentParser(prog=f"{program()} {command}", description=what)
    parser.add_argument("run", help="the run's local directory, its run id, or its directory name")
    if command == "attach":
        parser.add_argument("--no-fail-fast", action="store_true", help="do not stop the run on a fatal signature")
    args = parser.parse_args(argv)
    run_dir = find_run_dir(args.run)
    try:   # written atomically: damaged only by hand or a bad disk
        meta = json.loads((run_dir / JOB_FILE).read_text())
        why = None if isinstance(meta, dict) and {"host", "run_id"} <= meta.keys() else "no host or run_id in it"
    except (OSError, ValueError) as exc:
        why = one_line(exc)
    if why is not None:
        print(f"error: {run_dir / JOB_FILE} cannot be read ({why}); it says which host runs the run", file=sys.stderr)
        return 2
    try:
        outcome = attach(run_dir, fail_fast=not getattr(args, "no_fail_fast", False), stop=command == "stop")
    except HostError as exc:
        stopping = job_of(run_dir, meta).describe_stop()
        how = (f"; on the host, stop it with `{stopping}`"
               if command == "stop" else f"; try again later: {program()} attach {run_dir}")
        print(f"error: cannot reach the host of run {meta['run_id']}, it may still be running ({one_line(exc)}){how}",
              file=sys.stderr)
        return 1
    return 0 if command == "stop" else outcome.exit_status   # a stop that stopped (or found it ended) succeeded
