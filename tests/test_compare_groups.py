"""`compare` on runs of two setups (orchestrator.tracking.compare_rows, compare_table, compare_plots): one table and
one panel per group of comparable runs, every reference line the run's own (AR beside each run, never a mean over
runs), speedup plots with their intervals (dashed from too few prompts), more setups than a figure holds refused in
one line, names wrapped at word boundaries at any width, and a sweep named by its dir or runs by their ids.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer
from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.tracking import compare_plots, compare_rows, compare_table
from orchestrator.tracking.sweeps import SWEEP_RECORD
from orchestrator.tracking.tracker import Status, Tracker

MODEL, HOST, GPU = "demo-qwen3", "gpu1.example.org", "NVIDIA H100 80GB HBM3"
# (method, budget, speedup, ar tokens/s measured beside it): AR's speed differs run to run, as on a real box
JOBS = [("ar", None, None, None), ("dflash", None, 1.6, 12.4), ("ddtree", 15, 1.9, 23.3), ("ddtree", 63, 2.1, 22.0)]


def log_runs(client, exp: str, dtype: str, prompts: int) -> None:
    for method, budget, speedup, ar_speed in JOBS:
        name = {"ar": "ar", "dflash": "dflash-bs16", "ddtree": f"ddtree-b{budget}"}[method] + f"-{MODEL}"
        run = client.create_run(exp, run_name=name, tags={"host": HOST, "gpu": GPU, "dataset": "code",
                                                          "method": method})
        params = {"method.name": method, "model.name": MODEL, "model.dtype": dtype, "temperature": "0.0",
                  **({"tree_budget": str(budget)} if budget else {}),
                  **({"drafter.name": MODEL} if method != "ar" else {})}
        for key, value in params.items():
            client.log_param(run.info.run_id, key, value)
        speed = 20.0 * (speedup or 1.0)
        metrics = {"tau": 1.0 + (speedup or 0), "tau_ci_low": 0.9 + (speedup or 0), "tau_ci_high": 1.1 + (speedup or 0),
                   "tokens_per_s": speed, "num_prompts": float(prompts), "accept_rate_depth_1": 0.6}
        if speedup:
            metrics.update({"speedup_vs_ar": speedup, "speedup_vs_ar_ci_low": speedup - 0.2,
                            "speedup_vs_ar_ci_high": speedup + 0.2, "ar_tokens_per_s": ar_speed})
        for key, value in metrics.items():
            client.log_metric(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id)


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Two setups of one model, host and GPU: float32 from 24 prompts and bfloat16 from 8 (too few)."""
    tmp = tmp_path_factory.mktemp("groups")
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    exp = client.create_experiment("specbench", artifact_location=(tmp / "art").as_uri())
    log_runs(client, exp, "float32", 24)
    log_runs(client, exp, "bfloat16", 8)
    return tmp, client, compare_rows.rows_of(compare_rows.select_runs(client))


@pytest.fixture
def rows(logged):
    return copy.deepcopy(logged[2])


def test_runs_of_two_setups_are_two_tables_each_led_by_its_own_answer(rows):
    groups = compare_rows.comparable(rows)
    assert [sorted({r["dtype"] for r in g}) for g in groups] == [["float32"], ["bfloat16"]]
    assert all(len(g) == 4 for g in groups)          # AR (no drafter) joins the group it matches
    console = Console(width=80, record=True)
    for table in compare_table.render_tables(rows, "8 runs"):
        console.print(table)
    text = console.export_text()
    said = " ".join(text.split())      # captions wrap
    assert "setup 1 of 2" in said and "setup 2 of 2" in said and "dtype bfloat16" in said
    assert said.count("best speedup: ddtree-b63 2.1x vs AR [1.9, 2.3]") == 2
    assert "from 8 prompts: too few to tell" in said and "2.1?" in said     # the bf16 group's 8 prompts
    assert max(len(line) for line in text.splitlines()) <= 80


