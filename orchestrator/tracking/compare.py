"""Compare runs: a table (terminal and CSV) and plots from MLflow runs picked by experiment, parent or filter.

`specbench compare [--parent RUN_ID | --experiment NAME] [--filter "params.method.name = 'ddtree'"] [--out DIR]`
(or `python -m orchestrator compare`). A run or experiment that does not exist, a parent without children, a
filter MLflow cannot parse, or no runs at all is one line on stderr and exit 1; a missing local database is never
created. The sweep summary logged on a multirun's parent run is made by the same functions.
Every title says which model, host, GPU and date its numbers belong to (`context(rows)`). The terminal table fits
80 columns (short headers, GPU names without the vendor, host names without their domain; the model moves to
the title when all rows share it; runs launched apart that would share a name get the params that differ added to
it; a speedup whose 95% interval includes 1.0 is marked `*`, each run's intervals follow the table; an engine arm's
row is marked `†`); summary.csv has every column, host, GPU and engine included, and the skipped duplicates of a
sweep with the run that holds their result. Plots: speedup (with the speedup = 1 line: AR) and tau against tree
budget per method (budget-free methods as flat lines), tokens/s against tau with each run's budget labelled and
the Pareto front drawn (pareto.png), and the unconditional per-depth acceptance of each run.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import re
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from ..config.arms import AR, DDTree, DFlash, method_named
from .tracker import resolve_uri, sqlite_file

METRICS = ("tau", "tau_ci_low", "tau_ci_high", "tpot_ms", "speedup_vs_ar", "speedup_vs_ar_ci_low",
           "speedup_vs_ar_ci_high", "exact_match_vs_ar", "tokens_per_s", "ar_tokens_per_s")
COLUMNS = ("run", "status", "model", "method", "engine", "tree_budget", "temperature", "host", "gpu", "date", *METRICS,
           "duplicate_of", "run_id")   # summary.csv, then accept_by_depth
# The terminal table: (row key, header), chosen to fit 80 columns.
TERMINAL = (("run", "run"), ("host", "host"), ("gpu", "gpu"), ("status", "status"), ("tau", "tau"),
            ("tpot_ms", "ms/tok"), ("speedup_vs_ar", "vs AR"), ("exact_match_vs_ar", "exact"),
            ("tokens_per_s", "tok/s"))
STATUS_SHORT = {"FINISHED": "done", "SKIPPED": "skipped"}
NOT_SIGNIFICANT = "*"
ENGINE_MARK = " †"     # an engine arm's row: the engine's own decoding, its speedup against the engine's own AR
_DEPTH = re.compile(r"accept_rate_depth_(\d+)$")
_IP = re.compile(r"[\d.]+|.*:.*")   # IPv4 / IPv6: kept whole
_GPU_VENDOR = re.compile(r"\b(NVIDIA|GeForce|Tesla|Quadro) ")


def row_of(run) -> dict:
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    skipped = tags.get("skipped") == "true"
    start = run.info.start_time
    method = tags.get("method") or params.get("method.name", "")
    arm = method_named(method, tags)   # None: not one of ours nor an engine (a user's script: our configs unused)
    engine = tags.get("engine")
    row = {
        "run": run.info.run_name or run.info.run_id[:8], "status": "SKIPPED" if skipped else run.info.status,
        "model": params.get("model.name", "") if arm else "", "method": method,
        "engine": f"{engine} {tags.get('engine_version', '')}".strip() if engine else None,
        # Only a tree reads the budget: another method's run under a swept budget is the same run.
        "tree_budget": _budget(params.get("tree_budget", "")) if arm and arm.builds_tree else None,
        "temperature": params.get("temperature", ""), "host": tags.get("host", ""),
        "gpu": tags.get("gpu") or tags.get("gpu_name", ""),
        "date": datetime.datetime.fromtimestamp(start / 1000).strftime("%Y-%m-%d") if start else "",
        "duplicate_of": tags.get("duplicate_of") or tags.get("duplicate_of.name") if skipped else None,
        "duplicate_name": tags.get("duplicate_of.name") if skipped else None, "run_id": run.info.run_id,
    }
    row.update({k: metrics.get(k) for k in METRICS})
    if arm and arm.baseline is True and row["tau"] is None and row["status"] == "FINISHED":
        row["tau"] = 1.0   # AR commits one token per target forward (a run that failed measured nothing)
    if engine and params.get("method.speculative") in (None, "None") and row["tau"] is None \
            and row["status"] == "FINISHED":
        row["tau"] = 1.0   # an engine without speculation: one token per step
    depths = {int(m.group(1)): v for k, v in metrics.items() if (m := _DEPTH.match(k))}
    row["accept_by_depth"] = [depths[d] for d in sorted(depths)]
    return row


def rows_of(runs) -> list[dict]:
    """`row_of` each run; runs that would share a name (two runs launched apart that differ only in, say,
    `model.dtype`) get the params that tell them apart added to it, two at most."""
    rows = [row_of(run) for run in runs]
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if row["status"] != "SKIPPED":   # a skipped duplicate is named by the run it repeats
            groups.setdefault(row["run"], []).append(index)
    for name, members in groups.items():
        params = [runs[i].data.params for i in members]
        apart = sorted(key for key in set().union(*params) if len({p.get(key) for p in params}) > 1)[:2]
        for i, own in zip(members, params):
            if apart:
                rows[i]["run"] = " ".join([name, *(f"{key}={own.get(key, '-')}" for key in apart)])
    return rows


def select_runs(client, experiment: str | None = None, parent: str | None = None, filter_string: str = ""):
    """The runs of `experiment`, or the children of `parent`, matching `filter_string`, oldest first; a parent or
    experiment that does not exist, or a filter MLflow rejects, is a SystemExit with one line."""
    from mlflow.exceptions import MlflowException

    if parent:
        try:
            parent_run = client.get_run(parent)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            raise SystemExit(f"compare: no run with id {parent!r} in {client.tracking_uri}") from None
        exp_ids = [parent_run.info.experiment_id]
        clause = f"tags.mlflow.parentRunId = '{parent}'"
        query = f"{clause} and {filter_string}" if filter_string else clause
    else:
        exp = client.get_experiment_by_name(experiment or "specbench")
        if exp is None:
            known = ", ".join(sorted(e.name for e in client.search_experiments()))
            raise SystemExit(f"compare: no experiment {experiment!r} in {client.tracking_uri} (there: {known})")
        exp_ids, query = [exp.experiment_id], filter_string
    try:
        runs = client.search_runs(exp_ids, filter_string=query, max_results=5000)
    except MlflowException as exc:
        if exc.error_code != "INVALID_PARAMETER_VALUE":
            raise
        raise SystemExit(f"compare: bad --filter {filter_string!r}: {exc.message} "
                         "(e.g. \"params.method.name = 'ddtree'\")") from None
    if parent and not runs and not filter_string and "sweep.overrides" in parent_run.data.params:
        from ..program import program

        raise SystemExit(f"compare: sweep {parent} has no child runs in {client.tracking_uri} (its jobs did not "
                         f"reach MLflow: `{program()} sync <its sweep dir>` logs what they kept)")
    return sorted(runs, key=lambda r: r.info.start_time or 0)


def _nothing_found(args) -> str:
    if args.filter:
        return f"compare: no runs match --filter {args.filter!r}"
    if args.parent:
        return (f"compare: run {args.parent} has no child runs: it is not a sweep's parent run (give a sweep's "
                "parent id, or pick runs with --filter)")
    return f"compare: no runs yet in experiment {args.experiment!r}"


def _values(rows: list[dict], key: str) -> list[str]:
    return sorted({str(r[key]) for r in rows if r.get(key)})


def _joined(values: list[str], what: str) -> str:
    return ", ".join(values) if len(values) <= 2 else f"{len(values)} {what}"


def _hosts(rows: list[dict]) -> list[str]:
    """The hosts that ran; a pool's name list (`pool:a,b`, the tag of a job that never got a host) only where none
    did: beside them it counted as one host more."""
    named = _values(rows, "host")
    return [host for host in named if not host.startswith("pool:")] or named


def context(rows: list[dict]) -> str:
    """`model demo-qwen3, host gpu1 (NVIDIA H200), 2025-06-01`: what the rows' numbers belong to."""
    hosts = _joined(_hosts(rows), "hosts") or "?"
    gpus = _joined(_values(rows, "gpu"), "GPUs") or "?"
    return (f"model {_joined(_values(rows, 'model'), 'models') or '?'}, host {hosts} ({gpus}), "
            f"{_joined(_values(rows, 'date'), 'dates') or '?'}")


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _not_significant(row: dict) -> bool:
    low, high = row.get("speedup_vs_ar_ci_low"), row.get("speedup_vs_ar_ci_high")
    return low is not None and high is not None and low <= 1.0 <= high


