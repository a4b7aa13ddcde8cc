"""AR, DFlash and DDTree steps as functions of device state over preallocated caches, each captured once as a CUDA
graph and replayed: the graphed executor of remote.decoding.loop's `decode`.

Contract: `GraphDecoder(model, drafter, target_layer_ids, graphs)`: `steps(method, prompt_len, max_new, budget, auto,
temperature, seed)` is the executor of one generation (caches reserved for it, its sampling seeded), and
`generate_ar` / `generate_spec` decode with it, with remote.decoding.loop's results at temperature 0 and, from the
same seed, at temperature > 0. With `graphs=False` the same steps run eagerly (the CPU tests compare them token for
token with the eager loop). A shape's first step runs eagerly, the warm-up before its capture; a step that fails to
capture turns graphs off for the rest of the run (`fallback`), a compile that fails leaves the plain steps
(`compile.failed`). `graph_support` says why a run cannot use it (None when it can). Hybrid targets get
`HybridGraphDecoder`: the same steps through HybridTarget's layer loop on reserved state. Timer phases: ttft and
decode only (a replayed step has no inner boundaries).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

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
from ..spec import Method
from ..timing import PhaseTimer
from ..tree import Ancestry
from .auto_budget import MAX_BUCKETS, PLAIN, AutoBudget
from .loop import STATS_SIZE, Generation, Step, Steps, accept, accepted_nodes, build, decode, draft, draft_hidden, \
    read_step, to_host
from .sampling import sample


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
    phase 1-2 us shorter on demo-qwen3, 5-6 us on the hybrid's DDTree: one H200, 2026-12-04, `OUT=/tmp/o
    BASE=.ab/base STEPS="tests q3_graph24" bash bench/gpu_suite.sh`)."""
    n = depth.shape[0]
    return tree_visible(ancestors, depth, cols, start), start + depth, start + cols[:n], torch.cat([root, tokens])


def _compile_steps(decoder: "GraphDecoder") -> None:
    """Put torch.compile'd steps on the instance (its class keeps the plain ones): inductor fuses a step's small
    kernels (transformers' RMSNorm alone is six per call), then the fused step is captured as before. One compile
    per (method, budget): the recompile limit is raised for sweeps over many budgets."""
    allow_recompiles()
    decoder._ar_step = torch.compile(decoder._ar_step, dynamic=False)
    decoder._spec_step = torch.compile(decoder._spec_step, dynamic=False)


class DeviceState:
    """What a step reads and advances, all on the device: a step depends on no host value, so it can be captured."""

    def __init__(self, device: torch.device):
        as_long = dict(dtype=torch.long, device=device)
        # side by side, so that tree_budget=auto's AR step advances both in one launch (`_plain_step`); each on 16
        # bytes of its own, as a tensor of its own is: Triton and inductor specialise a pointer on 16-byte alignment
        self.counters = torch.zeros(2, 2, **as_long)[:, 0]
        self.start = self.counters[0]                    # committed length: the position of `root`
        self.context_rows = self.counters[1]             # speculative: real rows of `context`
        self.root = torch.zeros(1, **as_long)            # the last committed token, not yet run through the target
        self.context: torch.Tensor | None = None         # [1, B, F] the drafter's next context (`reserve`)

    def committed(self) -> list[torch.Tensor]:
        """The committed state a step starts from (remote.decoding.phase_split puts it back after each replay)."""
        drafter = [self.context] if self.context is not None else []
        return [self.start, self.root, self.context_rows] + drafter


class Sampling:
    """A generation's token choice (remote.decoding.sampling) at its temperature, from its seed."""

    def __init__(self, device: torch.device):
        self.device, self.temperature, self.rng = device, 0.0, None
        self.hear = None         # an untimed replay's listener (`Steps.listen`): steps then run uncaptured

    def seed(self, temperature: float, seed: int) -> None:
        """Sample at `temperature` from `seed`: on CUDA from the device's default generator (the one a captured graph
        advances at every replay), elsewhere from a generator of its own; as remote.decoding.loop draws from a
        generator seeded so, the same numbers in the same order."""
        self.temperature = temperature
        if temperature > 0 and self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)
            self.rng = None
        elif temperature > 0:
            self.rng = torch.Generator(device=self.device).manual_seed(seed)

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        """The target's token for each row of `logits` [N, V]."""
        if self.hear is not None:
            self.hear(logits)
        return sample(logits, self.temperature, self.rng)


