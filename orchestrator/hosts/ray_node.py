"""What runs inside a Ray node for a Ray host: shipped by value (cloudpickle, with plain_files), so it needs nothing of
orchestrator there, only the standard library and Ray, which every Ray worker has.

`NodeAgent` (no CPU, no GPU, pinned to the node) is a Ray host's Host primitives there: run a bash command, read a
file from an offset, write one atomically, read one whole; the runner's commands get the worker's environment less
Ray's own variables. `GpuHold` is the job's GPU lease: Ray places it on a node with the GPUs the job asks for (Ray's
choice of node and GPU ids, its CUDA_VISIBLE_DEVICES), and it holds them for as long as the runner launched in its run
dir lives: it ends itself once the runner's process group is gone, or if no runner started within `start_within`
seconds (an orchestrator killed between placement and launch), or `RELEASE_GRACE` s after `release()` found none.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

from . import plain_files

TIMEOUT_EXIT = 124
RELEASE_GRACE = 5.0    # seconds a released hold still waits for a runner whose launch.sh is about to write its pid
WATCH_EVERY = 0.5      # seconds between looks at the runner's process group


class NodeAgent:
    def where(self) -> dict:
        """The node's facts: Ray's id for it, its address and name, the worker's Python, the home directory, and
        the directory holding the `remote` package as the job's runtime environment delivered it."""
        import ray

        import remote

        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "hostname": os.uname().nodename, "python": sys.executable, "home": os.path.expanduser("~"),
                "bundle_source": os.path.dirname(os.path.dirname(os.path.abspath(remote.__file__)))}

    def run(self, command: str, stdin: bytes | None, timeout: float | None) -> tuple[int, bytes, bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONPATH"}
        try:
            proc = subprocess.run(["bash", "-c", command], input=stdin or b"", capture_output=True, timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired as exc:
            return TIMEOUT_EXIT, exc.stdout or b"", (exc.stderr or b"") + f"\n[timed out after {timeout:g} s]".encode()
        return proc.returncode, proc.stdout, proc.stderr

    def read_from(self, path: str, offset: int, limit: int | None = None) -> bytes:
        return plain_files.read_from(path, offset, limit)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        tmp = f"{path}.part-{uuid.uuid4().hex[:8]}"   # readers never see a half-written file
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


class GpuHold:
    def __init__(self, root: str, start_within: float):
        self.root = os.path.expanduser(root)    # the run dir on the node: <workdir>/runs/<run id>
        self.deadline = time.monotonic() + start_within
        self.pgid: int | None = None
        self.lock = threading.Lock()

    def where(self) -> dict:
        """Ray's choice: the node, its address, the GPU ids it gave this hold, and the hold's pid."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "hostname": os.uname().nodename, "gpus": [int(g) for g in ray.get_gpu_ids()], "pid": os.getpid()}

    def release(self) -> bool:
        """The orchestrator launches nothing more: without a runner (RELEASE_GRACE s on), the hold ends. Whether a
        runner holds the GPUs now."""
        with self.lock:
            if self.pgid is None:
                self.deadline = min(self.deadline, time.monotonic() + RELEASE_GRACE)
            return self.pgid is not None

    def hold(self) -> str:
        """Hold the GPUs until the runner's process group ends (or none started in time), then end the actor."""
        while True:
            with self.lock:
                if self.pgid is None:
                    self.pgid = _pid(os.path.join(self.root, "pid"))
                if self.pgid is None and time.monotonic() > self.deadline:
                    why = "no runner started"
                    break
            if self.pgid is not None and not _alive(self.pgid):
                why = "the runner ended"
                break
            time.sleep(WATCH_EVERY)
        import ray

        ray.actor.exit_actor()
        return why


def _pid(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pgid: int) -> bool:
    """Whether the process group has a process that is not a zombie (as the liveness command asks)."""
    try:
        out = subprocess.run(["ps", "-o", "stat=", "-s", str(pgid)], capture_output=True, text=True).stdout
    except OSError:   # no ps: kill -0 counts zombies too, which launch.sh's parent reaps at once
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return any(not line.strip().startswith("Z") for line in out.splitlines() if line.strip())
