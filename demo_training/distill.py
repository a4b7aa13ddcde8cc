"""Self-distillation data for a drafter: the target's own greedy continuations and its hidden states.

Contract: `sample_prompts(stream, n, length, seed)` draws n windows [n, length] of a (training) token stream;
`greedy_continuations(model, prompts, new_tokens, batch)` extends each prompt by `new_tokens` greedy tokens with a
KV-cached loop (cache built from the model config, as the runner does), big batches, no host sync inside;
`target_features(model, tokens, layer_ids, batch)` returns the drafter context features [N, T, len(ids) * H]: the
outputs of decoder layers `layer_ids` (HF `hidden_states[i + 1]`, what `remote`'s targets hand the drafter), from
one teacher-forced forward. Run both on the model exactly as it will be served (bf16 weights), so the drafter learns
the behaviour it will be checked against.
"""
from __future__ import annotations

import torch

from remote.models.compat import cache_kwarg, make_cache

from .common import log


def sample_prompts(stream: torch.Tensor, n: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, stream.numel() - length, (n,), generator=g)
    return stream.cpu()[starts[:, None] + torch.arange(length)].long()             # [n, length]


@torch.inference_mode()
def _greedy_batch(model, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """prompts [B, P] on device -> [B, P + new_tokens]."""
    cache, kw = make_cache(model), cache_kwarg(model)
    b, p = prompts.shape
    out = model(input_ids=prompts, use_cache=True, logits_to_keep=1, **{kw: cache})
    token = out.logits[:, -1].argmax(-1)                                            # [B]
    tokens = [token]
    for i in range(new_tokens - 1):
        position = torch.full((b, 1), p + i, dtype=torch.long, device=prompts.device)
        out = model(input_ids=token[:, None], position_ids=position, use_cache=True, **{kw: cache})
        token = out.logits[:, -1].argmax(-1)
        tokens.append(token)
    return torch.cat([prompts, torch.stack(tokens, dim=1)], dim=1)


def greedy_continuations(model, prompts: torch.Tensor, new_tokens: int, batch: int, name: str) -> torch.Tensor:
    """prompts [N, P] -> [N, P + new_tokens] long, on the model's device."""
    device = model.get_input_embeddings().weight.device
    parts = []
    for start in range(0, prompts.shape[0], batch):
        parts.append(_greedy_batch(model, prompts[start:start + batch].to(device), new_tokens))
        if start == 0 or (start // batch + 1) % 4 == 0:
            log(f"{name}: distillation batch {start // batch + 1}/{-(-prompts.shape[0] // batch)}")
    return torch.cat(parts)


@torch.no_grad()
def target_features(model, tokens: torch.Tensor, layer_ids: list[int], batch: int) -> torch.Tensor:
    """tokens [N, T] -> features [N, T, len(layer_ids) * H] in the model's dtype, on its device.

    no_grad rather than inference_mode: the features are inputs of the drafter's autograd graph later."""
    parts = []
    for start in range(0, tokens.shape[0], batch):
        out = model(input_ids=tokens[start:start + batch], use_cache=False, output_hidden_states=True,
                    logits_to_keep=1)
        parts.append(torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1))
    return torch.cat(parts)
