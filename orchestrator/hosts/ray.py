"""The Ray host: a job on a node of the user's Ray cluster, the node and GPUs chosen by Ray.

- `connect(settings)`: this process's Ray driver for the cluster at `host.address` (one per process, kept across
  jobs). The head is asked by TCP first: an unreachable one is one HostError line within `connect_timeout`, where
  ray.init would retry for ever. The job's runtime environment carries `remote/` (py_modules) to every node; a
  node needs Ray and the runner's packages, nothing of ours.
- `RayHost(settings)`: the Host primitives on `settings.node`, through a NodeAgent actor pinned there
  (orchestrator.hosts.ray_node); the runner bundle is copied from the node's runtime environment (`bundle_source`),
  never sent; no GPU leases of ours (Ray's). An agent that does not answer while Ray still counts its node alive is
  asked again for `reconnect_timeout` s; a node Ray declared dead (its health check: about 15 s after it stops
  answering) is HostGone, naming the node, at the next call.
Placement (a GpuHold actor per job) is orchestrator.hosts.ray_place.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from typing import Any

from ..paths import REMOTE_PACKAGE
from . import plain_files, ray_node
from .base import CommandFailed, Host, HostError, HostGone, LinkLost, Result
from .room import no_room
from .settings import RaySettings

NAMESPACE = "specbench"
CALL_MARGIN = 30.0   # seconds beyond a command's own timeout that its answer may take
log = logging.getLogger(__name__)


def connect(settings: RaySettings):
    """The `ray` module, connected as a driver to the cluster at `settings.address` (once per process)."""
    import ray
    import ray.cloudpickle

    if ray.is_initialized():
        if _connected_to[0] == settings.address:
            return ray
        ray.shutdown()
    _reachable(settings.address, settings.connect_timeout)
    for module in (ray_node, plain_files):   # the nodes need nothing of ours installed
        ray.cloudpickle.register_pickle_by_value(module)
    term = signal.getsignal(signal.SIGTERM)   # ray.init replaces it with an exit; ours stops the runner first
    try:
        ray.init(address=settings.address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False,
                 runtime_env={"py_modules": [str(REMOTE_PACKAGE)], "excludes": ["__pycache__", "*.pyc"]})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise HostError(f"ray: cannot connect to the cluster at {settings.address}: {_one_line(exc)}") from None
    finally:
        if term is not None:
            signal.signal(signal.SIGTERM, term)
    _connected_to[0] = settings.address
    return ray


_connected_to: list[str | None] = [None]   # the address this process's driver is connected to


def _reachable(address: str, timeout: float) -> None:
    """One line if the head's port does not answer (address `auto` is the local node's: Ray finds it)."""
    if address == "auto":
        return
    where = address.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise HostError(f"host.address: {address!r} is not <head>:<port>, ray://<head>:<port> or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc)).lower()
        raise HostError(f"ray: cannot reach the cluster's head at {where} ({why} within {timeout:g} s); is it up "
                        f"(`ray status --address {where}` on a node)?") from None


def node_state(ray, node_id: str) -> dict[str, Any] | None:
    """The GCS's record of a node (Alive, NodeManagerAddress, ...), None if it never knew it."""
    return next((n for n in ray.nodes() if n["NodeID"] == node_id), None)


def node_label(settings: RaySettings) -> str:
    return f"Ray node {settings.node_ip or '?'} ({(settings.node or '?')[:8]})"


def gone_message(settings: RaySettings, state: dict[str, Any] | None) -> str:
    """The line a lost node gets (the failure catalog's node_lost matches it)."""
    why = (state or {}).get("DeathReasonMessage") or ("it is not in the cluster" if state is None else "")
    return (f"{settings.name}: {node_label(settings)} died: the cluster no longer counts it"
            + (f" ({_one_line(why)})" if why else ""))


