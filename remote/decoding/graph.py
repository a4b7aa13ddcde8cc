"""AR, DFlash and DDTree with every decoding step captured once as a CUDA graph and replayed.

Why: on small and mid-size targets a step is bound by host work (Python and hundreds of kernel launches per
forward: ~460 top-level ops per AR token of the 6-layer demo target, ~1000 per DDTree step), not by the GPU.
Here a step is a function of device state only: preallocated caches (remote.models.static_cache), the committed length,
root token and drafter context as device tensors. AR's step is one forward and a token choice; a speculative step is
draft, tree build, verify, walk and commit (the same functions as remote.decoding.loop). Each shape is captured once and
replayed: one launch and one host read per step (the accepted tokens), and the next step is queued before that read
(AR reads its token one step late; a speculative step's read is copied out behind it, `_Reads`), so the GPU does
not wait for the host in between.

Contract: `GraphDecoder(model, drafter, target_layer_ids, graphs)` has `generate_ar` / `generate_spec` with the
results of remote.decoding.loop's, at temperature 0 and, from the same seed, at temperature > 0: a sampled step
draws its uniforms inside the step (remote.decoding.sampling; on CUDA from the default generator, which each replay
advances), so it is captured like a greedy one. With `graphs=False` the same step functions run eagerly (the CPU
tests compare them token for token with remote.decoding.loop). The prompt's drafter context is absorbed during the
prefill, so every step has the captured shape; a shape's first step runs eagerly: it is the warm-up before the
capture. Caches grow (and captured graphs are dropped) when a generation needs more rows. `graph_support` says why
a run cannot use it (None when it can): CUDA, one device, bidirectional drafter, a hybrid target only on the
transformers versions HybridTarget supports; a step that
fails to capture turns graphs off for the rest of the run (`fallback`). Timer phases: ttft and decode only (a
replayed step has no inner boundaries).

While a step is warmed up and captured, it uses remote.kernels.step (one-kernel RMSNorm, the attention kernel, one
GEMM per group of projections sharing an input); with `compiled=True` each step is also torch.compile'd first
(inductor fuses the rest), with `compiled_drafter=True` (the runner's default) only the draft (half the drafter's
kernels) and the target's elementwise glue (rotary, MLP activation, gated norms; in every method, AR included:
remote.kernels.glue); a compile failure falls back to the plain step and `compile_failed` says why. Hybrid targets
get `HybridGraphDecoder`: the same steps through HybridTarget's layer loop on reserved state (a tree's GDN
recurrence is one kernel call per layer, with no host value: remote.models.gdn). tree_budget=auto: each candidate
budget is a captured step of its own, and the host picks the graph of each step it queues
(remote.decoding.auto_budget); the predictions it picks from ride in the step's read.
"""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from ..errors import SpecError, first_line
from ..kernels.glue import active, allow_recompiles
from ..kernels.rows import gather_rows
from ..kernels.step import step_kernels
from ..models.attention_loop import AttentionLoop
from ..models.attention_target import AttentionTarget
from ..models.backends import is_hybrid
from ..models.compat import input_device
from ..models.drafter import DFlashDrafter
from ..models.gdn import TreeLayout
from ..models.hybrid_target import HybridTarget, Static, check_transformers_version
from ..models.placement import devices
from ..models.static_cache import StaticDrafterKV, StaticKV, visibility_mask
from ..timing import PhaseTimer
from ..tree import Ancestry
from .auto_budget import MAX_BUCKETS, AutoBudget
from .loop import STATS_SIZE, Generation, accept, accepted_nodes, draft, read_step, to_host
from .sampling import sample
from .tree_build import argmax_chain, best_first_tree


def graph_support(model, drafter: DFlashDrafter | None, device: torch.device) -> str | None:
    """None if `GraphDecoder` can run this pair, else why not."""
    if device.type != "cuda":
        return "not on CUDA"
    if len(devices(model)) > 1:
        return "target split over devices"
    if any("sliding" in str(kind) for kind in getattr(model.config, "layer_types", None) or []):
        return "sliding-window target"
    if drafter is not None and any(layer.self_attn.is_causal or layer.self_attn.window for layer in drafter.layers):
        return "causal or windowed drafter layers"
    if is_hybrid(model):
        try:
            check_transformers_version()
        except SpecError as exc:           # AR-only runs of a hybrid still decode, with the model's own forward
            return str(exc)
    return None


