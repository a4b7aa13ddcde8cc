"""How far a run's numbers can be trusted (remote.noise): the noise a run measures on itself, what the run and the
table say of it, and intervals from too few prompts.

Here from fixed per-prompt times, where the test must know the answer (the spread of AR's time per token, the
verdict's line, the report's); a real run on this box says what its own measured noise is worth in
tests/test_run_record.py.
"""
from __future__ import annotations

import json

from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.run.monitor import Outcome, report
from orchestrator.tracking.results_table import NOISY, fairness_of, results_table, speedup_text, trust_lines
from orchestrator.tracking.tracker import Status, Tracker
from remote.noise import MIN_PROMPTS, NOISE_LIMIT, noise_metrics, noise_tag, noisy, spread, too_few


def test_ar_spread_across_prompts_and_repeats():
    # 3 prompts, 2 repeats: prompt 2 twice as slow as the others; repeats agree within 10%
    tpots = [10.0, 10.0, 20.0, 11.0, 9.0, 22.0]
    m = noise_metrics(tpots, repeats=2, before={"host_load": 0.5}, after={"host_load": 0.75})
    assert abs(m["timing_noise_prompts"] - spread([10.5, 9.5, 21.0])) < 1e-12
    within = [spread([10.0, 11.0]), spread([10.0, 9.0]), spread([20.0, 22.0])]
    assert abs(m["timing_noise_repeats"] - (sum(s * s for s in within) / 3) ** 0.5) < 1e-12
    assert m["timing_noise"] == m["timing_noise_prompts"] > NOISE_LIMIT
    assert (m["host_load_before"], m["host_load_after"]) == (0.5, 0.75)
    assert noisy(m) == f"AR's time per token varied {m['timing_noise']:.0%} across prompts (limit 10%); host load " \
                       f"0.8 per core"
    busy = {**m, "host_load_after": 2.0}     # every core taken: the runner's host work waits at random moments
    assert noisy(busy).endswith("; the host's CPUs were oversubscribed (load 2.0 per core, limit 1)")
    # a speculative method's prompts differ in what they accept: only its repeats measure noise
    alone = noise_metrics(tpots, repeats=2, before={}, after={}, across_prompts=False)
    assert "timing_noise_prompts" not in alone and alone["timing_noise"] == alone["timing_noise_repeats"] < NOISE_LIMIT


def test_a_quiet_run_is_low_and_gpu_trouble_is_said():
    quiet = noise_metrics([10.0, 10.1, 9.9], 1, {}, {})
    assert noisy(quiet) is None and noise_tag(quiet).startswith("low (1.0%")
    busy = {**quiet, "gpu_other_processes_before": 2.0, "gpu_slowdown_after": 1.0}
    assert noisy(busy) == "2 other process(es) on the run's GPUs; the GPU slowed its clocks (thermal or hardware " \
                          "slowdown)"


def test_an_interval_from_too_few_prompts_is_never_called_significant():
    assert too_few(MIN_PROMPTS - 1) and not too_few(MIN_PROMPTS) and not too_few(None)
    small = {"speedup_vs_ar": 0.36, "speedup_vs_ar_ci_low": 0.047, "speedup_vs_ar_ci_high": 0.439, "num_prompts": 2.0}
    text = speedup_text(small)
    assert "too few for a 95% interval" in text and "significant" not in text
    enough = {**small, "num_prompts": float(MIN_PROMPTS), "speedup_vs_ar_ci_high": 1.2}
    assert speedup_text(enough).endswith("(includes 1.0: not significant)")
    assert [line for line in trust_lines(small) if "sample small" in line] and not trust_lines(enough)
    assert "sample small: 1 prompt, too few" in trust_lines({**small, "num_prompts": 1.0})[0]
    console = Console(width=100, record=True)   # tau's interval from 2 prompts is marked in the run's table too
    console.print(results_table({**small, "tau": 2.0, "tau_ci_low": 1.5, "tau_ci_high": 2.5}, "run"))
    assert "2 [1.50, 2.50] (too few prompts)" in console.export_text()


def _results(metrics: dict) -> dict:
    path = {"device": ["cpu"], "gpu_name": ["none"], "dtype": ["float32"], "attn_implementation": ["sdpa"],
            "decode": ["eager"], "compile": ["none"], "kernel_path": ["torch"]}
    return {"method": "ddtree", "metrics": metrics, "paths": {"ar": path, "ddtree": path}, "definitions": {}}


def test_a_noisy_small_run_says_so_in_one_line_each_and_is_tagged(tmp_path):
    metrics = {"tau": 2.5, "speedup_vs_ar": 1.145, "speedup_vs_ar_ci_low": 0.348, "speedup_vs_ar_ci_high": 2.59,
               "num_prompts": 2.0, "ar_tpot_ms": 40.0, "tpot_ms": 35.0,
               **noise_metrics([7.0, 91.0], 1, {"host_load": 3.1}, {"host_load": 2.9})}   # AR 13x apart
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(_results(metrics)))
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "specbench", run_dir=run_dir)
    tracker.start(run_name="noisy", params={"method.name": "ddtree"}, tags={"run_id_local": "noisy"})
    console = Console(width=100, record=True)
    report(Outcome(job=None, status=Status.FINISHED), tracker, run_dir, console, title="noisy")
    text = console.export_text()
    lines = text.splitlines()
    assert sum(line.startswith("timings noisy: AR's time per token varied") for line in lines) == 1
    assert sum(line.startswith("sample small: 2 prompts") for line in lines) == 1
    assert NOISY in " ".join(text.replace("│", " ").split()) and "significant" not in text
    tags = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(tracker.run_id).data.tags
    assert tags["fairness"] == fairness_of(_results(metrics)) == f"noisy: {noisy(metrics)}"
    assert tags["timing_noise"] == f"noisy: {noisy(metrics)}"
