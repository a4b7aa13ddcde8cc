"""Tables of compared runs: the terminal's (one per comparable group), a sweep parent's markdown and summary.csv.

Contract: `render_tables(rows, title)` is one rich Table per comparable group (orchestrator.tracking.compare_rows),
each titled with what its numbers belong to and, where there are several, what sets it apart; each fits 80 columns
(short headers, GPU names without the vendor, host names without their domain; the model, host and GPU move to the
title when its rows share them) and wraps names at word boundaries at any width it can fit in (60 columns and up). A
speedup is marked `*` where its 95% interval includes 1.0, `?` where it comes from fewer than
remote.noise.MIN_PROMPTS prompts (too few to call anything significant) and `!` where the run's fairness is not `ok`
(unlike paths, or noisy timings); an engine arm's run is marked `†`. The caption leads with the group's answer
(`leader`), gives each run's 95% intervals (`intervals`), names the skipped jobs and says in one line each what the
marks mean for these runs (`said`: how many were noisy, how much, how few prompts). `markdown(rows, title, url)` is
the same for a sweep parent's description; `write_csv(rows, path)` has every column, group and engine included.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

from rich import box
from rich.table import Table

from remote.noise import MIN_PROMPTS, too_few

from .cells import Words
from .compare_rows import METRICS, values_of, comparable, context, differs, label

COLUMNS = ("run", "status", "model", "method", "engine", "tree_budget", "temperature", "drafter", "dtype", "dataset",
           "host", "gpu", "date", "group", *METRICS, "fairness", "duplicate_of", "run_id")   # summary.csv, then depths
# The terminal table: (row key, header), chosen to fit 80 columns.
TERMINAL = (("run", "run"), ("host", "host"), ("gpu", "gpu"), ("status", "status"), ("tau", "tau"),
            ("tpot_ms", "ms/tok"), ("speedup_vs_ar", "vs AR"), ("exact_match_vs_ar", "exact"),
            ("tokens_per_s", "tok/s"))
STATUS_SHORT = {"FINISHED": "done", "SKIPPED": "skipped"}
ENGINE_MARK = " †"     # an engine arm's row: the engine's own decoding, its speedup against the engine's own AR
ENGINE_NOTE = "engine arm: the engine's own decoding, its speedup against the same engine without speculation"
NOT_SIGNIFICANT, SMALL, UNTRUSTED = "*", "?", "!"
MARKS = {NOT_SIGNIFICANT: "95% interval of the speedup (vs AR) includes 1.0",
         SMALL: f"fewer than {MIN_PROMPTS} prompts: too few for a 95% interval, nothing is significant",
         UNTRUSTED: "fairness not ok: AR and the method ran unlike paths, or the timings were noisy (the run's tags)"}


_IP = re.compile(r"[\d.]+|.*:.*")   # IPv4 / IPv6: kept whole
_GPU_VENDOR = re.compile(r"\b(NVIDIA|GeForce|Tesla|Quadro) ")


def said(shown: list[dict]) -> list[str]:
    """One line per mark the rows carry, saying what it means for them: how many runs had noisy timings (and how
    noisy), how few prompts, which intervals include 1.0, which rows are an engine's."""
    lines = []
    noisy = [r for r in shown if str(r.get("fairness", "")).startswith("noisy")]
    unlike = [r for r in shown if str(r.get("fairness", "")).startswith("mismatch")]
    if noisy:
        worst = max(noisy, key=lambda r: r.get("timing_noise") or 0.0)["fairness"].removeprefix("noisy: ")
        lines.append(f"{UNTRUSTED} timings noisy in {len(noisy)} of {len(shown)} runs (the worst: {worst}): their "
                     f"speedups cannot be trusted")
    if unlike:
        lines.append(f"{UNTRUSTED} AR and the method ran unlike paths in {len(unlike)} runs (their fairness tag)")
    if few := sorted({int(r["num_prompts"]) for r in shown if small_sample(r)}):
        lines.append(f"{SMALL} sample small: {'/'.join(map(str, few))} prompts a run, too few for a 95% interval "
                     f"({MIN_PROMPTS} needed): nothing here is significant")
    if any(not_significant(r) for r in shown):
        lines.append(f"{NOT_SIGNIFICANT} {MARKS[NOT_SIGNIFICANT]}")
    if engines := values_of(shown, "engine"):
        lines.append(f"{ENGINE_MARK.strip()} {ENGINE_NOTE} ({', '.join(engines)})")
    return lines


