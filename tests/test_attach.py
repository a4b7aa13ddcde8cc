"""The terminal closes mid-run: the runner goes on, and `attach` finishes the run's tail and MLflow logging."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

from tests.test_faults import LONG, cli, finish, runs_of, start_cli, started_runs, wait_for
from tests.test_ssh_e2e import group_alive


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


def test_stop_from_another_terminal_ends_the_followed_run_killed_by_the_user(tmp_path):
    workdir = tmp_path / "work"
    proc = start_cli(["host=local", f"host.workdir={workdir}", *LONG])
    try:
        (host_dir,) = wait_for(lambda: started_runs(workdir), "the runner starting")
        (job_file,) = wait_for(lambda: list((tmp_path / "runs").rglob("job.json")), "the run's job.json")
        stopped = cli("stop", str(job_file.parent))
        out = finish(proc, timeout=120)
    finally:
        finish(proc, timeout=1)
    assert not group_alive(int((host_dir / "pid").read_text()))
    assert "KILLED" in out, out[-3000:]
    # the terminal that follows it says why (it used to say KILLED alone, as if its own Ctrl-C had)
    assert "stopped from another terminal (`python -m orchestrator stop`, stopped_by=user)" in \
        " ".join(out.split()), out[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED", out[-3000:]
    assert run.data.tags["stopped_by"] == "user" and "failure.id" not in run.data.tags
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]


def test_stop_of_a_finished_run_touches_nothing_and_an_ambiguous_reference_is_refused(tmp_path):
    for _ in range(2):   # two sweeps: each has a job dir named 0 (a runner that ends at once: its work is not this)
        ran = cli("-m", *LONG, "runner.args=[--steps,1]")
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    first, second = sorted(f.parent for f in (tmp_path / "runs").rglob("job.json"))
    assert first.name == second.name == "0"
    for command in ("show", "stop"):
        refused = cli(command, "0")
        assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
        (line,) = refused.stderr.strip().splitlines()
        assert "ambiguous" in line and str(first) in line and str(second) in line, line

    kept = {name: (first / name).read_bytes() for name in ("exit_code", "tracking.json", "job.json")}
    stopped = cli("stop", str(first))
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "already finished (exit 0)" in stopped.stdout, stopped.stdout[-3000:]
    assert {name: (first / name).read_bytes() for name in kept} == kept
    statuses = [r.info.status for r in runs_of(tmp_path / "runs") if r.data.tags.get("sweep") != "parent"]
    assert statuses == ["FINISHED", "FINISHED"]


def test_attach_and_stop_of_a_damaged_job_file_are_one_line(tmp_path):
    """A job.json cut short or missing its host (by hand, a bad disk): one line naming the file, not a traceback."""
    for name, text in (("cut", '{"run_id": "x", "host": {'), ("hostless", '{"run_id": "x"}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "job.json").write_text(text)
        for command in ("attach", "stop"):
            proc = cli(command, str(tmp_path / name))
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            assert proc.stderr.startswith(f"error: {tmp_path / name / 'job.json'} cannot be read ("), proc.stderr
