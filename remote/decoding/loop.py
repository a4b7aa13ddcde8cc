"""The decoding loop: prefill, then steps (draft, verify, commit) until `max_new_tokens` or a stop id, for `ar` (one
target forward per step), `dflash` (a drafted block verified as a chain) and `ddtree` (a best-first tree).

Contract: `decode(steps, input_ids, max_new, stop_ids, timer, auto)` takes prompt ids [1, P] and returns a
`Generation` of at most `max_new` new ids, ending after the first id in `stop_ids`. `steps` is the executor, how a
step runs (`Steps`): `EagerAR` / `EagerSpec` here, eager torch calls over transformers' caches (`generate_ar` /
`generate_spec` build them); remote.decoding.graph's, the same step functions over preallocated caches, each step
a captured CUDA graph replayed. At temperature 0 every method emits AR's greedy tokens (in exact arithmetic), at
temperature > 0 samples of the target's distribution: a step keeps the target's own token at every node (`accept`),
drafts are never sampled. A speculative step reads the device once (its tokens and `StepStats`), AR once a token.
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import torch
from torch.nn import functional as F

from ..kernels import step_stats
from ..models.compat import cache_kwarg, input_device, make_cache, output_device
from ..models.drafter import DFlashDrafter, DrafterCache
from ..models.target import Target
from ..spec import Method
from ..timing import PhaseTimer
from ..tree import Ancestry, DeviceTree
from .auto_budget import PLAIN, AutoBudget
from .sampling import sample
from .tree_build import argmax_chain, best_first_tree


class StepStats(NamedTuple):
    """One verify step's tree facts (`miss_stats`), read with its tokens. The first missed depth is the first depth
    at which the target's token was not the drafter's top token held on the walk's path: either the walk took a
    sibling there (`in_tree`) or it ended there (the bonus token). 0 in the miss fields: no miss (the step accepted
    the drafter's top token at every depth the drafter predicts)."""

    nodes: int        # rows of the verify forward: the root and every drafted node
    miss_depth: int   # first missed depth (1-based), 0 for none
    miss_rank: int    # the drafter's rank of the target's token there (1 = its top token), 0 for none
    in_tree: int      # 1 if the tree held the target's token there (a sibling the walk took), else 0


STATS_SIZE = len(StepStats._fields)      # entries that `accept` appends to its read with `draft_logits`


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)      # new ids, prompt excluded
    accepted: list[int] = field(default_factory=list)    # per verify step: drafted tokens accepted
    committed: list[int] = field(default_factory=list)   # per verify step: tokens kept (accepted + bonus, capped)
    stats: list[StepStats] = field(default_factory=list)  # per verify step, where the decoder reads them
    budgets: list[int] = field(default_factory=list)     # tree_budget=auto: per step, the budget chosen (AR's: 0)
    predicted: list[float] = field(default_factory=list)  # ... per verify step, what its tree was expected to accept
    plain_steps: int = 0                                   # tree_budget=auto: AR steps chosen (not verify steps)
    times_ms: dict[str, float] = field(default_factory=dict)   # ttft, decode, draft, tree_build, verify, commit
    prompt_len: int = 0

    def extend(self, new: list[int], max_new: int, stop_ids: set[int]) -> bool:
        """Append `new`, capped at `max_new` and after the first stop id; True when generation is over."""
        for token in new:
            self.tokens.append(token)
            if token in stop_ids or len(self.tokens) >= max_new:
                return True
        return False

    def extend_step(self, new: list[int], max_new: int, stop_ids: set[int], stats: StepStats | None = None) -> bool:
        """`extend` with one verify step's tokens (accepted drafts, then the bonus), recording its acceptance (and
        its `stats`, when the decoder read them)."""
        before = len(self.tokens)
        done = self.extend(new, max_new, stop_ids)
        self.accepted.append(len(new) - 1)
        self.committed.append(len(self.tokens) - before)
        if stats is not None:
            self.stats.append(stats)
        return done

    def chose(self, auto: AutoBudget, budget: int, predicted: list[int], nodes: list[int], committed: int,
              span) -> None:
        """tree_budget=auto: a step's `budget`, its `predicted` (its tree's `expected`, remote.decoding.tree_build), the
        accepted path's `nodes` below the root, the tokens it `committed` and its timing `span` go to the policy and
        to this generation (an AR step, budget PLAIN: its budget and tokens only)."""
        auto.observe(budget, predicted, nodes, committed, span)
        self.budgets.append(budget)
        if budget != PLAIN:
            self.predicted.append(predicted[auto.sizes.index(budget)] / 1000)