class Replays:
    """Captured steps by key (method, budget, ...), each replayed; `on` False: every step runs eagerly (graphs off,
    or a capture failed: `fallback` says why)."""

    def __init__(self, on: bool):
        self.on, self.fallback = on, None
        self.captured: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = None                                # the memory pool all of them share (`capture`)

    @staticmethod
    def warm_up(step) -> torch.Tensor:
        side = torch.cuda.Stream()                   # capture wants its warm-up on a side stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            result = step()
        torch.cuda.current_stream().wait_stream(side)
        return result

    def capture(self, step) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """`step` captured (its graph and output). The decoder's steps share one memory pool, so their intermediates
        take one step's memory, not one per method and budget (tree_budget=auto captures five), and reuse the same
        addresses. Safe here: steps replay one after another on one stream, and a step's output, which stays
        allocated, is read before the next replay."""
        if not self.captured:                        # a fresh pool with each set of graphs (`reserve` drops them)
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):     # records without running: the state is not advanced twice
            out = step()
        return graph, out


@dataclass
class Compiled:
    """What of the steps runs torch.compile'd (inductor fuses the small kernels a captured step keeps)."""
    steps: bool                  # compile_steps: the AR and speculative steps whole
    drafter: bool                # compile_drafter (the runner's default): the draft only, half the drafter's kernels
    glue: bool                   # the target's elementwise glue (rotary, MLP activation, gated norms), in every method
    failed: str | None = None    # why a compile failed: the plain steps run since


