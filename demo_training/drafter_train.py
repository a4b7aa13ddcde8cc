"""DFlash drafter training on self-distilled sequences, through the runtime drafter module's own submodules.

Contract: `new_drafter(target, tokenizer, layers, block_size, layer_ids, seed)` is a float32
`remote.models.drafter.DFlashDrafter` shaped from the target by `remote.models.drafter_io.random_drafter` (RoPE over
the full head dim, with the target's theta). `block_forward(drafter, noise, context, anchors)` is the batched, masked
entry point the runtime module does not have: for every anchor a of a sequence it computes what
`DFlashDrafter.forward` computes at decode time for the block [token a, MASK x (B-1)] at positions a..a+B-1 whose
committed context is positions 0..a-1 (the same submodules, RoPE, scale and residual order; the runtime's cache only
changes where context K/V are kept). All blocks of a row share one attention: a block's queries see context keys
before its anchor and the keys of its own block (bidirectionally), nothing else. `train_drafter` trains on random
anchors (>= the prompt length, where the target's own greedy tokens start), loss weighted 0.9^(k-1) at block position
k, with the target's embeddings and LM head frozen. Non-goal: causal or sliding-window drafter layers (refused).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from remote.models.drafter import DFlashDrafter, _rope
from remote.models.drafter_io import random_drafter

from .common import StepWindow, adamw, autocast, log, lr_at, set_lr

POSITION_DECAY = 0.9


def spread_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """`count` target layers spread evenly from layer 1 to layer N-2 (the last layer's output is the normed one)."""
    if count == 1:
        return [num_target_layers // 2]
    lo, hi = 1, max(num_target_layers - 2, 1)
    return [round(lo + i * (hi - lo) / (count - 1)) for i in range(count)]


def new_drafter(target, tokenizer, layers: int, block_size: int, layer_ids: list[int], seed: int) -> DFlashDrafter:
    t = target.config.get_text_config()
    theta = (getattr(t, "rope_parameters", None) or {}).get("rope_theta") or getattr(t, "rope_theta", None) or 1e4
    overrides = {"num_hidden_layers": layers, "rope_parameters": {"rope_type": "default", "rope_theta": float(theta)},
                 "dflash_config": {"target_layer_ids": list(layer_ids)}}
    drafter = random_drafter(target, tokenizer, overrides, block_size, seed)
    for layer in drafter.layers:
        if layer.self_attn.is_causal or layer.self_attn.window is not None:
            raise ValueError("block_forward implements bidirectional, unwindowed drafter layers only")
    return drafter.float().train()


def block_mask(anchors: torch.Tensor, context_len: int, block: int) -> torch.Tensor:
    """anchors [B, NB] -> visible [B, 1, NB*block, context_len + NB*block] bool."""
    b, nb = anchors.shape
    q = nb * block
    q_anchor = anchors.repeat_interleave(block, dim=1)                                     # [B, Q]
    ctx = torch.arange(context_len, device=anchors.device)[None, None, :] < q_anchor[:, :, None]   # [B, Q, T]
    blocks = torch.arange(q, device=anchors.device) // block
    own = (blocks[:, None] == blocks[None, :]).expand(b, q, q)                             # [B, Q, Q]
    return torch.cat([ctx, own], dim=-1)[:, None]


def _attention(attn, x, ctx, cos, sin, mask):
    # x [B, Q, H] blocks; ctx [B, T, H] context; cos/sin [B, T+Q, D]; mask [B, 1, Q, T+Q]
    b, q_len, c_len = x.shape[0], x.shape[1], ctx.shape[1]
    q = attn.q_norm(attn.q_proj(x).view(b, q_len, attn.num_heads, attn.head_dim)).transpose(1, 2)   # [B, Hq, Q, D]
    both = torch.cat([ctx, x], dim=1)
    k = attn.k_norm(attn.k_proj(both).view(b, c_len + q_len, attn.num_kv, attn.head_dim)).transpose(1, 2)
    v = attn.v_proj(both).view(b, c_len + q_len, attn.num_kv, attn.head_dim).transpose(1, 2)       # [B, Hkv, T+Q, D]
    q = _rope(q, cos[:, c_len:], sin[:, c_len:])
    k = _rope(k, cos, sin)
    groups = attn.num_heads // attn.num_kv
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.head_dim ** -0.5)
    return attn.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


def block_forward(drafter: DFlashDrafter, noise: torch.Tensor, context: torch.Tensor,
                  anchors: torch.Tensor) -> torch.Tensor:
    """noise [B, NB*S, H] block embeddings; context [B, T, F] target features of every position; anchors [B, NB]
    -> hidden [B, NB*S, H] (before the LM head)."""
    b, t = context.shape[:2]
    block = drafter.block_size
    q = noise.shape[1]
    ctx = drafter.hidden_norm(drafter.fc(context))                                          # [B, T, H]
    offsets = torch.arange(q, device=noise.device) % block
    q_pos = anchors.repeat_interleave(block, dim=1) + offsets                               # [B, Q]
    positions = torch.cat([torch.arange(t, device=noise.device).expand(b, t), q_pos], dim=1)   # [B, T+Q]
    cos, sin = drafter.rotary_emb(noise, positions)                                        # [B, T+Q, D]
    mask = block_mask(anchors, t, block)
    x = noise
    for layer in drafter.layers:
        x = x + _attention(layer.self_attn, layer.input_layernorm(x), ctx, cos, sin, mask)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return drafter.norm(x)


def block_batch(tokens: torch.Tensor, anchors: torch.Tensor, block: int, mask_id: int):
    """tokens [B, T], anchors [B, NB] -> ids [B, NB*S] ([token a, MASK...] per block), labels [B, NB, S-1]
    (tokens a+1..a+S-1), valid [B, NB, S-1] (label inside the sequence)."""
    b, t = tokens.shape
    nb = anchors.shape[1]
    ids = torch.full((b, nb, block), mask_id, dtype=torch.long, device=tokens.device)
    ids[:, :, 0] = tokens.gather(1, anchors)
    label_pos = anchors[:, :, None] + torch.arange(1, block, device=tokens.device)          # [B, NB, S-1]
    valid = label_pos < t
    labels = tokens.gather(1, label_pos.clamp(max=t - 1).flatten(1)).view(b, nb, block - 1)
    return ids.flatten(1), labels, valid


def sample_anchors(batch: int, seq_len: int, prompt_len: int, count: int, generator, device) -> torch.Tensor:
    """`count` distinct anchors per row in [prompt_len, seq_len - 2]: the root is a target token, >= 1 label."""
    choices = seq_len - 1 - prompt_len
    scores = torch.rand(batch, choices, generator=generator, device=device)
    return scores.argsort(dim=1)[:, :min(count, choices)] + prompt_len                     # [B, NB]


def drafter_loss(drafter, target, tokens, context, anchors, device):
    """Weighted block loss and per-position hit counts ([S-1] correct, [S-1] valid) for one batch."""
    block = drafter.block_size
    ids, labels, valid = block_batch(tokens, anchors, block, drafter.mask_token_id)
    weight = target.get_input_embeddings().weight
    noise = F.embedding(ids, weight).float() * drafter.embed_scale                           # [B, Q, H]
    with autocast(device):
        hidden = block_forward(drafter, noise, context, anchors)
        hidden = hidden.view(*labels.shape[:2], block, -1)[:, :, 1:]                        # [B, NB, S-1, H]
        logits = drafter.logits(hidden, target.get_output_embeddings())                    # [B, NB, S-1, V]
    ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none").view_as(labels)
    w = POSITION_DECAY ** torch.arange(block - 1, device=device, dtype=torch.float32) * valid
    loss = (ce * w).sum() / w.sum()
    hits = ((logits.argmax(-1) == labels) & valid).sum(dim=(0, 1))
    return loss, hits, valid.sum(dim=(0, 1))


def train_drafter(drafter: DFlashDrafter, target, tokens: torch.Tensor, features: torch.Tensor, *, steps: int,
                  batch: int, anchors: int, lr: float, warmup: int, prompt_len: int, device: torch.device, seed: int,
                  name: str, log_every: int) -> dict:
    """tokens [N, T] long and features [N, T, F] on `device`; trains `drafter` in place."""
    drafter.to(device).train()
    for p in target.parameters():
        p.requires_grad_(False)
    optimizer = adamw(drafter, lr, 0.01, device)
    g = torch.Generator(device=device).manual_seed(seed)
    n, t = tokens.shape
    order, cursor = torch.randperm(n, generator=g, device=device), 0
    running = torch.zeros((), device=device)
    hits = torch.zeros(drafter.block_size - 1, device=device)
    seen = torch.zeros_like(hits)
    started, window = time.time(), StepWindow(steps)
    stats: dict = {}
    for step in range(steps):
        if cursor + batch > n:
            order, cursor = torch.randperm(n, generator=g, device=device), 0
        idx = order[cursor:cursor + batch]
        cursor += batch
        set_lr(optimizer, lr_at(step, steps, lr, warmup))
        anchor = sample_anchors(idx.numel(), t, prompt_len, anchors, g, device)
        loss, h, v = drafter_loss(drafter, target, tokens[idx], features[idx], anchor, device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        running += loss.detach()
        hits += h
        seen += v
        done = step + 1
        if done % log_every == 0 or done == steps:
            count, ms, eta = window.close(done, log_every)
            acc = (hits / seen.clamp(min=1)).tolist()
            stats = {"loss": round(float(running) / count, 3), "acc_first": round(acc[0], 3),
                     "acc_last": round(acc[-1], 3), "acc_mean": round(sum(acc) / len(acc), 3)}
            for acc_tensor in (running, hits, seen):
                acc_tensor.zero_()
            log(f"{name}: step {done}/{steps} loss {stats['loss']:.3f} acc pos1 {stats['acc_first']:.2f} .. "
                f"pos{drafter.block_size - 1} {stats['acc_last']:.2f} {ms:.0f} ms/step eta {eta:.0f}s")
    train_s = time.time() - started
    drafter.eval()
    return {"steps": steps, "batch": batch, "anchors": anchors, "sequences": n,
            "epochs": round(steps * batch / n, 2), "train_s": round(train_s, 1),
            "ms_per_step": round(1000 * train_s / max(steps, 1), 1), **stats}
