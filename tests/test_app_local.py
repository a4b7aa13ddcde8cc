"""README-style runs through `python -m orchestrator` on the Local host, logged to a real MLflow database."""
from __future__ import annotations

import json
import os
import re
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
    # said as a message on the terminal; orchestrator.log keeps the timestamp and the logger's name
    shown = proc.stdout + proc.stderr
    assert "WARNING: MLflow at" in shown and "][orchestrator.tracking.tracker][" not in shown, shown[-2000:]
    results = [p for p in (tmp_path / "runs").rglob("results.json") if ".host" not in p.parts]
    assert len(results) == 1 and "tpot_ms" in json.loads(results[0].read_text())["metrics"]
    log = (results[0].parent / "orchestrator.log").read_text()
    assert "][orchestrator.tracking.tracker][WARNING] - MLflow at" in log


def test_input_the_runner_refuses_and_a_missing_python_get_a_users_fix(tmp_path):
    """The runner's own `error:` line (exit 2) and a python the host cannot run (exit 127) are named failures
    with a fix for the user, not unknown crashes."""
    no_prompt = tmp_path / "no prompt.jsonl"
    no_prompt.write_text('{"text": "def f():"}\n')
    script = tmp_path / "script.py"
    script.write_text("print('hello')\n")
    # (our runner's own python is probed at preflight: a user's script is launched with it as given)
    cases = {"runner_refused_input": ["dataset=jsonl", f"dataset.path={no_prompt}"],
             "python_not_runnable": ["runner=script", f"runner.path={script}", "host.python=/nonexistent/python"]}
    for expected, overrides in cases.items():
        runs = tmp_path / expected
        proc = run_cli(["method=ar", "baseline=none", *SMALL, *overrides], cwd=tmp_path,
                       env={"SPECBENCH_RUNS_DIR": str(runs)})
        assert proc.returncode == 1, proc.stdout[-3000:]
        _, run = only_run(runs / "mlflow.db")
        assert run.data.tags["failure.id"] == expected, proc.stdout[-2000:]
        fix = run.data.tags["failure.hint"]
        assert "failures.yaml" not in fix and "failures.yaml" not in proc.stdout   # said to a user, not to us
        assert fix.split(";")[0][:40] in " ".join(proc.stdout.split())
        assert re.search(r"…  \d+:\d\d:\d\d", proc.stdout) is None, proc.stdout   # no stale stage spinner
    proc = run_cli(["method=ar", "baseline=none", *SMALL, "host.python=/nonexistent/python"], cwd=tmp_path,
                   env={"SPECBENCH_RUNS_DIR": str(tmp_path / "preflight")})
    assert proc.returncode == 1 and "is host.python='/nonexistent/python' right?" in " ".join(proc.stdout.split())
    assert not (tmp_path / "preflight" / "mlflow.db").exists()     # refused before a run existed
    assert "has no string field 'prompt'" in json.loads(
        (Path(only_run(tmp_path / "runner_refused_input" / "mlflow.db")[1].data.tags["run_dir"]) / "failure.json")
        .read_text())["primary"]["message"]


def test_a_dataset_smaller_than_num_prompts_is_said_and_what_ran_is_recorded(tmp_path):
    two = tmp_path / "two.jsonl"
    two.write_text('{"prompt": "def add(a, b):"}\n{"prompt": "import os"}\n')
    proc = run_cli(["method=ar", "baseline=none", "num_prompts=5", "max_new_tokens=2", "host=local",
                    "dataset=jsonl", f"dataset.path={two}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = " ".join(proc.stdout.split())
    assert "two.jsonl has only 2 prompts: running 2 of num_prompts=5" in said, said[-3000:]
    _, run = only_run(tmp_path / "runs" / "mlflow.db")
    assert run.data.params["num_prompts"] == "5" and run.data.metrics["num_prompts"] == 2
