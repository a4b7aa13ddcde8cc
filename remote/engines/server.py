"""An engine's OpenAI-compatible server as a context manager: started as the runner's child, its output streamed
into the runner's own (runner.log), stopped on every path.

Contract: `with Server(argv, url, ready_path, env, timeout) as server:` starts `argv` in the runner's process group
(so `stop`, Ctrl-C and the orchestrator's TERM/KILL of the group reach it and the processes it spawns), copies each
line it prints to stdout as it comes, keeping the last LAST_LINES, and returns once GET `url + ready_path` answers
200. A server that exits first, or does not answer within `timeout` seconds, raises EngineStartError whose message
ends with the server's own last lines. On leaving (normally, on an exception, on SIGTERM turned into SystemExit by
the caller) the server and every process under it get SIGTERM, then SIGKILL after STOP_GRACE seconds; Linux's
parent-death signal ends it too should the runner itself be killed alone. `server.started_s`: seconds to ready.
Non-goal: choosing the engine's flags (remote.engines.kinds).
"""
from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from ..errors import EngineStartError

LAST_LINES = 40
STOP_GRACE = 15.0        # seconds between SIGTERM and SIGKILL (vLLM shuts its engine core down in ~1-3 s)
POLL_EVERY = 0.5


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the runner dies (PR_SET_PDEATHSIG = 1)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children first found through /proc's children lists)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found += kids
            queue += kids
    return found


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET; (0, why) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


class Server:
    def __init__(self, argv: list[str], url: str, ready_path: str, env: dict[str, str] | None = None,
                 timeout: float = 600.0, name: str = "engine"):
        self.argv, self.url, self.ready_path = argv, url.rstrip("/"), ready_path
        self.env, self.timeout, self.name = env, timeout, name
        self.last = collections.deque(maxlen=LAST_LINES)
        self.proc: subprocess.Popen | None = None
        self.started_s = 0.0
        self._reader: threading.Thread | None = None

    def __enter__(self) -> "Server":
        started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env, preexec_fn=_die_with_parent)
        self._reader = threading.Thread(target=self._copy, daemon=True)
        self._reader.start()
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - started
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _copy(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.last.append(line)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _tail(self) -> str:
        if self._reader is not None:
            self._reader.join(timeout=2.0)     # the last lines of a server that exited
        lines = [line for line in self.last if line.strip()][-12:]
        return "\n".join(f"  | {line}" for line in lines) or "  | (it printed nothing)"

    def _wait_ready(self, started: float) -> None:
        while True:
            if self.proc.poll() is not None:
                waited = time.monotonic() - started
                raise EngineStartError(f"Engine {self.name}: the server exited with code {self.proc.returncode} "
                                       f"before it answered ({waited:.0f} s); its last lines:\n{self._tail()}")
            status, _ = get(self.url + self.ready_path, timeout=2.0)
            if status == 200:
                return
            if time.monotonic() - started > self.timeout:
                raise EngineStartError(f"Engine {self.name}: the server did not answer {self.url}{self.ready_path} "
                                       f"within {self.timeout:.0f} s (engine.start_timeout); its last lines:\n"
                                       f"{self._tail()}")
            time.sleep(POLL_EVERY)

    def stop(self) -> None:
        """TERM to the server and everything under it, KILL to what is left after STOP_GRACE s; waits for it."""
        proc = self.proc
        if proc is None:
            return
        tree = [proc.pid, *descendants(proc.pid)]
        for pid in tree:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline and any(_alive(pid) for pid in tree if pid != proc.pid) \
                or proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in [*tree, *descendants(proc.pid)]:
            _signal(pid, signal.SIGKILL)
        proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        self.proc = None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