def graph_decoder(model, drafter: DFlashDrafter | None, target_layer_ids: list[int] | None,
                  compiled: bool = False, compiled_drafter: bool = False) -> "GraphDecoder":
    """The graph decoder for a pair `graph_support` accepted."""
    kind = HybridGraphDecoder if is_hybrid(model) else GraphDecoder
    return kind(model, drafter, target_layer_ids, compiled=compiled, compiled_drafter=compiled_drafter)


def tree_visible(ancestors: torch.Tensor, depth: torch.Tensor, cols: torch.Tensor,
                 start: torch.Tensor) -> torch.Tensor:
    """[N, capacity] bool: which cache rows `cols` [capacity] each of a tree's N nodes (ancestors [N, H], depth [N])
    sees when the tree sits at rows start..start+N-1: the committed prefix, its ancestors and itself (node j is an
    ancestor of i iff ancestors[i, depth[j]] == j). One kernel when compiled (`active`), some ten apart."""
    n = depth.shape[0]
    offset = cols - start                                                                    # [cap]
    j = offset.clamp(0, n - 1)
    ancestor = ancestors.gather(1, depth.index_select(0, j)[None].expand(n, -1)) == j[None]     # [N, cap]
    return (ancestor & (offset >= 0) & (offset < n)) | (offset < 0)