class RayHost(Host):
    """A Ray host opened on its placed node (settings.node); cheap to construct: the agent starts at first use."""

    gpu_leases = False

    def __init__(self, settings: RaySettings):
        if not settings.node:
            raise HostError(f"{settings.name}: no Ray node to open: the job has not been placed")
        self.settings = settings
        self.name = settings.name or "ray"
        self.tied_to = settings.hold_pid
        self._agent = None
        self._facts: dict[str, Any] = {}

    # ---- what the lifecycle reads -----------------------------------------------------------------------------

    @property
    def workdir(self) -> str:  # type: ignore[override]
        typed = self.workdir_as_typed()
        return self._node("home").rstrip("/") + typed[1:] if typed.startswith("~") else typed

    def workdir_as_typed(self) -> str:
        return self.settings.workdir or "~/specbench"

    @property
    def python(self) -> str:  # type: ignore[override]
        return self.settings.python or self._node("python")

    @property
    def bundle_source(self) -> str:  # type: ignore[override]
        return self._node("bundle_source")

    # ---- the Host primitives ------------------------------------------------------------------------------------

    def run(self, command: str, *, check: bool = True, timeout: float | None = None,
            stdin: bytes | None = None) -> Result:
        code, out, err = self._call("run", command, stdin, timeout, repeat=False,
                                    wait=None if timeout is None else timeout + CALL_MARGIN)
        result = Result(command, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), host=self.name)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def put(self, local_path: str, remote_path: str) -> None:
        with open(local_path, "rb") as f:
            data = f.read()
        try:
            self._call("write", remote_path, data)
        except OSError as exc:   # the node's answer (a full disk, no such directory)
            if "No space left" in str(exc):
                raise HostError(no_room(self, os.path.dirname(remote_path), len(data), os.path.basename(local_path)))\
                    from None
            raise HostError(f"{self.name}: put {remote_path} failed: {_one_line(exc)}") from None

    def get(self, remote_path: str, local_path: str) -> None:
        data = self._call("read", remote_path)   # FileNotFoundError as the contract says
        tmp = f"{local_path}.part-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, local_path)

    def read_from(self, path: str, offset: int, limit: int | None = None) -> bytes:
        return self._call("read_from", path, offset, limit)

    def close(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            with contextlib.suppress(Exception):   # its node may be gone: nothing left to end
                connect(self.settings).kill(agent)

    # ---- the agent ------------------------------------------------------------------------------------------------

    def _node(self, key: str) -> str:
        if not self._facts:
            self._facts = self._call("where")
        return self._facts[key]

    def _start_agent(self, ray):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        state = node_state(ray, self.settings.node)
        if state is None or not state.get("Alive"):
            raise HostGone(gone_message(self.settings, state))
        agent = ray.remote(ray_node.NodeAgent).options(
            num_cpus=0, num_gpus=0, max_concurrency=4,   # a stop may come while a tail read waits
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.settings.node, soft=False)).remote()
        return agent

    def _call(self, method: str, *args, wait: float | None = CALL_MARGIN, repeat: bool = True):
        """The agent's answer to `method(*args)`; the node's own exceptions (FileNotFoundError, OSError) as they are.
        HostGone once Ray declares the node dead; one that is alive but does not answer is asked again for
        reconnect_timeout s (HostError then), or at once LinkLost where the call may have run (`repeat` false: a
        command, as over SSH)."""
        ray = connect(self.settings)
        from ray.exceptions import GetTimeoutError, RayActorError

        silent_since = None
        while True:
            try:
                if self._agent is None:
                    self._agent = self._start_agent(ray)
                return ray.get(getattr(self._agent, method).remote(*args), timeout=wait)
            except (RayActorError, GetTimeoutError) as exc:
                state = node_state(ray, self.settings.node)
                if state is None or not state.get("Alive"):
                    self._agent = None
                    raise HostGone(gone_message(self.settings, state)) from None
                if not repeat:
                    raise LinkLost(f"{self.name}: {node_label(self.settings)} did not answer a command; it may or "
                                   f"may not have run ({_one_line(exc)})") from None
                now = time.monotonic()
                silent_since = silent_since or now
                if now - silent_since > self.settings.reconnect_timeout:
                    raise HostError(f"{self.name}: {node_label(self.settings)} did not answer for "
                                    f"{self.settings.reconnect_timeout:g} s ({_one_line(exc)})") from None
                if silent_since == now:   # once: Ray's health check settles the node's fate within seconds
                    log.warning("%s: %s does not answer (%s); asking again for up to %g s while Ray checks it",
                                self.name, node_label(self.settings), type(exc).__name__,
                                self.settings.reconnect_timeout)
                if isinstance(exc, RayActorError) and not _unavailable(exc):
                    self._agent = None   # it died with its node still alive: a new one
                time.sleep(1.0)


def _unavailable(exc: BaseException) -> bool:
    """Ray's `ActorUnavailableError`: the actor may come back (its node is being checked)."""
    return type(exc).__name__ == "ActorUnavailableError"


def _one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