# Why capture: on small and mid-size targets a step is bound by host work (Python and hundreds of kernel launches per
# forward: ~460 top-level ops per AR token of the 6-layer demo target, ~1000 per DDTree step), not by the GPU. Here a
# step is a function of device state only (`DeviceState`, caches from remote.models.static_cache): AR's step is one
# forward and a token choice; a speculative step is draft, tree build, verify, walk and commit (the same functions as
# remote.decoding.loop). Captured once per shape and replayed, a step is one launch; while it is warmed up and
# captured it uses remote.kernels.step (one-kernel RMSNorm, the attention kernel, one GEMM per group of projections
# sharing an input). The prompt's drafter context is absorbed during the prefill (`_absorb`), so every step has the
# captured shape. Caches grow (and captured graphs are dropped) when a generation needs more rows.
class GraphDecoder:
    # The drafter's pending context, in blocks: a speculative step's draft reads the first block (what one step commits
    # at most); tree_budget=auto's AR steps append a row each to what is pending, and the rest is room for them: once it
    # is full the whole buffer goes through the drafter at once (`_absorb_step`: an AR step's cost otherwise, plus
    # appending one row). Why 16: with 4 blocks on demo-qwen3 an absorb (then uncompiled) took 270 us once per 48 AR
    # steps of 186 us, 3% of auto's time at T=1, where AR steps are nearly all it chooses (one H100, 2026-12-07,
    # `gpu_suite.sh q3_auto_timeline`, bench/step_timeline.py's kinds); the buffer is 256 rows of features (13 MB for 5
    # taps of a 5120-wide target).
    context_blocks = 16

    def __init__(self, model, drafter: DFlashDrafter | None, target_layer_ids: list[int] | None,
                 graphs: bool = True, compiled: bool = False, compiled_drafter: bool = False):
        self.model, self.drafter = model, drafter
        self.device = input_device(model)
        self.dtype = model.get_input_embeddings().weight.dtype
        self._targets(target_layer_ids)
        self.capacity = self.context_capacity = 0    # target and drafter cache rows
        self.replays = Replays(graphs)
        # the target's glue compiled in AR too: every method runs the same target kernels
        self.compile = Compiled(steps=compiled, drafter=compiled_drafter and not compiled and drafter is not None,
                                glue=compiled_drafter and not compiled)
        if compiled:
            _compile_steps(self)
        self._draft = torch.compile(draft, dynamic=False) if self.compile.drafter else draft
        self._draft_hidden = torch.compile(draft_hidden, dynamic=False) if self.compile.drafter else draft_hidden
        self.state, self.sampling = DeviceState(self.device), Sampling(self.device)
        self._first = torch.zeros(1, dtype=torch.long, device=self.device)     # the one row an AR step appends

    def _targets(self, target_layer_ids: list[int] | None) -> None:
        # their forwards (logits, and drafter features for `featured`) run on this decoder's static cache: the prompt
        # through transformers' forward, the steps through our layer loop where it can run the model
        self.featured, self.plain = AttentionTarget(self.model, target_layer_ids), AttentionTarget(self.model, None)
        self.loop = None if AttentionLoop.unsupported(self.model) else AttentionLoop(self.model, target_layer_ids)

    @property
    def graphs(self) -> bool:
        """Whether steps are captured and replayed (False: graphs off, or a capture failed)."""
        return self.replays.on

    @property
    def compiled(self) -> bool:
        """Whether the steps are torch.compile'd whole (compile_steps)."""
        return self.compile.steps

    @property
    def read_wait_s(self) -> float:
        """Seconds the host has waited for speculative steps' reads: near zero a step where the host sets the pace."""
        return self._reads.waited

    @torch.inference_mode()
    def steps(self, method: Method | str, prompt_len: int, max_new: int, budget: int = 0,
              auto: AutoBudget | None = None, temperature: float = 0.0, seed: int = 0) -> Steps:
        """The executor of one generation of `method` (remote.decoding.loop.decode): caches reserved for it (with
        `auto`, for its largest bucket), its sampling seeded from `seed`."""
        method = Method.parse(method)
        sizes = tuple(auto.sizes) if auto else ()
        budget = max(sizes) if auto else budget
        self.sampling.seed(temperature, seed)
        self.sampling.hear = None
        self.reserve(prompt_len, max_new, method, budget)
        if not method.uses_drafter:
            return GraphedAR(self)
        self._reads.clear()
        return GraphedSpec(self, method, budget, sizes, prompt_len)

    def generate_ar(self, input_ids: torch.Tensor, max_new: int, stop_ids: set[int], timer: PhaseTimer,
                    temperature: float = 0.0, seed: int = 0) -> Generation:
        steps = self.steps(Method.AR, input_ids.shape[1], max_new, temperature=temperature, seed=seed)
        return decode(steps, input_ids, max_new, stop_ids, timer)

    def generate_spec(self, input_ids: torch.Tensor, max_new: int, stop_ids: set[int], timer: PhaseTimer,
                      method: Method | str, budget: int, auto: AutoBudget | None = None, temperature: float = 0.0,
                      seed: int = 0) -> Generation:
        """With `auto`, each step's budget is its choice among its buckets, each bucket a step of its own."""
        steps = self.steps(method, input_ids.shape[1], max_new, budget, auto, temperature, seed)
        return decode(steps, input_ids, max_new, stop_ids, timer, auto)

    def reserve(self, prompt_len: int, max_new: int, method: Method | str, budget: int, exact: bool = False) -> None:
        """Caches for a generation of this size; growing them drops the graphs captured on the old ones. `exact`:
        exactly this size, also smaller (attention runs over every row, so a cache sized for a larger budget slows
        a smaller one down; bench/bench_methods.py sizes them per budget). The drafter's context cache does not
        depend on the method: a tree's width would otherwise make DDTree's draft attend over more rows than
        DFlash's (on the demo pair cuDNN's drafter attention took 6 us a step more for budget 31's 32 rows)."""
        # A step starts at most at prompt_len + max_new - 2 (AR) and writes `width` rows; a speculative one at most
        # `block_size` - 1 rows later (the loop's launch rule counts a token for a step launched and unread, which
        # may commit a block)
        method = Method.parse(method)
        unread = self.drafter.block_size if method.uses_drafter else 0
        grown = self._grow("capacity", prompt_len + max_new + unread + self._width(method, budget), exact)
        if grown:
            self._cols = torch.arange(self.capacity, device=self.device)
            self._allocate()
        # drafter context rows end before the block's start + block_size
        if self.drafter is not None and self._grow("context_capacity",
                                                   prompt_len + max_new + 2 * self.drafter.block_size, exact):
            self._allocate_drafter()
            grown = True
        if grown:
            self.replays.captured.clear()

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
        self.state.context = torch.zeros(1, self.context_blocks * self.drafter.block_size, weight.shape[1],
                                         dtype=weight.dtype, device=weight.device)
        # `accept`'s read, then tree_budget=auto's predictions (one per bucket)
        self._reads = _Reads(2 * self.drafter.block_size + 1 + STATS_SIZE + MAX_BUCKETS, weight.device)

    def _width(self, method: Method, budget: int) -> int:
        """Cache rows one step may write at or past the committed length."""
        if not method.uses_drafter:
            return 1
        return max(self.drafter.block_size, budget + 1 if method.builds_tree else 0)

    def _replay(self, key: tuple, step) -> torch.Tensor:
        """`step()`'s result; on the first call for `key` it runs eagerly (the warm-up) and is then captured. A
        step that cannot be captured (say a transformers version that reads a device value inside its forward)
        turns graphs off for every shape, so that all methods stay on the same path; `fallback` says why."""
        replays = self.replays
        if not replays.on:
            return step()
        if self.sampling.hear is not None:             # a replay that reads logits: the captured kernels, uncaptured
            with self.kernels():
                return step()
        if key in replays.captured:
            graph, out = replays.captured[key]
            graph.replay()
            return out
        with self.kernels():                           # the captured step keeps these kernels
            try:
                result = replays.warm_up(step)
            except Exception as exc:                 # noqa: BLE001 - a compile failure: the plain step instead
                if not (self.compile.steps or self.compile.drafter):
                    raise
                self._uncompile(exc)
                result = replays.warm_up(step)
            try:
                replays.captured[key] = replays.capture(step)
            except Exception as exc:                 # noqa: BLE001 - any capture failure: decode eagerly instead
                replays.on, replays.captured = False, {}
                replays.fallback = first_line(exc)
        return result

    def _uncompile(self, exc: Exception) -> None:
        """The plain steps from now on, after a compile failed with `exc`."""
        if self.compile.steps:
            del self._ar_step, self._spec_step       # the class's own, uncompiled
        self.compile.steps = self.compile.drafter = False
        self.compile.failed, self._draft, self._draft_hidden = first_line(exc), draft, draft_hidden

    def kernels(self):
        """The kernels of the captured steps (remote.kernels.step)."""
        return step_kernels(self.model, self.drafter, compiled=self.compile.glue)

    def _prefill(self, input_ids: torch.Tensor, featured: bool = False):
        """Run the prompt; `featured`: with the drafter's features (speculative methods)."""
        verified = self._run_prompt(input_ids, featured)
        self.state.start.fill_(input_ids.shape[1])
        self.state.root.copy_(self.sampling.choose(verified.logits[-1:]))
        return verified

    def _run_prompt(self, input_ids: torch.Tensor, featured: bool):
        target = self.featured if featured else self.plain
        rows = torch.arange(input_ids.shape[1], device=self.device)
        self.kv.slots = rows
        causal = visibility_mask(self._cols[None] <= rows[:, None], self.dtype)                # [1, 1, n, cap]
        return target.forward(input_ids.to(self.device), rows[None], causal, last_only=True)

    def _ar_step(self) -> torch.Tensor:
        start, root = self.state.start, self.state.root
        self.kv.slots = start.view(1)
        visible = (self._cols <= start)[None]
        if self.loop is not None:
            return self._advance(self.loop.forward(root.view(1, 1), start.view(1), self.kv, visible).logits)
        out = self.model(input_ids=root.view(1, 1), position_ids=start.view(1, 1),
                         attention_mask=visibility_mask(visible, self.dtype), use_cache=True,
                         **{self.plain.cache_kw: self.kv})
        return self._advance(out.logits[0, -1:])

    def _advance(self, logits: torch.Tensor) -> torch.Tensor:
        """AR bookkeeping after a token's logits [1, V]: the token chosen is the next root."""
        state = self.state
        state.root.copy_(self.sampling.choose(logits))
        state.start.add_(1)
        return state.root

    def _spec_step(self, context: torch.Tensor, valid: torch.Tensor | None, best_first: bool, budget: int,
                   until: str | None = None, sizes: tuple[int, ...] = ()):
        """One speculative step: a best-first tree of <= `budget` nodes (DDTree), else the argmax chain (DFlash).
        `until` names a phase (remote.timing.PHASES) after which it stops, without touching the committed state
        (remote.decoding.phase_split times the phases of a captured step so). With `sizes` (tree_budget=auto's
        buckets) the read ends with the tree's predictions for each."""
        state = self.state
        logits = self._draft(self.drafter, self.model, self.dkv, context, state.root, state.start, valid)
        if until == "draft":
            return logits
        built = build(self.drafter, logits, best_first, budget, sizes)
        tree = built.ancestry()
        if until == "tree_build":
            return tree.ancestors
        visible, positions, rows, nodes = active(tree_inputs)(tree.ancestors, tree.depth, self._cols, state.start,
                                                              state.root, built.tokens)
        verified, commit = self._verify(tree, nodes, visible, positions, rows)
        samples = self.sampling.choose(verified.logits)
        if until == "verify":
            return samples
        # compiled in captured steps (a few kernels, not ~12); `read` ends with tree_budget=auto's predictions
        path, bonus, length, read = active(accept)(tree, nodes, samples, logits, built.expected,
                                                   self.drafter.draft_tokens(samples))
        commit(path, length)
        gather_rows(verified.taps, 0, path, state.context[0], 0)
        state.context_rows.copy_(length)
        state.start.add_(length)
        state.root.copy_(bonus)
        return read

    def draft_context(self) -> torch.Tensor:
        """What a speculative step's draft reads: the first block of the pending context [1, B, F] (a view)."""
        return self.state.context[:, :self.drafter.block_size]

    def _plain_step(self) -> torch.Tensor:
        """tree_budget=auto's AR step inside a speculative generation (PLAIN): the root through the target alone, its
        token chosen; its feature row is appended to the drafter's pending context (the caller makes room:
        `_absorb_step`). Returns the token [1], the step's read."""
        state = self.state
        verified = self._plain_forward()
        token = self.sampling.choose(verified.logits)                                          # [1]
        gather_rows(verified.taps, 0, self._first, state.context[0], state.context_rows)
        state.counters.add_(1)                                                                 # start, context_rows
        state.root.copy_(token)
        return token

    def _absorb_step(self) -> torch.Tensor:
        """The whole pending context through the drafter into its cache (the block's output unused, its rows
        overwritten by later context), leaving none pending: room for AR steps, or a speculative step's context
        within one block."""
        state = self.state
        hidden = self._draft_hidden(self.drafter, self.model, self.dkv, state.context, state.root, state.start,
                                    state.context_rows)
        state.context_rows.zero_()
        return hidden

    def _plain_forward(self):
        """The target on the root alone at `start`, with the drafter's features (`Verified`: logits [1, V])."""
        state = self.state
        self.kv.slots = state.start.view(1)
        visible = (self._cols <= state.start)[None]
        if self.loop is not None:
            return self.loop.forward(state.root.view(1, 1), state.start.view(1), self.kv, visible, featured=True)
        mask = visibility_mask(visible, self.dtype)
        return self.featured.forward(state.root.view(1, 1), state.start.view(1, 1), mask)

    def _verify(self, tree: Ancestry, nodes: torch.Tensor, visible: torch.Tensor, positions: torch.Tensor,
                rows: torch.Tensor):
        """The target's verify of `nodes` at `start` (`tree_inputs`), and the commit to call with the accepted
        (path, length)."""
        self.kv.slots = rows
        if self.loop is not None:
            verified = self.loop.forward(nodes[None], positions, self.kv, visible, featured=True)
        else:
            verified = self.featured.forward(nodes[None], positions[None], visibility_mask(visible, self.dtype))
        return verified, lambda path, length: self.kv.compact(self.state.start, path)

    def _absorb(self, features: torch.Tensor) -> None:
        """Hand the prompt's features [P, F] to the drafter: its last rows (up to a block) become the first step's
        context, so that every step has the captured shape; the rows before them go into the drafter cache now,
        through a drafter forward whose block output is discarded (context K/V depend on row and position only)."""
        state, rows = self.state, min(features.shape[0], self.drafter.block_size)
        if features.shape[0] > rows:
            draft(self.drafter, self.model, self.dkv, features[None, :-rows], state.root, state.start - rows)
        state.context[0, :rows] = features[-rows:]
        state.context_rows.fill_(rows)


