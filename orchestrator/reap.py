"""`python -m orchestrator reap`: close the runs an orchestrator left RUNNING when it died.

A run is orphaned when its MLflow run is RUNNING (or was never opened: its orchestrator died first) and nobody
follows it: `locks.try_following(run_dir)` is an OS file lock that run_job and attach hold while they follow a run,
so it is free once their process is gone (`kill -9`, a closed laptop), whatever it did before. Orphans are settled
by what the host says, not remembered: one whose runner ended (exit code, or its process group gone) is finished as
attach would finish it (the rest of its log, its results, its status from the exit code, or FAILED
runner_vanished); one still running is left, with the command that follows it. A sweep parent whose sweep process
is gone (its lock free, orchestrator.sweep) gets its summary and status once no child of it is left RUNNING.
A run's MLflow run is looked up where its tracking record says (`sync --tracking-uri` moves it there). A run that
cannot be settled now (its host or its MLflow does not answer) gets one warning line and is left as it is; the
others are settled all the same.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .attach import JOB_FILE, attach, one_line, tracking_of
from .commands import program
from .locks import FOLLOW_LOCK, SWEEP_LOCK, free
from .paths import runs_dir
from .tracking import RECORD, sync_command


def orphans(root: Path) -> list[Path]:
    """Run dirs under `root` with a job file whose follow lock is free."""
    return sorted(f.parent for f in root.rglob(JOB_FILE) if free(f.parent / FOLLOW_LOCK))


def reap(root: Path, console: Console) -> int:
    """Settle every orphan under `root`; returns how many runs it closed. One that cannot be settled now (its host
    or its MLflow does not answer, a broken record) gets one warning line, and the next is settled all the same."""
    closed, uris = 0, set()
    for run_dir in orphans(root):
        try:
            closed += _settle(run_dir, uris, console)
        except Exception as exc:
            console.print(f"[yellow]{run_dir}: not reaped: {escape(one_line(exc))}[/]", soft_wrap=True)
    for uri in sorted(uris):
        try:
            closed += _close_parents(uri, console)
        except Exception as exc:
            console.print(f"[yellow]sweeps logged at {uri}: not reaped: {escape(one_line(exc))}[/]",
                          soft_wrap=True)
    return closed


def _settle(run_dir: Path, uris: set[str], console: Console) -> int:
    """Close the orphan in `run_dir` if its runner ended (1), else say why it is left (0); adds its tracking URI
    to `uris`."""
    from .hosts import HostError, make_host
    from .lifecycle import Job
    from .tracking import mlflow_client

    meta = json.loads((run_dir / JOB_FILE).read_text())
    record = json.loads((run_dir / RECORD).read_text()) if (run_dir / RECORD).is_file() else {}
    uri, mlflow_run_id = tracking_of(run_dir, meta)
    if mlflow_run_id:
        status = mlflow_client(uri).get_run(mlflow_run_id).info.status
        uris.add(uri)   # answered: its sweep parents are looked at too
        if status != "RUNNING":
            return 0
    elif record.get("final") is not None:   # its orchestrator reported it; only MLflow missed it
        console.print(f"[yellow]{meta['run_id']}: never reached MLflow; `{sync_command(run_dir)}` "
                      f"logs what it kept[/]")
        return 0
    # else: its orchestrator died before MLflow had the run (it opens in the background): settled like the rest
    try:
        with make_host(meta["host"]) as host:
            alive = Job(host, meta["run_id"], run_dir).running()
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


def _close_parents(uri: str, console: Console) -> int:
    from .sweep import finish_parent
    from .tracking import mlflow_client

    client, closed = mlflow_client(uri), 0
    for exp in client.search_experiments():
        open_parents = "tags.sweep = 'parent' and attributes.status = 'RUNNING'"
        for parent in client.search_runs([exp.experiment_id], open_parents):
            sweep_dir = Path(parent.data.tags.get("sweep_dir") or "/nonexistent")
            children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
            if not free(sweep_dir / SWEEP_LOCK) or any(c.info.status == "RUNNING" for c in children):
                continue
            console.print(f"[cyan]sweep {parent.info.run_id}: its sweep process is gone: closing it[/]")
            client.set_tag(parent.info.run_id, "sweep.reaped", "true")
            finish_parent(uri, parent.info.run_id, sweep_dir)   # its planned jobs without a child never ran
            closed += 1
    return closed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{program()} reap", description=__doc__.split("\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=None, help="where to look (default: the runs dir)")
    args = parser.parse_args(argv)
    console = Console()
    closed = reap((args.runs_dir or runs_dir()).expanduser(), console)
    console.print(f"reap: {closed} run(s) closed")
    return 0