def intervals(shown: list[dict], models: list[str]) -> list[str]:
    """`95% intervals: ddtree-b63: tau 2.90-5.31, vs AR 0.63-1.16`, one line a run that has them (the columns have
    no room for them within 80 columns); none for a run of too few prompts, whose spread is no interval (`said`)."""
    lines = []
    for row in (r for r in shown if not too_few(r.get("num_prompts"))):
        parts = [f"{name} {row[f'{key}_ci_low']:.2f}-{row[f'{key}_ci_high']:.2f}"
                 for key, name in (("tau", "tau"), ("speedup_vs_ar", "vs AR"))
                 if row.get(f"{key}_ci_low") is not None and row.get(f"{key}_ci_high") is not None]
        if parts:
            lines.append(f"95% intervals: {_cell(row, 'run', models)}: {', '.join(parts)}")
    return lines


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def small_sample(row: dict) -> bool:
    return row.get("speedup_vs_ar_ci_low") is not None and too_few(row.get("num_prompts"))


def not_significant(row: dict) -> bool:
    low, high = row.get("speedup_vs_ar_ci_low"), row.get("speedup_vs_ar_ci_high")
    return low is not None and high is not None and low <= 1.0 <= high and not small_sample(row)


def untrusted(row: dict) -> bool:
    return bool(row.get("fairness")) and row["fairness"] != "ok"


def marks(row: dict) -> str:
    return "".join(mark for mark, test in ((SMALL, small_sample), (NOT_SIGNIFICANT, not_significant),
                                           (UNTRUSTED, untrusted)) if test(row))


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
    if key == "speedup_vs_ar" and value is not None:
        return _fmt(value) + marks(row)
    return _fmt(value)


def _short_host(host: str) -> str:
    """A host's first label (the full name is in the title and summary.csv); an address kept whole, also after a
    `ray@` (a Ray node)."""
    where, at, name = host.rpartition("@")
    return where + at + (name if _IP.fullmatch(name) else name.split(".")[0])


def leader(rows: list[dict]) -> str | None:
    """`best speedup: ddtree-b32 2.51x vs AR [2.36, 2.66], 125.4 tok/s`: the finished run with the best speedup
    (`fastest:` by tokens/s, without a baseline), its interval read as the sample allows; None when none finished."""
    done = [r for r in rows if r.get("status") == "FINISHED"]
    key = "speedup_vs_ar" if any(r.get("speedup_vs_ar") is not None for r in done) else "tokens_per_s"
    done = [r for r in done if r.get(key) is not None]
    if not done:
        return None
    best = max(done, key=lambda r: r[key])
    name = _cell(best, "run", values_of(rows, "model"))
    speed = f"{_fmt(best.get('tokens_per_s'))} tok/s"
    if key == "tokens_per_s":
        return f"fastest: {name}, {speed}"
    low, high = best.get("speedup_vs_ar_ci_low"), best.get("speedup_vs_ar_ci_high")
    said = f" from {best['num_prompts']:.0f} prompts: too few to tell" if small_sample(best) else \
        " includes 1.0" if not_significant(best) else ""
    interval = f" [{low:.3g}, {high:.3g}]{said}" if low is not None and high is not None else ""
    trust = f" ({best['fairness']})" if untrusted(best) else ""
    return f"best speedup: {name} {best[key]:.3g}x vs AR{interval}, {speed}{trust}"


