"""Host synchronisation in the decoding loop, counted per step.

On CPU nothing synchronises, so the test counts what would on CUDA: every torch call that reads a device value
into Python (`tolist`, `item`, `int(t)`, `bool(t)`, `nonzero`, boolean-mask indexing, ...) and every tensor made
from Python data (`torch.tensor(list, device=...)` is a blocking host->device copy). A `TorchFunctionMode` sees
each of them, the phase timer tells whether the loop ("decode") is running, and the innermost non-torch frame
tells where the call came from. Budget: one read per spec step (the accepted tokens), on pure-attention and
hybrid targets alike, and one per AR token (the stop check).

The CUDA test checks the same with `torch.cuda.set_sync_debug_mode`, which also catches syncs inside kernels'
Python wrappers that this count cannot see.
"""
from __future__ import annotations

import collections
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from remote.decoding import loop
from remote.decoding.loop import generate_ar, generate_spec
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_pair

READS = {"tolist", "item", "__bool__", "__int__", "__index__", "__float__", "nonzero", "argwhere", "numpy", "cpu",
         "masked_select", "unique", "unique_consecutive"}
FROM_PYTHON = {"tensor", "as_tensor", "from_numpy"}
# drafter.py (not part of this change) reads positions[0] once per drafter layer; see test_drafter_reads_nothing.
DRAFTER = "drafter.py"


def _origin() -> str:
    """file:line of the innermost frame outside torch and this file."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/torch/" not in frame.filename and frame.filename != __file__:
            return f"{Path(frame.filename).name}:{frame.lineno}"
    return "?"


def _is_sync(func, args) -> bool:
    name = getattr(func, "__name__", "")
    if name in READS or name in FROM_PYTHON:
        return True
    if name == "__getitem__" and len(args) > 1:        # x[mask] waits for the mask's count
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
    return False


class _Count(TorchFunctionMode):
    def __init__(self, timer: "_LoopTimer"):
        super().__init__()
        self.timer = timer
        self.where: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.timer.in_loop and _is_sync(func, args):
            self.where[_origin()] += 1
        return func(*args, **(kwargs or {}))


class _LoopTimer(PhaseTimer):
    """A CPU PhaseTimer that knows whether the decoding loop is running."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.in_loop = False

    @contextmanager
    def phase(self, name: str):
        outer, self.in_loop = self.in_loop, self.in_loop or name == "decode"
        try:
            with super().phase(name) as span:
                yield span
        finally:
            self.in_loop = outer


def _count(run) -> tuple[collections.Counter, object]:
    run(PhaseTimer(torch.device("cpu")))          # warm: per-shape index tensors are built once, outside this count
    timer = _LoopTimer()
    with _Count(timer) as counter:
        gen = run(timer)
    return counter.where, gen


def _split(where: collections.Counter) -> tuple[int, int]:
    drafter = sum(n for at, n in where.items() if at.startswith(DRAFTER))
    return sum(where.values()) - drafter, drafter


def _attention_pair():
    model, drafter, target = tiny_pair("wide", block_size=8)
    return model, drafter, target, prompts(model, 1, seed=1)[0]


def _hybrid_pair():
    from tests.test_hybrid_lossless import tiny_hybrid_pair
    model, drafter, target = tiny_hybrid_pair("3to1")
    return model, drafter, target, torch.tensor([[1, 2, 3, 4, 5]])


PAIRS = {"attention": _attention_pair, "hybrid": _hybrid_pair}
METHODS = [("dflash", 0), ("ddtree", 4), ("ddtree", 64)]


@torch.inference_mode()
@pytest.mark.parametrize("kind", list(PAIRS))
@pytest.mark.parametrize("method, budget", METHODS)
def test_one_host_read_per_spec_step(kind, method, budget):
    model, drafter, target, ids = PAIRS[kind]()
    where, gen = _count(lambda timer: generate_spec(target, drafter, model, ids, 40, 0.0, None, set(), timer,
                                                    method, budget))
    ours, _ = _split(where)
    steps = len(gen.accepted)
    print(f"\n{kind} {method}/{budget}: {steps} steps, reads {dict(where)}")
    assert steps >= 5 and ours == steps, dict(where)