def tree_inputs(ancestors: torch.Tensor, depth: torch.Tensor, cols: torch.Tensor, start: torch.Tensor,
                root: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What a verify at cache rows start.. reads, from its tree (ancestors [N, H], depth [N]) and the drafted
    `tokens` [N - 1]: visible [N, capacity] (`tree_visible`), positions start + depth, the cache rows start + 0..N-1
    and the nodes, root first. Compiled in captured steps (`active`), where apart they were five launches (the verify
    phase of demo DDTree 31 steps measured 1-6 us shorter, session 27)."""
    n = depth.shape[0]
    return tree_visible(ancestors, depth, cols, start), start + depth, start + cols[:n], torch.cat([root, tokens])


def _compile_steps(decoder: "GraphDecoder") -> None:
    """Put torch.compile'd steps on the instance (its class keeps the plain ones): inductor fuses a step's small
    kernels (transformers' RMSNorm alone is six per call), then the fused step is captured as before. One compile
    per (method, budget): the recompile limit is raised for sweeps over many budgets."""
    allow_recompiles()
    decoder._ar_step = torch.compile(decoder._ar_step, dynamic=False)
    decoder._spec_step = torch.compile(decoder._spec_step, dynamic=False)


class GraphDecoder:
    def __init__(self, model, drafter: DFlashDrafter | None, target_layer_ids: list[int] | None,
                 graphs: bool = True, compiled: bool = False, compiled_drafter: bool = False):
        self.model, self.drafter, self.graphs = model, drafter, graphs
        self.device = input_device(model)
        self.dtype = model.get_input_embeddings().weight.dtype
        self._targets(target_layer_ids)
        self.capacity = self.context_capacity = 0    # target and drafter cache rows
        self.fallback: str | None = None             # why graphs were turned off mid-run, if they were
        self.compiled, self.compile_failed = compiled, None
        if compiled:
            _compile_steps(self)
        self.compiled_drafter = compiled_drafter and not compiled and drafter is not None
        self.compiled_glue = compiled_drafter and not compiled       # AR too: every method the same target kernels
        self._draft = torch.compile(draft, dynamic=False) if self.compiled_drafter else draft
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = None                                # the memory pool all of them share (`_capture`)
        as_long = dict(dtype=torch.long, device=self.device)
        self.start = torch.zeros((), **as_long)          # committed length: the position of `root`
        self.root = torch.zeros(1, **as_long)            # the last committed token, not yet run through the target
        self.count = torch.zeros((), **as_long)          # AR: tokens decoded after the first
        self.context_rows = torch.zeros((), **as_long)   # speculative: real rows of `context`
        self.temperature, self.rng = 0.0, None           # this generation's sampling (`_sampling`)

    def _targets(self, target_layer_ids: list[int] | None) -> None:
        # their forwards (logits, and drafter features for `featured`) run on this decoder's static cache: the prompt
        # through transformers' forward, the steps through our layer loop where it can run the model
        self.featured, self.plain = AttentionTarget(self.model, target_layer_ids), AttentionTarget(self.model, None)
        self.loop = None if AttentionLoop.unsupported(self.model) else AttentionLoop(self.model, target_layer_ids)

    @property
    def read_wait_s(self) -> float:
        """Seconds the host has waited for speculative steps' reads: near zero a step where the host sets the pace."""
        return self._reads.waited

    def reserve(self, prompt_len: int, max_new: int, method: str, budget: int, exact: bool = False) -> None:
        """Caches for a generation of this size; growing them drops the graphs captured on the old ones. `exact`:
        exactly this size, also smaller (attention runs over every row, so a cache sized for a larger budget slows
        a smaller one down; bench/bench_methods.py sizes them per budget). The drafter's context cache does not
        depend on the method: a tree's width would otherwise make DDTree's draft attend over more rows than
        DFlash's (on the demo pair cuDNN's drafter attention took 6 us a step more for budget 31's 32 rows)."""
        # A step starts at most at prompt_len + max_new - 2 (generate_spec's launch rule) and writes `width` rows
        grown = self._grow("capacity", prompt_len + max_new + self._width(method, budget), exact)
        if grown:
            self._cols = torch.arange(self.capacity, device=self.device)
            self.history = torch.zeros(self.capacity, dtype=torch.long, device=self.device)
            self._allocate()
        # drafter context rows end before the block's start + block_size
        if self.drafter is not None and self._grow("context_capacity", prompt_len + max_new + self.drafter.block_size,
                                                   exact):
            self._allocate_drafter()
            grown = True
        if grown:
            self._graphs.clear()

    def _grow(self, name: str, rows: int, exact: bool) -> bool:
        """Set the capacity `name` for `rows` (doubling when it grows, unless `exact`); True if it changed."""
        have = getattr(self, name)
        if rows == have or (rows < have and not exact):
            return False
        setattr(self, name, rows if exact else max(rows, 2 * have))
        return True

    def _allocate(self) -> None:
        """The target's static caches of `capacity` rows."""
        self.kv = StaticKV(self.model, self.capacity)
        self.featured.cache = self.plain.cache = self.kv

    def _allocate_drafter(self) -> None:
        attn, weight = self.drafter.layers[0].self_attn, self.drafter.fc.weight
        self.dkv = StaticDrafterKV(len(self.drafter.layers), attn.num_kv, attn.head_dim, self.context_capacity,
                                   weight.dtype, weight.device)
        self.context = torch.zeros(1, self.drafter.block_size, weight.shape[1], dtype=weight.dtype,
                                   device=weight.device)
        # `accept`'s read, then tree_budget=auto's predictions (one per bucket)
        self._reads = _Reads(2 * self.drafter.block_size + 1 + STATS_SIZE + MAX_BUCKETS, weight.device)

    def _width(self, method: str, budget: int) -> int:
        """Cache rows one step may write at or past the committed length."""
        if method == "ar":
            return 1
        return max(self.drafter.block_size, budget + 1 if method == "ddtree" else 0)

    def _replay(self, key: tuple, step) -> torch.Tensor:
        """`step()`'s result; on the first call for `key` it runs eagerly (the warm-up) and is then captured. A
        step that cannot be captured (say a transformers version that reads a device value inside its forward)
        turns graphs off for every shape, so that all methods stay on the same path; `fallback` says why."""
        if not self.graphs:
            return step()
        if key in self._graphs:
            graph, out = self._graphs[key]
            graph.replay()
            return out
        with self.kernels():                           # the captured step keeps these kernels
            try:
                result = self._warm_up(step)
            except Exception as exc:                 # noqa: BLE001 - a compile failure: the plain step instead
                if not (self.compiled or self.compiled_drafter):
                    raise
                if self.compiled:
                    del self._ar_step, self._spec_step   # the class's own, uncompiled
                self.compiled = self.compiled_drafter = False
                self.compile_failed, self._draft = first_line(exc), draft
                result = self._warm_up(step)
            try:
                self._graphs[key] = self._capture(step)
            except Exception as exc:                 # noqa: BLE001 - any capture failure: decode eagerly instead
                self.graphs, self._graphs = False, {}
                self.fallback = first_line(exc)
        return result

    def kernels(self):
        """The kernels of the captured steps (remote.kernels.step)."""
        return step_kernels(self.model, self.drafter, compiled=self.compiled_glue)

    @staticmethod
    def _warm_up(step) -> torch.Tensor:
        side = torch.cuda.Stream()                   # capture wants its warm-up on a side stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            result = step()
        torch.cuda.current_stream().wait_stream(side)
        return result

    def _capture(self, step) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """`step` captured (its graph and output). The decoder's steps share one memory pool, so their intermediates
        take one step's memory, not one per method and budget (tree_budget=auto captures five), and reuse the same
        addresses. Safe here: steps replay one after another on one stream, and a step's output, which stays
        allocated, is read before the next replay."""
        if not self._graphs:                         # a fresh pool with each set of graphs (`reserve` drops them)
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):     # records without running: the state is not advanced twice
            out = step()
        return graph, out

    def _sampling(self, temperature: float, seed: int) -> None:
        """Sample this generation at `temperature` from `seed`: on CUDA from the device's default generator (the
        one a captured graph advances at every replay), elsewhere from a generator of its own; as remote.decoding.loop
        draws from a generator seeded so, the same numbers in the same order."""
        self.temperature = temperature
        if temperature > 0 and self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)
            self.rng = None
        elif temperature > 0:
            self.rng = torch.Generator(device=self.device).manual_seed(seed)

    def _choose(self, logits: torch.Tensor) -> torch.Tensor:
        """The target's token for each row of `logits` [N, V] (remote.decoding.sampling)."""
        return sample(logits, self.temperature, self.rng)

    def _prefill(self, input_ids: torch.Tensor, featured: bool = False):
        """Run the prompt; `featured`: with the drafter's features (speculative methods)."""
        verified = self._run_prompt(input_ids, featured)
        self.start.fill_(input_ids.shape[1])
        self.root.copy_(self._choose(verified.logits[-1:]))
        return verified

    def _run_prompt(self, input_ids: torch.Tensor, featured: bool):
        target = self.featured if featured else self.plain
        rows = torch.arange(input_ids.shape[1], device=self.device)
        self.kv.slots = rows
        causal = visibility_mask(self._cols[None] <= rows[:, None], self.dtype)                # [1, 1, n, cap]
        return target.forward(input_ids.to(self.device), rows[None], causal, last_only=True)

    @torch.inference_mode()
    def generate_ar(self, input_ids: torch.Tensor, max_new: int, stop_ids: set[int], timer: PhaseTimer,
                    temperature: float = 0.0, seed: int = 0) -> Generation:
        gen = Generation(prompt_len=input_ids.shape[1])
        self.reserve(input_ids.shape[1], max_new, "ar", 0)
        self._sampling(temperature, seed)
        with timer.phase("ttft"):
            self._prefill(input_ids)
            done = gen.extend(to_host(self.root), max_new, stop_ids)
        self.count.zero_()
        with timer.phase("decode") as span:
            unread = None            # when the last decoded token's step ended: it is read after the next is queued
            while not done:
                queued = None
                if len(gen.tokens) + (unread is not None) < max_new:
                    self._replay(("ar", self.temperature), lambda: self._ar_step())
                    queued = timer.mark()
                if unread is not None:
                    index = len(gen.tokens) - 1          # history[i] is the token after gen.tokens[i]
                    done = gen.extend(to_host(self.history[index:index + 1]), max_new, stop_ids)
                    span.end = unread if done else None  # a step queued after a stop token is not decode time
                unread = queued
        return gen

    def _ar_step(self) -> torch.Tensor:
        self.kv.slots = self.start.view(1)
        visible = (self._cols <= self.start)[None]
        if self.loop is not None:
            return self._advance(self.loop.forward(self.root.view(1, 1), self.start.view(1), self.kv, visible).logits)
        out = self.model(input_ids=self.root.view(1, 1), position_ids=self.start.view(1, 1),
                         attention_mask=visibility_mask(visible, self.dtype), use_cache=True,
                         **{self.plain.cache_kw: self.kv})
        return self._advance(out.logits[0, -1:])

    def _advance(self, logits: torch.Tensor) -> torch.Tensor:
        """AR bookkeeping after a token's logits [1, V]: the token chosen is the next root and goes into `history`."""
        self.root.copy_(self._choose(logits))
        self.history.index_copy_(0, self.count.view(1), self.root)
        self.count.add_(1)
        self.start.add_(1)
        return self.root

    def _spec_step(self, context: torch.Tensor, valid: torch.Tensor | None, method: str, budget: int,
                   until: str | None = None, sizes: tuple[int, ...] = ()):
        """One speculative step; `until` names a phase (remote.timing.PHASES) after which it stops, without
        touching the committed state (remote.decoding.phase_split times the phases of a captured step so). With
        `sizes` (tree_budget=auto's buckets) the read ends with the tree's predictions for each."""
        logits = self._draft(self.drafter, self.model, self.dkv, context, self.root, self.start, valid)
        if until == "draft":
            return logits
        built = best_first_tree(logits, budget, sizes) if method == "ddtree" else argmax_chain(logits)
        tree = built.ancestry()
        if until == "tree_build":
            return tree.ancestors
        visible, positions, rows, nodes = active(tree_inputs)(tree.ancestors, tree.depth, self._cols, self.start,
                                                              self.root, built.tokens)
        verified, commit = self._verify(tree, nodes, visible, positions, rows)
        samples = self._choose(verified.logits)
        if until == "verify":
            return samples
        # compiled in captured steps (a few kernels, not ~12); `read` ends with tree_budget=auto's predictions
        path, bonus, length, read = active(accept)(tree, nodes, samples, logits, built.expected)
        commit(path, length)
        gather_rows(verified.features, 0, path, self.context[0], 0)
        self.context_rows.copy_(length)
        self.start.add_(length)
        self.root.copy_(bonus)
        return read

    def _verify(self, tree: Ancestry, nodes: torch.Tensor, visible: torch.Tensor, positions: torch.Tensor,
                rows: torch.Tensor):
        """The target's verify of `nodes` at `start` (`tree_inputs`), and the commit to call with the accepted
        (path, length)."""
        self.kv.slots = rows
        if self.loop is not None:
            verified = self.loop.forward(nodes[None], positions, self.kv, visible, featured=True)
        else:
            verified = self.featured.forward(nodes[None], positions[None], visibility_mask(visible, self.dtype))
        return verified, lambda path, length: self.kv.compact(self.start, path)

    def _absorb(self, features: torch.Tensor) -> None:
        """Hand the prompt's features [P, F] to the drafter: its last rows (up to a block) become the first step's
        context, so that every step has the captured shape; the rows before them go into the drafter cache now,
        through a drafter forward whose block output is discarded (context K/V depend on row and position only)."""
        rows = min(features.shape[0], self.drafter.block_size)
        if features.shape[0] > rows:
            draft(self.drafter, self.model, self.dkv, features[None, :-rows], self.root, self.start - rows)
        self.context[0, :rows] = features[-rows:]
        self.context_rows.fill_(rows)

    @torch.inference_mode()
    def generate_spec(self, input_ids: torch.Tensor, max_new: int, stop_ids: set[int], timer: PhaseTimer,
                      method: str, budget: int, auto: AutoBudget | None = None, temperature: float = 0.0,
                      seed: int = 0) -> Generation:
        """With `auto`, each step's budget is its choice among its buckets, each bucket a step of its own."""
        gen = Generation(prompt_len=input_ids.shape[1])
        self._sampling(temperature, seed)
        sizes = tuple(auto.sizes) if auto else ()
        budget = max(sizes) if auto else budget
        width, height = self._width(method, budget), self.drafter.block_size   # height: most tokens a step emits
        self.reserve(input_ids.shape[1], max_new, method, budget)
        with timer.phase("ttft"):
            verified = self._prefill(input_ids, featured=True)
            self._absorb(verified.features)
            done = gen.extend(to_host(self.root), max_new, stop_ids)
        length, queued = input_ids.shape[1], []       # committed rows as the host knows them; steps unread
        observed = None                               # auto: the last step read, for the policy once the next is queued
        with timer.phase("decode") as span:
            while not done:
                # The next step is queued before this one is read, so the GPU works through the host's read and
                # bookkeeping: its inputs are all on the device. Not when this step may end the generation.
                while len(queued) < 2 and len(gen.tokens) + height * len(queued) < max_new:
                    if length + height * len(queued) + width > self.capacity:
                        raise RuntimeError(f"static cache of {self.capacity} rows is full at {length}")
                    size = auto.pick() if auto else budget
                    with auto.timing(size) if auto else nullcontext() as launch:
                        out = self._replay(("spec", method, size, sizes, self.temperature), lambda: self._spec_step(
                            self.context, self.context_rows, method, size, sizes=sizes))
                    self._reads.put(out, timer)
                    queued.append((size, launch))
                if observed:
                    gen.chose(auto, *observed)
                read, ended = self._reads.take()
                tokens, stats, expected = read_step(read, len(sizes))
                done = gen.extend_step(tokens, max_new, stop_ids, stats)
                read_size, launch = queued.pop(0)   # the budget and launch of the step just read (the oldest)
                if auto:
                    observed = (read_size, expected, accepted_nodes(read, tokens), gen.committed[-1], launch)
                length += len(tokens)
                span.end = ended if done else None   # a step queued after a stop token runs out unread, untimed
        if observed:
            gen.chose(auto, *observed)
        self._reads.clear()
        return gen