def _cell(row: dict, key: str, models: list[str]) -> str:
    value = row.get(key)
    if key == "run":
        name = str(value).replace(f"-{models[0]}", "", 1) if len(models) == 1 else str(value)  # model: in the title
        return name + (ENGINE_MARK if row.get("engine") else "")
    if key == "gpu":
        return _GPU_VENDOR.sub("", str(value or "-"))
    if key == "host" and value:
        return _short_host(str(value))
    if key == "status":
        return STATUS_SHORT.get(str(value), str(value).lower())
    if key == "speedup_vs_ar" and value is not None and _not_significant(row):
        return _fmt(value) + NOT_SIGNIFICANT
    return _fmt(value)


def _short_host(host: str) -> str:
    """A host's first label (the full name is in the title and summary.csv); an address kept whole, also after a
    `ray@` (a Ray node)."""
    where, at, name = host.rpartition("@")
    return where + at + (name if _IP.fullmatch(name) else name.split(".")[0])


ENGINE_NOTE = "engine arm: the engine's own decoding, its speedup against the same engine without speculation"


def leader(rows: list[dict]) -> str | None:
    """`best speedup: ddtree-b32 2.51x vs AR [2.36, 2.66], 125.4 tok/s`: the finished run with the best speedup
    (`fastest:` by tokens/s, without a baseline); None when none finished."""
    done = [r for r in rows if r.get("status") == "FINISHED"]
    key = "speedup_vs_ar" if any(r.get("speedup_vs_ar") is not None for r in done) else "tokens_per_s"
    done = [r for r in done if r.get(key) is not None]
    if not done:
        return None
    best = max(done, key=lambda r: r[key])
    name = _cell(best, "run", _values(rows, "model"))
    speed = f"{_fmt(best.get('tokens_per_s'))} tok/s"
    if key == "tokens_per_s":
        return f"fastest: {name}, {speed}"
    low, high = best.get("speedup_vs_ar_ci_low"), best.get("speedup_vs_ar_ci_high")
    interval = f" [{low:.3g}, {high:.3g}]" + (" includes 1.0" if _not_significant(best) else "") \
        if low is not None and high is not None else ""
    return f"best speedup: {name} {best[key]:.3g}x vs AR{interval}, {speed}"


