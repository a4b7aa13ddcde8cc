"""README-style runs through `python -m orchestrator` on the Local host, logged to a real MLflow database."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

SMALL = ["num_prompts=2", "max_new_tokens=8", "host=local"]


def run_cli(args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=600)


def only_run(db: Path):
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("specbench")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    return client, runs[0]


def test_ddtree_run_logs_params_metrics_artifacts(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_cli(["method=ddtree", "tree_budget=64", *SMALL, "max_new_tokens=32"], cwd=elsewhere)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client, run = only_run(tmp_path / "runs" / "mlflow.db")
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["method.name"] == "ddtree" and params["tree_budget"] == "64" and params["gpus.0"] == "0"
    assert params["model.path"] == "assets:models/demo-qwen3"          # the embedded default, trained
    for name in ("tau", "tau_prompt_mean", "accept_rate_depth_1", "tokens_per_s", "tpot_ms", "ttft_ms",
                 "speedup_vs_ar", "draft_ms", "tree_build_ms", "verify_ms", "commit_ms", "peak_mem_gb",
                 "exact_match_vs_ar", "ar_tpot_ms"):
        assert name in run.data.metrics, name
    assert run.data.metrics["exact_match_vs_ar"] == 1.0
    assert run.data.metrics["tau"] >= 2.0      # a trained pair accepts drafts (random weights: tau ~1)
    tags = run.data.tags
    for tag in ("method", "host", "torch_version", "transformers_version", "kernel_path", "project_commit"):
        assert tag in tags, tag
    assert tags["decode_path"] == "eager (not on CUDA)"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "spec.json", "runner.log", "results.json", "outputs.jsonl", "events.jsonl"} <= artifacts
    # Nothing lost without MLflow: the local run dir holds the same results.
    run_dir = Path(tags["run_dir"])
    assert json.loads((run_dir / "results.json").read_text())["metrics"]["tau"] == run.data.metrics["tau"]
    assert run_dir.is_relative_to(tmp_path / "runs")


def test_unreachable_tracking_server_loses_nothing(tmp_path):
    proc = run_cli(["method=ar", "baseline=none", "tracking.uri=http://127.0.0.1:9", *SMALL], cwd=tmp_path,
                   env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "results kept locally" in proc.stdout
    results = [p for p in (tmp_path / "runs").rglob("results.json") if ".host" not in p.parts]
    assert len(results) == 1 and "tpot_ms" in json.loads(results[0].read_text())["metrics"]
