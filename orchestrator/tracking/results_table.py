"""The summary printed at the end of a run: headline metrics with their intervals, and whether the comparison with
AR was fair.

Contract: `results_table(metrics, title, fairness)` is a rich Table of SUMMARY_KEYS (then each GPU's peak memory in
GPU order, and with repeats the standard deviation across them). `speedup_vs_ar` and `tau` carry their 95%
interval where the runner computed one, and a speedup whose interval includes 1.0 says so ("1.04x [0.97, 1.11]
(includes 1.0: not significant)"); `fairness` (`fairness_of(results)`: from the paths results.json records)
other than "ok" marks the speedup and adds a row saying what differed. Fits 80 columns (a mismatch's row wraps).
Non-goal: tables across runs (orchestrator.tracking.compare).
"""
from __future__ import annotations

from typing import Mapping

from rich.markup import escape
from rich.table import Table

from remote.fairness import verdict

from ..untrusted import printable

SUMMARY_KEYS = ("tau", "tau_prompt_mean", "tpot_ms", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "tokens_per_s",
                "ttft_ms", "speedup_vs_ar", "exact_match_vs_ar", "ar_tpot_ms", "draft_ms", "tree_build_ms",
                "verify_ms", "commit_ms", "nodes_per_token", "reject_in_tree", "auto_budget_mean", "auto_calibration",
                "warmup_s", "peak_mem_gb",
                # engine arms: the check against our runner, the engine's own clock, its start
                "ours_tau", "engine_tau_ratio", "engine_tpot_ms", "client_minus_engine_tpot_ms", "server_start_s")
SPREAD_KEYS = ("tokens_per_s", "tpot_ms", "speedup_vs_ar")     # their `_repeat_std`, on one row (80 columns)
NOT_SIGNIFICANT = "(includes 1.0: not significant)"
UNFAIR = "(unfair: see fairness)"


def fairness_of(results: Mapping) -> str | None:
    """"ok" / "mismatch: ..." for a run with AR and a method, from the paths its results.json records (the
    runner's verdict where it recorded no paths); None where there is nothing to compare."""
    paths = results.get("paths")
    if isinstance(paths, Mapping) and paths:
        return verdict(paths, str(results.get("method")))
    return results.get("fairness")


def _number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _interval(metrics: Mapping[str, float], key: str, unit: str = "") -> str:
    low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
    text = f"{metrics[key]:.2f}{unit}" if unit else _number(metrics[key])
    if low is None or high is None:
        return text
    return f"{text} [{low:.2f}, {high:.2f}]"


def speedup_text(metrics: Mapping[str, float], fairness: str | None = None) -> str:
    text = _interval(metrics, "speedup_vs_ar", "x")
    low, high = metrics.get("speedup_vs_ar_ci_low"), metrics.get("speedup_vs_ar_ci_high")
    if low is not None and high is not None and low <= 1.0 <= high:
        text += f" {NOT_SIGNIFICANT}"
    if fairness and fairness != "ok":
        text += f" {UNFAIR}"
    return text


def results_table(metrics: Mapping[str, float], title: str, fairness: str | None = None) -> Table:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    gpu = "peak_mem_gb_gpu"
    per_gpu = sorted((k for k in metrics if k.startswith(gpu)), key=lambda k: int(k.removeprefix(gpu)))
    for key in (*SUMMARY_KEYS, *per_gpu):
        if key not in metrics:
            continue
        if key == "speedup_vs_ar":
            table.add_row(key, speedup_text(metrics, fairness))
        elif key == "tau":
            table.add_row(key, _interval(metrics, key))
        else:
            table.add_row(key, _number(metrics[key]))
    spread = [f"{key} {metrics[f'{key}_repeat_std']:.3g}" for key in SPREAD_KEYS if f"{key}_repeat_std" in metrics]
    if spread:
        table.add_row("repeats: sd", ", ".join(spread))
    if fairness:
        table.add_row("fairness", fairness if fairness == "ok" else f"[yellow]{escape(printable(fairness))}[/]")
    return table
