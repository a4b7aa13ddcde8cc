"""Plots of compared runs, one panel per comparable group (orchestrator.tracking.compare_rows): a line or point is only
ever drawn beside the runs it can be compared with.

Contract: `budget_figure(rows, metric, label)`: `metric` against tree budget, DDTree's fixed budgets as points, a
line joining the runs of one setup (compare_rows.series; the mean where one setup ran a budget twice), every
budget-free run (dflash, ar, tree_budget=auto) as a flat line of its own; each with its 95% interval (bars, or a
band), drawn dashed where it comes from too few prompts; speedup also gets the speedup = 1 line.
`pareto_figure(rows)`: tokens/s against tau, each run labelled with its budget and tied to its own AR (a hollow
marker at tau 1: what its speedup is against; an engine arm's run, `†`, to the engine's own), the Pareto front
drawn. `depth_figure(rows)`: the unconditional per-depth acceptance of each run. Every figure's title says what its
numbers belong to, each panel what sets its group apart. `plot(rows, out_dir)` writes the four PNGs; more groups
than MAX_PANELS is Incomparable, with one line saying what differs; `summarize(rows, out_dir)` writes summary.csv
(compare_table) and the plots.
"""
from __future__ import annotations

from pathlib import Path

from remote.noise import MIN_PROMPTS, too_few

from ..config.arms import AR, DDTree, DFlash, method_named
from .compare_rows import comparable, context, differs, label, series
from .compare_table import ENGINE_MARK, write_csv

MAX_PANELS = 6
MARKERS = ((AR, "s", "tab:green"), (DFlash, "^", "tab:blue"), (DDTree, "o", "tab:orange"))
ENGINE_MARKER = ("D", "tab:purple")   # an engine arm's runs, tied to the engine's own AR
_COLUMNS = 3


class Incomparable(Exception):
    """Rows of more groups than a figure can hold side by side: the message says what sets them apart."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panels(rows: list[dict], height: float = 4.4):
    """(figure, [(axes, group rows, group label)]): one panel per comparable group of the finished rows."""
    groups = comparable(rows)
    if len(groups) > MAX_PANELS:
        raise Incomparable(f"{len(rows)} runs of {len(groups)} setups that differ in {', '.join(differs(groups))}: "
                           f"more than {MAX_PANELS} panels; pick runs with --filter (e.g. \"params.model.name = "
                           f"'{rows[0].get('model') or '...'}'\")")
    keys = differs(groups)
    columns = min(len(groups), _COLUMNS)
    lines = -(-len(groups) // columns)
    fig, axes = _pyplot().subplots(lines, columns, figsize=(6.4 * columns, height * lines), squeeze=False)
    for extra in axes.flat[len(groups):]:
        extra.remove()
    titles = ["\n".join(filter(None, [context(group) if len(groups) > 1 else "", label(group, keys)]))
              for group in groups]
    return fig, list(zip(axes.flat, groups, titles))


def _finished(fig, panels, what: str, rows: list[dict], xlabel: str, ylabel: str, legend_size: int = 8):
    """Every figure's last touches: axis labels, grid, a legend where there is one, each panel's group and the title
    with the runs' context."""
    for ax, group, apart in panels:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if apart:
            ax.set_title(f"{apart} ({len(group)} runs)", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_size)
    title = f"{what}\n{context(rows)}"
    if len(panels) == 1 and not panels[0][2]:
        panels[0][0].set_title(title, fontsize=9)
    else:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def _tree(row: dict) -> bool:
    arm = method_named(row["method"])
    return arm is not None and arm.builds_tree


def _fixed_budget(row: dict) -> bool:
    return _tree(row) and isinstance(row["tree_budget"], int)


def _short(row: dict) -> str:
    model = row.get("model") or ""
    name = str(row["run"]).replace(f"-{model}", "", 1) if model else str(row["run"])
    return name + (ENGINE_MARK if row.get("engine") else "")


def _interval(row: dict, metric: str) -> tuple[float, float] | None:
    low, high = row.get(f"{metric}_ci_low"), row.get(f"{metric}_ci_high")
    return (low, high) if low is not None and high is not None else None


