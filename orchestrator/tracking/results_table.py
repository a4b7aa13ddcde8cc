"""The summary printed at the end of a run: headline metrics with their intervals, whether the comparison with AR
was fair, and how far its numbers can be trusted.

Contract: `results_table(metrics, title, fairness)` is a rich Table of SUMMARY_KEYS (then each GPU's peak memory in
GPU order, and with repeats the standard deviation across them). `speedup_vs_ar` and `tau` carry their 95% interval
where the runner computed one: from fewer than remote.noise.MIN_PROMPTS prompts it is marked as too small a sample
and never called significant; otherwise a speedup whose interval includes 1.0 says so ("1.04x [0.97, 1.11]
(includes 1.0: not significant)"). `fairness` (`fairness_of(results)`: from the paths and the noise results.json
records) other than "ok" marks the speedup and adds a row saying why. `trust_lines(metrics, fairness)`: one line for
each reason not to trust the run's figures (unlike paths, noisy timings, a small sample), printed after the table.
Cells wrap at word boundaries. Non-goal: tables across runs (orchestrator.tracking.compare_table).
"""
from __future__ import annotations

from typing import Mapping

from rich.markup import escape
from rich.table import Table

from remote.fairness import verdict
from remote.noise import MIN_PROMPTS, noisy, too_few

from ..untrusted import printable
from .cells import Words

SUMMARY_KEYS = ("tau", "tau_prompt_mean", "tpot_ms", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "tokens_per_s",
                "ttft_ms", "speedup_vs_ar", "exact_match_vs_ar", "divergence_near_tie_share", "ar_tpot_ms",
                "draft_ms", "tree_build_ms", "verify_ms", "commit_ms", "nodes_per_token", "reject_in_tree",
                "auto_budget_mean", "auto_calibration", "timing_noise", "warmup_s", "peak_mem_gb",
                # engine arms: the check against our runner, the engine's own clock, its start
                "ours_tau", "engine_tau_ratio", "engine_tpot_ms", "client_minus_engine_tpot_ms", "server_start_s")
SPREAD_KEYS = ("tokens_per_s", "tpot_ms", "speedup_vs_ar")     # their `_repeat_std`, on one row (80 columns)
NOT_SIGNIFICANT = "(includes 1.0: not significant)"
UNFAIR = "(unfair: see fairness)"
NOISY = "(noisy: see fairness)"


def _prompts(count) -> str:
    return f"{count:.0f} prompt" + ("" if round(count) == 1 else "s")


def small_sample(prompts) -> str:
    return f"({_prompts(prompts)}: too few for a 95% interval, {MIN_PROMPTS} needed)"


def fairness_of(results: Mapping) -> str | None:
    """"ok" / "mismatch: ..." / "noisy: ..." for a run with AR and a method, from the paths and the timing noise its
    results.json records (the runner's verdict where it recorded no paths); None where there is nothing to compare."""
    paths = results.get("paths")
    if isinstance(paths, Mapping) and paths:
        return verdict(paths, str(results.get("method")), noisy(results.get("metrics") or {}))
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
    if low is not None and too_few(metrics.get("num_prompts")):
        text += f" {small_sample(metrics['num_prompts'])}"
    elif low is not None and high is not None and low <= 1.0 <= high:
        text += f" {NOT_SIGNIFICANT}"
    if fairness and fairness.startswith("mismatch"):
        text += f" {UNFAIR}"
    elif fairness and fairness != "ok":
        text += f" {NOISY}"
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
        elif key == "tau":   # its interval from too few prompts: marked as the speedup's, the reason said once
            few = metrics.get("tau_ci_low") is not None and too_few(metrics.get("num_prompts"))
            table.add_row(key, _interval(metrics, key) + (" (too few prompts)" if few else ""))
        else:
            table.add_row(key, _number(metrics[key]))
    spread = [f"{key} {metrics[f'{key}_repeat_std']:.3g}" for key in SPREAD_KEYS if f"{key}_repeat_std" in metrics]
    if spread:
        table.add_row("repeats: sd", ", ".join(spread))
    if fairness:
        table.add_row("fairness", fairness if fairness == "ok" else Words(printable(fairness), "yellow"))
    return table


def trust_lines(metrics: Mapping[str, float], fairness: str | None = None) -> list[str]:
    """One line (rich markup) for each reason the run's figures are not to be trusted, the fix where there is one."""
    lines = []
    if fairness and fairness.startswith("mismatch"):
        what = fairness.removeprefix("mismatch: ").split("; noisy: ")[0]
        lines.append(f"[yellow]warning: fairness: AR and the method did not run on the same path, so speedup_vs_ar "
                     f"compares unlike things: {escape(printable(what))}[/]")
    if (why := noisy(metrics)) is not None:
        lines.append(f"[yellow]timings noisy: {escape(why)}: speedup_vs_ar and tokens/s cannot be trusted "
                     f"(a quieter host, or repeats=3 to average the noise out)[/]")
    prompts = metrics.get("num_prompts")
    if too_few(prompts) and ("speedup_vs_ar" in metrics or "tau_ci_low" in metrics):
        lines.append(f"[yellow]sample small: {_prompts(prompts)}, too few for a 95% interval of speedup_vs_ar "
                     f"and tau ({MIN_PROMPTS} needed: num_prompts={MIN_PROMPTS} or more)[/]")
    return lines
