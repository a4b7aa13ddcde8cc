"""The terminal closes mid-run: the runner goes on, and `attach` finishes the run's tail and MLflow logging."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient


def _first(pattern: str, root, deadline: float, opened: bool = False) -> list:
    """Files under `root` matching `pattern` (non-empty); `opened`: job files that name their MLflow run."""
    found = []
    while time.time() < deadline and not (found := [p for p in root.rglob(pattern) if p.stat().st_size and (
            not opened or json.loads(p.read_text()).get("mlflow_run_id"))]):
        time.sleep(0.1)
    return found


def test_attach_after_the_orchestrator_died(tmp_path):
    env = os.environ.copy()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "method=dflash", "num_prompts=2",
                             "max_new_tokens=32", "host=local"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    # The runner's process group is held stopped until the orchestrator is gone, so the run cannot finish first
    # (MLflow opens the run, seconds of import and database work, before the job file names it).
    pid_files = _first("pid", tmp_path / "runs" / ".host", deadline)
    assert pid_files, "the runner never started"
    group = int(pid_files[0].read_text())
    os.killpg(group, signal.SIGSTOP)
    try:
        job_files = _first("job.json", tmp_path / "runs", deadline, opened=True)
        assert job_files, "the run never reached MLflow"
        proc.send_signal(signal.SIGKILL)      # like a closed terminal: no cleanup of ours runs
        proc.wait()
    finally:
        os.killpg(group, signal.SIGCONT)
    run_dir = job_files[0].parent
    meta = json.loads(job_files[0].read_text())
    client = MlflowClient(meta["tracking_uri"])
    assert client.get_run(meta["mlflow_run_id"]).info.status == "RUNNING"

    attached = subprocess.run([sys.executable, "-m", "orchestrator", "attach", meta["run_id"]], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
    assert attached.returncode == 0, attached.stdout[-2000:] + attached.stderr[-2000:]
    run = client.get_run(meta["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert "tau" in run.data.metrics
    remote_log = next((tmp_path / "runs" / ".host" / "runs" / meta["run_id"]).glob("runner.log")).read_bytes()
    assert (run_dir / "runner.log").read_bytes() == remote_log