def _skipped(rows: list[dict], models: list[str]) -> list[str]:
    return [f"{_cell(r, 'run', models)} = {_cell({'run': r['duplicate_name'] or r['duplicate_of']}, 'run', models)}"
            for r in rows if r.get("status") == "SKIPPED"]


def render_table(rows: list[dict], title: str = "runs", apart: str = "") -> Table:
    """One group's runs that ran, one a row (skipped duplicates in the caption), fitting 80 columns."""
    models = values_of(rows, "model")
    shown = [r for r in rows if r.get("status") != "SKIPPED"]
    caption = [line] if (line := leader(rows)) else []
    caption += intervals(shown, models)
    if notes := _skipped(rows, models):
        caption.append("skipped, same effective config: " + "; ".join(notes))
    caption += said(shown)
    head = f"{title}\n{context(rows)}" + (f"\n{apart}" if apart else "")
    table = Table(title=head, header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True,
                  pad_edge=False, caption="\n".join(caption) or None, caption_justify="left")
    columns = [(k, h) for k, h in TERMINAL if k not in ("host", "gpu") or len({r.get(k) for r in shown}) > 1]
    for key, header in columns:   # a host or GPU that all rows share is in the title, as the model is
        table.add_column(header, justify="left" if key in ("run", "host", "gpu", "status") else "right")
    for row in shown:
        table.add_row(*(Words(_cell(row, key, models)) if key in ("run", "host", "gpu", "status") else
                        _cell(row, key, models) for key, _ in columns))
    return table


def render_tables(rows: list[dict], title: str = "runs") -> list[Table]:
    """One table per comparable group: a speedup or tau is read against its own group's runs only."""
    groups = comparable(rows)
    keys = differs(groups)
    if len(groups) == 1:
        return [render_table(rows, title)]
    return [render_table(group, f"{title}: setup {i} of {len(groups)}", label(group, keys))
            for i, group in enumerate(groups, start=1)]


def markdown(rows: list[dict], title: str, url: str, limit: int = 8000) -> str:
    """The tables as markdown (a sweep parent's description): context, one row per run that ran, the skipped ones
    with the run that holds their result, and a link to MLflow's comparison of them; within `limit` characters."""
    groups = comparable(rows)
    keys = differs(groups)
    text = f"**{title}**: {context(rows)}\n\n[Compare them side by side in MLflow]({url}); plots: the artifacts " \
           "(pareto.png: tokens/s against tau, speedup_vs_budget.png, tau_vs_budget.png)."
    for group in groups:
        models = values_of(group, "model")
        answer = leader(group)
        head = [*([f"\n**{label(group, keys)}**"] if len(groups) > 1 else []), *([f"\n**{answer}**"] if answer else []),
                "", "| " + " | ".join(h for _, h in TERMINAL) + " |", "|" + "---|" * len(TERMINAL)]
        lines = [f"| {' | '.join(_cell(r, k, models).replace('|', '/') for k, _ in TERMINAL)} |" for r in group
                 if r.get("status") != "SKIPPED"]
        lines += [f"\nskipped (same effective config): {note}" for note in _skipped(group, models)]
        shown = [r for r in group if r.get("status") != "SKIPPED"]
        lines += [f"\n{line}" for line in said(shown)]
        for line in [*head, *lines]:
            if len(text) + len(line) > limit - 30:
                return text + "\n\n(more in summary.csv)"
            text += "\n" + line
    return text


def write_csv(rows: list[dict], path: Path) -> Path:
    groups = comparable(rows)
    keys = differs(groups)
    group_of = {id(r): label(g, keys) or "all" for g in groups for r in g}
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, "accept_by_depth"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**{c: row.get(c) for c in COLUMNS}, "group": group_of[id(row)],
                             "accept_by_depth": " ".join(f"{v:.4f}" for v in row.get("accept_by_depth", []))})
    return path