def to_host(t: torch.Tensor) -> list[int]:
    """The one device->host read of a decoding step (tests count the calls)."""
    return t.tolist()


def draft(drafter: DFlashDrafter, model, cache: DrafterCache, context: torch.Tensor, root: torch.Tensor | int,
          start: torch.Tensor | int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Drafter logits [B-1, V] for the positions after `root` ([1] on the device, or an int), which sits at
    sequence position `start` (an int, or a device scalar with a static cache: remote.decoding.graph); over a
    reduced draft vocabulary [B-1, N], in draft ids (`build` maps a tree's tokens to the target's).

    `context` [1, C, F] holds target features of the C committed tokens the drafter has not seen yet; they sit
    at positions start-C .. start-1, right after the cache's C' = start - C tokens. With `valid` (a device
    scalar, static caches only) only its first `valid` rows are real: they sit at start-valid .. start-1, and the
    padding rows after them land at or past `start`, where the static cache masks them.
    """
    hidden = draft_hidden(drafter, model, cache, context, root, start, valid)[:, 1:]           # [1, B-1, H]
    return drafter.logits(hidden, model.get_output_embeddings())[0].float()       # [B-1, V] or, reduced, [B-1, N]


def draft_hidden(drafter: DFlashDrafter, model, cache: DrafterCache, context: torch.Tensor, root: torch.Tensor | int,
                 start: torch.Tensor | int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """`draft`'s drafter forward: the block's hidden states [1, B, H]; the context's K/V go into `cache`."""
    block, c_len = drafter.block_size, context.shape[1]
    assert not isinstance(start, int) or cache.length + c_len == start, "drafter context must follow its cache"
    weight = model.get_input_embeddings().weight
    ids = torch.full((1, block), drafter.mask_token_id, dtype=torch.long, device=weight.device)
    ids[:, :1] = root                                                                         # [1, B]
    noise = F.embedding(ids, weight).to(context.device) * drafter.embed_scale                # [1, B, H]
    real = c_len if valid is None else valid
    positions = torch.cat([torch.arange(c_len, device=context.device) + (start - real),
                           torch.arange(block, device=context.device) + start])                # [C + B]
    cache.begin(positions, c_len)
    return drafter(noise, context, positions, cache)                                         # [1, B, H]


@dataclass
class Accepted:
    """One step's outcome: `path` and `bonus` stay on the device, `tokens` came over in the step's one read."""
    path: torch.Tensor      # [L] long: verify indices of the accepted path, root first
    bonus: torch.Tensor     # [1] long: the target's token after the path (the next root)
    tokens: list[int]       # the L-1 accepted drafted tokens, then the bonus token
    stats: StepStats | None  # the step's tree facts, from the same read (given the draft logits)
    extra: list[int] = field(default_factory=list)   # what `walk` was given to read along
    nodes: list[int] = field(default_factory=list)   # the accepted nodes' verify indices (given the draft logits)
    plain: bool = False                               # an AR step (tree_budget=auto's PLAIN): no draft, no tree


def build(drafter: DFlashDrafter, logits: torch.Tensor, best_first: bool, budget: int,
          sizes: tuple[int, ...] = ()) -> DeviceTree:
    """A step's tree from its draft `logits`: best-first of <= `budget` nodes (DDTree, with tree_budget=auto's
    `sizes`) or the argmax chain (DFlash), built in draft ids, its tokens then the target's (one gather, where the
    drafter has a reduced vocabulary)."""
    tree = best_first_tree(logits, budget, sizes) if best_first else argmax_chain(logits)
    return tree if drafter.vocab is None else dataclasses.replace(tree, tokens=drafter.target_tokens(tree.tokens))


def accept(tree: Ancestry, nodes: torch.Tensor, samples: torch.Tensor, draft_logits: torch.Tensor | None = None,
           extra: torch.Tensor | None = None, draft_samples: torch.Tensor | None = None):
    """Acceptance rule: the target's own token at a node (argmax at T=0, a sample at T>0, drawn at every node)
    is the next output token. If that token is a child of the node, the child is accepted and the walk goes on
    from it; otherwise it is the bonus token and the step ends. Every emitted token is therefore a target token
    given its exact prefix, which makes the method lossless at any temperature.

    On the device, without a loop: a node is reached iff every node on its path (the root excepted) holds the
    token the target chose at its parent. Siblings hold distinct tokens, so the reached nodes form one chain
    from the root and the deepest of them ends the walk. nodes, samples [N] (verify index space, one root at 0).
    Returns device tensors: the path [H] (root first, padded with its last node), the bonus token [1], the path
    length [] and `read` [2H + 1] = path, its tokens, bonus: what the host needs (`accepted_tokens`). With the
    step's `draft_logits` [D, V], `read` goes on with the step's `StepStats` [STATS_SIZE] (`miss_stats`), then
    `extra` [K] long if given (one concatenation: each kernel costs a captured step ~2 us). Draft logits over a
    reduced vocabulary rank `draft_samples` (the samples in draft ids, -1 outside it) in place of `samples`."""
    matched = nodes == samples.index_select(0, tree.parents.clamp(min=0))                   # [N] (root: unused)
    reached = torch.take(matched, tree.ancestors[:, 1:]).all(dim=1)                         # [N] path below the root
    last = (tree.depth * reached).argmax().view(1)        # deepest reached node; none reached: all 0, the root
    path = tree.ancestors.index_select(0, last).view(tree.height)     # [H]: the path, then `last` repeated
    bonus = samples.index_select(0, last)
    depth = tree.depth.index_select(0, last)[0]
    parts = [path, nodes.index_select(0, path), bonus]
    if draft_logits is not None:
        ranked = samples if draft_samples is None else draft_samples
        parts.append(miss_stats(ranked, path, depth, draft_logits).to(path.device))
        if extra is not None:
            parts.append(extra.to(path.device))
    return path, bonus, depth + 1, torch.cat(parts)


def miss_stats(samples: torch.Tensor, path: torch.Tensor, accepted: torch.Tensor,
               draft_logits: torch.Tensor) -> torch.Tensor:
    """`StepStats` [STATS_SIZE] long, on the device. samples [N]: the target's token at every node (in the draft
    logits' ids); path [H]: the accepted path (root first, padded with its last node); accepted []: its depth;
    draft_logits [D, V]: row d ranks the drafter's candidates for depth d + 1. The target's token at depth j + 1 is
    its sample at the path's depth-j node (for j < accepted: the accepted node's own token); its rank is 1 + the
    number of tokens the drafter scored strictly higher (a token outside a reduced draft vocabulary, id -1, ranks
    after all of them). Depth j + 1 is missed when j < accepted and that rank is not 1 (the walk went
    on through a sibling), or when j == accepted (the walk ended there), within the D depths the drafter predicts.
    On CUDA two Triton kernels compute it (remote.kernels.step_stats, in place of ~25 small torch ops)."""
    return step_stats.miss_stats(samples, path, accepted, draft_logits)


def accepted_tokens(read: list[int], height: int) -> list[int]:
    """The accepted drafted tokens, then the bonus token, from `accept`'s `read` once on the host."""
    length = read.index(read[height - 1]) + 1                    # up to the first `last`
    return read[height + 1:height + length] + [read[2 * height]]         # the bonus; `StepStats` may follow


def accepted_nodes(read: list[int], tokens: list[int]) -> list[int]:
    """The accepted drafted nodes' verify indices (best-first numbers for a best-first tree), from `accept`'s `read`
    on the host and its `accepted_tokens`: the read begins with the path, root first."""
    return read[1:len(tokens)]


def read_step(read: list[int], extra: int = 0) -> tuple[list[int], StepStats, list[int]]:
    """The accepted tokens, the `StepStats` and the `extra` entries appended after them (tree_budget=auto's
    predictions) of a `read` that `accept` made with `draft_logits`."""
    height = (len(read) - 1 - STATS_SIZE - extra) // 2
    stats = 2 * height + 1
    return accepted_tokens(read, height), StepStats(*read[stats:stats + STATS_SIZE]), read[stats + STATS_SIZE:]


def walk(tree: Ancestry, nodes: torch.Tensor, samples: torch.Tensor,
         draft_logits: torch.Tensor | None = None, extra: torch.Tensor | None = None,
         draft_samples: torch.Tensor | None = None) -> Accepted:
    """`accept`, with the step's one host read (its `StepStats` too, given the step's `draft_logits`; and `extra`
    [K] long, read along, given draft logits)."""
    path, bonus, _, read = accept(tree, nodes, samples, draft_logits, extra, draft_samples)
    if draft_logits is None:
        tokens = accepted_tokens(to_host(read), tree.height)
        return Accepted(path=path[:len(tokens)], bonus=bonus, tokens=tokens, stats=None)
    host = to_host(read)
    tokens, stats, rest = read_step(host, 0 if extra is None else extra.shape[0])
    return Accepted(path=path[:len(tokens)], bonus=bonus, tokens=tokens, stats=stats, extra=rest,
                    nodes=accepted_nodes(host, tokens))


class Step(NamedTuple):
    """A step as the host reads it."""
    tokens: list[int]                 # AR: the token; speculative: the accepted drafted tokens, then the bonus token
    stats: StepStats | None = None    # speculative: the step's tree facts
    predicted: list[int] = []         # tree_budget=auto: its tree's `expected`, one per bucket
    nodes: list[int] = []             # speculative: the accepted nodes' verify indices below the root
    mark: object = None               # a timer mark of when its tokens were there to read; None: when read
    plain: bool = False               # speculative executor: an AR step tree_budget=auto chose (one token)


class Steps(Protocol):
    """An executor: how a generation's steps run. Built for one generation; `decode` calls `prefill` once, then
    `launch` and `hold` per step, `read` per step in launch order."""
    method: Method
    budget: int     # the step's node budget without tree_budget=auto (AR, DFlash: unused)
    height: int     # most tokens a step emits
    ahead: int      # most steps launched and not yet read
    waited_s: float | None   # seconds the host waited for reads so far, where they come asynchronously; else None

    def prefill(self, input_ids: torch.Tensor) -> list[int]:
        """Run the prompt [1, P]; its next token, read."""

    def launch(self, budget: int, timer: PhaseTimer) -> object:
        """One step's device work (what tree_budget=auto times), a tree of `budget` nodes where the method builds
        one (speculative executors: an AR step for PLAIN); what `hold` gets."""

    def hold(self, launched: object, timer: PhaseTimer) -> object:
        """What the loop keeps of a launched step until `read` (a captured step's output is copied out here)."""

    def read(self, held: object) -> Step:
        """The step's one device->host read."""

    def listen(self, hear) -> None:
        """From now on `hear(logits [N, V])` at every token choice, the rows of a verify in verify order; the steps
        then run uncaptured (an untimed replay that reads logits: remote.divergence). None: no more."""


@torch.inference_mode()
def decode(steps: Steps, input_ids: torch.Tensor, max_new: int, stop_ids: set[int], timer: PhaseTimer,
           auto: AutoBudget | None = None) -> Generation:
    """Prefill, then steps until `max_new` tokens or a stop id; with `auto`, each step's budget is its choice."""
    gen = Generation(prompt_len=input_ids.shape[1])
    with timer.phase("ttft"):
        done = gen.extend(steps.prefill(input_ids), max_new, stop_ids)
    queued: deque = deque()     # (budget, auto's span, held) per step launched and not read, oldest first
    seen = None                 # auto: the step read last, observed once the next one is launched
    host = auto is not None and steps.waited_s is not None      # auto learns the host's own time a pass
    with timer.phase("decode") as span:
        while not done:
            began, waited = (time.perf_counter(), steps.waited_s) if host else (0.0, 0.0)
            # Up to `ahead` steps are launched before the oldest is read, so that the device works through the
            # host's read and bookkeeping (a step's inputs are all on the device); none that max_new rules out:
            # every step commits a token at least, so one more is ruled out only once those queued surely reach
            # max_new (one that turns out unneeded runs out unread, as past a stop token: not decode time).
            while len(queued) < steps.ahead and len(gen.tokens) + len(queued) < max_new:
                queued.append(_launch(steps, auto, timer))
            if seen:
                gen.chose(auto, *seen)
            budget, launched, held = queued.popleft()
            step, before = steps.read(held), len(gen.tokens)
            if step.plain:
                gen.plain_steps += 1
            if steps.method.uses_drafter and not step.plain:
                done = gen.extend_step(step.tokens, max_new, stop_ids, step.stats)
            else:
                done = gen.extend(step.tokens, max_new, stop_ids)
            # a step launched before a stop token was read runs out unread: not decode time
            span.end = step.mark if done else None
            seen = (budget, step.predicted, step.nodes, len(gen.tokens) - before, launched) if auto else None
            if seen and steps.ahead == 1:       # no step launched ahead to overlap with: observed at once
                gen.chose(auto, *seen)
                seen = None
            if host:
                auto.host(1000.0 * (time.perf_counter() - began - (steps.waited_s - waited)))
    if seen:
        gen.chose(auto, *seen)
    for budget, launched, _ in queued if auto else ():     # launched, never read: the generation ended first
        auto.dropped(budget, launched)
    return gen


def _launch(steps: Steps, auto: AutoBudget | None, timer: PhaseTimer) -> tuple:
    """One step launched, at tree_budget=auto's pick of budget and timed by it."""
    budget = auto.pick() if auto else steps.budget
    with auto.timing(budget) if auto else nullcontext() as launched:
        out = steps.launch(budget, timer)
    return budget, launched, steps.hold(out, timer)


class EagerAR:
    """AR through the model's own forward and transformers' cache. A token is read one step late, once the next
    forward is queued: the stop check then costs the device no wait."""
    method, budget, height, ahead = Method.AR, 0, 1, 2
    waited_s = None

    def __init__(self, model, temperature: float, generator):
        self.model, self.temperature, self.generator = model, temperature, generator
        self.cache, self.kw, self.device = make_cache(model), cache_kwarg(model), input_device(model)
        self.hear = None

    def listen(self, hear) -> None:
        self.hear = hear

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        if self.hear is not None:
            self.hear(logits)
        return sample(logits, self.temperature, self.generator)

    def prefill(self, input_ids: torch.Tensor) -> list[int]:
        out = self.model(input_ids=input_ids.to(self.device), use_cache=True, logits_to_keep=1,
                         **{self.kw: self.cache})
        self.token = self.choose(out.logits[0, -1:].float())                                           # [1]
        self.position = torch.full((1, 1), input_ids.shape[1], dtype=torch.long, device=self.device)  # of `token`
        return to_host(self.token)

    def launch(self, budget: int, timer: PhaseTimer) -> torch.Tensor:
        out = self.model(input_ids=self.token.view(1, 1).to(self.device), position_ids=self.position, use_cache=True,
                         **{self.kw: self.cache})
        self.position = self.position + 1
        self.token = self.choose(out.logits[0, -1:].float())                                           # [1]
        return self.token

    def hold(self, launched: torch.Tensor, timer: PhaseTimer) -> tuple[torch.Tensor, object]:
        return launched, timer.mark()

    def read(self, held: tuple[torch.Tensor, object]) -> Step:
        token, mark = held
        return Step(to_host(token), mark=mark)


class EagerSpec:
    """DFlash or DDTree through a `Target` (remote.models.target), pure-attention or hybrid alike. A step reads its
    tokens before its commit (the target crops its cache to the host's length), so none is launched ahead.

        draft   : drafter block [root, MASK x (B-1)] -> per-position logits [B-1, V]
        build   : dflash -> argmax chain of B-1 nodes; ddtree -> best-first tree of <= budget nodes
        verify  : one target forward over [root] + nodes -> logits [N, V], features [N, F]
        walk    : acceptance (`accept`), the step's one read
        commit  : keep the accepted path's KV; its features become the drafter's next context
    """
    ahead, waited_s = 1, None

    def __init__(self, target: Target, drafter: DFlashDrafter, model, method: Method, budget: int,
                 temperature: float, generator, sizes: tuple[int, ...] = ()):
        self.target, self.drafter, self.model = target, drafter, model
        self.method, self.budget, self.sizes = method, budget, sizes       # sizes: tree_budget=auto's buckets
        self.temperature, self.generator = temperature, generator
        self.height, self.cache = drafter.block_size, drafter.new_cache()
        self.hear = None

    listen, choose = EagerAR.listen, EagerAR.choose

    def prefill(self, input_ids: torch.Tensor) -> list[int]:
        verified = self.target.prefill(input_ids)
        self.root = self.choose(verified.logits[-1:])                                                  # [1]
        tokens = to_host(self.root)
        self.context = verified.features[None].to(output_device(self.model))                          # [1, P, F]
        return tokens

    def launch(self, budget: int, timer: PhaseTimer) -> Accepted:
        if budget == PLAIN:
            return self._plain(timer)
        with timer.phase("draft"):
            logits = draft(self.drafter, self.model, self.cache, self.context, self.root, self.target.length)
        with timer.phase("tree_build"):
            tree = build(self.drafter, logits, self.method.builds_tree, budget, self.sizes)
            ancestry = tree.ancestry()
        with timer.phase("verify"):
            nodes = torch.cat([self.root.to(tree.tokens.device), tree.tokens])                        # [N]
            verified = self.target.verify(nodes, ancestry)
            samples = self.choose(verified.logits).to(nodes.device)                                   # [N]
        with timer.phase("commit"):
            step = walk(ancestry, nodes, samples, logits, tree.expected, self.drafter.draft_tokens(samples))
            self.target.commit(step.path)
            path = step.path.to(verified.features.device)
            self.context = verified.features.index_select(0, path)[None].to(output_device(self.model))  # [1, L, F]
            self.root = step.bonus
        return step

    def _plain(self, timer: PhaseTimer) -> Accepted:
        """tree_budget=auto's AR step: the root verified alone; its features join the drafter's pending context
        (the next draft reads them all)."""
        with timer.phase("verify"):
            chain = Ancestry.chain_of(1, self.root.device)
            verified = self.target.verify(self.root, chain)
            samples = sample(verified.logits, self.temperature, self.generator).to(self.root.device)  # [1]
        with timer.phase("commit"):
            step = walk(chain, self.root, samples)
            self.target.commit(step.path)
            row = verified.features.index_select(0, step.path.to(verified.features.device))[None]
            self.context = torch.cat([self.context, row.to(self.context.device)], dim=1)           # [1, C + 1, F]
            self.root = step.bonus
        return dataclasses.replace(step, plain=True)

    def hold(self, launched: Accepted, timer: PhaseTimer) -> Accepted:
        return launched

    def read(self, held: Accepted) -> Step:
        return Step(held.tokens, held.stats, held.extra, held.nodes, plain=held.plain)


def generate_ar(model, input_ids: torch.Tensor, max_new: int, temperature: float, generator, stop_ids: set[int],
                timer: PhaseTimer) -> Generation:
    """Plain KV-cached decoding, eagerly: one target forward per token."""
    return decode(EagerAR(model, temperature, generator), input_ids, max_new, stop_ids, timer)


def generate_spec(target: Target, drafter: DFlashDrafter, model, input_ids: torch.Tensor, max_new: int,
                  temperature: float, generator, stop_ids: set[int], timer: PhaseTimer, method: Method | str,
                  budget: int, auto: AutoBudget | None = None) -> Generation:
    """`dflash` (chain) or `ddtree` (tree of <= `budget` nodes, or with `auto` a budget chosen per step by it)
    speculative decoding through `target`, eagerly."""
    steps = EagerSpec(target, drafter, model, Method.parse(method), budget, temperature, generator,
                      tuple(auto.sizes) if auto else ())
    return decode(steps, input_ids, max_new, stop_ids, timer, auto)
