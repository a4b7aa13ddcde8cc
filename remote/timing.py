"""Phase timers that never synchronise inside the decoding loop.

Contract: `with timer.phase("verify"): ...` adds the duration of the block to phase "verify". On CUDA the
bounds are CUDA events recorded on the current stream (GPU timeline, which also counts host work while the GPU
waits for it); they are read once, in `totals_ms()`, after a single synchronize. On CPU they are
`time.perf_counter()` deltas. `with timer.phase(name) as span:` the block may end its phase at an earlier point,
`span.end = timer.mark()` taken inside it: a decoding loop that queued a step it then did not need (the step after
a stop token, queued before that token was read) ends "decode" where the last token's step ended, which is when
that token was there to read. Under a multi-GPU `device_map` the runner makes the LM head's GPU current: its
stream waits for the other GPUs' work at every cross-device copy, so its events bound whole phases. Non-goal:
per-device timelines.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

PHASES = ("draft", "tree_build", "verify", "commit")     # a speculative step's phases, in order


class Span:
    end = None          # a `PhaseTimer.mark()` at which the phase ends, if earlier than the end of its block


class PhaseTimer:
    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self._spans: dict[str, list] = defaultdict(list)      # phase -> [(start, end)] events or floats

    def mark(self):
        """Now, on the timeline the phases are measured on."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        start, span = self.mark(), Span()
        try:
            yield span
        finally:
            self._spans[name].append((start, self.mark() if span.end is None else span.end))

    def totals_ms(self) -> dict[str, float]:
        """Total milliseconds per phase (synchronises once on CUDA)."""
        if self.cuda:
            torch.cuda.synchronize()
            return {k: sum(s.elapsed_time(e) for s, e in v) for k, v in self._spans.items()}
        return {k: 1000.0 * sum(e - s for s, e in v) for k, v in self._spans.items()}

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self._spans.items()}
