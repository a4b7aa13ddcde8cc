"""One engine phase: a server started for one arm (AR or the speculative config), warmed up, then the run's prompts
sent at each concurrency level, the engine's counters read around each level.

Contract: `measure(engine, launch, prompts, spec, events, method)` starts the server (remote.engines.server), sends
`warmup` short requests, then per level N of `engine.concurrency` every prompt with N streams at once, and returns a
Phase: per level its Replies (in prompt order), wall time, /metrics deltas and acceptance (at concurrency 1 also each
request's own, read around it: it is alone on the server); the server's start time, version, command and peak
memory (its process tree's RSS, and GPU memory in use where nvidia-smi answers). Requests are greedy or sampled as
the run's decoding says, seeded per prompt (seed + index) like ours; `progress` events name `method`.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field

from ..events import EventWriter
from ..spec import RunSpec
from .base import Acceptance, Engine, Launch
from .client import Reply, complete, run_streams
from .prom import delta, parse
from .server import Server, descendants, get

WARMUP_TOKENS = 32


@dataclass
class Level:
    streams: int
    replies: list[Reply]
    wall_s: float
    delta: dict
    acceptance: Acceptance | None
    per_request: list[Acceptance | None] = field(default_factory=list)   # one stream: each request's own counters


@dataclass
class Phase:
    method: str
    command: list[str]
    version: str
    start_s: float
    levels: list[Level] = field(default_factory=list)
    peak_rss_gb: float = 0.0
    peak_gpu_gb: float | None = None


def measure(engine: Engine, launch: Launch, prompts: list[list[int]], spec: RunSpec, events: EventWriter,
            method: str) -> Phase:
    argv, url = engine.argv(launch), engine.url(launch)
    phase = Phase(method, argv, engine.version(launch.python), 0.0)
    print(f"engine: starting {engine.name} for {method}: {' '.join(argv)}", flush=True)
    with Server(argv, url, engine.ready_path, timeout=spec.engine.start_timeout, name=engine.name) as server, \
            Sampler(server.proc.pid) as memory:
        phase.start_s = server.started_s
        print(f"engine: {engine.name} answered after {server.started_s:.1f} s", flush=True)
        body = _body(spec, engine, engine.served(url))
        for _ in range(spec.decoding.warmup):
            complete(url, {**body(0), "prompt": prompts[0], "max_tokens": min(WARMUP_TOKENS, body(0)["max_tokens"])})
        for streams in spec.engine.concurrency:
            phase.levels.append(_level(engine, url, prompts, body, streams, events, method))
        phase.peak_rss_gb, phase.peak_gpu_gb = memory.rss_gb, memory.gpu_gb
    return phase


def _body(spec: RunSpec, engine: Engine, served: str):
    d = spec.decoding

    def body(index: int) -> dict:
        return engine.request({"model": served, "max_tokens": d.max_new_tokens,
                               "temperature": d.temperature, "seed": spec.seed + index,
                               "ignore_eos": spec.engine.ignore_eos, "stream_options": {"include_usage": True}})
    return body


def _level(engine: Engine, url: str, prompts: list[list[int]], body, streams: int, events: EventWriter,
           method: str) -> Level:
    before = parse(get(f"{url}/metrics")[1])
    done, own = [], {}

    def job(index: int):
        def send() -> Reply:
            start = parse(get(f"{url}/metrics")[1]) if streams == 1 else None
            reply = complete(url, {**body(index), "prompt": prompts[index]})
            if start is not None:      # alone on the server: the counters' change is this request's
                own[index] = engine.acceptance(delta(parse(get(f"{url}/metrics")[1]), start), url)
            done.append(index)
            events.emit("progress", method=method, done=len(done), total=len(prompts), concurrency=streams)
            return reply
        return send

    started = time.perf_counter()
    replies = run_streams([job(i) for i in range(len(prompts))], streams)
    wall = time.perf_counter() - started
    change = delta(parse(get(f"{url}/metrics")[1]), before)
    return Level(streams, replies, wall, change, engine.acceptance(change, url),
                 [own.get(i) for i in range(len(prompts))] if own else [])


class Sampler:
    """Peak memory of a process tree, read every half second on a thread: RSS from /proc, GPU memory in use from
    nvidia-smi where it answers (the engine owns its GPUs for the run: the GPUs' used memory is the engine's)."""

    def __init__(self, pid: int):
        self.pid, self.rss_gb, self.gpu_gb = pid, 0.0, None
        self._stop = threading.Event()
        self._smi = os.environ.get("CUDA_VISIBLE_DEVICES", None) is not None and _nvidia_smi() is not None

    def __enter__(self) -> "Sampler":
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.rss_gb = max(self.rss_gb, sum(_rss_kib(p) for p in [self.pid, *descendants(self.pid)]) / 2**20)
            used = _nvidia_smi() if self._smi else None
            if used is not None:
                self.gpu_gb = max(self.gpu_gb or 0.0, used)
            self._stop.wait(0.5)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
    except (OSError, ValueError):
        return 0


def _nvidia_smi() -> float | None:
    """GiB in use summed over the visible GPUs; None without nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    argv = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(argv + ([f"--id={visible}"] if visible else []), capture_output=True, text=True,
                             timeout=10).stdout
        return sum(float(x) for x in out.split()) / 1024.0
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