class _Reads:
    """The speculative steps' `read`s (at most [2 * block + 1]), each copied to a host buffer behind its step (a
    captured step's output tensor is overwritten by the next replay): a FIFO of up to two, read in order; `waited`:
    seconds spent waiting for them."""

    def __init__(self, size: int, device: torch.device):
        self._buffers = [torch.empty(size, dtype=torch.long, pin_memory=device.type == "cuda") for _ in range(2)]
        self._done: list = [None, None]          # the timer's mark after each copy (a CUDA event on CUDA)
        self._sizes = [0, 0]
        self._put = self._taken = 0
        self.waited = 0.0

    def put(self, read: torch.Tensor, timer: PhaseTimer) -> None:
        slot = self._put % 2
        self._sizes[slot] = read.shape[0]
        self._buffers[slot][:read.shape[0]].copy_(read, non_blocking=True)
        self._done[slot] = timer.mark()
        self._put += 1

    def take(self) -> tuple[list[int], object]:
        """The oldest read not taken (the step's one host synchronisation), and the mark of when it was there."""
        slot = self._taken % 2
        done = self._done[slot]
        if isinstance(done, torch.cuda.Event):
            start = time.perf_counter()
            done.synchronize()
            self.waited += time.perf_counter() - start
        self._taken += 1
        return to_host(self._buffers[slot][:self._sizes[slot]]), done

    def clear(self) -> None:
        self._put = self._taken = 0


class HybridGraphDecoder(GraphDecoder):
    """AR, DFlash and DDTree on a hybrid (Gated DeltaNet + attention) target, each step captured once:
    `HybridTarget`'s own layer loop on reserved state (K/V rows, conv and recurrent states updated in place)."""

    def _targets(self, target_layer_ids: list[int] | None) -> None:
        self.target = HybridTarget(self.model, target_layer_ids)

    def _allocate(self) -> None:
        self.target.reserve(self.capacity)

    def _run_prompt(self, input_ids: torch.Tensor, featured: bool):
        return self.target.prefill(input_ids)         # one target for all methods: the features come along

    def _ar_step(self) -> torch.Tensor:
        step = Static(self.start, (self._cols <= self.start)[None])
        return self._advance(self.target.decode(self.root, step))

    def _verify(self, tree: Ancestry, nodes: torch.Tensor, visible: torch.Tensor, positions: torch.Tensor,
                rows: torch.Tensor):
        step = Static(self.start, visible, TreeLayout.build(tree, self.target.conv_kernel), rows=rows,
                      positions=positions)
        verified = self.target.verify_static(nodes, step)
        return verified, lambda path, length: self.target.commit_static(step, path, length)
