"""`python -m orchestrator sync`: a run kept locally while MLflow was away is logged later, exactly once, from its
local record (tracking.json); a run the server made but the record never heard of is completed, not duplicated."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.test_tracking_outage import SMALL, MlflowServer, free_port, sync


def test_a_run_that_never_reached_mlflow_is_logged_once_by_sync(tmp_path):
    refused = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *SMALL, f"tracking.uri={refused}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "not in MLflow" in proc.stdout and "python -m orchestrator sync" in proc.stdout, proc.stdout[-2000:]
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/*/results.json")]
    server = MlflowServer(tmp_path / "server")
    try:
        synced = sync(str(run_dir), "--tracking-uri", server.url)
        assert synced.returncode == 0, synced.stdout + synced.stderr
        again = sync(str(run_dir), "--tracking-uri", server.url)
        assert again.returncode == 0, again.stdout + again.stderr
        client = MlflowClient(server.url)
        (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
        assert run.info.status == "FINISHED"
        results = json.loads((run_dir / "results.json").read_text())["metrics"]
        assert run.data.metrics["tau"] == results["tau"]
        assert run.data.params["method.name"] == "ddtree" and run.data.params["num_prompts"] == "2"
        assert run.data.tags["run_dir"] == str(run_dir) and run.data.tags["status"] == "FINISHED"
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.yaml", "spec.json", "runner.log", "results.json", "events.jsonl"} <= artifacts
    finally:
        server.stop()


def _kept_run(run_dir: Path, run_id_local: str, parent: str | None = None):
    """A run whose MLflow server refused every call: what the orchestrator kept locally (its record and results)."""
    from orchestrator.tracking.tracker import Status, Tracker

    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps({"metrics": {"tau": 2.5}}))
    tracker = Tracker(f"http://127.0.0.1:{free_port()}", "specbench", run_dir=run_dir)
    tracker.start(run_name="ddtree-tiny", params={"method.name": "ddtree"},
                  tags={"run_id_local": run_id_local, "method": "ddtree"}, parent_run_id=parent)
    tracker.finish(Status.FINISHED, {"tau": 2.5}, {"status": "FINISHED"}, [run_dir / "results.json"],
                   history=[("loss", 1.0, 1), ("loss", 0.5, 2)])
    assert not tracker.logged and tracker.run_id is None
    return tracker


def _sync_in_process(run_dir: Path, uri: str) -> int:
    from orchestrator.tracking.sync import main

    return main([str(run_dir), "--tracking-uri", uri])


def _sync_target(tmp_path, monkeypatch) -> tuple[str, MlflowClient, str]:
    """(uri, client, experiment id) of a fresh MLflow database to sync to; the kept runs' server refuses at once."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    return uri, client, client.create_experiment("specbench", artifact_location=(tmp_path / "artifacts").as_uri())


def test_sync_completes_the_run_a_lost_answer_left_on_the_server(tmp_path, monkeypatch):
    uri, client, exp_id = _sync_target(tmp_path, monkeypatch)
    # The server created the run, its answer never came back: RUNNING there, unknown to the local record.
    orphan = client.create_run(exp_id, tags={"run_id_local": "r-lost"}).info.run_id
    run_dir = tmp_path / "run"
    _kept_run(run_dir, "r-lost")
    assert _sync_in_process(run_dir, uri) == 0
    record = json.loads((run_dir / "tracking.json").read_text())
    record["logged"] = []   # as if the first sync's answers had been lost too: the replay must add nothing
    (run_dir / "tracking.json").write_text(json.dumps(record))
    assert _sync_in_process(run_dir, uri) == 0
    (run,) = client.search_runs([exp_id])
    assert run.info.run_id == orphan and run.info.status == "FINISHED"
    assert run.data.metrics["tau"] == 2.5 and run.data.params["method.name"] == "ddtree"
    assert [m.value for m in client.get_metric_history(orphan, "tau")] == [2.5]
    assert [(m.step, m.value) for m in client.get_metric_history(orphan, "loss")] == [(1, 1.0), (2, 0.5)]
    assert {a.path for a in client.list_artifacts(orphan)} == {"results.json"}


def test_sync_logs_a_sweep_child_under_its_parent(tmp_path, monkeypatch):
    uri, client, exp_id = _sync_target(tmp_path, monkeypatch)
    parent = client.create_run(exp_id, tags={"sweep": "parent"}).info.run_id
    sweep_dir = tmp_path / "sweep"
    for num in range(2):
        _kept_run(sweep_dir / str(num), f"child-{num}", parent=parent)
    assert _sync_in_process(sweep_dir, uri) == 0   # a sweep's dir: every kept run below it
    children = client.search_runs([exp_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(r.data.tags["run_id_local"] for r in children) == ["child-0", "child-1"]
    assert {r.info.status for r in children} == {"FINISHED"}


def test_sync_refuses_a_dir_without_a_record(tmp_path, capsys):
    from orchestrator.tracking.sync import main

    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 1
    assert "no tracking.json" in capsys.readouterr().out
    assert main([str(tmp_path / "nothere")]) == 1     # a typo: said as such, not as a dir without a record
    assert capsys.readouterr().out == f"{tmp_path / 'nothere'}: not synced: no such directory\n"
