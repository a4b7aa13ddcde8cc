"""Faults as they happen, against the real CLI: a runner SIGKILLed with its wrapper, SIGTERM / SIGHUP to the
orchestrator, Ctrl-C while the link is cut or the host's sshd is stopped, a sweep killed with `kill -9` whose runners
live on, a GPU held by another runner. Each says what the user sees, how fast, and that no run stays RUNNING unless
its runner may still be running.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock
from mlflow.tracking import MlflowClient

from orchestrator.paths import PROJECT_ROOT
from tests.sshd import SSHD
from tests.test_ssh_e2e import _descendants, _signal_each, group_alive

# Long enough to be interrupted mid-decode on any machine; never paid in full. A runner that sends our runner's
# `start` and progress events and idles: what a runner computes does not matter to these faults, and ours cost ~5 s
# of imports and a core while it decoded beside the test (test_a_sweep_killed_with_kill_9...'s first sweep and
# tests/test_ssh_e2e.py stop ours).
SCRIPT = Path(__file__).parent / "scripts" / "decoding_runner.py"
LONG = ["runner=script", f"runner.path={SCRIPT}"]
LEASES = "+host.env.SPECBENCH_GPU_LEASES=1"   # held on this GPU-less machine too (auto: where GPUs are)


def start_cli(args: list[str], cwd: Path = PROJECT_ROOT, env: dict | None = None) -> subprocess.Popen:
    # SIGINT back to its default: a suite started in the background inherits it ignored
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=cwd, text=True,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(found, what: str, timeout: float = 180):
    """Poll `found()` until it returns something truthy; the event, not a guess, ends the wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := found():
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def started_runs(workdir: Path) -> list[Path]:
    """Host run dirs whose runner is decoding (its `start` event is written)."""
    return [e.parent for e in workdir.glob("runs/*/events.jsonl") if '"start"' in e.read_text()]