def test_every_reference_line_is_its_own_runs(rows):
    pareto = compare_plots.pareto_figure(rows)
    assert len(pareto.axes) == 2
    for ax, group in zip(pareto.axes, compare_rows.comparable(rows)):
        ar_points = sorted((tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.get_lines()
                           if line.get_marker() == "s" and line.get_markerfacecolor() == "white"
                           and len(line.get_xdata()) == 1)    # hollow: AR as measured beside a run
        assert ar_points == sorted(((1.0,), (r["ar_tokens_per_s"],)) for r in group if r.get("ar_tokens_per_s"))
        assert not [line for line in ax.get_lines() if "mean" in line.get_label()]
        tau_bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        dashed = [c for c in tau_bars if c.lines[2][0].get_linestyle()[0][1] is not None]
        assert len(dashed) == (len(tau_bars) if group[0]["num_prompts"] < 12 else 0)   # too few prompts: dashed
    speedup = compare_plots.budget_figure(rows, "speedup_vs_ar", "speedup vs AR")
    for ax, group in zip(speedup.axes, compare_rows.comparable(rows)):
        flat = {line.get_label(): set(line.get_ydata()) for line in ax.get_lines() if len(set(line.get_ydata())) == 1
                and line.get_label() != "AR, each run's own (speedup = 1)" and not line.get_label().startswith("_")}
        assert flat == {"dflash-bs16": {1.6}}          # one flat line per budget-free run, at its own value
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == 2                           # each ddtree point carries its interval
        dashed = [c for c in bars if c.lines[2][0].get_linestyle()[0][1] is not None]     # a dash pattern
        assert len(dashed) == (2 if group[0]["num_prompts"] < 12 else 0)    # too few prompts: dashed
    assert "dashed: from fewer than 12 prompts" in speedup._suptitle.get_text()


def test_more_setups_than_a_figure_holds_are_refused_in_one_line(rows, tmp_path):
    many = [{**r, "model": f"m{i}"} for i in range(7) for r in rows[:2]]
    with pytest.raises(compare_plots.Incomparable, match=r"14 runs of 7 setups that differ in model: more than 6"):
        compare_plots.pareto_figure(many)


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_names_wrap_at_word_boundaries_at_any_width(rows, width):
    for row in rows:
        row["run"] += " max_new_tokens=64 num_prompts=8"
    console = Console(width=width, record=True)
    console.print(compare_table.render_tables(rows, "runs")[0])
    words = console.export_text().split()
    for piece in ("ddtree-", "b63", "dflash-", "bs16", "max_new_tokens=", "num_prompts="):   # a name's words
        assert any(piece in word for word in words), (piece, width)      # folded mid-word: `ddtree-b` / `63`


def record(run_dir: Path, name: str, method: str, speedup: float) -> None:
    """A job's local record as the orchestrator keeps it, never sent to MLflow."""
    run_dir.mkdir(parents=True)
    tracker = Tracker(None, "specbench", run_dir=run_dir, away="not in this test")
    tracker.record_start(run_name=name, params={"method.name": method, "model.name": MODEL},
                         tags={"host": HOST, "gpu": GPU, "run_id_local": run_dir.name})
    tracker.finish(Status.FINISHED, {"speedup_vs_ar": speedup, "tau": 3.0, "tokens_per_s": 40.0,
                                     "num_prompts": 24.0}, {}, [])


def test_compare_takes_a_sweeps_dir_and_run_ids(logged, tmp_path):
    sweep = tmp_path / "multirun" / "2026-12-07" / "10-00-00-abcdef"
    sweep.mkdir(parents=True)
    parent = Tracker(None, "specbench", run_dir=sweep, name=SWEEP_RECORD, away="not in this test")
    parent.record_start(run_name="sweep", params={}, tags={"sweep": "parent"})
    for job, (name, method, speedup) in enumerate([("dflash-bs16", "dflash", 1.5), ("ddtree-b63", "ddtree", 2.4)]):
        record(sweep / str(job), name, method, speedup)
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "compare", str(sweep)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 runs" in proc.stdout and "best speedup: ddtree-b63 2.4x" in proc.stdout   # no MLflow needed
    db, client, rows = logged
    ids = [r["run_id"] for r in rows if r["dtype"] == "float32"][:2]
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "compare", *ids, "--tracking-uri",
                           client.tracking_uri], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "2 runs" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "compare", "nonesuch", "--tracking-uri",
                           client.tracking_uri], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("compare: 'nonesuch' is neither") and \
        len(proc.stderr.splitlines()) == 1
    assert compare_plots.summarize(rows, tmp_path / "out")[0].name == "summary.csv"


def test_engine_rows_join_ours_of_the_same_setup_tied_to_the_engines_own_ar(tmp_path):
    """vLLM's DFlash (our drafter) and vLLM without speculation beside our runs of the same model, host, GPU and
    dtype: one group, the engine's rows marked, each engine point tied to the engine's own AR, never to ours."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("specbench", artifact_location=(tmp_path / "art").as_uri())
    log_runs(client, exp, "float32", 24)
    for name, speculative, speedup in (("vllm-dflash", "{'method': 'dflash'}", 1.4), ("vllm", "None", None)):
        run = client.create_run(exp, run_name=f"{name}-{MODEL}", tags={
            "host": HOST, "gpu": GPU, "dataset": "code", "method": name, "engine": "vllm", "engine_version": "0.32.0"})
        params = {"method.name": name, "method.speculative": speculative, "model.name": MODEL,
                  "model.dtype": "float32", "temperature": "0.0", **({"drafter.name": MODEL} if speedup else {})}
        for key, value in params.items():
            client.log_param(run.info.run_id, key, value)
        metrics = {"tokens_per_s": 50.0 * (speedup or 1.0), "num_prompts": 24.0, "ar_tokens_per_s": 50.0,
                   **({"tau": 2.5, "speedup_vs_ar": speedup, "speedup_vs_ar_ci_low": speedup - 0.1,
                       "speedup_vs_ar_ci_high": speedup + 0.1} if speedup else {})}
        for key, value in metrics.items():
            client.log_metric(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id)
    rows = compare_rows.rows_of(compare_rows.select_runs(client))
    (group,) = compare_rows.comparable(rows)
    assert len(group) == 6 and next(r for r in rows if r["method"] == "vllm")["tau"] == 1.0   # its own AR: tau 1
    console = Console(width=80, record=True)
    console.print(compare_table.render_tables(rows, "6 runs")[0])
    said = " ".join(console.export_text().split())
    assert "vllm-dflash †" in said and compare_table.ENGINE_NOTE in said and "(vllm 0.32.0)" in said
    (ax,) = compare_plots.pareto_figure(rows).axes
    hollow = {(line.get_marker(), line.get_ydata()[0]) for line in ax.get_lines()
              if line.get_markerfacecolor() == "white" and len(line.get_xdata()) == 1}
    assert hollow == {("s", 12.4), ("s", 23.3), ("s", 22.0), ("D", 50.0)}   # ours beside ours, the engine's beside it
