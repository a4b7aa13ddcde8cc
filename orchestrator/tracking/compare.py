"""`specbench compare [REF ...] [--parent ID | --experiment NAME] [--filter F] [--out DIR]`: tables (terminal, CSV)
and plots of runs, one per group of runs that can be compared.

Contract: a REF is a sweep's dir (its jobs as their local records keep them: no MLflow needed), a run's dir, a sweep
parent's MLflow id (its children) or a run's MLflow id; without REFs, the runs of `--parent`'s sweep or of the
experiment (`--filter`: an MLflow search filter). A run or experiment that does not exist, a REF that names nothing,
a parent without children, a filter MLflow cannot parse, no runs at all, or (with --out) more setups than one figure
can hold side by side (compare_plots.Incomparable: what differs) is one line on stderr and exit 1; a missing local
database is never created. The rows, tables and plots are orchestrator.tracking.compare_rows, compare_table and
compare_plots (its `summarize(rows, out_dir)` writes summary.csv and the plots, as a sweep's end does too).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from .compare_plots import Incomparable, summarize
from .compare_rows import rows_of, select_runs
from .compare_table import render_tables
from .tracker import resolve_uri, sqlite_file


def _nothing_found(args) -> str:
    if args.filter:
        return f"compare: no runs match --filter {args.filter!r}"
    if args.parent:
        return (f"compare: run {args.parent} has no child runs: it is not a sweep's parent run (give a sweep's "
                "parent id, or pick runs with --filter)")
    return f"compare: no runs yet in experiment {args.experiment!r}"


def _local(ref: str) -> list | None:
    """The runs a local dir holds, as their records keep them: a sweep's jobs, or one run; None if not a dir of ours."""
    from .records import as_run, job_records
    from .sweeps import SWEEP_RECORD, resolve_skipped
    from .tracker import RECORD

    path = Path(ref).expanduser()
    if (path / SWEEP_RECORD).is_file():
        runs = [as_run(r) for r in job_records(path)]
        resolve_skipped(runs)
        return runs
    if (path / RECORD).is_file():
        return [as_run(json.loads((path / RECORD).read_text()))]
    return None


def _by_id(client, ref: str) -> list:
    """A sweep parent's children or the run, by its MLflow id; SystemExit when MLflow has no such run."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(ref)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise SystemExit(f"compare: {ref!r} is neither a sweep's or a run's dir nor a run id in "
                         f"{client.tracking_uri}") from None
    return select_runs(client, parent=ref) if run.data.tags.get("sweep") == "parent" else [run]


def _runs(args, uri: str) -> list:
    """The runs the command line names (module docstring)."""
    from .tracker import mlflow_client

    runs, ids = [], []
    for ref in args.refs:
        found = _local(ref)
        runs += found if found is not None else []
        ids += [] if found is not None else [ref]
    if not ids and args.refs:
        return runs
    database = sqlite_file(uri)
    if database and not database.exists():   # MLflow would create it (and say so) just to find it empty
        raise SystemExit(f"compare: no runs yet ({database} does not exist)")
    client = mlflow_client(uri)
    if ids:
        return runs + [run for ref in ids for run in _by_id(client, ref)]
    return select_runs(client, args.experiment, args.parent, args.filter)


def _parser() -> argparse.ArgumentParser:
    from ..program import program

    parser = argparse.ArgumentParser(prog=f"{program()} compare", description=__doc__.split("\n")[0])
    parser.add_argument("refs", nargs="*", metavar="REF",
                        help="a sweep's dir, a run's dir, a sweep parent's or a run's MLflow id (several: together)")
    parser.add_argument("--tracking-uri", default=None, help="default: sqlite:///<project>/runs/mlflow.db")
    parser.add_argument("--experiment", default="specbench")
    parser.add_argument("--parent", default=None, help="a sweep's parent run id: compare its children")
    parser.add_argument("--filter", default="", help="an MLflow search filter, e.g. \"params.method.name = 'ddtree'\"")
    parser.add_argument("--out", default=None, help="directory for summary.csv and plots")
    return parser


def main(argv: list[str] | None = None) -> int:
    from mlflow.exceptions import MlflowException

    from .tracker import mlflow_error
    from .ui_links import compare_url, where

    args = _parser().parse_args(argv)
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"compare: --out {args.out} is a file; give a directory (summary.csv and the plots go in it)",
              file=sys.stderr)
        return 1
    uri = resolve_uri(args.tracking_uri)
    try:
        runs = _runs(args, uri)
    except MlflowException as exc:   # the store itself failed: unreachable server, unreadable database
        print(f"compare: cannot read runs from {uri}: {mlflow_error(exc)}", file=sys.stderr)
        return 1
    except SystemExit as exc:
        print(exc.code, file=sys.stderr)
        return 1
    if not runs:
        print(_nothing_found(args), file=sys.stderr)
        return 1
    rows = rows_of(runs)
    console = Console()
    try:
        written = summarize(rows, Path(args.out)) if args.out else []
    except Incomparable as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 1
    for table in render_tables(rows, f"{len(rows)} runs"):
        console.print(table)
    for path in written:
        console.print(f"wrote {path}")
    ran = [r for r in runs if r.data.tags.get("skipped") != "true" and hasattr(r.info, "experiment_id")]
    if ran:   # runs MLflow gave (a sweep's dir read locally has its compare link on its parent)
        url = compare_url(uri, ran[0].info.experiment_id, [r.info.run_id for r in ran])
        console.print(f"compare in MLflow: {where(uri, url)}", soft_wrap=True)
    return 0
