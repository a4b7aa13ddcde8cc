"""This machine's runs dir on a real filesystem filled to the byte (a tmpfs; the runner's host workdir elsewhere):
whatever the free space, the command ends in one line, leaves no MLflow run RUNNING and no truncated file that looks
whole, and says the command that finishes the job once there is room. A runs dir with 60 KB free used to end in
SQLAlchemy's and Hydra's tracebacks, its MLflow run RUNNING, a 0-byte definitions.md and no hint; `reap` said "not
reaped: OSError" and exited 0."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator.paths import PROJECT_ROOT, START_ROOM
from tests.test_disk_full import tmpfs

SCRIPT = Path(__file__).parent / "scripts" / "hostile_output.py"
KB = 1024


def fill(path: Path, leave: int) -> None:
    """Fill the filesystem at `path` until `leave` bytes are free (in whole 4 KiB pages, as tmpfs counts)."""
    st = os.statvfs(path)
    (path / "filler").write_bytes(bytes(max(st.f_bavail * st.f_frsize - leave, 0)))


def cli(*args: str, runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "1000", "SPECBENCH_RUNS_DIR": str(runs)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


def test_a_runs_dir_without_room_to_start_refuses_every_command_that_writes_in_one_line(tmp_path):
    runs = tmp_path / "runs"
    with tmpfs(runs, 8):
        for leave in (60 * KB, 200 * KB, START_ROOM - 64 * KB):
            fill(runs, leave)
            for args in (["runner=script", f"runner.path={SCRIPT}", f"host.workdir={tmp_path / 'work'}"], ["reap"],
                         ["sync", str(runs)]):
                done = cli(*args, runs=runs)
                said = (done.stdout + done.stderr).strip()
                assert done.returncode == 1 and len(said.splitlines()) == 1, (leave, args, said)
                assert said.startswith(f"error: this machine: No space left on device in {runs}: a run's records "
                                       f"(run dir, MLflow database and artifacts) needs about 4.2 MB, "), said
                assert sorted(p.name for p in runs.iterdir()) == ["filler"], (leave, args)   # nothing written
            (runs / "filler").unlink()


def test_a_runs_dir_that_fills_mid_run_closes_the_run_and_attach_finishes_it_once_there_is_room(tmp_path):
    runs = tmp_path / "runs"
    with tmpfs(runs, 32):   # room, once the filler goes, for the log and its copy in MLflow's artifacts
        client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")   # the database a first run would have made
        client.create_experiment("specbench", artifact_location=(runs / "mlartifacts").as_uri())
        fill(runs, START_ROOM + 1024 * KB)
        ran = cli("runner=script", f"runner.path={SCRIPT}", "runner.args=[--line-mb,8]",
                  f"host.workdir={tmp_path / 'work'}", runs=runs)
        (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
        run_dir = Path(run.data.tags["run_dir"])
        left = sorted(p.name for p in run_dir.iterdir())
        (host_log,) = (tmp_path / "work" / "runs").glob("*/runner.log")
        mirrored = (run_dir / "runner.log").read_bytes()
        failure = json.loads((run_dir / "failure.json").read_text())
        (runs / "filler").unlink()
        attached = cli("attach", str(run_dir), runs=runs)
        (settled,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
        whole = (run_dir / "runner.log").read_bytes() == host_log.read_bytes()
    out = ran.stdout + ran.stderr
    assert ran.returncode == 1 and "Traceback" not in out and "Logging error" not in out, out[-3000:]
    (error,) = [line for line in out.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: this machine: No space left on device in {run_dir}: the local copy of "
                            f"runner.log needs about "), error
    closing = next(line for line in out.splitlines() if line.startswith("FAILED run dir: "))
    assert closing.endswith(f"log it later: python -m orchestrator attach {run_dir})"), closing
    assert run.info.status == "FAILED", run   # closed, not RUNNING; its tags and artifacts wait for room
    assert failure["tags"]["failure.id"] == "runs_dir_full", failure   # as the record kept it
    assert not [name for name in left if ".tmp" in name or ".part" in name], left   # no part of a file
    assert "definitions.md" not in left or (run_dir / "definitions.md").stat().st_size > 0
    assert host_log.read_bytes().startswith(mirrored)   # the mirror is a prefix, from which attach goes on
    said = attached.stdout + attached.stderr
    assert attached.returncode == 0, said[-3000:]
    assert settled.info.status == "FINISHED" and "failure.id" not in settled.data.tags, settled.data.tags
    assert whole   # attach went on from the mirror's end