def _few(row: dict, metric: str) -> bool:
    """An interval of `metric` from too few prompts to be read as one (remote.noise.MIN_PROMPTS)."""
    return row.get(f"{metric}_ci_low") is not None and too_few(row.get("num_prompts"))


def _budget_panel(ax, done: list[dict], metric: str) -> list[int]:
    """One group's `metric` against tree budget; returns the budgets drawn."""
    budgets = sorted({r["tree_budget"] for r in done if _fixed_budget(r)})
    # flat lines span the budgets (one budget: an octave either side of it, or they would not show)
    span = [budgets[0], budgets[-1]] if len(budgets) > 1 else [budgets[0] / 2, budgets[0] * 2] if budgets else [1, 2]
    fixed = [r for r in done if _fixed_budget(r) and r.get(metric) is not None]
    for name, mine in series(fixed):     # a line per setup; two runs of one setup at one budget: their mean
        budgets_run = sorted({r["tree_budget"] for r in mine})
        means = {b: [r[metric] for r in mine if r["tree_budget"] == b] for b in budgets_run}
        (line,) = ax.plot(list(means), [sum(v) / len(v) for v in means.values()], "-", label=name)
        for r in mine:
            low, high = _interval(r, metric) or (r[metric], r[metric])
            bars = ax.errorbar([r["tree_budget"]], [r[metric]], yerr=[[r[metric] - low], [high - r[metric]]],
                               fmt="o", color=line.get_color(), capsize=3, mfc="white" if _few(r, metric) else None)
            if _few(r, metric):
                bars[2][0].set_linestyle("--")
    for r in (r for r in done if not _fixed_budget(r) and r.get(metric) is not None):
        (line,) = ax.plot(span, [r[metric]] * 2, "--" if _few(r, metric) else "-", label=_short(r))
        if (found := _interval(r, metric)) is not None:
            ax.fill_between(span, *found, color=line.get_color(), alpha=0.12)
    return budgets


def budget_figure(rows: list[dict], metric: str, label_: str):
    done = [r for r in rows if r["status"] == "FINISHED"]
    fig, panels = _panels(done or rows)
    for ax, group, _ in panels:
        budgets = _budget_panel(ax, [r for r in group if r["status"] == "FINISHED"], metric)
        if metric == "speedup_vs_ar":
            whose = f"; {ENGINE_MARK.strip()} the engine's own" if any(r.get("engine") for r in group) else ""
            ax.axhline(1.0, color="grey", linewidth=1, linestyle=":", label=f"AR, each run's own (speedup = 1{whose})")
        ax.set_xscale("log", base=2)
        if budgets:
            ax.set_xticks(budgets, [str(b) for b in budgets])
            ax.minorticks_off()
    note = f"; dashed: from fewer than {MIN_PROMPTS} prompts" if any(_few(r, metric) for r in done) else ""
    return _finished(fig, panels, f"{label_} against tree budget (95% intervals{note})", rows,
                     "tree budget (nodes)", label_)


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