def intervals(rows: list[dict], models: list[str]) -> list[str]:
    """`95% intervals: ddtree-b63 tau 2.90-5.31, vs AR 0.63-1.16`, one line a run that has one (the columns above
    have no room for them within 80 columns)."""
    lines = []
    for row in rows:
        parts = [f"{label} {row[f'{key}_ci_low']:.2f}-{row[f'{key}_ci_high']:.2f}"
                 for key, label in (("tau", "tau"), ("speedup_vs_ar", "vs AR"))
                 if row.get(f"{key}_ci_low") is not None and row.get(f"{key}_ci_high") is not None]
        if parts:
            lines.append(f"95% intervals: {_cell(row, 'run', models)}: {', '.join(parts)}")
    return lines


def render_table(rows: list[dict], title: str = "runs") -> Table:
    """The runs that ran, one a row (skipped duplicates in the caption), fitting 80 columns."""
    models = _values(rows, "model")
    shown = [r for r in rows if r.get("status") != "SKIPPED"]
    notes = [f"{_cell(r, 'run', models)} = {_cell({'run': r['duplicate_name'] or r['duplicate_of']}, 'run', models)}"
             for r in rows if r.get("status") == "SKIPPED"]
    caption = [line] if (line := leader(rows)) else []
    caption += intervals(shown, models)
    if notes:
        caption.append("skipped, same effective config: " + "; ".join(notes))
    if any(_not_significant(r) for r in shown):
        caption.append(f"{NOT_SIGNIFICANT} 95% interval of the speedup (vs AR) includes 1.0")
    if (engines := _values(shown, "engine")):
        caption.append(f"{ENGINE_MARK.strip()} {ENGINE_NOTE} ({', '.join(engines)})")
    table = Table(title=f"{title}\n{context(rows)}", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                  collapse_padding=True, pad_edge=False, caption="\n".join(caption) or None, caption_justify="left")
    for key, header in TERMINAL:
        table.add_column(header, justify="left" if key in ("run", "host", "gpu", "status") else "right",
                         overflow="fold")
    for row in shown:
        table.add_row(*(_cell(row, key, models) for key, _ in TERMINAL))
    return table


