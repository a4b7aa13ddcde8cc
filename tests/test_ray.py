"""Jobs on a real Ray cluster on loopback (tests/ray_cluster.py: a head and a second node, two GPUs declared each):
a sweep spread over both nodes with no GPU given to two jobs of one node at once, an engine arm (vLLM's CPU build) on a
node, and the faults as they happen: Ctrl-C or SIGTERM mid-run, the orchestrator killed with -9 (the runner finishes;
`reap` logs it), a node that dies mid-run (`node_lost` within Ray's health-check bound; also after its orchestrator
died: `reap`), the head unreachable at start. Each says what the user sees and how fast, and that nothing is left
running.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.ray_cluster import free_port
from tests.test_engines import ENGINE, ONE_SERVER, PYTHON as VLLM_PYTHON, _ours as engine_processes
from tests.test_faults import LONG, finish, runs_of, start_cli, wait_for
from tests.test_ssh_e2e import alive
from tests.test_sweep_ssh import runs

pytest.importorskip("ray", reason="ray is not installed: it is in the test extra (pip install -e '.[test]')")
# The cluster's tests one after another on one xdist worker (tests/ray_cluster.py): two at once would place jobs on each
# other's GPUs (a whole node taken by one test leaves a sweep of another one node to spread over)
ON_THE_CLUSTER = pytest.mark.xdist_group("ray-cluster")


def ray_args(cluster, work: Path, *more: str) -> list[str]:
    return ["host=ray", f"host.address={cluster.address}", f"host.workdir={work}", *more]


def started(proc: subprocess.Popen, work: Path) -> Path:
    """The run dir on its node once the runner started (its `start` event is written); the orchestrator's output if it
    ended before that."""
    def found():
        if proc.poll() is not None:
            pytest.fail(f"the orchestrator ended first (exit {proc.returncode}): {proc.stdout.read()[-3000:]}")
        return [e.parent for e in work.glob("runs/*/events.jsonl") if '"start"' in e.read_text()]

    (root,) = wait_for(found, "the runner starting")
    return root


def group_alive(pgid: int) -> bool:
    return subprocess.run(["ps", "-o", "stat=", "-s", str(pgid)], capture_output=True, text=True).stdout.strip() \
        .replace("Z", "") != ""


def ended_after(proc: subprocess.Popen, act, timeout: float) -> tuple[str, float]:
    """`act()`, then the orchestrator's output and the seconds from `act` to its exit."""
    act()
    since = time.monotonic()
    out = finish(proc, timeout=timeout)
    return out, time.monotonic() - since


def hold_pid(run_dir: Path) -> int:
    return json.loads((run_dir / "job.json").read_text())["host"]["hold_pid"]


def local_run(runs_dir: Path) -> Path:
    """The run dir here, once its job.json is: the orchestrator writes it once it knows the runner started, which
    may be after the runner's own start event on the node."""
    (job,) = wait_for(lambda: list(runs_dir.glob("*/*/job.json")), "the run's job.json")
    return job.parent


def says(pid: int, word: bytes) -> bool:
    """Whether process `pid`'s command line has `word` (False once it is gone)."""
    try:
        return word in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def in_mlflow(run_dir: Path) -> str:
    """The run's MLflow id once MLflow has it (it opens in the background)."""
    return wait_for(lambda: json.loads((run_dir / "job.json").read_text()).get("mlflow_run_id"), "the MLflow run")


def killed_with_kill_9(proc: subprocess.Popen, work: Path, runs_dir: Path) -> tuple[Path, Path]:
    """Once its runner started and MLflow has the run, the orchestrator killed with -9: the run dirs on the node
    and here."""
    try:
        root = started(proc, work)
        run_dir = local_run(runs_dir)
        in_mlflow(run_dir)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        finish(proc, timeout=1)
    return root, run_dir


@ON_THE_CLUSTER
def test_sweep_runs_on_both_nodes_without_sharing_a_gpu(ray_cluster, tmp_path):
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "-m", "method=ar,dflash,ddtree", "tree_budget=8,32",
         *ray_args(ray_cluster, work), "hydra.launcher.n_jobs=4", "model=tiny-qwen3", "num_prompts=1",
         "max_new_tokens=4"], capture_output=True, text=True, cwd=tmp_path, timeout=900,
        env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _, parent, children = runs(tmp_path)
    assert parent.info.status == "FINISHED" and len(children) == 6
    assert all(c.info.status == "FINISHED" for c in children)
    ran = [c for c in children if c.data.tags.get("skipped") != "true"]
    assert len(ran) == 4 and {c.data.tags["ray.node_ip"] for c in ran} == {"127.0.0.2", "127.0.0.3"}
    jobs = []
    for c in ran:   # each job's GPUs as its runner saw them, its node, and its runner's life on the node
        root = work / "runs" / c.data.tags["run_id_local"]
        config = yaml.safe_load((Path(c.data.tags["run_dir"]) / "config.yaml").read_text())
        assert c.data.tags["cuda_visible_devices"] == ",".join(map(str, config["gpus"])) == c.data.tags["gpus"]
        jobs.append((c.data.tags["ray.node_id"], set(config["gpus"]), (root / "pid").stat().st_mtime,
                     (root / "exit_code").stat().st_mtime))
    for (node_a, gpus_a, start_a, end_a), (node_b, gpus_b, start_b, end_b) in itertools.combinations(jobs, 2):
        if node_a == node_b and start_a < end_b and start_b < end_a:
            assert not gpus_a & gpus_b, jobs
    # the sweep's tables, as for a local sweep over two hosts: one setup a node (runs on different machines are
    # compared within their own), each titled by its node, every run that ran in one of them
    assert "best speedup" in proc.stdout, proc.stdout[-3000:]
    titled = re.findall(r"host (ray@[\d.]+) \(cpu\)", proc.stdout)
    assert set(titled) == {"ray@127.0.0.2", "ray@127.0.0.3"}, proc.stdout[-3000:]
    done = re.findall(r"^(\S+) +done ", proc.stdout, re.M)
    assert {c.info.run_name.removesuffix("-tiny-qwen3") for c in ran} <= set(done), proc.stdout[-3000:]