def runs_of(runs_dir: Path) -> list:
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specbench")
    return client.search_runs([exp.experiment_id]) if exp else []


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "1000"})   # lines unwrapped


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def host_overrides(kind: str, workdir: Path, request) -> list[str]:
    if kind == "local":
        return ["host=local", f"host.workdir={workdir}"]
    return request.getfixturevalue("sshd").overrides(workdir=str(workdir))


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_runner_killed_with_its_wrapper_fails_as_vanished_within_30_s(kind, tmp_path, request):
    workdir = tmp_path / "work"
    proc = start_cli([*host_overrides(kind, workdir, request), *LONG])
    try:
        (run_dir,) = wait_for(lambda: started_runs(workdir), "the runner starting")
        os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)    # what the OOM killer or a reboot does
        killed = time.monotonic()
        out = finish(proc, timeout=60)
        noticed = time.monotonic() - killed
    finally:
        finish(proc, timeout=1)
    assert proc.returncode == 1, out[-3000:]
    assert noticed < 30, f"{noticed:.1f} s to notice"
    assert "runner_vanished" in out and "dmesg" in out, out[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.id"] == "runner_vanished"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_the_runner_and_close_the_run_killed(sig, code, tmp_path):
    workdir = tmp_path / "work"
    proc = start_cli(["host=local", f"host.workdir={workdir}", *LONG])
    try:
        (run_dir,) = wait_for(lambda: started_runs(workdir), "the runner starting")
        pgid = int((run_dir / "pid").read_text())
        proc.send_signal(sig)
        out = finish(proc, timeout=60)
    finally:
        finish(proc, timeout=1)
    assert not group_alive(pgid), "the runner outlived the orchestrator"
    assert proc.returncode == code, out[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED", out[-3000:]
    assert run.data.tags["stopped_by"] == signal.Signals(sig).name


def test_ctrl_c_during_a_link_cut_ends_within_10_s_and_says_how_to_stop(sshd_netns, tmp_path):
    facts = sshd_netns.facts
    workdir = Path(facts.host_config()["workdir"])
    proc = start_cli([*facts.overrides(io_timeout=1.5, connect_timeout=1.5), *LONG])
    try:
        (run_dir,) = wait_for(lambda: started_runs(workdir), "the runner starting")
        sshd_netns.cut()
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out = finish(proc, timeout=60)
        took = time.monotonic() - sent
    finally:
        sshd_netns.restore()
        finish(proc, timeout=1)
    assert took < 10, f"{took:.1f} s after Ctrl-C"
    assert proc.returncode == 130, out[-3000:]
    flat = " ".join(out.split())
    assert "may still be running" in flat and "python -m orchestrator stop" in flat, out[-3000:]
    pgid = int((run_dir / "pid").read_text())
    assert group_alive(pgid), "the cut should have kept the stop from reaching the host"
    (run,) = runs_of(tmp_path / "runs")
    local_dir = Path(run.data.tags["run_dir"])
    stopped = cli("stop", str(local_dir))
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert not group_alive(pgid)
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED"


def test_a_signal_the_host_cannot_hear_leaves_the_run_unsettled_until_stop_settles_it(tmp_path):
    """The whole sshd stopped (SIGSTOP: a hung box; the link stays up and says nothing) when Ctrl-C comes: the stop
    cannot reach the runner, which may still be running, so its MLflow run is not closed KILLED as if it had
    stopped: it stays RUNNING, tagged with what is known; `reap` leaves it (still running), `stop` settles it."""
    server = SSHD(tmp_path / "sshd")
    facts = server.start()
    workdir = Path(facts.host_config()["workdir"])
    proc = start_cli([*facts.overrides(io_timeout=1.5, connect_timeout=1.5), *LONG])
    group, frozen = None, set()
    try:
        (host_dir,) = wait_for(lambda: started_runs(workdir), "the runner starting")
        group = int((host_dir / "pid").read_text())
        (job_file,) = wait_for(lambda: _in_mlflow(tmp_path / "runs"), "the run in MLflow")
        frozen = _descendants(server.proc.pid)   # the listener and every connection's processes
        _signal_each(frozen, signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out = finish(proc, timeout=60)
        took = time.monotonic() - sent
        (run,) = runs_of(tmp_path / "runs")
        _signal_each(frozen, signal.SIGCONT)
        frozen = set()
        reaped = cli("reap")
        (after_reap,) = runs_of(tmp_path / "runs")
        stopped = cli("stop", str(job_file.parent))
    finally:
        _signal_each(frozen, signal.SIGCONT)
        if group is not None and group_alive(group):
            os.killpg(group, signal.SIGKILL)
        server.stop()
        finish(proc, timeout=1)
    assert proc.returncode == 130 and took < 15, (took, out[-3000:])
    flat = " ".join(out.split())
    assert "may still be running" in flat and f"UNSETTLED run dir: {job_file.parent}" in flat, out[-3000:]
    assert run.info.status == "RUNNING", out[-3000:]
    assert run.data.tags["stopped_by"] == "user" and "did not confirm the stop" in run.data.tags["stop_unconfirmed"]
    said = reaped.stdout + reaped.stderr
    assert reaped.returncode == 0 and "still running; follow it" in said, said[-3000:]
    assert after_reap.info.status == "RUNNING"
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert not group_alive(group)
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED" and "stop_unconfirmed" not in run.data.tags, run.data.tags


def test_a_held_gpu_refuses_a_run_on_it(tmp_path):
    workdir = tmp_path / "work"
    holder = start_cli(["host=local", f"host.workdir={workdir}", LEASES, "gpus=[1]", *LONG])
    try:
        wait_for(lambda: started_runs(workdir), "the first runner starting")
        second = subprocess.run([sys.executable, "-m", "orchestrator", "host=local", f"host.workdir={workdir}",
                                 LEASES, "gpus=[1]", *LONG], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                timeout=180)
        holder.send_signal(signal.SIGINT)
        finish(holder, timeout=60)
    finally:
        finish(holder, timeout=1)
    out = second.stdout + second.stderr
    assert second.returncode == 1, out[-3000:]
    assert "gpu_busy" in out and "GPU 1 is held by run" in out, out[-3000:]
    statuses = {r.data.tags.get("failure.id"): r.info.status for r in runs_of(tmp_path / "runs")}
    assert statuses["gpu_busy"] == "FAILED"


# Our runner's few tokens: a run that ends by itself with results.
SHORT = ["device=cpu", "method=ar", "baseline=none", "num_prompts=2", "max_new_tokens=24"]


def _sweep(tmp_path: Path, name: str, jobs: str, runner: list[str]) -> subprocess.Popen:
    """A 2-worker sweep over a local pool of GPUs 0 and 1; `jobs`: a sweep over seed (ours) or runner.args."""
    pool = (f"pool.hosts=[{{host:{{name:lh,kind:local,workdir:{tmp_path / 'hostwork'},"
            f"env:{{SPECBENCH_GPU_LEASES:1}}}},gpus:[0,1]}}]")
    return start_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", pool,
                      f"pool.lock_dir={tmp_path / name / 'leases'}", *runner, jobs],
                     cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / name), "COLUMNS": "1000"})   # unwrapped


