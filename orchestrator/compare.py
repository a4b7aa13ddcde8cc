"""Compare runs: a table (terminal and CSV) and plots from MLflow runs picked by experiment, parent or filter.

`python -m orchestrator.compare [--parent RUN_ID | --experiment NAME] [--filter "params.method.name = 'ddtree'"]
[--out DIR]`. The sweep summary logged on a multirun's parent run is made by the same functions.
Plots: speedup and tau against tree budget per method (budget-free methods as flat lines), and the
unconditional per-depth acceptance of each run.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .tracking import resolve_uri

COLUMNS = ("run", "status", "model", "method", "tree_budget", "temperature", "tau", "tpot_ms", "speedup_vs_ar",
           "exact_match_vs_ar", "tokens_per_s")
_DEPTH = re.compile(r"accept_rate_depth_(\d+)$")


def row_of(run) -> dict:
    params, metrics = run.data.params, run.data.metrics
    row = {
        "run": run.info.run_name or run.info.run_id[:8], "status": run.info.status,
        "model": params.get("model.name", ""), "method": params.get("method.name", ""),
        "tree_budget": int(params["tree_budget"]) if params.get("tree_budget", "").isdigit() else None,
        "temperature": params.get("temperature", ""),
    }
    row.update({k: metrics.get(k) for k in COLUMNS if k not in row})
    depths = {int(m.group(1)): v for k, v in metrics.items() if (m := _DEPTH.match(k))}
    row["accept_by_depth"] = [depths[d] for d in sorted(depths)]
    return row


def select_runs(client, experiment: str | None = None, parent: str | None = None, filter_string: str = ""):
    if parent:
        parent_run = client.get_run(parent)
        exp_ids = [parent_run.info.experiment_id]
        clause = f"tags.mlflow.parentRunId = '{parent}'"
        filter_string = f"{clause} and {filter_string}" if filter_string else clause
    else:
        exp = client.get_experiment_by_name(experiment or "specbench")
        if exp is None:
            raise SystemExit(f"error: experiment {experiment!r} does not exist")
        exp_ids = [exp.experiment_id]
    runs = client.search_runs(exp_ids, filter_string=filter_string, max_results=5000)
    return sorted(runs, key=lambda r: r.info.start_time or 0)


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render_table(rows: list[dict], title: str = "runs") -> Table:
    table = Table(title=title, header_style="bold")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col not in ("run", "status", "model", "method") else "left")
    for row in rows:
        table.add_row(*(_fmt(row.get(c)) for c in COLUMNS))
    return table


def write_csv(rows: list[dict], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, "accept_by_depth"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**{c: row.get(c) for c in COLUMNS},
                             "accept_by_depth": " ".join(f"{v:.4f}" for v in row["accept_by_depth"])})
    return path


def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    """speedup_vs_budget.png, tau_vs_budget.png, accept_by_depth.png from finished runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["status"] == "FINISHED"]
    paths = []
    for metric, label in (("speedup_vs_ar", "speedup vs AR"), ("tau", "tau (tokens per verify step)")):
        fig, ax = plt.subplots(figsize=(6, 4))
        budgets = sorted({r["tree_budget"] for r in done if r["tree_budget"] is not None})
        for method in sorted({r["method"] for r in done}):
            pts = sorted((r["tree_budget"], r[metric]) for r in done
                         if r["method"] == method and r.get(metric) is not None and r["tree_budget"] is not None)
            if method != "ddtree" and pts and budgets:
                # Budget-free methods: one flat line at their mean, for reference.
                mean = sum(v for _, v in pts) / len(pts)
                ax.plot([budgets[0], budgets[-1]], [mean, mean], "--", label=method)
            elif pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tree budget (nodes)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        path = out_dir / f"{metric.split('_vs')[0]}_vs_budget.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in done:
        if r["accept_by_depth"]:
            depth = range(1, len(r["accept_by_depth"]) + 1)
            ax.plot(list(depth), r["accept_by_depth"], marker=".", label=f"{r['method']} b={r['tree_budget']}")
    ax.set_xlabel("depth i")
    ax.set_ylabel("fraction of steps accepting >= i drafted tokens")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    path = out_dir / "accept_by_depth.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [*paths, path]


def summarize(rows: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_csv(rows, out_dir / "summary.csv"), *plot(rows, out_dir)]


def main(argv: list[str] | None = None) -> int:
    from mlflow.tracking import MlflowClient

    parser = argparse.ArgumentParser(prog="python -m orchestrator.compare", description=__doc__.split("\n")[0])
    parser.add_argument("--tracking-uri", default=None, help="default: sqlite:///<project>/runs/mlflow.db")
    parser.add_argument("--experiment", default="specbench")
    parser.add_argument("--parent", default=None, help="a sweep's parent run id: compare its children")
    parser.add_argument("--filter", default="", help="an MLflow search filter, e.g. \"params.method.name = 'ddtree'\"")
    parser.add_argument("--out", default=None, help="directory for summary.csv and plots")
    args = parser.parse_args(argv)
    client = MlflowClient(resolve_uri(args.tracking_uri))
    rows = [row_of(r) for r in select_runs(client, args.experiment, args.parent, args.filter)]
    console = Console()
    console.print(render_table(rows, f"{len(rows)} runs"))
    if args.out:
        for path in summarize(rows, Path(args.out)):
            console.print(f"wrote {path}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
