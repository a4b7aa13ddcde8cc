"""A real Ray cluster on loopback for the tests: a head (127.0.0.2) and a second node (127.0.0.3), each started with
`ray start --block` in its own session and temp dir, each declaring two GPUs (--num-gpus 2: Ray places by count,
this CPU box has none). A node is stopped as a dead machine's would be: its process group SIGKILLed. The nodes get no
PYTHONPATH: what runs there comes through Ray (the runtime environment, actors shipped by value).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

READY = "Ray runtime started"
RAY = shutil.which("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayNode:
    """One `ray start --block` process group; `stop()` kills it as a node that dies would go."""

    def __init__(self, root: Path, ip: str, head: str | None = None, gpus: int = 2, resources: str | None = None):
        self.root, self.ip, self.head = root, ip, head
        self.port = free_port() if head is None else None
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

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while READY not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray node {self.ip} did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


class RayCluster:
    def __init__(self, root: Path):
        self.root = root
        self.head = RayNode(root / "2", "127.0.0.2")
        self.head.wait_ready()
        self.nodes = [self.head, self.add_node("127.0.0.3")]

    @property
    def address(self) -> str:
        return self.head.address

    def add_node(self, ip: str, resources: str | None = None) -> RayNode:
        node = RayNode(self.root / ip.rsplit(".", 1)[1], ip, head=self.address, resources=resources)
        node.wait_ready()
        return node

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


@pytest.fixture(scope="module")
def ray_cluster():
    if RAY is None:
        pytest.skip("ray is not installed (pip install ray; .ci/run does)")
    # A short root: a node's sockets live under it, and a Unix socket's path has at most 107 bytes
    root = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    try:
        cluster = RayCluster(root)
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
