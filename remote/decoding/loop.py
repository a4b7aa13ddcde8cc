"""The decoding methods: `ar` (KV-cached), `dflash` (draft a block, verify it as a chain) and `ddtree` (verify a
best-first tree), as one small function per step around one loop.

Contract: `generate_ar` and `generate_spec` take prompt ids [1, P] and return a `Generation` with at most
`max_new_tokens` new ids, stopping after the first id in `stop_ids`. At temperature 0 both emit exactly AR's
greedy tokens (in exact arithmetic); at temperature > 0 both emit samples from the target's distribution.
The speculative loop only talks to a `Target` (remote.models.target), so the same code serves pure-attention and
hybrid targets. One verify step:

    draft   : drafter block [root, MASK x (B-1)] -> per-position logits [B-1, V]
    build   : dflash -> argmax chain of B-1 nodes; ddtree -> best-first tree of <= budget nodes (tree_budget=auto:
              a budget chosen per step, remote.decoding.auto_budget)
    verify  : one target forward over [root] + nodes -> logits [N, V], features [N, F]
    walk    : acceptance (see `walk`)
    commit  : keep the accepted path's KV; its features become the drafter's next context

Drafts are never sampled (argmax chain / top-k tree at every temperature): losslessness comes from choosing the
target's own token at every node (`walk`), not from rejection sampling against draft probabilities.

Host synchronisation: the tree, its verify mask and positions, the walk and the commit stay on the device; a spec
step reads the device once (`to_host`: the accepted tokens and their count, which the host needs to know how far
the sequence moved; the step's `StepStats` come along in the same read). AR reads each token once, for the stop
check, one token late so that the next forward is already queued on the device. On CUDA at temperature 0 the
runner uses remote.decoding.graph instead: the same draft / tree / `accept` functions over static caches, each
step replayed as one CUDA graph; this loop serves the CPU, sampling, and what the graph decoder does not run.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.nn import functional as F

from ..kernels import step_stats
from ..models.compat import cache_kwarg, input_device, make_cache, output_device
from ..models.drafter import DFlashDrafter, DrafterCache
from ..models.target import Target
from ..timing import PhaseTimer
from ..tree import Ancestry
from .auto_budget import AutoBudget
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
    budgets: list[int] = field(default_factory=list)     # tree_budget=auto: per verify step, the budget chosen
    predicted: list[float] = field(default_factory=list)  # ... and the drafted tokens its tree was expected to accept
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
        to this generation."""
        auto.observe(budget, predicted, nodes, committed, span)
        self.budgets.append(budget)
        self.predicted.append(predicted[auto.sizes.index(budget)] / 1000)


def to_host(t: torch.Tensor) -> list[int]:
    """The one device->host read of a decoding step (tests count the calls)."""
    return t.tolist()


@torch.inference_mode()
def generate_ar(model, input_ids: torch.Tensor, max_new: int, temperature: float, generator, stop_ids: set[int],
                timer: PhaseTimer) -> Generation:
    """Plain KV-cached decoding: one target forward per token."""
    cache, kw = make_cache(model), cache_kwarg(model)
    dev, n = input_device(model), input_ids.shape[1]
    gen = Generation(prompt_len=n)
    with timer.phase("ttft"):
        out = model(input_ids=input_ids.to(dev), use_cache=True, logits_to_keep=1, **{kw: cache})
        token = sample(out.logits[0, -1:].float(), temperature, generator)              # [1]
        done = gen.extend(to_host(token), max_new, stop_ids)
    position = torch.full((1, 1), n, dtype=torch.long, device=dev)                      # of `token`, kept on device
    with timer.phase("decode") as span:
        unread = unread_at = None  # the last sampled token, not yet read: read after the next forward is queued
        while not done:
            queued = queued_at = None
            if len(gen.tokens) + (unread is not None) < max_new:        # a token is still wanted after `unread`
                out = model(input_ids=token.view(1, 1).to(dev), position_ids=position, use_cache=True,
                            **{kw: cache})
                position = position + 1
                token = queued = sample(out.logits[0, -1:].float(), temperature, generator)
                queued_at = timer.mark()
            if unread is not None:
                # If `unread` is a stop id, the queued forward was wasted (one per generation): not decode time.
                done = gen.extend(to_host(unread), max_new, stop_ids)
                span.end = unread_at if done else None
            unread, unread_at = queued, queued_at
    return gen


