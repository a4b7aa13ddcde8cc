"""The fairness guard: AR and the method must have run on the same device and decode path.

On a CPU both always take the same path inside one run (no graphs, no compile), so the comparison is checked on
the paths recorded by real runs with different settings (attention implementation), compared across the two
results.json files; a run's own verdict is "ok". The orchestrator's side (tag, warning, table mark) gets a run
directory whose AR baseline came from the other run, and a real MLflow database; a README-style run through the
CLI shows the fair case end to end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.run.monitor import Outcome, report
from orchestrator.tracking.results_table import UNFAIR, fairness_of
from orchestrator.tracking.tracker import Status, Tracker
from remote.fairness import FACTS, PathLog, mismatches, verdict
from remote.noise import NOISE_METRICS
from remote.runner import run
from tests.runner_fixtures import tiny_spec


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """(sdpa, eager): ddtree with the sdpa attention implementation, dflash with eager, each with its AR."""
    sdpa = run(tiny_spec("ddtree"), str(tmp_path_factory.mktemp("sdpa")))
    eager = run(tiny_spec("dflash", model={"attn_implementation": "eager"}), str(tmp_path_factory.mktemp("eager")))
    return sdpa, eager


def quiet(results: dict) -> dict:
    """`results` as a quiet machine would have measured them: no timing noise (remote.noise; tests/test_noise.py)."""
    return {**results, "metrics": {k: v for k, v in results["metrics"].items() if k not in NOISE_METRICS}}


def test_a_run_records_its_paths_and_finds_them_equal(two_runs):
    for results in two_runs:
        assert results["fairness"] == fairness_of(results) and verdict(results["paths"], results["method"]) == "ok"
        assert fairness_of(quiet(results)) == "ok"      # a loaded test box may add `noisy: ...` on its own
        assert set(results["paths"]) == {"ar", results["method"]}
        for path in results["paths"].values():
            assert set(path) == set(FACTS) and all(len(values) == 1 for values in path.values())
            assert path["decode"] == ["eager"] and path["device"] == ["cpu"]


def test_paths_of_two_runs_with_different_settings_differ(two_runs):
    sdpa, eager = two_runs
    assert mismatches(sdpa["paths"]["ar"], eager["paths"]["dflash"], "dflash") == [
        "attn_implementation ar=sdpa dflash=eager"]
    assert mismatches(eager["paths"]["ar"], eager["paths"]["dflash"], "dflash") == []
    found = verdict({"ar": sdpa["paths"]["ar"], "dflash": eager["paths"]["dflash"]}, "dflash")
    assert found == "mismatch: attn_implementation ar=sdpa dflash=eager"
    assert verdict(sdpa["paths"], "ar") is None and verdict({"ddtree": sdpa["paths"]["ddtree"]}, "ddtree") is None


def test_a_path_that_changed_during_the_run_is_a_mismatch(two_runs):
    """A method whose generations took two paths (as when a capture fails mid-run) does not compare fairly even
    with an AR that took both as well."""
    sdpa, eager = two_runs
    changed = PathLog()
    for results in (sdpa, eager):
        changed.add({key: values[0] for key, values in results["paths"]["ar"].items()})
    both = changed.as_dict()
    assert both["attn_implementation"] == ["sdpa", "eager"]
    assert mismatches(both, both, "ddtree") == ["attn_implementation ar=sdpa->eager ddtree=sdpa->eager"]


def _report(run_dir: Path, results: dict, db: Path) -> tuple[str, dict]:
    """The orchestrator's end of a run over `results`: (what the terminal showed, the MLflow run's tags)."""
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps(results))
    tracker = Tracker(f"sqlite:///{db}", "specbench", run_dir=run_dir)
    tracker.start(run_name=run_dir.name, params={"method.name": results["method"]},
                  tags={"run_id_local": run_dir.name})
    console = Console(width=80, record=True)
    report(Outcome(job=None, status=Status.FINISHED), tracker, run_dir, console, title=run_dir.name)
    return console.export_text(), MlflowClient(f"sqlite:///{db}").get_run(tracker.run_id).data.tags


def test_orchestrator_warns_tags_and_marks_an_unfair_run(two_runs, tmp_path):
    sdpa, eager = two_runs
    # the dflash run of the eager model, against the AR baseline timed with sdpa in the other run
    unfair = {**quiet(eager), "paths": {"ar": sdpa["paths"]["ar"], "dflash": eager["paths"]["dflash"]}}
    text, tags = _report(tmp_path / "unfair", unfair, tmp_path / "mlflow.db")
    assert tags["fairness"] == "mismatch: attn_implementation ar=sdpa dflash=eager"
    assert "warning: fairness" in text and "attn_implementation ar=sdpa dflash=eager" in " ".join(text.split())
    assert UNFAIR in " ".join(text.replace("│", " ").split())     # the speedup's cell (which may wrap)
    text, tags = _report(tmp_path / "fair", quiet(sdpa), tmp_path / "mlflow.db")
    assert tags["fairness"] == "ok" and "warning: fairness" not in text and "(unfair" not in text


def test_cli_run_logs_fairness_intervals_and_repeats(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "method=ddtree", "num_prompts=3", "max_new_tokens=8",
                           "repeats=2", "host=local"], capture_output=True, text=True, cwd=tmp_path,
                          env=os.environ.copy(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    [logged] = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert logged.data.tags["fairness"] == "ok" or logged.data.tags["fairness"].startswith("noisy: ")
    assert logged.data.tags["timing_noise"].startswith(("low (", "noisy: "))
    assert logged.data.params["repeats"] == "2"
    m = logged.data.metrics
    assert m["speedup_vs_ar_ci_low"] <= m["speedup_vs_ar"] <= m["speedup_vs_ar_ci_high"]
    assert m["tau_ci_low"] <= m["tau"] <= m["tau_ci_high"] and "tokens_per_s_repeat_std" in m
    assert m["nodes_per_token"] > 1 and "reject_in_tree" in m and "accepted_depth_hist_0" in m
    row = next(line for line in proc.stdout.splitlines() if "speedup_vs_ar" in line)
    assert f"[{m['speedup_vs_ar_ci_low']:.2f}, {m['speedup_vs_ar_ci_high']:.2f}]" in row