@ON_THE_CLUSTER
@pytest.mark.skipif(not Path(VLLM_PYTHON).is_file(), reason="SPECBENCH_VLLM_PYTHON (vLLM's CPU build) unset")
def test_an_engine_arm_runs_on_a_node_and_leaves_no_server(ray_cluster, tmp_path):
    work = tmp_path / "work"
    with ONE_SERVER:   # one vLLM server at a time on the box, as in tests/test_engines.py
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "method=vllm", *ENGINE, *ray_args(ray_cluster, work)],
            capture_output=True, text=True, cwd=tmp_path, timeout=900, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["engine"] == "vllm" and tags["host_kind"] == "ray", tags
    assert tags["ray.node_ip"] in ("127.0.0.2", "127.0.0.3") and tags["engine_version"] == "0.32.0", tags
    assert run.data.metrics["tokens_per_s"] > 0
    # the server (its --model names the bundle under the workdir) is gone when the run ends
    assert not [pid for pid in engine_processes(work) if says(pid, b"--model")], "the engine's server outlived its run"
    # launch.sh's watcher of the Ray hold notices its launch.sh gone at its next look, 1 s apart (job._tie)
    wait_for(lambda: not engine_processes(work), "nothing of the run left on the node", timeout=10)


# Ctrl-C reaches the terminal's whole process group; SIGTERM (timeout, systemd, SLURM) the orchestrator alone
@ON_THE_CLUSTER
@pytest.mark.parametrize("sig, code, by", [(signal.SIGINT, 130, "user"), (signal.SIGTERM, 143, "SIGTERM")])
def test_ctrl_c_or_sigterm_stops_the_runner_and_frees_its_gpus(sig, code, by, ray_cluster, tmp_path):
    work = tmp_path / "work"
    proc = start_cli([*ray_args(ray_cluster, work, "gpus=2"), *LONG], cwd=tmp_path)   # any two: a whole node
    try:
        root = started(proc, work)
        seen = json.loads((root / "events.jsonl").read_text().splitlines()[0])["cuda_visible_devices"]
        assert sorted(seen.split(",")) == ["0", "1"], seen
        pgid = int((root / "pid").read_text())
        run_dir = local_run(tmp_path / "runs")
        hold = hold_pid(run_dir)
        in_mlflow(run_dir)   # a Ctrl-C before MLflow has the run also waits for its opening, as on any host
        send = (lambda: os.killpg(proc.pid, sig)) if sig == signal.SIGINT else (lambda: proc.send_signal(sig))
        out, took = ended_after(proc, send, timeout=60)
        print(f"{signal.Signals(sig).name}: the orchestrator ended {took:.1f} s later")
    finally:
        finish(proc, timeout=1)
    assert proc.returncode == code, out[-3000:]
    assert took < 15, f"{took:.1f} s from the signal to exit"   # 1.3-2.3 s on the loaded 2-core box, 2026-12-07
    assert not group_alive(pgid), "the runner is still running on the node"
    wait_for(lambda: not alive(hold), "the GPU hold ending with its runner", timeout=30)
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED" and run.data.tags["stopped_by"] == by


