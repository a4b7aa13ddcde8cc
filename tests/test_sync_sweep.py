"""A sweep whose MLflow was away ends from what it kept (its table, summary and exit status), and `sync` later
makes its parent, puts every job under it and logs the summary there: at the first URI and again at a new one,
also for jobs that reached MLflow before their parent did, and after a tracking server stopped mid-sweep. Real
sweeps, real sqlite MLflow stores, a real `mlflow server` stopped for real."""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import time

from mlflow.tracking import MlflowClient

from orchestrator.tracking.sweeps import SWEEP_RECORD, sweep_id
from orchestrator.tracking.sync import main as sync_main
from orchestrator.tracking.tracker import Status, Tracker
from tests.test_faults import LONG
from tests.test_sweep import sweep
from tests.test_tracking_outage import (END_WITHIN_S, Cli, MlflowServer, black_hole, free_port, stop_group, sync,
                                        wait_file)


def _parent_and_children(uri: str):
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return client, runs, parent, children


def test_a_sweep_without_mlflow_fails_as_its_jobs_did_and_sync_logs_it_under_one_parent(tmp_path):
    refused = f"http://127.0.0.1:{free_port()}"   # nothing listens there, for the whole sweep
    proc = sweep(tmp_path, "method=ar", "model.random.model_type=qwen3,no_such_model_type", f"tracking.uri={refused}")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]   # a job failed, MLflow or not
    assert "sweep: 2 jobs, 1 not finished" in proc.stdout and "sweep not in MLflow" in proc.stdout
    at_start = proc.stdout.split("Launching 2 jobs")[0]   # the refused parent, said once (not by Hydra's log too)
    assert at_start.count(f"MLflow at {refused} unavailable") == 1, at_start
    (sweep_dir,) = (tmp_path / "runs" / "multirun").glob("*/*")
    with open(sweep_dir / "summary" / "summary.csv") as f:
        assert sorted(r["status"] for r in csv.DictReader(f)) == ["FAILED", "FINISHED"]
    # transformers' refusal names every model type it knows (~10 KB): said as the runner said it and in the
    # failure's line, each with the list cut; no log tail that only repeats it; runner.log keeps it whole
    out = " ".join(proc.stdout.split())
    said = out.count("Unrecognized model identifier: no_such_model_type. Should contain one of")
    cut = re.findall(r"Should contain one of (?:[^\s,]+, ){5}… and \d+ more", out)
    assert said == len(cut) == 2 and "runner log tail:" not in out, proc.stdout[-3000:]
    assert (sweep_dir / "1" / "runner.log").read_text().count(", ") > 100

    for name in ("first.db", "moved.db"):   # logged later, then moved to another store
        uri = f"sqlite:///{tmp_path / name}"
        synced = sync(str(sweep_dir), "--tracking-uri", uri)
        assert synced.returncode == 0, synced.stdout[-3000:] + synced.stderr[-3000:]
        client, runs, parent, children = _parent_and_children(uri)
        assert len(runs) == 3 and len(children) == 2
        assert sorted(c.info.status for c in children) == ["FAILED", "FINISHED"]
        assert parent.info.status == "FAILED" and parent.data.tags["sweep.failed"] == "1"
        assert parent.data.tags["sweep.jobs"] == "2"
        assert all(c.info.run_id in parent.data.tags["sweep.compare_url"] for c in children)
        assert "summary.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    again = sync(str(sweep_dir), "--tracking-uri", uri)
    assert again.returncode == 0 and "sweep already in MLflow" in again.stdout, again.stdout[-2000:]
    assert len(_parent_and_children(uri)[1]) == 3


