"""Where a captured step's GPU time goes: the per-phase split of a replayed step (draft, tree_build, verify,
commit: remote.timing.PHASES; AR has one phase, its forward).

Why not a timer around each phase: a replayed step has no host-visible boundaries, and timing phases of the
eager step measures Python and kernel launches instead of the GPU work the replay does. Here each prefix of the
step (draft; draft + build; ... ; the whole step) is captured as its own graph and replayed `repeats` times from
the same committed state, timed by CUDA events; a phase costs its prefix's median minus the previous one's.

Contract: `split_step(decoder, method, budget)` -> {phase_ms: float} (draft_ms, tree_build_ms, verify_ms,
commit_ms; AR: forward_ms) for a `GraphDecoder` that has just decoded with graphs on (its caches hold a real
committed state); `split_kernels(decoder, method, budget)` -> the kernels of each phase, from torch.profiler. The
committed state (length, root, drafter context, AR count) is put back after every replay; cache rows past the
committed length are scratch anyway, but a hybrid target's GDN states are advanced in place by every replayed
commit, so call it between prompts (the next prefill overwrites them), as the runner and bench_methods do. A
phase whose cost depends on the data shows this state's cost, not a generation's mean: the tree search stops after
a few levels on a bushy tree and runs all of them on a confident spine (remote.kernels.tree_search).
"""
from __future__ import annotations

from statistics import median

import torch

from ..kernels.step import step_kernels
from ..timing import PHASES
from .graph import GraphDecoder


def _prefix_graphs(decoder: GraphDecoder, method: str, budget: int):
    """Yields (phase, restore, graph) per phase, in step order: the graph of the step's prefix up to and including
    that phase, captured from the committed state, which `restore()` puts back (before each replay)."""
    phases = ("forward",) if method == "ar" else PHASES
    state = (decoder.start, decoder.root, decoder.count, decoder.context_rows) + (
        (decoder.context,) if decoder.drafter is not None else ())
    saved = [t.clone() for t in state]

    def restore() -> None:
        for live, kept in zip(state, saved):
            live.copy_(kept)

    def step(until):
        if method == "ar":
            return lambda: decoder._ar_step()
        return lambda: decoder._spec_step(decoder.context, decoder.context_rows, method, budget, until=until)

    with torch.inference_mode():      # stays on while the caller replays: the decoder's buffers are inference
        try:                          # tensors, which only inference mode may update in place (`restore`)
            for phase, until in zip(phases, phases[:-1] + (None,)):
                fn = step(until)
                with step_kernels(decoder.model, decoder.drafter):
                    decoder._warm_up(fn)
                    restore()
                    graph, _ = decoder._capture(fn)
                yield phase, restore, graph
                del graph
        finally:
            restore()


def split_step(decoder: GraphDecoder, method: str, budget: int, repeats: int = 20) -> dict[str, float]:
    phases, cumulative = [], []
    for phase, restore, graph in _prefix_graphs(decoder, method, budget):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        for begin, end in events:       # queued back to back: the GPU never waits on the host in between
            restore()
            begin.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        phases.append(phase)
        cumulative.append(median(b.elapsed_time(e) for b, e in events))
    before = [0.0] + cumulative[:-1]
    return {f"{phase}_ms": max(0.0, total - prior) for phase, total, prior in zip(phases, cumulative, before)}


def split_kernels(decoder: GraphDecoder, method: str, budget: int, repeats: int = 10) -> dict[str, list]:
    """Which kernels each phase of a replayed step runs: {phase: [(kernel, us per step, launches per step)]},
    slowest first, from torch.profiler over `repeats` replays of each prefix graph (a kernel's share of a phase is
    its time in the prefix minus its time in the previous prefix)."""
    from torch.profiler import ProfilerActivity, profile

    out, before = {}, {}    # the restores' copies show in every prefix alike and cancel out
    for phase, restore, graph in _prefix_graphs(decoder, method, budget):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                restore()
                graph.replay()
            torch.cuda.synchronize()
        now = {e.key: (e.self_device_time_total / repeats, e.count / repeats)
               for e in prof.key_averages() if e.self_device_time_total > 0}
        rows = [(name, us - before.get(name, (0, 0))[0], calls - before.get(name, (0, 0))[1])
                for name, (us, calls) in now.items()]
        out[phase] = sorted((r for r in rows if r[1] > 0.05), key=lambda r: -r[1])
        before = now
    return out