@ON_THE_CLUSTER
def test_orchestrator_killed_with_kill_9_leaves_the_runner_finishing_and_reap_logs_it(ray_cluster, tmp_path):
    work, until = tmp_path / "work", tmp_path / "until"
    proc = start_cli([*ray_args(ray_cluster, work), *LONG, f"runner.args=[--until,{until}]"], cwd=tmp_path)
    root, run_dir = killed_with_kill_9(proc, work, tmp_path / "runs")
    pgid, hold = int((root / "pid").read_text()), hold_pid(run_dir)
    time.sleep(2)   # what the orchestrator's death could have stopped: nothing does
    assert group_alive(pgid) and alive(hold), "the runner or its GPU hold went with the orchestrator"
    until.touch()   # the runner ends by itself: its hold lets the GPUs go
    wait_for(lambda: (root / "exit_code").exists(), "the runner finishing")
    wait_for(lambda: not alive(hold), "the GPU hold ending with its runner", timeout=30)
    reap = subprocess.run([sys.executable, "-m", "orchestrator", "reap"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert reap.returncode == 0, reap.stdout[-3000:] + reap.stderr[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FINISHED", reap.stdout[-2000:]
    assert "decoding runner done" in (run_dir / "runner.log").read_text()


@ON_THE_CLUSTER
def test_a_node_that_dies_mid_run_fails_the_job_as_node_lost(ray_cluster, tmp_path):
    spare = ray_cluster.add_node("127.0.0.4", resources='{"spare": 1}')   # the job's node, and only this test's
    work = tmp_path / "work"
    proc = start_cli([*ray_args(ray_cluster, work, "host.resources={spare:1}"), *LONG], cwd=tmp_path)
    try:
        root = started(proc, work)
        pgid = int((root / "pid").read_text())
        # the node's Ray processes SIGKILLed: what a machine that dies does to them
        out, noticed = ended_after(proc, spare.stop, timeout=120)
        print(f"node killed: node_lost and the orchestrator's exit {noticed:.1f} s later")
    finally:
        finish(proc, timeout=1)
        spare.stop()
    assert proc.returncode == 1, out[-3000:]
    assert noticed < 45, f"{noticed:.1f} s to notice"   # Ray's health check: 5 misses 3 s apart, then our next call
    assert "node_lost" in out and "127.0.0.4" in out and "attach" not in out, out[-3000:]
    wait_for(lambda: not group_alive(pgid), "the runner stopping with its node's GPU hold", timeout=10)
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FAILED" and run.data.tags["failure.id"] == "node_lost"


@ON_THE_CLUSTER
def test_reap_closes_a_run_whose_node_died_after_its_orchestrator_as_node_lost(ray_cluster, tmp_path):
    spare = ray_cluster.add_node("127.0.0.5", resources='{"spare5": 1}')
    work = tmp_path / "work"
    proc = start_cli([*ray_args(ray_cluster, work, "host.resources={spare5:1}"), *LONG], cwd=tmp_path)
    try:
        root, _ = killed_with_kill_9(proc, work, tmp_path / "runs")
    finally:
        spare.stop()
    wait_for(lambda: not group_alive(int((root / "pid").read_text())), "the runner stopping with its GPU hold",
             timeout=10)
    reap = subprocess.run([sys.executable, "-m", "orchestrator", "reap"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "COLUMNS": "1000"})
    assert reap.returncode == 0 and "reap: 1 run(s) closed" in reap.stdout, reap.stdout[-3000:] + reap.stderr[-2000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FAILED" and run.data.tags["failure.id"] == "node_lost", reap.stdout[-3000:]


def test_an_unreachable_head_is_one_line_before_anything_runs(tmp_path):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "host=ray", f"host.address=127.0.0.1:{free_port()}",
                           f"host.workdir={tmp_path / 'work'}", "host.connect_timeout=5", *LONG],
                          capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, env={**os.environ, "COLUMNS": "1000"})
    took = time.monotonic() - start
    print(f"unreachable head: one line and the exit {took:.1f} s after the command's start")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot reach the cluster's head" in errors[0] and "nothing was started" in errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert took < 60, f"{took:.1f} s"
    assert not (tmp_path / "work").exists()


def test_ray_config_mistakes_are_refused_before_anything_starts(tmp_path):
    for args, says in ((["host=ray"], "host.address"),
                       (["host=ray", "host.address=h:1", "host.gpus=[0]"], "host.gpus"),
                       (["host=ray", "host.address=h:1", "pool=example"], "places its jobs itself"),
                       (["gpus=2"], "is for host=ray or a pool")):
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120, env={**os.environ, "COLUMNS": "1000"})
        assert proc.returncode == 2 and says in proc.stdout + proc.stderr, (args, proc.stdout + proc.stderr)


def test_the_node_side_needs_nothing_of_orchestrator_on_the_node(tmp_path):
    """The agent travels by value: it loads and works in a Python where orchestrator cannot be imported."""
    import ray.cloudpickle

    from orchestrator.hosts import plain_files, ray_node

    for module in (ray_node, plain_files):
        ray.cloudpickle.register_pickle_by_value(module)
    (tmp_path / "agent.pkl").write_bytes(ray.cloudpickle.dumps(ray_node.NodeAgent))
    (tmp_path / "log").write_bytes(b"0123456789")
    node = (f"import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] == 'orchestrator': raise ImportError(name)\n"
            f"sys.meta_path.insert(0, Block())\nimport ray.cloudpickle\n"
            f"agent = ray.cloudpickle.loads(open({str(tmp_path / 'agent.pkl')!r}, 'rb').read())()\n"
            f"print(agent.read_from({str(tmp_path / 'log')!r}, 6), agent.run('echo $((6*7))', None, 10)[1])")
    proc = subprocess.run([sys.executable, "-c", node], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["b'6789'", "b'42\\n'"], proc.stdout + proc.stderr
