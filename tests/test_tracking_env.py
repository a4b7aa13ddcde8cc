"""MLflow's own variables, as every MLflow user sets them: MLFLOW_TRACKING_URI sends a run to that store (after an
explicit tracking.uri, before the embedded default) with the credentials the client reads from the environment,
MLFLOW_EXPERIMENT_NAME names its experiment, and the run says which store it logs to. A real `mlflow server` with
MLflow's basic-auth app; the CLI as a user runs it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator.paths import PROJECT_ROOT
from tests.test_tracking_outage import MlflowServer

SCRIPT = Path(__file__).parent / "scripts" / "decoding_runner.py"
QUICK = ["runner=script", f"runner.path={SCRIPT}", "runner.args=[--steps,3]"]
PASSWORD = "s3cret-Pass-1234"


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "1000", **env})


def test_mlflow_tracking_uri_and_experiment_name_send_the_run_to_that_server(tmp_path):
    server = MlflowServer(tmp_path / "server", password=PASSWORD)
    env = {"MLFLOW_TRACKING_URI": server.url, "MLFLOW_EXPERIMENT_NAME": "from-env",
           "MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": PASSWORD}
    try:
        ran = cli(*QUICK, env=env)
        local = tmp_path / "explicit.db"
        explicit = cli(*QUICK, f"tracking.uri=sqlite:///{local}", "tracking.experiment=mine", env=env)
        os.environ.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=PASSWORD)   # (undone by
        try:                                                                                    # conftest)
            client = MlflowClient(server.url)
            exp = client.get_experiment_by_name("from-env")
            runs = client.search_runs([exp.experiment_id]) if exp else []
            everywhere = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
        finally:
            del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
    finally:
        server.stop()
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out[-3000:]
    assert f"MLflow: {server.url} (MLFLOW_TRACKING_URI)" in out, out[-3000:]
    assert f"mlflow run: {runs[0].info.run_id} {server.url}/#/experiments/{exp.experiment_id}/runs/" in out, out
    (run,) = runs
    assert run.info.status == "FINISHED" and len(everywhere) == 1   # the second went where tracking.uri said
    assert not (tmp_path / "runs" / "mlflow.db").exists()           # nothing went to the embedded default
    run_dir = Path(run.data.tags["run_dir"])
    assert all(PASSWORD not in f.read_text(errors="replace") for f in run_dir.rglob("*") if f.is_file())
    assert PASSWORD not in out

    said = explicit.stdout + explicit.stderr
    assert explicit.returncode == 0 and f"MLflow: sqlite:///{local} (tracking.uri)" in said, said[-3000:]
    client = MlflowClient(f"sqlite:///{local}")
    (mine,) = client.search_runs([client.get_experiment_by_name("mine").experiment_id])
    assert mine.info.status == "FINISHED"


def test_a_password_in_mlflow_tracking_uri_is_refused_in_one_line_before_anything_starts(tmp_path):
    refused = cli(*QUICK, env={"MLFLOW_TRACKING_URI": f"http://admin:{PASSWORD}@127.0.0.1:9"})
    said = (refused.stdout + refused.stderr).strip()
    assert refused.returncode == 2 and len(said.splitlines()) == 1, said
    assert said.startswith("error: MLFLOW_TRACKING_URI: http://admin:***@127.0.0.1:9 carries a password"), said
    assert PASSWORD not in said and not (tmp_path / "runs").exists(), said


def test_mlflow_experiment_id_names_the_experiment_where_no_name_is_given(tmp_path, monkeypatch):
    from orchestrator.tracking.tracker import Status, Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    chosen = client.create_experiment("chosen-by-id", artifact_location=(tmp_path / "art").as_uri())
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", chosen)
    runs = {}
    for name in (None, "named"):   # an explicit tracking.experiment comes first
        run_dir = tmp_path / f"run-{name}"
        run_dir.mkdir()
        tracker = Tracker(uri, name, run_dir=run_dir)
        tracker.start("r", {}, {"run_id_local": run_dir.name})
        tracker.finish(Status.FINISHED, {"tau": 2.0}, {}, [])
        assert tracker.logged, tracker.warning
        runs[name] = client.get_run(tracker.run_id)
    assert runs[None].info.experiment_id == chosen
    assert runs["named"].info.experiment_id == client.get_experiment_by_name("named").experiment_id != chosen
