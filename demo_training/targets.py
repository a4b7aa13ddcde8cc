"""The two demo targets (pure-attention Qwen3, hybrid Qwen3.5 text) and their language-model training.

Contract: `build_target(kind, shape, vocab_size, seed)` returns a float32 `AutoModelForCausalLM` with random weights
(kind "qwen3" or "qwen3_5"; `shape` holds transformers config fields); `train_lm(model, ...)` trains it on random
windows of a token stream (AdamW (0.9, 0.95), wd 0.1 on matrices, warm-up then cosine to 10 %, bf16 autocast on CUDA,
grad-norm clip 1.0) and returns its losses. Hybrid models train on transformers' torch reference path for the Gated
DeltaNet layers (`torch_gdn_path`): flash-linear-attention's backward is refused on the GPU host's Triton.
The token stream lives on the device and batches are drawn there, so a step never waits on the host; losses are
read back only every `log_every` steps.
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM

from remote.kernels.gdn_paths import torch_gdn_path

from .common import StepWindow, adamw, autocast, log, lr_at, set_lr

KINDS = {"qwen3": "qwen3", "qwen3_5": "qwen3_5_text"}


def build_target(kind: str, shape: dict, vocab_size: int, seed: int) -> torch.nn.Module:
    if kind not in KINDS:
        raise ValueError(f"target kind must be one of {', '.join(KINDS)}; got {kind!r}")
    fields = dict(shape, vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                  tie_word_embeddings=True, use_cache=True)
    config = AutoConfig.for_model(KINDS[kind], **fields)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return model.float()


def _windows(stream: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """stream [N] int32 on device, starts [B] -> [B, length] long."""
    return stream[starts[:, None] + torch.arange(length, device=stream.device)].long()


def lm_loss(model: torch.nn.Module, chunk: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Next-token cross-entropy of chunk [B, L+1] (float32 loss from bf16 logits)."""
    with autocast(device):
        logits = model(input_ids=chunk[:, :-1], use_cache=False).logits              # [B, L, V]
    return F.cross_entropy(logits.float().flatten(0, 1), chunk[:, 1:].flatten())


@torch.no_grad()
def heldout_loss(model, stream: torch.Tensor, batch: int, seq: int, batches: int, device, seed: int) -> float:
    """Mean next-token loss over `batches` fixed random windows of the held-out stream."""
    if stream.numel() <= seq + 1:
        return float("nan")
    model.eval()
    g = torch.Generator(device=device).manual_seed(seed)
    total = torch.zeros((), device=device)
    for _ in range(batches):
        starts = torch.randint(0, stream.numel() - seq - 1, (batch,), device=device, generator=g)
        total += lm_loss(model, _windows(stream, starts, seq + 1), device)
    return float(total / batches)


def train_lm(model, train: torch.Tensor, heldout: torch.Tensor, *, steps: int, batch: int, seq: int, lr: float,
             warmup: int, device: torch.device, seed: int, name: str, log_every: int) -> dict:
    """Train `model` in place on windows of `train` [N] int32 (on `device`); returns losses and timings."""
    model.to(device).train()
    optimizer = adamw(model, lr, 0.1, device)
    g = torch.Generator(device=device).manual_seed(seed)
    running = torch.zeros((), device=device)
    started, window, first_loss = time.time(), StepWindow(steps), None
    train_loss = float("nan")
    gdn = torch_gdn_path() if "linear_attention" in (getattr(model.config, "layer_types", None) or []) \
        else contextlib.nullcontext()
    with gdn:
        for step in range(steps):
            set_lr(optimizer, lr_at(step, steps, lr, warmup))
            starts = torch.randint(0, train.numel() - seq - 1, (batch,), device=device, generator=g)
            loss = lm_loss(model, _windows(train, starts, seq + 1), device)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            running += loss.detach()
            done = step + 1
            if done % log_every == 0 or done == steps:
                count, ms, eta = window.close(done, log_every)
                train_loss = float(running) / count                       # the only host sync
                first_loss = train_loss if first_loss is None else first_loss
                running.zero_()
                log(f"{name}: step {done}/{steps} loss {train_loss:.3f} lr {lr_at(step, steps, lr, warmup):.2e} "
                    f"{ms:.0f} ms/step eta {eta:.0f}s")
        train_s = time.time() - started
        held = heldout_loss(model, heldout, batch, seq, 8, device, seed + 1)
    log(f"{name}: trained {steps} steps in {train_s:.0f}s, train loss {train_loss:.3f}, held-out loss {held:.3f}")
    model.eval()
    return {"steps": steps, "batch": batch, "seq": seq, "train_s": round(train_s, 1),
            "ms_per_step": round(1000 * train_s / max(steps, 1), 1), "first_window_loss": round(first_loss or 0.0, 3),
            "train_loss": round(train_loss, 3), "heldout_loss": round(held, 3)}