def draft(drafter: DFlashDrafter, model, cache: DrafterCache, context: torch.Tensor, root: torch.Tensor | int,
          start: torch.Tensor | int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Drafter logits [B-1, V] for the positions after `root` ([1] on the device, or an int), which sits at
    sequence position `start` (an int, or a device scalar with a static cache: remote.decoding.graph).

    `context` [1, C, F] holds target features of the C committed tokens the drafter has not seen yet; they sit
    at positions start-C .. start-1, right after the cache's C' = start - C tokens. With `valid` (a device
    scalar, static caches only) only its first `valid` rows are real: they sit at start-valid .. start-1, and the
    padding rows after them land at or past `start`, where the static cache masks them.
    """
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
    hidden = drafter(noise, context, positions, cache)[:, 1:]                                # [1, B-1, H]
    return drafter.logits(hidden, model.get_output_embeddings())[0].float()                  # [B-1, V]


@dataclass
class Accepted:
    """One step's outcome: `path` and `bonus` stay on the device, `tokens` came over in the step's one read."""
    path: torch.Tensor      # [L] long: verify indices of the accepted path, root first
    bonus: torch.Tensor     # [1] long: the target's token after the path (the next root)
    tokens: list[int]       # the L-1 accepted drafted tokens, then the bonus token
    stats: StepStats | None  # the step's tree facts, from the same read (given the draft logits)
    extra: list[int] = field(default_factory=list)   # what `walk` was given to read along
    nodes: list[int] = field(default_factory=list)   # the accepted nodes' verify indices (given the draft logits)


def accept(tree: Ancestry, nodes: torch.Tensor, samples: torch.Tensor, draft_logits: torch.Tensor | None = None,
           extra: torch.Tensor | None = None):
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
    `extra` [K] long if given (one concatenation: each kernel costs a captured step ~2 us)."""
    matched = nodes == samples.index_select(0, tree.parents.clamp(min=0))                   # [N] (root: unused)
    reached = torch.take(matched, tree.ancestors[:, 1:]).all(dim=1)                         # [N] path below the root
    last = (tree.depth * reached).argmax().view(1)        # deepest reached node; none reached: all 0, the root
    path = tree.ancestors.index_select(0, last).view(tree.height)     # [H]: the path, then `last` repeated
    bonus = samples.index_select(0, last)
    depth = tree.depth.index_select(0, last)[0]
    parts = [path, nodes.index_select(0, path), bonus]
    if draft_logits is not None:
        parts.append(miss_stats(samples, path, depth, draft_logits).to(path.device))
        if extra is not None:
            parts.append(extra.to(path.device))
    return path, bonus, depth + 1, torch.cat(parts)


def miss_stats(samples: torch.Tensor, path: torch.Tensor, accepted: torch.Tensor,
               draft_logits: torch.Tensor) -> torch.Tensor:
    """`StepStats` [STATS_SIZE] long, on the device. samples [N]: the target's token at every node; path [H]: the
    accepted path (root first, padded with its last node); accepted []: its depth; draft_logits [D, V]: row d
    ranks the drafter's candidates for depth d + 1. The target's token at depth j + 1 is its sample at the path's
    depth-j node (for j < accepted: the accepted node's own token); its rank is 1 + the number of tokens the
    drafter scored strictly higher. Depth j + 1 is missed when j < accepted and that rank is not 1 (the walk went
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
         draft_logits: torch.Tensor | None = None, extra: torch.Tensor | None = None) -> Accepted:
    """`accept`, with the step's one host read (its `StepStats` too, given the step's `draft_logits`; and `extra`
    [K] long, read along, given draft logits)."""
    path, bonus, _, read = accept(tree, nodes, samples, draft_logits, extra)
    if draft_logits is None:
        tokens = accepted_tokens(to_host(read), tree.height)
        return Accepted(path=path[:len(tokens)], bonus=bonus, tokens=tokens, stats=None)
    host = to_host(read)
    tokens, stats, rest = read_step(host, 0 if extra is None else extra.shape[0])
    return Accepted(path=path[:len(tokens)], bonus=bonus, tokens=tokens, stats=stats, extra=rest,
                    nodes=accepted_nodes(host, tokens))


@torch.inference_mode()
def generate_spec(target: Target, drafter: DFlashDrafter, model, input_ids: torch.Tensor, max_new: int,
                  temperature: float, generator, stop_ids: set[int], timer: PhaseTimer, method: str,
                  budget: int, auto: AutoBudget | None = None) -> Generation:
    """`dflash` (chain) or `ddtree` (tree of <= `budget` nodes, or with `auto` a budget chosen per step by it)
    speculative decoding through `target`."""
    gen = Generation(prompt_len=input_ids.shape[1])
    with timer.phase("ttft"):
        verified = target.prefill(input_ids)
        root = sample(verified.logits[-1:], temperature, generator)                         # [1]
        done = gen.extend(to_host(root), max_new, stop_ids)
    context, cache = verified.features[None].to(output_device(model)), drafter.new_cache()   # [1, P, F]
    with timer.phase("decode"):
        while not done:
            size = auto.pick() if auto else budget
            with auto.timing(size) if auto else nullcontext() as launch:
                with timer.phase("draft"):
                    logits = draft(drafter, model, cache, context, root, target.length)
                with timer.phase("tree_build"):
                    tree = best_first_tree(logits, size, tuple(auto.sizes) if auto else ()) \
                        if method == "ddtree" else argmax_chain(logits)
                    ancestry = tree.ancestry()
                with timer.phase("verify"):
                    nodes = torch.cat([root.to(tree.tokens.device), tree.tokens])                 # [N]
                    verified = target.verify(nodes, ancestry)
                    samples = sample(verified.logits, temperature, generator).to(nodes.device)   # [N]
                with timer.phase("commit"):
                    step = walk(ancestry, nodes, samples, logits, tree.expected)
                    target.commit(step.path)
                    path = step.path.to(verified.features.device)
                    context = verified.features.index_select(0, path)[None].to(output_device(model))  # [1, L, F]
                    root = step.bonus
            done = gen.extend_step(step.tokens, max_new, stop_ids, step.stats)
            if auto:
                gen.chose(auto, size, step.extra, step.nodes, gen.committed[-1], launch)
    return gen
