"""Multirun = one MLflow parent with a child per job; the parent's status is right even when a job fails."""
from __future__ import annotations

import os
import subprocess
import sys

from mlflow.tracking import MlflowClient

from orchestrator import compare

FAST = ["model=tiny-qwen3", "num_prompts=1", "max_new_tokens=4", "baseline=none", "host=local"]   # plumbing: the random pair


def sweep(tmp_path, *overrides):
    return subprocess.run([sys.executable, "-m", "orchestrator", "-m", *overrides, *FAST], capture_output=True,
                          text=True, cwd=tmp_path, env=os.environ.copy(), timeout=900)


def parent_and_children(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specbench")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return client, parents[0], children


def test_2x2_sweep_parent_children_summary(tmp_path):
    proc = sweep(tmp_path, "method=dflash,ddtree", "tree_budget=2,8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED"
    assert sorted((c.data.params["method.name"], c.data.params["tree_budget"]) for c in children) == [
        ("ddtree", "2"), ("ddtree", "8"), ("dflash", "2"), ("dflash", "8")]
    assert all(c.info.status == "FINISHED" for c in children)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"summary.csv", "speedup_vs_budget.png", "tau_vs_budget.png", "accept_by_depth.png"} <= artifacts
    csv_text = (client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path)))
    assert open(csv_text).read().count("\n") == 5

    # The compare CLI picks the same runs by parent and prints the same table.
    out = tmp_path / "cmp"
    assert compare.main(["--tracking-uri", client.tracking_uri, "--parent", parent.info.run_id,
                         "--out", str(out)]) == 0
    assert (out / "summary.csv").read_text().count("\n") == 5


def test_failed_job_fails_the_parent_and_spares_the_others(tmp_path):
    # The second model type does not exist: that job fails inside the runner, the other one finishes.
    proc = sweep(tmp_path, "method=ar", "model.random.model_type=qwen3,no_such_model_type")
    assert proc.returncode != 0
    _, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FAILED"
    statuses = sorted((c.data.params["model.random.model_type"], c.info.status) for c in children)
    assert statuses == [("no_such_model_type", "FAILED"), ("qwen3", "FINISHED")]


def test_submitit_local_launcher_runs_the_sweep(tmp_path):
    """SLURM clusters go through Hydra's submitit launcher; its local mode runs the same jobs here."""
    proc = sweep(tmp_path, "hydra/launcher=submitit_local", "method=ar", "seed=0,1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED"
    assert sorted(c.data.params["seed"] for c in children) == ["0", "1"]
    assert all(c.info.status == "FINISHED" for c in children)
