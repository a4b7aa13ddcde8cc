"""Where a captured step's GPU time goes: the per-phase split of a replayed step (draft, tree_build, verify,
commit: remote.timing.PHASES; AR has one phase, its forward).

Contract: `split_step(decoder, method, budget)` -> {phase_ms: float} (draft_ms, tree_build_ms, verify_ms,
commit_ms; AR, and a speculative method at budget PLAIN (tree_budget=auto's AR step): forward_ms) for a
`GraphDecoder` that has just decoded with graphs on (its caches hold a real committed state); `split_kernels(decoder,
method, budget)` -> the kernels of each phase, from torch.profiler. The committed state (length, root, drafter
context) is put back after every replay (`measured_state`, which also picks where the step starts; `prefix_steps`
are the functions captured, eager-runnable on the CPU); cache rows past the measured length are scratch anyway, but a
hybrid target's GDN states are advanced in place by every replayed commit, so call it between prompts (the next
prefill overwrites them), as the runner and bench_methods do. A phase whose cost depends on the data shows this
state's cost, not a generation's mean (the tree search stops after a few levels on a bushy tree and runs all of them
on a confident spine: remote.kernels.tree_search). A state no length can hold raises a ValueError on the host,
before any kernel runs.
"""
from __future__ import annotations

from contextlib import contextmanager
from statistics import median

import torch

from ..spec import Method
from ..timing import PHASES
from .auto_budget import PLAIN
from .graph import GraphDecoder


# Where the measured step starts: a generation launches a step only at a length its reserved caches hold
# (GraphDecoder.reserve: up to prompt + max_new - 2, a block more for a speculative step launched behind an unread one,
# plus the step's width), but its last steps may commit up to a block each past that, so the state it ends in may have
# no room for one more step (the demo hybrid pair, 128 tokens, as reserved before the block for the unread step: DFlash
# ended at 193 of 208 rows and its step writes 16). There the measured step starts at the last length that has room (the
# committed rows before it are the same generation's); the cost of a step hardly depends on it (attention runs over
# every reserved row, masked). The rows a step would index are checked on the host first: a device-side index error
# would poison the CUDA context, and with it the run.
@contextmanager
def measured_state(decoder: GraphDecoder, method: Method, budget: int):
    """The committed state the measured step starts from, inside the reserved caches (see the comment above);
    yields `restore()`, which puts that state back (before each replay). On exit the decoder's own committed
    state is back (cache rows from the measured length on were overwritten, as scratch)."""
    state = decoder.state.committed()

    def put(kept) -> None:
        for live, value in zip(state, kept):
            live.copy_(value)

    # inference mode stays on while the caller replays: the decoder's buffers are inference tensors, which only
    # inference mode may update in place (`restore`)
    with torch.inference_mode():
        own = [t.clone() for t in state]
        decoder.state.start.fill_(_room(decoder, method, budget))
        if budget == PLAIN and method.uses_drafter:     # an AR step appends a context row: one must be free
            decoder.state.context_rows.clamp_(max=decoder.state.context.shape[1] - 1)
        saved = [t.clone() for t in state]
        try:
            yield lambda: put(saved)
        finally:
            put(own)


def _room(decoder: GraphDecoder, method: Method, budget: int) -> int:
    """The committed length to measure from: the decoder's, or the last one at which every row one step indexes is
    reserved (target rows start .. start + width - 1; the drafter's context rows start - context_rows .. + block -
    1; an AR step's one target row). Host values only, read before any kernel of the step runs."""
    state = decoder.state
    plain = budget == PLAIN or not method.uses_drafter      # one target row; no drafter context read
    start, width = int(state.start), 1 if plain else decoder._width(method, budget)
    last, first = decoder.capacity - width, 0
    if not plain:
        rows, block, held = int(state.context_rows), decoder.drafter.block_size, state.context.shape[1]
        if not 0 <= rows <= held:     # past a block after tree_budget=auto's AR steps: a step then drafts from a block
            raise ValueError(f"phase split: context_rows {rows} is outside 0..{held} (the drafter's pending context)")
        first, last = rows, min(last, decoder.context_capacity - block + rows)
    if last < first:
        raise ValueError(f"phase split: the reserved caches ({decoder.capacity} target rows, "
                         f"{decoder.context_capacity} drafter rows) cannot hold one {method} step of {width} rows "
                         f"at budget {budget}")
    return min(max(start, first), last)


def prefix_steps(decoder: GraphDecoder, method: Method, budget: int):
    """(phase, step) per phase, in step order: `step()` runs the step's prefix up to and including that phase."""
    if not method.uses_drafter:
        return [("forward", lambda: decoder._ar_step())]
    if budget == PLAIN:                 # tree_budget=auto's AR step: the target alone, its features kept
        return [("forward", lambda: decoder._plain_step())]
    state = decoder.state
    return [(phase, lambda until=until: decoder._spec_step(decoder.draft_context(), state.context_rows,
                                                           method.builds_tree, budget, until=until))
            for phase, until in zip(PHASES, PHASES[:-1] + (None,))]


# Why not a timer around each phase: a replayed step has no host-visible boundaries, and timing phases of the eager
# step measures Python and kernel launches instead of the GPU work the replay does. Here each prefix of the step
# (draft; draft + build; ... ; the whole step) is captured as its own graph and replayed `repeats` times from the same
# committed state, timed by CUDA events; a phase costs its prefix's median minus the previous one's.
def _prefix_graphs(decoder: GraphDecoder, method: Method | str, budget: int):
    """Yields (phase, restore, graph) per phase, in step order: the graph of the step's prefix up to and including
    that phase, captured from the measured state, which `restore()` puts back (before each replay)."""
    method = Method.parse(method)
    with measured_state(decoder, method, budget) as restore:
        for phase, fn in prefix_steps(decoder, method, budget):
            with decoder.kernels():
                decoder.replays.warm_up(fn)
                restore()
                graph, _ = decoder.replays.capture(fn)
            yield phase, restore, graph
            del graph


def split_step(decoder: GraphDecoder, method: Method | str, budget: int, repeats: int = 20) -> dict[str, float]:
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


def split_kernels(decoder: GraphDecoder, method: Method | str, budget: int, repeats: int = 10) -> dict[str, list]:
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
