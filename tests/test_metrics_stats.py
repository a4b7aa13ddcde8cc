"""Statistics of a run: bootstrap intervals (remote.stats) checked against scipy and against cases with a known
answer, TPOT percentiles against numpy, and the `repeats` knob end to end (runner figures recomputed from the
per-prompt values that results.json keeps)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import mean

import numpy as np
import pytest
from rich.console import Console
from scipy import stats as scipy_stats

from orchestrator.tracking.results_table import NOT_SIGNIFICANT, results_table
from remote.errors import SpecError
from remote.noise import MIN_PROMPTS
from remote.runner import run
from remote.stats import percentile, ratio_interval
from tests.runner_fixtures import tiny_spec

ROOT = Path(__file__).resolve().parent.parent


def test_percentile_is_numpys_linear_percentile():
    values = list(np.random.default_rng(3).lognormal(size=37))
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert percentile([4.0], 99) == 4.0


def test_ratio_interval_agrees_with_scipys_paired_percentile_bootstrap():
    rng = np.random.default_rng(11)
    ar = rng.lognormal(1.0, 0.4, size=40)
    method = ar / 1.3 * rng.lognormal(0.0, 0.15, size=40)
    ours = ratio_interval(list(ar), list(method), seed=0)
    theirs = scipy_stats.bootstrap((ar, method), lambda a, m, axis: a.mean(axis) / m.mean(axis), paired=True,
                                   vectorized=True, n_resamples=20000, method="percentile", confidence_level=0.95,
                                   random_state=1).confidence_interval
    width = theirs.high - theirs.low
    assert ours[0] == pytest.approx(theirs.low, abs=0.05 * width)     # Monte Carlo error of two bootstraps
    assert ours[1] == pytest.approx(theirs.high, abs=0.05 * width)


def test_pairing_keeps_what_belongs_to_one_prompt_together():
    """Prompts of very different lengths, the method exactly 1.7x faster on each: paired, every resample's ratio
    is 1.7; the same values with the pairing shuffled are not."""
    ar = [1.0, 9.0, 2.0, 30.0, 4.0, 0.5, 12.0, 7.0]
    method = [a / 1.7 for a in ar]
    low, high = ratio_interval(ar, method, seed=5)
    assert low == pytest.approx(1.7) and high == pytest.approx(1.7)
    low, high = ratio_interval(ar, method[::-1], seed=5)
    assert high - low > 0.5


def test_interval_is_seeded_and_needs_two_prompts():
    rng = np.random.default_rng(2)
    a, b = list(rng.lognormal(size=12)), list(rng.lognormal(size=12))
    assert ratio_interval(a, b, seed=1) == ratio_interval(a, b, seed=1)
    assert ratio_interval(a, b, seed=1) != ratio_interval(a, b, seed=2)
    assert ratio_interval([1.0], [2.0], seed=0) is None
    with pytest.raises(ValueError, match="one of each per prompt"):
        ratio_interval([1.0, 2.0], [1.0], seed=0)


def test_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    covered, trials = 0, 200
    for trial in range(trials):
        ar = rng.gamma(4.0, 2.0, size=25)                 # mean 8
        method = rng.gamma(4.0, 1.0, size=25)             # mean 4: true ratio of means 2
        low, high = ratio_interval(list(ar), list(method), seed=trial)
        covered += low <= 2.0 <= high
    assert 0.88 <= covered / trials <= 0.99, covered


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("repeats")
    results = run(tiny_spec("ddtree", decoding={"repeats": 3}, dataset={"num_prompts": 4}), str(run_dir))
    return results, run_dir


def _per(results, method):
    return [p for p in results["per_prompt"] if p["method"] == method]


def test_repeats_time_every_prompt_again_and_report_the_spread(repeated):
    results, run_dir = repeated
    m = results["metrics"]
    assert m["num_prompts"] == 4 and m["ar_num_prompts"] == 4
    for method in ("ar", "ddtree"):
        per = _per(results, method)
        assert sorted((p["repeat"], p["prompt_index"]) for p in per) == [(r, i) for r in range(3) for i in range(4)]
        prefix = "ar_" if method == "ar" else ""
        speeds = [sum(p["new_tokens"] for p in per if p["repeat"] == r)
                  / sum(p["ttft_ms"] + p["decode_ms"] for p in per if p["repeat"] == r) * 1000 for r in range(3)]
        assert m[f"{prefix}tokens_per_s_repeat_std"] == pytest.approx(np.std(speeds, ddof=1))
        assert m[f"{prefix}tokens_per_s_repeat_min"] == pytest.approx(min(speeds))
        assert m[f"{prefix}tokens_per_s_repeat_max"] == pytest.approx(max(speeds))
        tpots = [p["tpot_ms"] for p in per]
        for q in (50, 90, 99):
            assert m[f"{prefix}tpot_ms_p{q}"] == pytest.approx(np.percentile(tpots, q))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    progress = [e for e in events if e["event"] == "progress" and e["method"] == "ddtree"]
    assert [e["done"] for e in progress] == list(range(1, 13)) and {e["total"] for e in progress} == {12}
    outputs = (run_dir / "outputs.jsonl").read_text().splitlines()
    assert len(outputs) == 8                          # the first repeat's tokens, one line per prompt per method


def test_speedup_and_tau_intervals_from_the_per_prompt_values(repeated):
    """Recomputed from results.json alone: per prompt, AR's and the method's TPOT averaged over the repeats
    (paired), and committed tokens over verify steps summed over them."""
    results, _ = repeated
    m, seed = results["metrics"], 0
    ar, dd = _per(results, "ar"), _per(results, "ddtree")
    tpot = {method: [mean(p["tpot_ms"] for p in per if p["prompt_index"] == i) for i in range(4)]
            for method, per in (("ar", ar), ("ddtree", dd))}
    assert m["speedup_vs_ar"] == pytest.approx(mean(tpot["ar"]) / mean(tpot["ddtree"]))
    assert (m["speedup_vs_ar_ci_low"], m["speedup_vs_ar_ci_high"]) == pytest.approx(
        ratio_interval(tpot["ar"], tpot["ddtree"], seed))
    committed = [sum(p["committed_tokens"] for p in dd if p["prompt_index"] == i) for i in range(4)]
    steps = [sum(p["verify_steps"] for p in dd if p["prompt_index"] == i) for i in range(4)]
    assert m["tau"] == pytest.approx(sum(committed) / sum(steps))
    assert (m["tau_ci_low"], m["tau_ci_high"]) == pytest.approx(ratio_interval(committed, steps, seed))
    speedups = [mean(p["tpot_ms"] for p in ar if p["repeat"] == r) / mean(p["tpot_ms"] for p in dd if p["repeat"] == r)
                for r in range(3)]
    assert m["speedup_vs_ar_repeat_std"] == pytest.approx(np.std(speedups, ddof=1))


def _table_text(metrics) -> str:
    console = Console(width=80, record=True)
    console.print(results_table(metrics, "run"))
    return console.export_text()


def test_results_table_says_whether_the_speedup_interval_includes_one(repeated):
    # its 4 prompts are too few for a 95% interval: the table says so and calls nothing significant
    small = dict(repeated[0]["metrics"])
    low, high = small["speedup_vs_ar_ci_low"], small["speedup_vs_ar_ci_high"]
    text = _table_text({**small, "speedup_vs_ar_ci_high": 1.0 + high})
    assert "(4 prompts:" in text and "too few" in text and NOT_SIGNIFICANT not in text   # the cell wraps
    metrics = {**small, "num_prompts": float(MIN_PROMPTS)}    # as if from enough prompts
    text = _table_text(metrics)
    assert f"{metrics['speedup_vs_ar']:.2f}x [{low:.2f}, {high:.2f}]" in text
    assert (NOT_SIGNIFICANT in text) == (low <= 1.0 <= high)
    # the same run had the method been as fast as AR on some prompts: its interval reaching past 1.0
    text = _table_text({**metrics, "speedup_vs_ar_ci_high": 1.0 + high})
    assert NOT_SIGNIFICANT in text and f"[{low:.2f}, {1.0 + high:.2f}]" in text
    assert f"{metrics['tau']:.4g} [{metrics['tau_ci_low']:.2f}, {metrics['tau_ci_high']:.2f}]" in text


def test_results_table_lists_warmup_then_per_gpu_memory_in_gpu_order():
    metrics = {"tau": 2.5, "peak_mem_gb": 6.0, "peak_mem_gb_gpu10": 0.5, "peak_mem_gb_gpu1": 2.0,
               "peak_mem_gb_gpu0": 3.5, "unlisted_metric": 1.0, "warmup_s": 41.5}
    rows = [line.split("│")[1].strip() for line in _table_text(metrics).splitlines() if line.count("│") == 3]
    assert rows == ["tau", "warmup_s", "peak_mem_gb", "peak_mem_gb_gpu0", "peak_mem_gb_gpu1", "peak_mem_gb_gpu10"]


def test_runner_refuses_zero_repeats(tmp_path):
    with pytest.raises(SpecError, match="repeats >= 1"):
        run(tiny_spec("ar", decoding={"repeats": 0}), str(tmp_path))


def test_cli_refuses_zero_repeats_naming_the_key(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "repeats=0"], capture_output=True, text=True,
                          cwd=ROOT, env=os.environ.copy(), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "repeats" in lines[0] and "from 1 to 100" in lines[0], lines
