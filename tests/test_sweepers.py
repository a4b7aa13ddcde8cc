"""Sweepers that optimise (the real hydra-optuna-sweeper plugin): each job returns its `objective` as a plain
float, and a failed job is a failed trial, not a crashed sweep."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

optuna = pytest.importorskip("optuna")   # hydra-optuna-sweeper is in the test extra

SMALL = ["model=tiny-qwen3", "method=ddtree", "baseline=none", "num_prompts=1", "max_new_tokens=4"]


def sweep(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # (optuna 2.10's RDB storage does not run against today's SQLAlchemy: the study is read from the sweep's
    # optimization_results.yaml and the plugin's log instead)
    return subprocess.run([sys.executable, "-m", "orchestrator", "-m", "hydra/sweeper=optuna",
                           "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=0",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}", *SMALL, *args], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path, env=os.environ.copy())


def test_optuna_maximises_the_chosen_objective(tmp_path):
    proc = sweep(tmp_path, "hydra.sweeper.n_trials=2", "tree_budget=int(interval(2,8))", "objective=tokens_per_s")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    measured = {}   # tree_budget -> tokens_per_s, as each trial's runner wrote it
    for results in (tmp_path / "sweep").glob("*/results.json"):
        spec = json.loads((results.parent / "spec.json").read_text())
        measured[spec["decoding"]["tree_budget"]] = json.loads(results.read_text())["metrics"]["tokens_per_s"]
    assert len(list((tmp_path / "sweep").glob("*/results.json"))) == 2
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert best["best_value"] == max(measured.values())
    assert measured[best["best_params"]["tree_budget"]] == best["best_value"]


def test_a_failed_job_is_a_failed_trial(tmp_path):
    """The runner fails on the prompts file: the trial is told FAIL (the plugin's warning names our reason),
    the sweep stops as max_failure_rate=0 asks, and the job's MLflow run is closed FAILED."""
    bad = tmp_path / "prompts.jsonl"
    bad.write_text("this is not JSON\n")
    proc = sweep(tmp_path, "hydra.sweeper.n_trials=1", "tree_budget=int(interval(2,8))", "objective=tokens_per_s",
                 "dataset=jsonl", f"dataset.path={bad}")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Failed experiment: job 0 ended FAILED" in output, output[-3000:]
    assert "Traceback" not in output and "\njob 0 ended FAILED: " in output, output[-3000:]   # its one line
    client = MlflowClient(f"sqlite:///{Path(os.environ['SPECBENCH_RUNS_DIR']) / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert runs and all(r.info.status == "FAILED" for r in runs if "mlflow.parentRunId" in r.data.tags)


def test_sigterm_stops_an_optuna_sweep_killed_with_its_summary(tmp_path):
    """The trial in flight is stopped, no further trial runs, the parent ends KILLED with the sweep's table, and
    the sweep exits 143 without a traceback."""
    from tests.test_faults import finish, runs_of, start_cli, started_runs, wait_for

    workdir = tmp_path / "work"
    proc = start_cli(["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3", "tree_budget=int(interval(2,8))",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", "model=tiny-qwen3", "method=ddtree", "baseline=none",
                      "objective=tokens_per_s", "device=cpu", "num_prompts=24", "max_new_tokens=256", "host=local",
                      f"host.workdir={workdir}"],
                     cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
    wait_for(lambda: started_runs(workdir) or proc.poll() is not None, "trial 0's runner starting")
    proc.send_signal(signal.SIGTERM)
    out = finish(proc, timeout=180)
    assert proc.returncode == 143 and "Traceback" not in out, out[-3000:]
    assert len(list(workdir.glob("runs/*"))) == 1, out[-3000:]   # no trial launched after the signal
    runs = runs_of(tmp_path / "runs")
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert parent.info.status == "KILLED" and "sweep: " in out, out[-3000:]
    assert {r.info.status for r in runs if r is not parent} == {"KILLED"}, out[-3000:]


def test_a_signal_to_a_trials_worker_after_its_run_fails_the_trial_saying_so(tmp_path):
    """SIGTERM to the joblib worker of trial 0 while its run's end waits on MLflow (the sqlite store held by this
    test): the run is logged whole first (cut off, it stayed RUNNING), then the signal acts, outside the run's own
    handling. The trial fails with a line saying it was interrupted (it used to return None, which the plugin
    refused with 'Return value must be float-castable'), and joblib's pool is not broken: the launch returns, and
    the plugin tells the trial."""
    from tests.test_faults import _loky_workers_of, finish, runs_of, start_cli, wait_for

    workdir, runs, sweep_dir = tmp_path / "work", tmp_path / "runs", tmp_path / "sweep"
    proc = start_cli(["-m", "hydra/sweeper=optuna", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                      "hydra.sweeper.n_jobs=1", "hydra.sweeper.n_trials=1", "tree_budget=int(interval(2,8))",
                      "objective=tokens_per_s", f"hydra.sweep.dir={sweep_dir}", *SMALL, "host=local",
                      f"host.workdir={workdir}"],
                     cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(runs), "COLUMNS": "1000"})
    store = None
    try:
        pid_file = wait_for(lambda: next(workdir.glob("runs/*/pid"), None), "trial 0's runner launched")
        group = int(pid_file.read_text())
        os.killpg(group, signal.SIGSTOP)   # it ends only once MLflow has its run and the store is held
        try:
            wait_for(lambda: _record(sweep_dir / "0" / "job.json").get("mlflow_run_id"), "trial 0's MLflow run")
            store = sqlite3.connect(runs / "mlflow.db", isolation_level=None)
            store.execute("BEGIN EXCLUSIVE")   # the run's final logging waits on it (sqlite's 20 s busy timeout)
        finally:
            os.killpg(group, signal.SIGCONT)
        wait_for(lambda: _record(sweep_dir / "0" / "tracking.json").get("final"), "trial 0's run reported")
        for worker in _loky_workers_of(proc.pid):   # an idle one ignores it
            os.kill(worker, signal.SIGTERM)
        store.execute("ROLLBACK")
        out = finish(proc, timeout=300)
    finally:
        if store is not None:
            store.close()
        finish(proc, timeout=1)
    assert "Failed experiment: job 0 interrupted by SIGTERM outside its run" in out, out[-3000:]
    assert "float-castable" not in out, out[-3000:]
    assert "SIGTERM: the run has ended; logging it to MLflow first" in out, out[-3000:]
    (trial,) = [run for run in runs_of(runs) if run.data.tags.get("sweep") != "parent"]
    assert trial.info.status == "FINISHED" and "tokens_per_s" in trial.data.metrics, out[-3000:]


def _record(path: Path) -> dict:
    """A JSON record written atomically (never half of one); empty until it exists."""
    return json.loads(path.read_text()) if path.exists() else {}