def _sweep_runners(workdir: Path) -> list[int]:
    """Once both runners of a 2-job sweep decode: their process groups."""
    wait_for(lambda: len(started_runs(workdir)) == 2, "both runners of the sweep starting")
    return [int((d / "pid").read_text()) for d in started_runs(workdir)]


def _in_mlflow(runs_dir: Path) -> list[Path]:
    """Local run dirs whose job file names their MLflow run (written once MLflow opened it)."""
    return [f for f in runs_dir.rglob("job.json") if json.loads(f.read_text()).get("mlflow_run_id")]


def _spans(workdir: Path) -> list[tuple[str, float, float]]:
    """(CUDA_VISIBLE_DEVICES, start, end) of every runner on the host, from its own events."""
    out = []
    for events in workdir.glob("runs/*/events.jsonl"):
        lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
        start = next(e for e in lines if e["event"] == "start")
        out.append((start["cuda_visible_devices"], start["time"], lines[-1]["time"]))
    return out


def test_a_sweep_killed_with_kill_9_never_shares_its_gpus_with_the_next(tmp_path):
    """Separate local lease dirs, as two sweeps of two machines (or a lock dir wiped) would have: only the leases
    held on the host by the first sweep's runners can keep the second one off their GPUs."""
    workdir = tmp_path / "hostwork"
    first = _sweep(tmp_path, "first", "seed=0,1", SHORT)   # ours: reap logs their results at the end
    runners: list[int] = []

    def both_stopped() -> bool:
        # each stopped as soon as it decodes: they live on, and cannot finish before the second sweep tries (on a
        # loaded machine the first used to finish its few tokens before the second had started)
        for run in started_runs(workdir):
            if (pgid := int((run / "pid").read_text())) not in runners:
                os.killpg(pgid, signal.SIGSTOP)
                runners.append(pgid)
        return len(runners) == 2

    try:
        wait_for(both_stopped, "both runners of the first sweep starting")
        # MLflow opens each run in the background once its runner started; this test is about runs MLflow holds
        # RUNNING (one killed before that: tests/test_tracking_outage.py).
        wait_for(lambda: len(_in_mlflow(tmp_path / "first")) == 2, "both runs of the first sweep in MLflow")
        os.killpg(first.pid, signal.SIGKILL)   # the sweep, its joblib workers and nothing else (runners: setsid)
        first.wait()
        second = _sweep(tmp_path, "second", "runner.args=[--steps,5],[--steps,6]", LONG)
        waited: list[str] = []

        def second_waits_or_starts():
            line = second.stdout.readline()
            waited.append(line)
            return "waiting for 1 free GPU" in line or len(started_runs(workdir)) > 2

        wait_for(second_waits_or_starts, "the second sweep waiting or starting")
    finally:
        for pgid in runners:
            os.killpg(pgid, signal.SIGCONT)
    out = "".join(waited) + finish(second, timeout=600)
    assert second.returncode == 0, out[-3000:]
    assert "held on the host by runners of ours: lh GPU 0, 1" in out, out[:3000] + "\n[...]\n" + out[-2000:]
    spans = _spans(workdir)
    assert len(spans) == 4
    for gpu in ("0", "1"):
        mine = sorted((s, e) for g, s, e in spans if g == gpu)
        assert all(prev_end <= start for (_, prev_end), (start, _) in zip(mine, mine[1:])), (gpu, mine)

    # The killed sweep left its parent and children RUNNING although its runners exited 0: reap settles them.
    assert {r.info.status for r in runs_of(tmp_path / "first")} == {"RUNNING"}
    reaped = subprocess.run([sys.executable, "-m", "orchestrator", "reap"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "first")})
    assert reaped.returncode == 0, reaped.stdout[-3000:] + reaped.stderr[-3000:]
    runs = runs_of(tmp_path / "first")
    assert [r.info.status for r in runs] == ["FINISHED"] * 3, reaped.stdout[-3000:]
    assert all("tokens_per_s" in r.data.metrics for r in runs if r.data.tags.get("sweep") != "parent")


