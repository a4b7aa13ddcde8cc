"""`specbench runs [--sweep REF] [--status S] [--model M] [--limit N]`: the recent runs and sweeps of this machine,
newest first, from their local records (no MLflow needed: the runs dir is the truth MLflow mirrors).

Contract: a sweep is one row (its id `<date>/<time>-<tag>`, its status, models, arms and hosts, its best speedup)
and its jobs are not listed beside it; `--sweep REF` (a sweep's dir, its id or its parent's MLflow id) lists that
sweep's jobs instead. A run's row: its id (`run_id_local`: what `show`, `attach` and `compare` take), date, status,
model, arm (its name's words; `†` an engine arm's), host, tau, speedup with its marks
(orchestrator.tracking.compare_table) and tokens/s; a sweep's, its best job's. A model or host the same on every
row is said once, in the title; ids and numbers are never cut. `--status` and `--model` filter (case-insensitive),
`--limit` bounds the rows (default 20). The closing line names the next commands (`show`, `compare`, `resume`). A
`--sweep` that names no sweep is one line, exit 1.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from ..paths import runs_dir
from ..program import program
from .cells import Words
from .compare_rows import row_of
from .compare_table import ENGINE_MARK, marks
from .records import as_run, job_records
from .sweeps import PLANNED_TAG, SWEEP_RECORD, sweep_id
from .tracker import RECORD


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _when(ms) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%m-%d %H:%M") if ms else "?"


def _speedup(row: dict) -> str:
    return "-" if row.get("speedup_vs_ar") is None else f"{row['speedup_vs_ar']:.3g}x{marks(row)}"


def run_entry(record: dict, path: Path) -> dict:
    row = row_of(as_run(record))
    start = record.get("start") or {}
    return {"id": start.get("tags", {}).get("run_id_local") or path.name, "start": start.get("start_time") or 0,
            "status": row["status"], "model": row["model"],
            "arm": row["run"].replace(f"-{row['model']}", "", 1) + (ENGINE_MARK if row["engine"] else ""),
            "host": row["host"], "tau": row["tau"], "speedup": _speedup(row), "tok/s": row["tokens_per_s"],
            "mlflow": (record.get("mlflow_run_id") or "")[:12]}


def sweep_entry(sweep_dir: Path) -> dict:
    record = _read(sweep_dir / SWEEP_RECORD)
    rows = [row_of(as_run(r)) for r in job_records(sweep_dir)]
    end = record.get("end") or {}
    done = [r for r in rows if r["status"] == "FINISHED" and r.get("speedup_vs_ar") is not None]
    best = max(done, key=lambda r: r["speedup_vs_ar"]) if done else {}
    join = lambda key: ", ".join(sorted({str(r[key]) for r in rows if r.get(key)})) or "-"   # noqa: E731
    name = str(best.get("run", "")).replace(f"-{best.get('model')}", "", 1)
    start = record.get("start") or {}
    planned = int(start.get("tags", {}).get(PLANNED_TAG) or len(rows))
    ended = sum(r["status"] in ("FINISHED", "SKIPPED") for r in rows)
    return {"id": sweep_id(sweep_dir), "start": start.get("start_time") or 0,
            "status": end.get("status", "RUNNING"), "model": join("model"),
            "arm": f"sweep, {ended} of {planned} done" + (f", best {name}" if best else ""), "host": join("host"),
            "tau": best.get("tau"), "speedup": _speedup(best), "tok/s": best.get("tokens_per_s"),
            "mlflow": (record.get("mlflow_run_id") or "")[:12]}


def find_sweep(ref: str) -> Path | None:
    """A sweep's dir from its dir, its id (`<date>/<time>-<tag>`) or its parent's MLflow id."""
    path = Path(ref).expanduser()
    if (path / SWEEP_RECORD).is_file():
        return path.resolve()
    if (runs_dir() / "multirun" / ref / SWEEP_RECORD).is_file():
        return runs_dir() / "multirun" / ref
    return next((p.parent for p in (runs_dir() / "multirun").glob(f"*/*/{SWEEP_RECORD}")
                 if _read(p).get("mlflow_run_id") == ref), None)


def entries(sweep: Path | None = None) -> list[dict]:
    """A sweep's jobs, or the runs dir's single runs and sweeps; newest first."""
    if sweep is not None:
        found = [run_entry(_read(p), p.parent) for p in sweep.glob(f"*/{RECORD}") if _read(p).get("start")]
    else:
        root = runs_dir()
        found = [run_entry(_read(p), p.parent) for p in root.glob(f"*/*/{RECORD}")
                 if p.parts[-3] != "multirun" and _read(p).get("start")]
        found += [sweep_entry(p.parent) for p in (root / "multirun").glob(f"*/*/{SWEEP_RECORD}")]
    return sorted(found, key=lambda e: e["start"], reverse=True)


STATUS = {"FINISHED": "done"}


def _table(shown: list[dict], title: str) -> Table:
    """The rows; a column whose value is the same on every row is said once, in the title (what fits 80 columns)."""
    fmt = lambda v: "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)   # noqa: E731
    same = [k for k in ("model", "host") if len(shown) > 1 and len({fmt(e[k]) for e in shown}) == 1]
    said = "; ".join(f"{k} {fmt(shown[0][k])}" for k in same)
    table = Table(title=f"{title}{'; ' + said if said else ''}", box=box.SIMPLE_HEAD, header_style="bold",
                  show_edge=False, pad_edge=False, padding=(0, 0))
    columns = [k for k in ("id", "date", "status", "model", "arm", "host", "tau", "vs AR", "tok/s") if k not in same]
    for name in columns:
        number = name in ("tau", "vs AR", "tok/s")      # never cut, nor an id (it is copied whole); the words wrap
        table.add_column(name, justify="right" if number else "left", no_wrap=number or name in ("id", "status"))
    for e in shown:
        cells = {"id": e["id"], "date": Words(_when(e["start"])),
                 "status": STATUS.get(e["status"], e["status"].lower()),
                 **{k: Words(fmt(e[k])) for k in ("model", "arm", "host")},
                 "tau": fmt(e["tau"]), "vs AR": e["speedup"], "tok/s": fmt(e["tok/s"])}
        table.add_row(*(cells[name] for name in columns))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"{program()} runs", description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", default=None, help="a sweep's dir, id or parent MLflow id: list its jobs")
    parser.add_argument("--status", default=None, help="FINISHED, FAILED, KILLED, RUNNING, SKIPPED")
    parser.add_argument("--model", default=None, help="a model's name (e.g. demo-qwen3)")
    parser.add_argument("--limit", type=int, default=20, help="rows at most (default 20)")
    args = parser.parse_args(argv)
    sweep = find_sweep(args.sweep) if args.sweep else None
    if args.sweep and sweep is None:
        print(f"runs: no sweep {args.sweep!r} under {runs_dir() / 'multirun'} (give its dir, its id or its parent's "
              f"MLflow id)", file=sys.stderr)
        return 1
    found = [e for e in entries(sweep) if (not args.status or e["status"].lower() == args.status.lower())
             and (not args.model or args.model.lower() in e["model"].lower())]
    console = Console()
    if not found:
        console.print(f"no runs under {runs_dir()}" + (" matching the filters" if args.status or args.model else ""))
        return 0
    title = f"sweep {sweep_id(sweep)}: its jobs" if sweep else f"runs and sweeps under {runs_dir()}"
    console.print(_table(found[:args.limit], f"{title} ({min(len(found), args.limit)} of {len(found)}, newest first)"))
    what = f"{program()} compare {sweep}" if sweep else f"{program()} runs --sweep <id> (its jobs)"
    console.print(f"next: {program()} show <id> (texts beside AR's), {what}, {program()} resume <sweep id> "
                  f"(its unfinished jobs)", soft_wrap=True, highlight=False)
    return 0