class GraphedAR:
    """AR's steps on a `GraphDecoder`: one forward and a token choice each, the token copied out behind its step
    (`_Reads`) and read one step late, so the device works through the host's read and the next launch."""
    method, budget, height, ahead = Method.AR, 0, 1, 2
    waited_s = None

    # Why: reading the token from a device tensor (a `history` of them, once) synchronised the whole stream, the
    # step queued behind it included, so each token cost the device's step plus the host's: demo-qwen3's AR took
    # 0.236 ms a token for a 0.178 ms forward, while tree_budget=auto's AR steps, read through `_Reads` in the
    # speculative loop, took ~0.20 (one H100, 2026-12-07, `gpu_suite.sh q3_auto_t1`).
    def __init__(self, decoder: GraphDecoder):
        self.decoder = decoder
        self.reads = _Reads(1, decoder.state.root.device)

    def listen(self, hear) -> None:
        self.decoder.sampling.hear = hear

    def prefill(self, input_ids: torch.Tensor) -> list[int]:
        self.decoder._prefill(input_ids)
        return to_host(self.decoder.state.root)

    def launch(self, budget: int, timer: PhaseTimer) -> torch.Tensor:
        decoder = self.decoder
        return decoder._replay((Method.AR, decoder.sampling.temperature), lambda: decoder._ar_step())

    def hold(self, launched: torch.Tensor, timer: PhaseTimer) -> None:
        self.reads.put(launched.view(1), timer)      # the state's root, which the next step overwrites

    def read(self, held: None) -> Step:
        token, ended = self.reads.take()
        return Step(token, mark=ended)