def test_sigterm_to_a_sweeps_main_process_stops_every_job(tmp_path):
    """`timeout` (and a scheduler that signals one process) TERMs the sweep's main process only, not its joblib
    workers: every runner must still be stopped, every run closed KILLED (the parent too), and the sweep exit 143."""
    workdir = tmp_path / "hostwork"
    sweep = _sweep(tmp_path, "first", "runner.args=[--steps,3000],[--steps,3001],[--steps,3002],[--steps,3003]",
                   LONG)   # 4 jobs, 2 workers: jobs 2 and 3 must never start
    runners: list[int] = []
    try:
        runners = _sweep_runners(workdir)
        wait_for(lambda: len(_in_mlflow(tmp_path / "first")) == 2, "both runs of the sweep in MLflow")
        sweep.send_signal(signal.SIGTERM)                    # the main process alone
        sent = time.monotonic()
        out = finish(sweep, timeout=180)
        took = time.monotonic() - sent
        print(f"SIGTERM to the sweep's main process: exit {took:.1f} s later")
    finally:
        for pgid in runners:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
    assert sweep.returncode == 143, out[-3000:]
    assert not any(group_alive(pgid) for pgid in runners), out[-3000:]
    runs = runs_of(tmp_path / "first")
    parent = [r.info.status for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("sweep") != "parent"]
    assert [r.info.status for r in children] == ["KILLED"] * 4 and parent == ["KILLED"], (parent, out[-3000:])
    assert {r.data.tags["stopped_by"] for r in children} == {"SIGTERM"}
    assert len(list(workdir.glob("runs/*"))) == 2, out[-3000:]   # no runner launched after the signal


def test_sigterm_to_a_sequential_sweep_starts_no_further_job(tmp_path):
    workdir = tmp_path / "work"
    sweep = start_cli(["-m", "seed=0,1", "host=local", f"host.workdir={workdir}", *LONG], cwd=tmp_path,
                      env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
    wait_for(lambda: started_runs(workdir) or sweep.poll() is not None, "job 0's runner starting")
    sweep.send_signal(signal.SIGTERM)
    out = finish(sweep, timeout=180)
    assert sweep.returncode == 143, out[-3000:]
    assert len(list(workdir.glob("runs/*"))) == 1 and "Traceback" not in out, out[-3000:]
    runs = runs_of(tmp_path / "runs")
    statuses = sorted((r.data.tags.get("sweep") == "parent", r.info.status) for r in runs)
    assert statuses == [(False, "KILLED"), (False, "KILLED"), (True, "KILLED")], (statuses, out[-3000:])
    assert "job 1 not started: the sweep was stopped (SIGTERM)" in out, out[-3000:]


def _one_gpu_pool(tmp_path: Path) -> list[str]:
    return [f"pool.hosts=[{{host:{{name:lh,kind:local,workdir:{tmp_path / 'hostwork'},"
            f"env:{{SPECBENCH_GPU_LEASES:1}}}},gpus:[0]}}]", f"pool.lock_dir={tmp_path / 'leases'}"]


def _read_until(proc: subprocess.Popen, text: str, seen: list[str]) -> None:
    """Read the CLI's output until a line holds `text` (kept in `seen`); its end first fails the test."""
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} in the output:\n{''.join(seen)[-3000:]}")


