"""The decoding methods: `ar` (KV-cached), `dflash` (draft a block, verify it as a chain) and `ddtree` (verify a
best-first tree), as one small function per step around one loop.

Contract: `generate_ar` and `generate_spec` take prompt ids [1, P] and return a `Generation` with at most
`max_new_tokens` new ids, stopping after the first id in `stop_ids`. At temperature 0 both emit exactly AR's
greedy tokens (in exact arithmetic); at temperature > 0 both emit samples from the target's distribution.
The speculative loop only talks to a `Target` (remote.target), so the same code serves pure-attention and
hybrid targets. One verify step:

    draft   : drafter block [root, MASK x (B-1)] -> per-position logits [B-1, V]
    build   : dflash -> argmax chain of B-1 nodes; ddtree -> best-first tree of <= budget nodes
    verify  : one target forward over [root] + nodes -> logits [N, V], features [N, F]
    walk    : acceptance (see `walk`)
    commit  : keep the accepted path's KV; its features become the drafter's next context

Drafts are never sampled (argmax chain / top-k tree at every temperature): losslessness comes from choosing the
target's own token at every node (`walk`), not from rejection sampling against draft probabilities.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from .compat import cache_kwarg, input_device, make_cache, output_device
from .drafter import DFlashDrafter, DrafterCache
from .sampling import sample
from .target import Target
from .timing import PhaseTimer
from .tree import Tree, build_tree, chain_tree


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)      # new ids, prompt excluded
    accepted: list[int] = field(default_factory=list)    # per verify step: drafted tokens accepted
    committed: list[int] = field(default_factory=list)   # per verify step: tokens kept (accepted + bonus, capped)
    times_ms: dict[str, float] = field(default_factory=dict)   # ttft, decode, draft, tree_build, verify, commit
    prompt_len: int = 0


def _append(gen: Generation, new: list[int], max_new: int, stop_ids: set[int]) -> bool:
    """Append `new`, capped at `max_new` and after the first stop id; True when generation is over."""
    for token in new:
        gen.tokens.append(token)
        if token in stop_ids or len(gen.tokens) >= max_new:
            return True
    return False


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
        done = _append(gen, token.tolist(), max_new, stop_ids)
    with timer.phase("decode"):
        while not done:
            position = torch.tensor([[n + len(gen.tokens) - 1]], device=dev)
            out = model(input_ids=token.view(1, 1).to(dev), position_ids=position, use_cache=True, **{kw: cache})
            token = sample(out.logits[0, -1:].float(), temperature, generator)
            done = _append(gen, token.tolist(), max_new, stop_ids)
    return gen


def draft(drafter: DFlashDrafter, model, cache: DrafterCache, context: torch.Tensor, root: int,
          start: int) -> torch.Tensor:
    """Drafter logits [B-1, V] for the positions after `root`, which sits at sequence position `start`.

    `context` [1, C, F] holds target features of the C committed tokens the drafter has not seen yet; they sit
    at positions start-C .. start-1, right after the cache's C' = start - C tokens.
    """
    assert cache.length + context.shape[1] == start, "drafter context must be contiguous with its cache"
    block = drafter.block_size
    weight = model.get_input_embeddings().weight
    ids = torch.full((1, block), drafter.mask_token_id, dtype=torch.long, device=weight.device)
    ids[0, 0] = root
    noise = F.embedding(ids, weight).to(context.device) * drafter.embed_scale                # [1, B, H]
    positions = torch.arange(start - context.shape[1], start + block, device=context.device)
    hidden = drafter(noise, context, positions, cache)[:, 1:]                                # [1, B-1, H]
    return drafter.logits(hidden, model.get_output_embeddings())[0].float()                  # [B-1, V]


def walk(tree: Tree, samples: list[int]) -> tuple[list[int], int]:
    """Acceptance rule: the target's own token at a node (argmax at T=0, a sample at T>0, drawn at every node)
    is the next output token. If that token is a child of the node, the child is accepted and the walk goes on
    from it; otherwise it is the bonus token and the step ends. Every emitted token is therefore a target token
    given its exact prefix, which makes the method lossless at any temperature. Returns (path from the root,
    bonus token)."""
    node, path = 0, [0]
    while (child := tree.children[node].get(samples[node])) is not None:
        node = child
        path.append(node)
    return path, samples[node]


@torch.inference_mode()
def generate_spec(target: Target, drafter: DFlashDrafter, model, input_ids: torch.Tensor, max_new: int,
                  temperature: float, generator, stop_ids: set[int], timer: PhaseTimer, method: str,
                  budget: int) -> Generation:
    """`dflash` (chain) or `ddtree` (tree of <= `budget` nodes) speculative decoding through `target`."""
    gen = Generation(prompt_len=input_ids.shape[1])
    with timer.phase("ttft"):
        verified = target.prefill(input_ids)
        root = sample(verified.logits[-1:], temperature, generator).tolist()[0]
        done = _append(gen, [root], max_new, stop_ids)
    context, cache = verified.features[None].to(output_device(model)), drafter.new_cache()   # [1, P, F]
    with timer.phase("decode"):
        while not done:
            with timer.phase("draft"):
                logits = draft(drafter, model, cache, context, root, target.length)
            with timer.phase("tree_build"):
                tree = build_tree(logits, budget) if method == "ddtree" else chain_tree(logits)
            with timer.phase("verify"):
                nodes = torch.tensor([root] + tree.tokens, device=input_device(model))         # [N]
                verified = target.verify(nodes, tree.verify_parents())
                samples = sample(verified.logits, temperature, generator).tolist()           # [N]
            with timer.phase("commit"):
                path, root = walk(tree, samples)
                target.commit(path)
                context = verified.features[path][None].to(output_device(model))            # [1, len(path), F]
            new = [tree.tokens[i - 1] for i in path[1:]] + [root]
            before = len(gen.tokens)
            done = _append(gen, new, max_new, stop_ids)
            gen.accepted.append(len(path) - 1)
            gen.committed.append(len(gen.tokens) - before)
    return gen