@torch.inference_mode()
@pytest.mark.parametrize("kind", list(PAIRS))
def test_one_host_read_per_ar_token(kind):
    model, _, _, ids = PAIRS[kind]()
    where, gen = _count(lambda timer: generate_ar(model, ids, 40, 0.0, None, set(), timer))
    print(f"\n{kind} ar: {len(gen.tokens)} tokens, reads {dict(where)}")
    assert sum(where.values()) == len(gen.tokens) - 1, dict(where)       # the first token is read in ttft


@torch.inference_mode()
def test_ar_reads_each_token_one_step_late_and_stops_at_the_same_token():
    """The stop check lags one forward behind (so the next forward is queued before the read): a stop id still
    ends the output exactly where the plain loop would, and the length cap costs no extra forward."""
    model, _, _, ids = _attention_pair()
    timer = PhaseTimer(torch.device("cpu"))
    full = generate_ar(model, ids, 30, 0.0, None, set(), timer).tokens
    stop = full[12]
    cut = generate_ar(model, ids, 30, 0.0, None, {stop}, timer).tokens
    assert cut == full[:full.index(stop) + 1]
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        generate_ar(model, ids, 9, 0.0, None, set(), timer)
    finally:
        hook.remove()
    assert len(calls) == 9                                  # prefill + 8 decode forwards, none wasted


@torch.inference_mode()
def test_drafter_reads_nothing():
    model, drafter, target, ids = _attention_pair()
    where, _ = _count(lambda timer: generate_spec(target, drafter, model, ids, 20, 0.0, None, set(), timer,
                                                  "ddtree", 16))
    assert _split(where)[1] == 0, dict(where)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA sync debug mode needs a GPU")
@pytest.mark.parametrize("method, budget", [("ar", 0), ("dflash", 0), ("ddtree", 16)])
def test_cuda_loop_synchronises_only_at_the_read(method, budget, monkeypatch):
    """Inside the loop every synchronising CUDA call warns, except the sanctioned `loop.to_host`."""
    from remote.models.backends import build_target
    model, drafter, _ = tiny_pair("wide", block_size=8)
    model, drafter = model.cuda(), drafter.cuda()
    target = build_target(model, drafter.target_layer_ids)
    ids = prompts(model, 1, seed=1)[0].cuda()
    read = loop.to_host

    def sanctioned(t):
        torch.cuda.set_sync_debug_mode(0)
        try:
            return read(t)
        finally:
            torch.cuda.set_sync_debug_mode("warn")

    class Timer(PhaseTimer):
        @contextmanager
        def phase(self, name):
            with super().phase(name) as span:     # the timer's own events stay outside the watched window
                if name == "decode":
                    torch.cuda.set_sync_debug_mode("warn")
                try:
                    yield span
                finally:
                    if name == "decode":
                        torch.cuda.set_sync_debug_mode(0)

    def run(timer):
        if method == "ar":
            return generate_ar(model, ids, 24, 0.0, None, set(), timer)
        return generate_spec(target, drafter, model, ids, 24, 0.0, None, set(), timer, method, budget)

    run(PhaseTimer(torch.device("cuda")))
    monkeypatch.setattr(loop, "to_host", sanctioned)
    # Steady state: a first watched run pays torch's once-per-process lazy checks (on the H200 the first AR case
    # met one sync in torch/cuda/__init__.py, the first case to run; later cases did not): the second must have none.
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(Timer(torch.device("cuda")))
    syncs = [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]
    others = [s for s in syncs if not Path(s).name.startswith(DRAFTER)]
    print(f"\n{method}: synchronising calls in the loop: {collections.Counter(syncs)}")
    assert not others, collections.Counter(others)