def test_jobs_that_reached_mlflow_before_their_parent_are_put_under_it(tmp_path, monkeypatch):
    """MLflow was away when the sweep started (no parent) and back for its jobs (logged without one)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep_dir = tmp_path / "runs" / "multirun" / "2026-12-05" / "10-00-00-abcdef"
    away = Tracker(f"http://127.0.0.1:{free_port()}", "specbench", run_dir=sweep_dir, name=SWEEP_RECORD)
    sweep_dir.mkdir(parents=True)
    away.start(run_name="sweep-tiny method=ar,dflash", params={"sweep.overrides": "method=ar,dflash"},
               tags={"sweep": "parent", "run_id_local": sweep_id(sweep_dir), "sweep.planned": "2"})
    assert away.run_id is None
    for num, method in enumerate(("ar", "dflash")):
        job = Tracker(uri, "specbench", run_dir=sweep_dir / str(num))
        job.run_dir.mkdir()
        job.start(run_name=method, params={"method.name": method}, tags={"run_id_local": f"job-{num}"})
        job.finish(Status.FINISHED, {"tau": 1.0 + num}, {"status": "FINISHED"}, [])
        assert job.logged
    assert sync_main([str(sweep_dir), "--tracking-uri", uri]) == 0
    client, runs, parent, children = _parent_and_children(uri)
    assert len(runs) == 3 and sorted(c.data.tags["run_id_local"] for c in children) == ["job-0", "job-1"]
    # its process is gone without having recorded an end (as `reap` finds it); every planned job finished
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.failed"] == "0"


def test_a_tracking_server_stopped_mid_sweep_ends_it_from_its_records_and_sync_completes_it(tmp_path):
    """Job 0's run is open in MLflow when the server stops: job 0 ends, job 1 runs, the sweep prints its table and
    exits 0 (both jobs finished) within END_WITHIN_S of its last runner, saying how to log the rest; `sync` of the
    sweep dir, once the server is back, closes job 0, logs job 1 under the parent, and the summary on it."""
    server = MlflowServer(tmp_path / "server")
    host_runs = tmp_path / "runs" / ".host" / "runs"
    cli = Cli(["-m", "seed=0,1", "method=ar", "device=cpu", "num_prompts=2", "max_new_tokens=8", "baseline=none",
               f"tracking.uri={server.url}"], cwd=tmp_path)
    pid_file = None
    try:
        pid_file, _ = wait_file(host_runs, "0-*/pid", within=300)
        group = int(pid_file.read_text())
        os.killpg(group, signal.SIGSTOP)   # job 0 goes on only once the server is gone
        try:
            wait_file(tmp_path / "runs" / "multirun", "*/*/0/tracking.json", within=120)
            deadline = time.monotonic() + 120
            while not server.runs(pid_file.parent.name):      # job 0's run open, under the parent
                assert time.monotonic() < deadline and cli.proc.poll() is None, cli.output[-3000:]
                time.sleep(0.1)
            server.stop()
        finally:
            os.killpg(group, signal.SIGCONT)
        wait_file(host_runs, "1-*/exit_code", within=300)     # the last runner ended
        code, _ = cli.wait_exit(until=time.monotonic() + END_WITHIN_S)
    finally:
        cli.close()
        server.stop()
        if pid_file:
            stop_group(pid_file)
    out = " ".join(cli.output.split())
    assert code == 0, cli.output[-3000:]
    assert "sweep: 2 jobs, 0 not finished" in out and "sweep summary not logged to MLflow" in out, out[-3000:]
    (sweep_dir,) = (tmp_path / "runs" / "multirun").glob("*/*")
    assert f"sync {sweep_dir}" in out, out[-3000:]

    server = MlflowServer(tmp_path / "server", port=server.port)   # the same backend, back again
    try:
        synced = sync(str(sweep_dir))
        assert synced.returncode == 0, synced.stdout[-3000:] + synced.stderr[-3000:]
        client, runs, parent, children = _parent_and_children(server.url)
        assert len(runs) == 3 and sorted(c.info.status for c in children) == ["FINISHED", "FINISHED"]
        assert all("tokens_per_s" in c.data.metrics for c in children)
        assert parent.info.status == "FINISHED" and parent.data.tags["sweep.jobs"] == "2"
        assert "summary.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    finally:
        server.stop()


def test_a_sweep_whose_parent_mlflow_cannot_open_runs_its_jobs_without_trying_it(tmp_path):
    """A server that accepts and never answers: the parent's opening gives up after CLOSE_WITHIN_S, and the jobs
    keep their records locally without trying (each used to wait ~34 s to open and 15 s to close), then `sync`
    logs the whole sweep."""
    with black_hole() as url:   # a runner that sends our start event and ends: what it computes is not this test's
        proc = sweep(tmp_path, *LONG, "runner.args=[--steps,1],[--steps,2]", f"tracking.uri={url}")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "runs" / "multirun").glob("*/*")
    assert f"the sweep's jobs keep their results locally, without trying MLflow; log them later: python -m " \
           f"orchestrator sync {sweep_dir}" in out, out[-3000:]
    for job in ("0", "1"):
        record = json.loads((sweep_dir / job / "tracking.json").read_text())
        assert record["error"].endswith("at the sweep's start") and record["final"]["status"] == "FINISHED", record

    uri = f"sqlite:///{tmp_path / 'later.db'}"
    synced = sync(str(sweep_dir), "--tracking-uri", uri)
    assert synced.returncode == 0, synced.stdout[-3000:] + synced.stderr[-3000:]
    _, runs, parent, children = _parent_and_children(uri)
    assert len(runs) == 3 and [c.info.status for c in children] == ["FINISHED"] * 2
    assert parent.info.status == "FINISHED"