class GraphedSpec:
    """DFlash's and DDTree's steps on a `GraphDecoder`: each step's read is copied out behind it (`_Reads`), so the
    next step is queued before this one is read. tree_budget=auto: each candidate budget is a captured step of its
    own, and the host picks the graph of each step it launches (remote.decoding.auto_budget); the predictions it
    picks from ride in the step's read."""
    ahead = 2

    def __init__(self, decoder: GraphDecoder, method: Method, budget: int, sizes: tuple[int, ...], prompt_len: int):
        self.decoder, self.method, self.budget, self.sizes = decoder, method, budget, sizes
        self.height = decoder.drafter.block_size        # most tokens a step emits
        self.width = decoder._width(method, budget)     # most cache rows a step writes
        self.length, self.unread = prompt_len, 0        # committed rows as the host knows them; steps launched unread
        self.pending = min(prompt_len, self.height)     # most drafter context rows pending (`_absorb`: exactly)
        self.kinds: deque = deque()                     # per step launched and not read: an AR step's (PLAIN)?

    listen = GraphedAR.listen

    @property
    def waited_s(self) -> float:
        return self.decoder.read_wait_s

    def prefill(self, input_ids: torch.Tensor) -> list[int]:
        decoder = self.decoder
        decoder._absorb(decoder._prefill(input_ids, featured=True).features)
        return to_host(decoder.state.root)

    def launch(self, budget: int, timer: PhaseTimer) -> torch.Tensor:
        decoder, state = self.decoder, self.decoder.state
        if self.length + self.height * self.unread + self.width > decoder.capacity:
            raise RuntimeError(f"static cache of {decoder.capacity} rows is full at {self.length}")
        vocab = decoder.drafter.vocab          # a head of its own is another step (bench_methods --draft-vocabs)
        key = ("spec", self.method, budget, self.sizes, decoder.sampling.temperature, vocab.size if vocab else 0)
        room = state.context.shape[1] if budget == PLAIN else self.height
        if self.pending + (budget == PLAIN) > room:     # a draft reads one block: absorb what AR steps left first
            decoder._replay(("absorb",), decoder._absorb_step)
            self.pending = 0
        self.kinds.append(budget == PLAIN)
        if budget == PLAIN:
            self.pending += 1
            return decoder._replay(("plain", decoder.sampling.temperature), decoder._plain_step)
        self.pending = self.height
        return decoder._replay(key, lambda: decoder._spec_step(decoder.draft_context(), state.context_rows,
                                                               self.method.builds_tree, budget, sizes=self.sizes))

    def hold(self, launched: torch.Tensor, timer: PhaseTimer) -> None:
        self.decoder._reads.put(launched, timer)
        self.unread += 1

    def read(self, held: None) -> Step:
        read, ended = self.decoder._reads.take()
        self.unread -= 1
        if self.kinds.popleft():                        # an AR step: its token
            self.length += 1
            return Step(read, mark=ended, plain=True)
        tokens, stats, predicted = read_step(read, len(self.sizes))
        self.length += len(tokens)
        return Step(tokens, stats, predicted, accepted_nodes(read, tokens), ended)


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
        step = Static(self.state.start, (self._cols <= self.state.start)[None])
        return self._advance(self.target.decode(self.state.root, step))

    def _plain_forward(self):
        step = Static(self.state.start, (self._cols <= self.state.start)[None])
        return self.target.decode(self.state.root, step, featured=True)

    def _verify(self, tree: Ancestry, nodes: torch.Tensor, visible: torch.Tensor, positions: torch.Tensor,
                rows: torch.Tensor):
        step = Static(self.state.start, visible, TreeLayout.build(tree, self.target.conv_kernel), rows=rows,
                      positions=positions)
        verified = self.target.verify_static(nodes, step)
        return verified, lambda path, length: self.target.commit_static(step, path, length)