def test_ctrl_c_while_waiting_for_a_pool_gpu_exits_130_and_starts_nothing(tmp_path):
    """A run waits for its GPU, which another job of this machine leases; the user gives up (it used to end in a
    traceback through Hydra, exit 1)."""
    (tmp_path / "leases").mkdir()
    with FileLock(str(tmp_path / "leases" / "lh.gpu0.lock")):     # the other job's lease
        proc = start_cli([*_one_gpu_pool(tmp_path), *LONG], cwd=tmp_path,
                         env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
        seen: list[str] = []
        try:
            _read_until(proc, "waiting for 1 free GPU", seen)
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            out = "".join(seen) + finish(proc, timeout=60)
            print(f"Ctrl-C while waiting for a GPU: exit {time.monotonic() - sent:.2f} s later")
        finally:
            finish(proc, timeout=1)
    assert proc.returncode == 130, out[-3000:]
    assert "Ctrl-C: stopped while waiting for GPUs; nothing was started" in out and "Traceback" not in out, out
    assert not (tmp_path / "hostwork").exists() and runs_of(tmp_path / "runs") == []


def test_sigterm_to_a_parallel_sweep_closes_a_job_waiting_for_its_gpu_killed(tmp_path):
    """Two jobs, two workers, one GPU: one job waits for the other's lease when the sweep is signalled. Both end
    KILLED, the waiting one never launched, the sweep exits 143 without a traceback."""
    proc = start_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *_one_gpu_pool(tmp_path), *LONG,
                      "seed=0,1"], cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
    workdir = tmp_path / "hostwork"
    seen: list[str] = []
    pgids: list[int] = []
    try:
        _read_until(proc, "waiting for 1 free GPU", seen)
        (run_dir,) = wait_for(lambda: started_runs(workdir), "job 0's runner starting")
        pgids.append(int((run_dir / "pid").read_text()))
        proc.send_signal(signal.SIGTERM)
        out = "".join(seen) + finish(proc, timeout=180)
    finally:
        for pgid in pgids:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
    assert proc.returncode == 143 and "Traceback" not in out, out[-3000:]
    assert "SIGTERM: stopped while waiting for GPUs; nothing was started" in out, out[-3000:]
    assert not group_alive(pgids[0]) and len(list(workdir.glob("runs/*"))) == 1, out[-3000:]
    runs = runs_of(tmp_path / "runs")
    parent = [r.info.status for r in runs if r.data.tags.get("sweep") == "parent"]
    children = sorted((r.data.tags["host"], r.info.status, r.data.tags["stopped_by"]) for r in runs
                      if r.data.tags.get("sweep") != "parent")    # the waiting one names the pool: no host yet
    assert parent == ["KILLED"] and children == [("lh", "KILLED", "SIGTERM"), ("pool:lh", "KILLED", "SIGTERM")]


