"""`python -m orchestrator reap`: close the runs an orchestrator left RUNNING when it died.

A run is orphaned when its MLflow run is RUNNING (or was never opened: its orchestrator died first) and nobody follows
it: `locks.try_following(run_dir)` is an OS file lock that a job (orchestrator.sweep.job) and attach hold while they
follow a run, so it is free once their process is gone (`kill -9`, a closed laptop), whatever it did before. Orphans are
settled by what the host says, not remembered: one whose runner ended (exit code, or its process group gone) is finished
as attach would finish it (the rest of its log, its results, its status from the exit code, or FAILED runner_vanished);
one still running is left, with the command that follows it; one whose host is gone for good (a Ray node the cluster
declared dead) is closed FAILED node_lost. A sweep whose process is gone (its lock free) without
recording its end (orchestrator.tracking.sweeps) is closed from its jobs' records once none of them is left running: its
summary and status, KILLED where planned jobs never ran, on its parent where MLflow has one. A run's MLflow run is
looked up where its tracking record says (`sync --tracking-uri` moves it there). A run that cannot be settled now (its
host or its MLflow does not answer) gets one warning line and is left as it is; the others are settled all the same.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..locks import FOLLOW_LOCK, SWEEP_LOCK, free
from ..paths import runs_dir
from ..program import program
from ..tracking.find import JOB_FILE, one_line, tracking_of
from ..tracking.sweeps import SWEEP_RECORD, close_sweep, sweep_id
from ..tracking.tracker import RECORD, Status, Tracker, sync_command
from .attach import attach, job_of


def orphans(root: Path) -> list[Path]:
    """Run dirs under `root` with a job file whose follow lock is free."""
    return sorted(f.parent for f in root.rglob(JOB_FILE) if free(f.parent / FOLLOW_LOCK))


def reap(root: Path, console: Console) -> int:
    """Settle every orphan under `root`; returns how many runs it closed. One that cannot be settled now (its host
    or its MLflow does not answer, a broken record) gets one warning line, and the next is settled all the same."""
    closed = 0
    for run_dir in orphans(root):
        try:
            closed += _settle(run_dir, console)
        except Exception as exc:
            console.print(f"[yellow]{run_dir}: not reaped: {escape(one_line(exc))}[/]", soft_wrap=True)
    for sweep_dir in sorted(r.parent for r in root.rglob(SWEEP_RECORD)):
        try:
            closed += _close_sweep(sweep_dir, console)
        except Exception as exc:
            console.print(f"[yellow]{sweep_dir}: not reaped: {escape(one_line(exc))}[/]", soft_wrap=True)
    return closed


def _settle(run_dir: Path, console: Console) -> int:
    """Close the orphan in `run_dir` if its runner ended (1), else say why it is left (0)."""
    from ..hosts import HostError, HostGone
    from ..tracking.tracker import mlflow_client

    meta = json.loads((run_dir / JOB_FILE).read_text())
    record = json.loads((run_dir / RECORD).read_text()) if (run_dir / RECORD).is_file() else {}
    uri, mlflow_run_id = tracking_of(run_dir, meta)
    if mlflow_run_id:
        status = mlflow_client(uri).get_run(mlflow_run_id).info.status
        if status != "RUNNING":
            return 0
    elif record.get("final") is not None:   # its orchestrator reported it; only MLflow missed it
        console.print(f"[yellow]{meta['run_id']}: never reached MLflow; `{sync_command(run_dir)}` "
                      f"logs what it kept[/]")
        return 0
    # else: its orchestrator died before MLflow had the run (it opens in the background): settled like the rest
    try:
        job = job_of(run_dir, meta)
        with job.host:
            alive = job.running()
    except HostGone:   # a dead Ray node: its runner went with it
        console.print(f"[cyan]{meta['run_id']}: its orchestrator is gone and its host too: closing it[/]")
        attach(run_dir, console)
        return 1
    except HostError as exc:
        console.print(f"[yellow]{meta['run_id']}: host unreachable, left RUNNING ({escape(one_line(exc))})[/]",
                      soft_wrap=True)
        return 0
    if alive:
        console.print(f"[cyan]{meta['run_id']}: still running; follow it: {program()} attach "
                      f"{run_dir}[/]")
        return 0
    console.print(f"[cyan]{meta['run_id']}: its orchestrator is gone and its runner ended: closing it[/]")
    attach(run_dir, console)
    return 1


def _close_sweep(sweep_dir: Path, console: Console) -> int:
    """Close the sweep in `sweep_dir` (1) if its process is gone without recording its end and none of its jobs is
    left running, else 0."""
    from ..tracking.records import job_records

    parent = Tracker.load(sweep_dir, name=SWEEP_RECORD)
    if parent.record.get("end") is not None or not free(sweep_dir / SWEEP_LOCK) \
            or any(r.get("final") is None for r in job_records(sweep_dir)):   # a job still running: said above
        return 0
    console.print(f"[cyan]sweep {sweep_id(sweep_dir)}: its sweep process is gone: closing it[/]")
    close_sweep(parent, Status.KILLED, tags={"sweep.reaped": "true"})   # its planned jobs without a record never ran
    return 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{program()} reap", description=__doc__.split("\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=None, help="where to look (default: the runs dir)")
    args = parser.parse_args(argv)
    console = Console()
    closed = reap((args.runs_dir or runs_dir()).expanduser(), console)
    console.print(f"reap: {closed} run(s) closed")
    return 0
