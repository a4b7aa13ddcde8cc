"""`python -m orchestrator sync RUN_DIR... [--tracking-uri URI]`: log runs kept locally to MLflow later.

Contract: a run's local record (tracking.json, see orchestrator.tracking.tracker) holds what its MLflow run should
show and how much of it got there. Sync replays the rest: it finds the MLflow run by the record or by the run's
`run_id_local` tag (so a run the server made while its answer was lost is completed, not duplicated), logs the
params, the metrics with their original timestamps, the tags and artifacts, then the recorded final status. A
sweep's job goes under its sweep's parent, which sync finds the same way (the parent's record in the sweep dir,
orchestrator.tracking.sweeps; its `run_id_local` tag) or makes, also at a new URI and for jobs logged before their
parent was; once every job of a sweep that has ended is in MLflow, the sweep's summary is logged on the parent and the
parent closed with the sweep's status. Syncing again changes nothing: a run fully logged is skipped, and a replay
adds no second param, metric point or run. A directory without a record of its own stands for every run below
it (a sweep's dir, or the whole runs dir). Exit 0 if every run is now in MLflow, 1 otherwise.
Non-goals: runs and sweeps still going (`attach` follows a run and logs it at its end; a sweep logs its own
summary), runs made before records existed.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..program import program
from .tracker import RECORD, Tracker, mlflow_client, mlflow_error


class SyncError(Exception):
    """A run that cannot be synced (yet); the message says why and what to do."""


def kept_runs(path: Path) -> list[Path]:
    """`path` if it has a record, or else every run dir with a record below it (sorted)."""
    return [path] if (path / RECORD).is_file() else sorted(p.parent for p in path.rglob(RECORD))


def sync_run(run_dir: Path, uri: str | None = None, parent: str | None = None) -> str:
    """Bring one kept run's MLflow run up to its record, under the sweep parent `parent` (an MLflow run id at the
    URI it is logged to) if given; returns what was done, raises SyncError if not done."""
    try:
        tracker = Tracker.load(run_dir, uri)
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise SyncError(f"no readable {RECORD} ({type(exc).__name__}: {exc})") from exc
    if tracker.record["final"] is None:
        raise SyncError("no final outcome recorded: the run may still be going; `python -m orchestrator attach "
                        f"{run_dir}` follows it and logs it at its end")
    moved = parent is not None and tracker.adopt(parent)
    if tracker.logged and not moved:
        return f"already in MLflow at {tracker.uri}: mlflow run {tracker.run_id}"
    try:
        tracker.replay()
        if moved:   # a run logged before its parent was (MLflow was away at the sweep's start)
            mlflow_client(tracker.uri).set_tag(tracker.run_id, "mlflow.parentRunId", parent)
    except Exception as exc:  # the server's answer, whatever it is, is the user's to see
        raise SyncError(f"MLflow at {tracker.uri}: {mlflow_error(exc)}") from exc
    return f"logged to MLflow at {tracker.uri}: mlflow run {tracker.run_id} ({tracker.record['final']['status']})"


def sync_sweep(sweep_dir: Path, run_dirs: list[Path], uri: str | None = None) -> int:
    """Bring the sweep's MLflow parent up to its record (found by its local id, or made), then `run_dirs` (its
    jobs) under it, then, once every job of it is in MLflow and the sweep has ended, its summary and status;
    prints a line each, returns how many of those failed."""
    from ..locks import SWEEP_LOCK, free
    from .sweeps import SWEEP_RECORD, close_sweep

    try:
        parent = Tracker.load(sweep_dir, uri, SWEEP_RECORD)
        if parent.record.get("end") is None and not free(sweep_dir / SWEEP_LOCK):
            raise SyncError("the sweep is still running (its process holds the sweep's lock); it logs its own "
                            "summary at its end")
        try:
            parent.replay()
        except Exception as exc:
            raise SyncError(f"MLflow at {parent.uri}: {mlflow_error(exc)}") from exc
    except SyncError as exc:
        print(f"{sweep_dir}: not synced: {exc}")
        return 1 + len(run_dirs)
    failed = sum(_report(run_dir, lambda d=run_dir: sync_run(d, uri, parent.run_id)) for run_dir in run_dirs)
    if parent.logged:
        print(f"{sweep_dir}: sweep already in MLflow at {parent.uri}: mlflow run {parent.run_id}")
    elif failed:
        print(f"{sweep_dir}: sweep summary not logged yet: {failed} of its jobs not synced")
    else:
        close_sweep(parent)   # as its end was recorded; with none (its process died): KILLED, as reap closes it
        if not parent.logged:
            return 1   # close_sweep said why
        print(f"{sweep_dir}: sweep logged to MLflow at {parent.uri}: mlflow run {parent.run_id} "
              f"({parent.record['end']['status']})")
    return failed


def _report(run_dir: Path, sync) -> int:
    """Print what `sync()` did to the run in `run_dir`; 1 if it failed."""
    try:
        print(f"{run_dir}: {sync()}")
        return 0
    except SyncError as exc:
        print(f"{run_dir}: not synced: {exc}")
        return 1


def main(argv: list[str]) -> int:
    from .sweeps import SWEEP_RECORD

    parser = argparse.ArgumentParser(prog=f"{program()} sync", description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                        help=f"a run's local directory (with {RECORD}), or a directory of runs (a sweep's)")
    parser.add_argument("--tracking-uri", help="log there instead of the tracking URI the run was started with")
    args = parser.parse_args(argv)
    failed = 0
    for path in (p.expanduser().resolve() for p in args.run_dirs):
        if not (found := kept_runs(path)):
            failed += 1
            why = f"no {RECORD} in it or below it (a run dir of `{program()}`)" if path.is_dir() else \
                "no such directory"
            print(f"{path}: not synced: {why}")
        sweeps = sorted({d.parent for d in found if (d.parent / SWEEP_RECORD).is_file()})
        for run_dir in (d for d in found if d.parent not in sweeps):
            failed += _report(run_dir, lambda d=run_dir: sync_run(d, args.tracking_uri))
        for sweep_dir in sweeps:
            failed += sync_sweep(sweep_dir, [d for d in found if d.parent == sweep_dir], args.tracking_uri)
    return 1 if failed else 0