def _pareto_panel(ax, done: list[dict]) -> None:
    """One group's runs: each point tied to its own AR (hollow, at tau 1; an engine's to the engine's own), the
    front over the group's runs."""
    kinds = [(arm.tag, marker, colour, [r for r in done if not r.get("engine") and method_named(r["method"]) is arm])
             for arm, marker, colour in MARKERS]
    kinds.append((f"engine arms{ENGINE_MARK}", *ENGINE_MARKER, [r for r in done if r.get("engine")]))
    for name, marker, colour, mine in kinds:
        if not mine:
            continue
        for few in (False, True):   # an interval from too few prompts: its bar dashed
            some = [r for r in mine if _few(r, "tau") is few]
            if some:
                ci = [[r["tau"] - (r.get("tau_ci_low") or r["tau"]) for r in some],
                      [(r.get("tau_ci_high") or r["tau"]) - r["tau"] for r in some]]
                bars = ax.errorbar([r["tau"] for r in some], [r["tokens_per_s"] for r in some], xerr=ci, fmt=marker,
                                   capsize=2, label=name if len(some) == len(mine) or not few else None, color=colour)
                if few:
                    bars[2][0].set_linestyle("--")
        for r in mine:
            ax.annotate(_label(r), (r["tau"], r["tokens_per_s"]), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
            if r.get("ar_tokens_per_s") is not None and not r.get("baseline"):
                ax.plot([1.0, r["tau"]], [r["ar_tokens_per_s"], r["tokens_per_s"]], ":", linewidth=0.8, color=colour)
                ax.plot([1.0], [r["ar_tokens_per_s"]], ENGINE_MARKER[0] if r.get("engine") else "s", mfc="white",
                        color=colour)   # our AR a square, an engine's own a diamond
    tied = [r for r in done if r.get("ar_tokens_per_s") is not None and not r.get("baseline")]
    if any(not r.get("engine") for r in tied):
        ax.plot([], [], "s:", mfc="white", color="grey", label="AR beside each run (its speedup = 1)")
    if any(r.get("engine") for r in tied):
        ax.plot([], [], f"{ENGINE_MARKER[0]}:", mfc="white", color=ENGINE_MARKER[1],
                label=f"the engine's own AR beside each engine run{ENGINE_MARK}")
    front = pareto_front([(r["tau"], r["tokens_per_s"]) for r in done])
    if front:   # ringed, and joined where there are several
        ax.plot(*zip(*front), "-o", color="grey", alpha=0.6, linewidth=1, markersize=11, fillstyle="none",
                label="Pareto front")


def pareto_figure(rows: list[dict]):
    """tokens/s against tau, one point per finished run labelled with its budget (ar: tau 1), per group."""
    done = [r for r in rows if r["status"] == "FINISHED" and r.get("tau") is not None
            and r.get("tokens_per_s") is not None]
    fig, panels = _panels(done or rows, height=4.6)
    ids = {id(r) for r in done}
    for ax, group, _ in panels:
        _pareto_panel(ax, [r for r in group if id(r) in ids])
    note = f" (dashed: from fewer than {MIN_PROMPTS} prompts, no 95% interval)" if any(_few(r, "tau") for r in done) \
        else ""
    return _finished(fig, panels, f"tokens/s against tau{note}", rows,
                     "tau (tokens per verify step; 95% interval where known)", "tokens/s")


def depth_figure(rows: list[dict]):
    done = [r for r in rows if r["status"] == "FINISHED" and r["accept_by_depth"]]
    fig, panels = _panels(done or rows)
    ids = {id(r) for r in done}
    for ax, group, _ in panels:
        for r in (r for r in group if id(r) in ids):
            ax.plot(list(range(1, len(r["accept_by_depth"]) + 1)), r["accept_by_depth"], marker=".", label=_label(r))
    return _finished(fig, panels, "acceptance by depth", rows, "depth i",
                     "fraction of steps accepting >= i drafted tokens", legend_size=7)


def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    """speedup_vs_budget.png, tau_vs_budget.png, pareto.png, accept_by_depth.png; Incomparable where the rows are
    more setups than MAX_PANELS; none without rows (a sweep stopped before any job recorded a start)."""
    if not rows:
        return []
    plt = _pyplot()
    figures = {"speedup_vs_budget.png": lambda: budget_figure(rows, "speedup_vs_ar", "speedup vs AR"),
               "tau_vs_budget.png": lambda: budget_figure(rows, "tau", "tau (tokens per verify step)"),
               "pareto.png": lambda: pareto_figure(rows), "accept_by_depth.png": lambda: depth_figure(rows)}
    paths = []
    for name, make in figures.items():
        fig = make()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        paths.append(out_dir / name)
    return paths


def summarize(rows: list[dict], out_dir: Path) -> list[Path]:
    """summary.csv and the plots in `out_dir`; Incomparable (after the CSV) where the rows are too many setups."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_csv(rows, out_dir / "summary.csv"), *plot(rows, out_dir)]
