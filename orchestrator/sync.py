"""`python -m orchestrator sync RUN_DIR... [--tracking-uri URI]`: log runs kept locally to MLflow later.

Contract: a run's local record (tracking.json, see orchestrator/tracking.py) holds what its MLflow run should show
and how much of it got there. Sync replays the rest: it finds the MLflow run by the record or by the run's
`run_id_local` tag (so a run the server made while its answer was lost is completed, not duplicated), logs the
params, the metrics with their original timestamps, the tags and artifacts, then the recorded final status; a
sweep child goes under its recorded parent. Syncing again changes nothing: a run fully logged is skipped, and a
replay adds no second param, metric point or run. A directory without a record of its own stands for every run
below it (a sweep's dir, or the whole runs dir). Exit 0 if every run is now in MLflow, 1 otherwise.
Non-goals: runs still going (`attach` follows them and logs them at their end), runs made before records existed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .commands import program
from .tracking import RECORD, Tracker


class SyncError(Exception):
    """A run that cannot be synced (yet); the message says why and what to do."""


def kept_runs(path: Path) -> list[Path]:
    """`path` if it has a record, or else every run dir with a record below it (sorted)."""
    return [path] if (path / RECORD).is_file() else sorted(p.parent for p in path.rglob(RECORD))


def sync_run(run_dir: Path, uri: str | None = None) -> str:
    """Bring one kept run's MLflow run up to its record; returns what was done, raises SyncError if not done."""
    try:
        tracker = Tracker.load(run_dir, uri)
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise SyncError(f"no readable {RECORD} ({type(exc).__name__}: {exc})") from exc
    if tracker.record["final"] is None:
        raise SyncError("no final outcome recorded: the run may still be going; `python -m orchestrator attach "
                        f"{run_dir}` follows it and logs it at its end")
    if tracker.logged:
        return f"already in MLflow at {tracker.uri}: mlflow run {tracker.run_id}"
    try:
        tracker.replay()
    except Exception as exc:  # the server's answer, whatever it is, is the user's to see
        raise SyncError(f"MLflow at {tracker.uri}: {type(exc).__name__}: {exc}") from exc
    return f"logged to MLflow at {tracker.uri}: mlflow run {tracker.run_id} ({tracker.record['final']['status']})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{program()} sync", description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                        help=f"a run's local directory (with {RECORD}), or a directory of runs (a sweep's)")
    parser.add_argument("--tracking-uri", help="log there instead of the tracking URI the run was started with")
    args = parser.parse_args(argv)
    failed = 0
    for path in (p.expanduser().resolve() for p in args.run_dirs):
        if not (found := kept_runs(path)):
            failed += 1
            print(f"{path}: not synced: no {RECORD} in it or below it (a run dir of `python -m orchestrator`)")
        for run_dir in found:
            try:
                print(f"{run_dir}: {sync_run(run_dir, args.tracking_uri)}")
            except SyncError as exc:
                failed += 1
                print(f"{run_dir}: not synced: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