def markdown(rows: list[dict], title: str, url: str, limit: int = 8000) -> str:
    """The table as markdown (a sweep parent's description): context, one row per run that ran, the skipped ones
    with the run that holds their result, and a link to MLflow's comparison of them; within `limit` characters."""
    models = _values(rows, "model")
    answer = leader(rows)
    head = [f"**{title}**: {context(rows)}", "", *([f"**{answer}**", ""] if answer else []),
            f"[Compare them side by side in MLflow]({url}); plots: the artifacts (pareto.png: tokens/s against tau, "
            "speedup_vs_budget.png, tau_vs_budget.png).", "",
            "| " + " | ".join(h for _, h in TERMINAL) + " |", "|" + "---|" * len(TERMINAL)]
    lines = [f"| {' | '.join(_cell(r, k, models).replace('|', '/') for k, _ in TERMINAL)} |" for r in rows
             if r.get("status") != "SKIPPED"]
    lines += [f"\nskipped (same effective config): {_cell(r, 'run', models)} = "
              f"{_cell({'run': r['duplicate_name'] or r['duplicate_of']}, 'run', models)}" for r in rows
              if r.get("status") == "SKIPPED"]
    if any(_not_significant(r) for r in rows if r.get("status") != "SKIPPED"):
        lines.append(f"\n{NOT_SIGNIFICANT}: the 95% interval of the speedup includes 1.0")
    if (engines := _values([r for r in rows if r.get("status") != "SKIPPED"], "engine")):
        lines.append(f"\n{ENGINE_MARK.strip()}: {ENGINE_NOTE} ({', '.join(engines)})")
    text = "\n".join(head)
    for line in lines:
        if len(text) + len(line) > limit - 30:
            return text + "\n\n(more in summary.csv)"
        text += "\n" + line
    return text


def write_csv(rows: list[dict], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, "accept_by_depth"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**{c: row.get(c) for c in COLUMNS},
                             "accept_by_depth": " ".join(f"{v:.4f}" for v in row.get("accept_by_depth", []))})
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finished(fig, ax, what: str, rows: list[dict], xlabel: str, ylabel: str, legend_size: int = 8):
    """Every figure's last touches: axis labels, grid, the title with the runs' context, a legend if any."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.set_title(f"{what}\n{context(rows)}", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def _budget(text: str) -> int | str | None:
    """A ddtree run's tree_budget param: its number, "auto", or None when unreadable."""
    return int(text) if text.isdigit() else "auto" if text == "auto" else None