@pytest.mark.parametrize("sig, to_group, code", [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)])
def test_a_signal_to_a_parallel_sweep_with_idle_workers_stops_the_busy_one_cleanly(sig, to_group, code, tmp_path):
    """Three workers, two jobs: one worker never gets a job, job 0's is idle once it finished, job 1's decodes.
    Ctrl-C in a terminal reaches every worker (the sweep's process group), a scheduler's SIGTERM the main process,
    which passes it on. An idle worker used to die of it: joblib's pool broke, killed the worker stopping job 1's
    runner (its run left RUNNING, not in MLflow) and the sweep ended in tracebacks."""
    workdir = tmp_path / "work"
    proc = start_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=3", "host=local", f"host.workdir={workdir}",
                      *LONG, "runner.args=[--steps,1],[--steps,3000]"],
                     cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
    seen: list[str] = []
    pgids: list[int] = []
    try:
        _read_until(proc, "FINISHED run dir", seen)     # job 0 (one step) reported: its worker idles
        runs = wait_for(lambda: len(started := started_runs(workdir)) == 2 and started, "job 1's runner starting")
        pgids = [int((d / "pid").read_text()) for d in runs]
        os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)
        out = "".join(seen) + finish(proc, timeout=180)
    finally:
        for pgid in pgids:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
    assert proc.returncode == code and "Traceback" not in out, out[-3000:]
    assert not any(group_alive(pgid) for pgid in pgids)
    runs = runs_of(tmp_path / "runs")
    statuses = sorted((r.data.tags.get("sweep") == "parent", r.data.params.get("runner.args.1"), r.info.status)
                      for r in runs)
    assert statuses == [(False, "1", "FINISHED"), (False, "3000", "KILLED"), (True, None, "KILLED")], out[-3000:]


def _loky_workers_of(pid: int) -> list[int]:
    """The joblib (loky) worker processes of `pid`: from their fork on, before they have run any of our code."""
    workers = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid and \
                    b"loky" in (stat.parent / "cmdline").read_bytes():
                workers.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):   # a process that ended while we looked
            continue
    return workers


def test_ctrl_c_as_a_parallel_sweeps_workers_start_ends_it_without_a_traceback(tmp_path):
    """Ctrl-C (the whole process group) the moment the first worker exists: a worker that had not yet set its
    signals used to die of it (TerminatedWorkerError from joblib, a traceback); now it is spawned with them blocked.
    Every run is closed KILLED; a job the Ctrl-C reached before it began has no run of its own (under load, about
    one run in three: neither had begun), and the parent counts both jobs as not finished."""
    proc = start_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "host=local",
                      f"host.workdir={tmp_path / 'work'}", *LONG, "seed=0,1"],
                     cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
    try:
        wait_for(lambda: _loky_workers_of(proc.pid), "a joblib worker process", timeout=120)
        os.killpg(proc.pid, signal.SIGINT)
        out = finish(proc, timeout=180)
    finally:
        finish(proc, timeout=1)
    assert proc.returncode == 130 and "Error" not in out and "Traceback" not in out, out[-3000:]
    runs = runs_of(tmp_path / "runs")
    assert {r.info.status for r in runs} == {"KILLED"}, out[-3000:]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(runs) <= 3 and parent.data.tags["sweep.failed"] == "2", out[-3000:]


def test_an_unreachable_host_leaves_the_run_alone_and_stop_says_what_to_type_there(tmp_path):
    """A host that accepts the TCP connection and then says nothing (its sshd stopped, as a hung box does):
    `reap` leaves the run RUNNING, `stop` and `attach` say in one line that the host cannot be reached (`stop` with
    the `kill` to type there) and exit non-zero; once the host answers again, `stop` stops the run (KILLED)."""
    server = SSHD(tmp_path / "sshd")
    facts = server.start()
    workdir = Path(facts.host_config()["workdir"])
    proc = start_cli([*facts.overrides(), *LONG])
    group = None
    try:
        (host_dir,) = wait_for(lambda: started_runs(workdir), "the runner starting")
        group = int((host_dir / "pid").read_text())
        os.killpg(group, signal.SIGSTOP)   # it lives on (idle: the box is shared) while the host is away
        (job_file,) = wait_for(lambda: _in_mlflow(tmp_path / "runs"), "the run in MLflow")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            reaped, stopped, attached = (cli(*args) for args in (["reap"], ["stop", str(job_file.parent)],
                                                                  ["attach", str(job_file.parent)]))
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert {r.info.status for r in runs_of(tmp_path / "runs")} == {"RUNNING"}
        os.killpg(group, signal.SIGCONT)
        stopped_later = cli("stop", str(job_file.parent))
    finally:
        if group is not None and group_alive(group):
            os.killpg(group, signal.SIGCONT)
            os.killpg(group, signal.SIGKILL)
        server.stop()
        finish(proc, timeout=1)
    out = reaped.stdout + reaped.stderr
    assert reaped.returncode == 0 and "host unreachable, left RUNNING" in out, out[-3000:]
    assert "closing it" not in out and "Traceback" not in out, out[-3000:]
    for done, what in ((stopped, "kill -TERM -- -$(cat "), (attached, "attach")):
        said = done.stdout + done.stderr
        assert done.returncode == 1 and len(said.strip().splitlines()) == 1, said[-3000:]
        assert "cannot reach the host" in said and what in said, said
    assert stopped_later.returncode == 0, stopped_later.stdout[-3000:] + stopped_later.stderr[-3000:]
    assert not group_alive(group)
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED" and run.data.tags["stopped_by"] == "user"


