"""What an engine kind is to the runner: how its server is started, asked and read. One subclass per engine
(remote.engines.vllm, .sglang, .openai); remote.engines.kinds' `engine_of(kind)` is the one place a kind's name
becomes a class.

Contract: `argv(launch)` is the server's command line for a Launch (paths resolved, port chosen, speculative config
or None); `ready_path` answers 200 once it serves; `request(body)` adds the engine's own request fields (vLLM: token
ids back); `acceptance(delta)` reads drafts, accepted tokens and accepted tokens per position from the /metrics
counters' deltas over the measured requests (None where the engine exposes none); `latency(delta)` the engine's own
mean TTFT and TPOT (ms) from its histograms' deltas; `version(python)` its installed version.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import ClassVar

SERVED_NAME = "specbench"      # the model name the server answers to (--served-model-name)


@dataclass(frozen=True)
class Launch:
    python: str
    model: str                      # the target's resolved path or hub id
    port: int
    dtype: str
    tensor_parallel: int
    max_model_len: int | None
    enforce_eager: bool
    speculative: dict | None        # the engine's speculative config, our drafter's path filled in; None: none
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()   # kind openai: the user's server argv
    url: str | None = None          # kind openai: the user's base URL


@dataclass(frozen=True)
class Acceptance:
    drafts: float                   # verify steps (vLLM: num_drafts)
    accepted: float                 # drafted tokens accepted
    per_position: dict[int, float]  # position i (0-based) -> drafts that accepted at least i + 1 tokens
    source: str                     # where it was read (counter names), for the definitions

    @property
    def tau(self) -> float | None:
        """Mean acceptance length, the bonus token included; accepted tokens a request's max_tokens then trims count
        (vLLM's counters: remote.engines.checks.as_engines_count counts our runner's steps the same way)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None


class Engine:
    name: ClassVar[str]
    ready_path: ClassVar[str] = "/health"
    distributions: ClassVar[tuple[str, ...]] = ()   # pip names whose version is the engine's

    def argv(self, launch: Launch) -> list[str]:
        raise NotImplementedError

    def url(self, launch: Launch) -> str:
        return f"http://127.0.0.1:{launch.port}"

    def served(self, url: str) -> str:
        """The model name requests give."""
        return SERVED_NAME

    def request(self, body: dict) -> dict:
        return body

    def acceptance(self, delta: dict, url: str) -> Acceptance | None:
        return None

    def latency(self, delta: dict) -> dict[str, float]:
        return {}

    def version(self, python: str) -> str:
        if not self.distributions:
            return "unknown"
        code = ("import importlib.metadata as m\nfor d in %r:\n    try: print(m.version(d)); break\n"
                "    except m.PackageNotFoundError: pass" % (self.distributions,))
        try:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return out or "unknown"


def mean_ms(delta: dict, histogram: str) -> float | None:
    """A Prometheus histogram's mean over the delta (its _sum / _count), in ms."""
    from .prom import total

    count, seconds = total(delta, f"{histogram}_count"), total(delta, f"{histogram}_sum")
    return 1000.0 * seconds / count if count and seconds is not None else None