def _tree(row: dict) -> bool:
    arm = method_named(row["method"])
    return arm is not None and arm.builds_tree


def _fixed_budget(row: dict) -> bool:
    return _tree(row) and isinstance(row["tree_budget"], int)


def budget_figure(rows: list[dict], metric: str, label: str):
    """`metric` against tree budget per method (ddtree with tree_budget=auto as its own flat line, as the
    budget-free methods); speedup also gets the speedup = 1 line (AR)."""
    plt = _pyplot()
    done = [r for r in rows if r["status"] == "FINISHED"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    budgets = sorted({r["tree_budget"] for r in done if _fixed_budget(r)})
    # the flat lines span the budgets swept (one budget: an octave either side of it, or they would not show)
    span = [budgets[0], budgets[-1]] if len(budgets) > 1 else [budgets[0] / 2, budgets[0] * 2] if budgets else [1, 2]
    def series(r: dict) -> str:       # ddtree auto (or bench's auto<max>) is a line of its own
        return r["method"] if not _tree(r) or _fixed_budget(r) else f"{r['method']} {r['tree_budget']}"

    for method in sorted({series(r) for r in done}):
        mine = [r for r in done if series(r) == method and r.get(metric) is not None]
        pts = sorted((r["tree_budget"] if _fixed_budget(r) else 0, r[metric]) for r in mine)
        if pts and not _fixed_budget(mine[0]):
            # Budget-free methods: one flat line at their mean, for reference.
            mean = sum(v for _, v in pts) / len(pts)
            ax.plot(span, [mean, mean], "--", label=method)
        elif pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=method)
    if metric == "speedup_vs_ar":
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":", label="AR (speedup = 1)")
    ax.set_xscale("log", base=2)
    if budgets:
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
    return _finished(fig, ax, f"{label} against tree budget", rows, "tree budget (nodes)", label)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both tau and tokens/s (higher is better on both), by tau."""
    front, best = [], float("-inf")
    for tau, speed in sorted(points, key=lambda p: (-p[0], -p[1])):
        if speed > best:
            front.append((tau, speed))
            best = speed
    return sorted(front)


def _label(row: dict) -> str:
    return f"b={row['tree_budget']}" if _tree(row) else row["method"] + (ENGINE_MARK if row.get("engine") else "")


def pareto_figure(rows: list[dict]):
    """tokens/s against tau, one point per finished run labelled with its budget (ar: tau 1); the line is AR's
    tokens/s as measured beside each method in its own run (what its speedup is against), averaged."""
    plt = _pyplot()
    done = [r for r in rows if r["status"] == "FINISHED" and r.get("tau") is not None
            and r.get("tokens_per_s") is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    groups = [(arm.tag, marker, [r for r in done if not r.get("engine") and method_named(r["method"]) is arm])
              for arm, marker in ((AR, "s"), (DFlash, "^"), (DDTree, "o"))]
    groups.append((f"engine arms{ENGINE_MARK}", "D", [r for r in done if r.get("engine")]))
    for method, marker, mine in groups:
        if not mine:
            continue
        ci = [[r["tau"] - (r.get("tau_ci_low") or r["tau"]) for r in mine],
              [(r.get("tau_ci_high") or r["tau"]) - r["tau"] for r in mine]]
        ax.errorbar([r["tau"] for r in mine], [r["tokens_per_s"] for r in mine], xerr=ci, fmt=marker,
                    capsize=2, label=method)
        for r in mine:
            ax.annotate(_label(r), (r["tau"], r["tokens_per_s"]), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
    front = pareto_front([(r["tau"], r["tokens_per_s"]) for r in done])
    if front:   # ringed, and joined where there are several
        ax.plot(*zip(*front), "-o", color="grey", alpha=0.6, linewidth=1, markersize=11, fillstyle="none",
                label="Pareto front")
    for engines, label, style in ((False, "AR beside the methods, mean (speedup = 1)", ":"),
                                  (True, f"the engine's AR, mean{ENGINE_MARK}", "-.")):
        # our AR and an engine's own are different baselines: one line each, never averaged together
        ar_speeds = [r["ar_tokens_per_s"] for r in done if r.get("ar_tokens_per_s") is not None
                     and bool(r.get("engine")) is engines]
        if ar_speeds:
            ax.axhline(sum(ar_speeds) / len(ar_speeds), color="grey", linestyle=style, linewidth=1, label=label)
    return _finished(fig, ax, "tokens/s against tau", rows,
                     "tau (tokens per verify step; 95% interval where known)", "tokens/s")


def depth_figure(rows: list[dict]):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for r in rows:
        if r["status"] == "FINISHED" and r["accept_by_depth"]:
            depth = range(1, len(r["accept_by_depth"]) + 1)
            ax.plot(list(depth), r["accept_by_depth"], marker=".", label=_label(r))
    return _finished(fig, ax, "acceptance by depth", rows, "depth i",
                     "fraction of steps accepting >= i drafted tokens", legend_size=7)


def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    """speedup_vs_budget.png, tau_vs_budget.png, pareto.png, accept_by_depth.png from finished runs."""
    plt = _pyplot()
    figures = {"speedup_vs_budget.png": budget_figure(rows, "speedup_vs_ar", "speedup vs AR"),
               "tau_vs_budget.png": budget_figure(rows, "tau", "tau (tokens per verify step)"),
               "pareto.png": pareto_figure(rows), "accept_by_depth.png": depth_figure(rows)}
    paths = []
    for name, fig in figures.items():
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        paths.append(out_dir / name)
    return paths


def summarize(rows: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_csv(rows, out_dir / "summary.csv"), *plot(rows, out_dir)]


def main(argv: list[str] | None = None) -> int:
    from mlflow.exceptions import MlflowException

    from ..program import program
    from .tracker import mlflow_client, mlflow_error
    from .ui_links import compare_url, where

    parser = argparse.ArgumentParser(prog=f"{program()} compare", description=__doc__.split("\n")[0])
    parser.add_argument("--tracking-uri", default=None, help="default: sqlite:///<project>/runs/mlflow.db")
    parser.add_argument("--experiment", default="specbench")
    parser.add_argument("--parent", default=None, help="a sweep's parent run id: compare its children")
    parser.add_argument("--filter", default="", help="an MLflow search filter, e.g. \"params.method.name = 'ddtree'\"")
    parser.add_argument("--out", default=None, help="directory for summary.csv and plots")
    args = parser.parse_args(argv)
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"compare: --out {args.out} is a file; give a directory (summary.csv and the plots go in it)",
              file=sys.stderr)
        return 1
    uri = resolve_uri(args.tracking_uri)
    database = sqlite_file(uri)
    if database and not database.exists():   # MLflow would create it (and say so) just to find it empty
        print(f"compare: no runs yet ({database} does not exist)", file=sys.stderr)
        return 1
    try:
        runs = select_runs(mlflow_client(uri), args.experiment, args.parent, args.filter)
    except MlflowException as exc:   # the store itself failed: unreachable server, unreadable database
        print(f"compare: cannot read runs from {uri}: {mlflow_error(exc)}", file=sys.stderr)
        return 1
    if not runs:
        print(_nothing_found(args), file=sys.stderr)
        return 1
    rows = rows_of(runs)
    console = Console()
    console.print(render_table(rows, f"{len(rows)} runs"))
    if args.out:
        for path in summarize(rows, Path(args.out)):
            console.print(f"wrote {path}")
    ran = [r for r in runs if r.data.tags.get("skipped") != "true"]
    if ran:
        url = compare_url(uri, ran[0].info.experiment_id, [r.info.run_id for r in ran])
        console.print(f"compare in MLflow: {where(uri, url)}", soft_wrap=True)
    return 0
