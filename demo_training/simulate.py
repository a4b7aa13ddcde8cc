"""Exact simulation of DFlash / DDTree acceptance at temperature 0, batched on the GPU.

Contract: `simulate_pair(model, drafter, prompts, ...)` returns per method the pooled tau (committed tokens / verify
steps, as remote.metrics defines it) and per-prompt taus. It equals the runner's figures in exact arithmetic; in bf16
a tie can flip a token, hence the runner cross-check on a few prompts. Why: the runner's loop costs tens of ms per
verify step on these tiny models (per-step host overhead), too slow for 24 prompts x 5 methods x 2 pairs in the
training job's time budget; at temperature 0 its outcome is fully determined by the target's greedy continuation and
the drafter's output for each root position, so it can be replayed (the replay is written out below).
"""

# The replay, for y the target's greedy continuation (ending at max_new_tokens or at its first stop token, inclusive):
#     root r = P (the prefill token), count = 1
#     each verify step: draft logits for the block rooted at r (context = target features of positions < r);
#                       build the chain (`remote.decoding.tree_build.chain_tree`) or the tree
#                       (`remote.decoding.tree_build.build_tree`, budget b);
#                       accepted a = depth of the deepest node on the path y[r+1], y[r+2], ... (the runner's `walk`
#                       at T=0: a child is accepted iff it is the target's argmax);
#                       committed = min(a + 1, n - count) (bonus included, capped like `Generation.extend`); r += a + 1
# Drafts for all roots of a sequence come from one `block_forward` (the runtime drafter's math,
# tests/test_train_smoke.py), features from one teacher-forced forward (the runner targets' features).
from __future__ import annotations

import torch
import torch.nn.functional as F

from remote.decoding.tree_build import build_tree, chain_tree

from .distill import _greedy_batch, target_features
from .drafter_train import block_forward


def _accepted(tree, seq: list[int], root: int, limit: int) -> int:
    """Accepted drafted tokens when the target's greedy tokens after position `root` are seq[root + 1:limit]."""
    node, depth = 0, 0
    while root + depth + 1 < limit:
        child = tree.children[node].get(seq[root + depth + 1])
        if child is None:
            break
        node, depth = child, depth + 1
    return depth


def _draft_logits(model, drafter, seq: torch.Tensor, features: torch.Tensor, roots: torch.Tensor) -> torch.Tensor:
    """seq [1, T], features [1, T, F], roots [R] -> draft logits [R, B-1, V] float32."""
    block = drafter.block_size
    ids = torch.full((1, roots.numel(), block), drafter.mask_token_id, dtype=torch.long, device=seq.device)
    ids[0, :, 0] = seq[0, roots]
    weight = model.get_input_embeddings().weight
    noise = F.embedding(ids.flatten(1), weight).to(features.dtype) * drafter.embed_scale
    hidden = block_forward(drafter, noise, features, roots[None])                           # [1, R*B, H]
    hidden = hidden.view(roots.numel(), block, -1)[:, 1:]
    return drafter.logits(hidden, model.get_output_embeddings()).float()                   # [R, B-1, V]


def _greedy_all(model, prompts: list[torch.Tensor], max_new_tokens: int, device) -> list[torch.Tensor]:
    """Greedy continuations [1, P + N] of every prompt, prompts of equal length decoded as one batch."""
    by_length: dict[int, list[int]] = {}
    for i, prompt in enumerate(prompts):
        by_length.setdefault(prompt.shape[1], []).append(i)
    out: list[torch.Tensor] = [None] * len(prompts)                   # type: ignore[list-item]
    for indices in by_length.values():
        batch = torch.cat([prompts[i].to(device) for i in indices])
        for i, seq in zip(indices, _greedy_batch(model, batch, max_new_tokens)):
            out[i] = seq[None]
    return out


@torch.no_grad()
def simulate_pair(model, drafter, prompts: list[torch.Tensor], *, max_new_tokens: int, budgets: list[int],
                  stop_ids: set[int]) -> dict:
    """prompts: ids [1, P] each (any lengths). Returns {method: {"tau", "tau_prompt_mean", "per_prompt"}}."""
    device = model.get_input_embeddings().weight.device
    drafter = drafter.to(device=device, dtype=model.get_input_embeddings().weight.dtype).eval()
    methods = ["dflash"] + [f"ddtree{b}" for b in budgets]
    per_prompt: dict[str, list[tuple[int, int]]] = {m: [] for m in methods}          # (committed, steps)
    for prompt, seq_t in zip(prompts, _greedy_all(model, prompts, max_new_tokens, device)):
        p = prompt.shape[1]
        seq = seq_t[0].tolist()
        n = max_new_tokens
        for i, token in enumerate(seq[p:]):
            if token in stop_ids:
                n = i + 1
                break
        features = target_features(model, seq_t, drafter.target_layer_ids, batch=1)      # [1, T, F]
        roots = torch.arange(p, p + n - 1, device=device)                                # every possible root
        logits = _draft_logits(model, drafter, seq_t, features, roots).cpu() if n > 1 else None   # trees on host
        limit = p + n                                                                     # tokens known / kept
        for method in methods:
            committed, steps, count = 0, 0, 1
            while count < n:
                root = p + count - 1
                row = logits[root - p]
                tree = chain_tree(row) if method == "dflash" else build_tree(row, int(method[6:]))
                take = min(_accepted(tree, seq, root, limit) + 1, n - count)
                committed, steps, count = committed + take, steps + 1, count + take
            per_prompt[method].append((committed, steps))
    out = {}
    for method, rows in per_prompt.items():
        taus = [round(c / s, 3) if s else None for c, s in rows]      # None: the first token was a stop token
        kept = [t for t in taus if t is not None]
        steps = sum(s for _, s in rows)
        out[method] = {"tau": round(sum(c for c, _ in rows) / steps, 3) if steps else 0.0,
                       "tau_prompt_mean": round(sum(kept) / len(kept), 3) if kept else 0.0,
                       "per_prompt": taus}
    return out
