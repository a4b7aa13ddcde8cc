"""`python -m orchestrator ... host=ssh` end to end against a real sshd, logged to a real MLflow database:
a finished run (with a forwarded secret that lands nowhere), an unknown host key, Ctrl-C, a connection cut.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path


from orchestrator.paths import PROJECT_ROOT

SMALL = ["device=cpu", "num_prompts=2", "max_new_tokens=8"]


def cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def run_cli(args, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run(cli(args), capture_output=True, text=True, cwd=PROJECT_ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def mlflow_runs(runs_dir: Path) -> list:
    db = runs_dir / "mlflow.db"
    if not db.exists():
        return []
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("specbench")
    return client.search_runs([exp.experiment_id]) if exp else []


def remote_run_dir(workdir: Path, wait_for: str, timeout: float = 120) -> Path:
    """The run dir on the host once its events.jsonl contains `wait_for`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for events in workdir.glob("runs/*/events.jsonl"):
            if wait_for in events.read_text():
                return events.parent
        time.sleep(0.1)
    raise AssertionError(f"no run under {workdir} reached {wait_for!r} within {timeout} s")


def group_alive(pgid: int) -> list[int]:
    """Processes (not zombies) whose process group is `pgid`: the runner and its launch wrapper."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(entry.name))
    return alive


def files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_ddtree_over_ssh_finishes_and_the_secret_lands_nowhere(sshd, tmp_path):
    secret = f"hf_{uuid.uuid4().hex}"
    workdir = tmp_path / "work"
    proc = run_cli(["method=ddtree", "tree_budget=64", *sshd.overrides(workdir=str(workdir)),
                    "host.forward_env=[HF_TOKEN]", *SMALL], env={"HF_TOKEN": secret})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "FINISHED"
    assert run.data.tags["host"] == "127.0.0.1" and "tau" in run.data.metrics
    assert run.data.tags["preflight.python"] and run.data.params["host.kind"] == "ssh"
    needle = secret.encode()
    assert files_containing(tmp_path / "runs", needle) == []    # Hydra dirs, mlflow.db, artifacts
    assert files_containing(workdir, needle) == []              # the host's run dir and bundles
    assert secret not in proc.stdout + proc.stderr


def test_unknown_host_key_fails_before_any_mlflow_run(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc = run_cli(["method=ar", *sshd.overrides(known_hosts=str(empty)), *SMALL], timeout=120)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1" in out.replace("\n", " ")
    assert [r.info.status for r in mlflow_runs(tmp_path / "runs") if r.info.status == "RUNNING"] == []


def test_ctrl_c_stops_the_runner_on_the_host_and_logs_killed(sshd, tmp_path):
    workdir = tmp_path / "work"
    # Long enough to be interrupted mid-decode on any machine; never paid in full.
    # SIGINT back to its default in the child: a suite started in the background inherits it ignored
    proc = subprocess.Popen(cli(["method=ddtree", *sshd.overrides(workdir=str(workdir)), "device=cpu",
                                 "num_prompts=24", "max_new_tokens=256"]),
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        run_dir = remote_run_dir(workdir, '"start"')   # the runner is up: models built, decoding begins
        pgid = int((run_dir / "pid").read_text())
        assert group_alive(pgid), "the runner should be running"
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        while group_alive(pgid) and time.monotonic() - sent < 10:
            time.sleep(0.1)
        assert group_alive(pgid) == [], "runner processes still alive 10 s after Ctrl-C"
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "KILLED", out[-3000:]


def test_a_connection_cut_mid_run_loses_nothing(sshd_netns, tmp_path):
    workdir = Path(sshd_netns.facts.host_config()["workdir"])
    # long enough that the run is still decoding when the cut comes, even on a loaded machine
    args = ["method=ddtree", *sshd_netns.facts.overrides(io_timeout=1.5, connect_timeout=1.5), "device=cpu",
            "num_prompts=6", "max_new_tokens=96"]
    proc = subprocess.Popen(cli(args), cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        run_dir = remote_run_dir(workdir, '"start"')   # the runner is up and writing
        # The tail starts after the run line: MLflow opens the run first, seconds under load, and a cut before
        # the tail would go unnoticed.
        head = []
        for line in proc.stdout:
            head.append(line)
            if line.startswith("run ") and " on " in line:
                break
        sshd_netns.cut()
        time.sleep(6)
        sshd_netns.restore()
        out = "".join(head) + proc.communicate(timeout=180)[0]
    finally:
        sshd_netns.restore()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert "reconnected after" in out, "the cut was not noticed: the test proves nothing"
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "FINISHED"
    local_dir = Path(run.data.tags["run_dir"])
    for name in ("runner.log", "events.jsonl"):
        assert (local_dir / name).read_bytes() == (run_dir / name).read_bytes(), name
    assert json.loads((local_dir / "results.json").read_text())["metrics"]
