"""A real Ray cluster on loopback for the tests: a head (127.0.0.2) and a second node (127.0.0.3), each started with
`ray start --block` in its own session and temp dir, each declaring two GPUs (--num-gpus 2: Ray places by count,
this CPU box has none). A node is stopped as a dead machine's would be: its session SIGKILLed (Ray's workers lead
process groups of their own, in the session of their `ray start`), and stopping waits until none of it is left. The
nodes get no PYTHONPATH: what runs there comes through Ray (the runtime environment, actors shipped by value).

One cluster serves the whole test session: the tests that use it are one xdist group (one worker, one after another:
pytest_configure). Should workers share it all the same, the first that asks starts it and records it beside their
common base temp dir; each counts itself in and out under a file lock, and the last one out stops it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from filelock import FileLock

READY = "Ray runtime started"
# The `ray` of this interpreter's environment (a venv's, not another Python's on PATH)
_BESIDE = Path(sys.executable).parent / "ray"
RAY = str(_BESIDE) if _BESIDE.is_file() else shutil.which("ray")
GONE_WITHIN = 30.0   # seconds a killed node's processes get to be reaped before stopping calls them leaked


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_session(sid: int) -> list[int]:
    """The live processes of session `sid` (zombies awaiting their parent's wait are gone for this purpose)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True, check=True).stdout
    return [int(pid) for pid, s, stat in (line.split()[:3] for line in out.splitlines())
            if int(s) == sid and not stat.startswith("Z")]


def kill_session(sid: int) -> None:
    """SIGKILL every process of the session a `ray start` leads, then wait until they are gone: AssertionError
    naming what is left after GONE_WITHIN s (a leaked raylet or worker)."""
    deadline = time.monotonic() + GONE_WITHIN
    while left := in_session(sid):
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"Ray processes left after stopping its node: {left}")
        time.sleep(0.1)


class RayNode:
    """One `ray start --block` process group; `stop()` kills it as a node that dies would go."""

    def __init__(self, root: Path, ip: str, head: str | None = None, gpus: int = 2, resources: str | None = None):
        self.ip, self.port = ip, (free_port() if head is None else None)
        args = [RAY, "start", "--block", f"--node-ip-address={ip}", f"--num-gpus={gpus}", "--num-cpus=1",
                f"--temp-dir={root}", "--object-store-memory=78643200", "--disable-usage-stats"]
        args += (["--head", f"--port={self.port}", "--include-dashboard=false"] if head is None
                 else [f"--address={head}"])
        if resources:
            args.append(f"--resources={resources}")
        root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.log = root / "start.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=root, env=env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while READY not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray node {self.ip} did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        kill_session(self.proc.pid)
        self.proc.wait(timeout=30)


class RayCluster:
    """The shared cluster as its record describes it: `address`, and `add_node` for a test's own extra node (which
    the test stops)."""

    def __init__(self, record: dict):
        self.root, self.address, self.pgids = Path(record["root"]), record["address"], record["pgids"]

    @classmethod
    def start(cls) -> "RayCluster":
        # A short root: a node's sockets live under it, and a Unix socket's path has at most 107 bytes
        root = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        head = RayNode(root / "2", "127.0.0.2")
        try:
            second = RayNode(root / "3", "127.0.0.3", head=f"127.0.0.2:{head.port}")
        except BaseException:
            head.stop()
            raise
        return cls({"root": str(root), "address": f"127.0.0.2:{head.port}", "pgids": [head.proc.pid, second.proc.pid]})

    def record(self) -> dict:
        return {"root": str(self.root), "address": self.address, "pgids": self.pgids}

    def add_node(self, ip: str, resources: str | None = None) -> RayNode:
        return RayNode(self.root / ip.rsplit(".", 1)[1], ip, head=self.address, resources=resources)

    def stop(self) -> None:
        try:
            for sid in reversed(self.pgids):
                kill_session(sid)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def pytest_configure(config):
    """Under xdist, `load` (what -n gives) becomes `loadgroup`: the same, but the tests marked `xdist_group(NAME)` go
    to one worker, one after another (the cluster's tests, which share its GPUs). Here, not in addopts: a run without
    xdist (-p no:xdist) must still parse its options. A worker parses the command line anew: it learns it from its
    workerinput (pytest_configure_node) and names each test's group as the scheduler expects."""
    if getattr(config.option, "dist", None) == "load":
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get("loadgroup"):
        config.option.loadgroup = True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["loadgroup"] = node.config.getvalue("dist") == "loadgroup"


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    if RAY is None:
        pytest.skip("ray is not installed: it is in the test extra (pip install -e '.[test]')")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base   # this session's, for all its workers
    state, lock = shared / "ray-cluster.json", FileLock(str(shared / "ray-cluster.lock"))
    with lock:
        record = json.loads(state.read_text()) if state.exists() else None
        cluster = RayCluster(record) if record else RayCluster.start()
        users = (record or {}).get("users", 0) + 1
        state.write_text(json.dumps({**cluster.record(), "users": users}))
    try:
        yield cluster
    finally:
        with lock:
            record = json.loads(state.read_text())
            if record["users"] > 1:
                state.write_text(json.dumps({**record, "users": record["users"] - 1}))
            else:
                cluster.stop()
                state.unlink()