def test_a_parallel_sweeps_workers_leave_once_its_main_process_is_killed(tmp_path):
    """`kill -9` of a joblib sweep's main process: the worker running job 1 finishes it (its run logged), and every
    worker then exits; they ignore SIGINT/SIGTERM between jobs, and an idle one used to wait for work for ever."""
    workdir = tmp_path / "work"
    go = tmp_path / "go"     # job 1's runner ends once this exists: after the main process is killed
    proc = start_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=3", "host=local", f"host.workdir={workdir}",
                      *LONG, f"runner.args=[--steps,1],[--until,{go}]"],
                     cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
    seen: list[str] = []
    try:
        _read_until(proc, "FINISHED run dir", seen)      # job 0 reported: its worker idles, one never had a job
        wait_for(lambda: len(started_runs(workdir)) == 2, "job 1's runner starting")
        workers = _loky_workers_of(proc.pid)             # its three workers and loky's resource tracker
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        go.touch()
    assert len(workers) == 4, workers
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() and b"loky" in Path(f"/proc/{pid}/cmdline").read_bytes()
                             for pid in workers), "every worker (and the tracker) leaving", timeout=300)
    finished = sorted(r.data.params.get("runner.args.0") for r in runs_of(tmp_path / "runs")
                      if r.data.tags.get("sweep") != "parent" and r.info.status == "FINISHED")
    assert finished == ["--steps", "--until"]


def _caught_interrupt(signum: int) -> BaseException:
    from orchestrator.signals import Interrupted

    return Interrupted(signum)


def test_an_interrupt_crosses_from_a_worker_process_whole():
    """What a signal raises must come back from a joblib worker (in a job's result or as its exception) as it
    was: one that failed to unpickle broke the pool ("A result has failed to un-serialize") and ended the sweep in
    a traceback."""
    from concurrent.futures import ProcessPoolExecutor

    from orchestrator.signals import Interrupted, exit_code

    with ProcessPoolExecutor(1) as pool:
        back = pool.submit(_caught_interrupt, signal.SIGTERM).result(timeout=120)
    assert isinstance(back, Interrupted) and back.signum == signal.SIGTERM and exit_code(back) == 143


SIGNAL_AS_A_JOB_ENDS = """
import os, signal
from orchestrator import signals
signals._worker[0] = True      # a joblib worker of a sweep, between jobs: signals ignored
signals._ignore()
ignore = signals._ignore

def signal_now():   # the sweep's SIGTERM lands as the job's handling ends, before the worker ignores it again
    signals._ignore = ignore
    os.kill(os.getpid(), signal.SIGTERM)
    ignore()

signals._ignore = signal_now
with signals.handling():
    pass
print("job ended")
"""


def test_a_signal_reaching_a_worker_as_its_job_ends_is_dropped():
    """A sweep's signal that reached a worker as its job ended (job 0 of a sweep with idle workers, in CI) raised
    out of the job: joblib took the worker's KeyboardInterrupt for the sweep's own, the main process said
    "interrupted" and killed the workers still stopping their runners (a run left out of MLflow, the sweep FAILED).
    Python runs a signal's handler at its next check, which may fall in the job's last lines: there it is dropped."""
    done = subprocess.run([sys.executable, "-c", SIGNAL_AS_A_JOB_ENDS], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "job ended\n", done.stderr[-3000:]
