"""The elementwise glue of the captured steps, torch.compile'd: the target's rotary embedding, silu(gate) * up in its
MLPs, the zero-centred and gated RMSNorms of the hybrids and, in our own layer loops (remote.models.layer_loop), each
residual add with the norm after it and a Qwen3 attention's q / k norms with its rotary, one fused kernel each.

Contract: inside `compiled_glue(model)` the `apply_rotary_pos_emb` of every modeling module `model`'s layers come
from is its compiled self (the same function: partial rotary and mrope stay the model's), every SiLU MLP of the
known shape (gate_proj, up_proj, down_proj, act_fn) computes `down_proj(silu(gate) * up)` through a compiled
`silu_mul`, and `active(fn)` is `fn` compiled (the norms and the attention output gate here, remote.models.gdn's
conv and gates); all undone on exit. Every function compiles static, once for each shape it meets (a step's row
count: a handful of widths a run), so a method's kernels never depend on which method compiled first.
Compiled code computes in float32 and rounds once where transformers rounds after each op (equal up to that
rounding). A function that fails to compile runs plain from then on, so a step never fails here. Callers look the
rotary function up in its module at each call (as transformers' attention does).
"""
from __future__ import annotations

import contextlib
import sys
import types

import torch
from torch.nn import functional as F

# Why: at the widths users deploy a small kernel costs a captured step ~2.5 us, and these are many of a step's kernels.
# transformers' `apply_rotary_pos_emb` is five kernels for q and five for k (multiply, negate, cat, multiply, add),
# every attention layer and step: in the eager profile of one Qwen3-8B AR pass they were 0.59 ms of 7.3 (one H200,
# 2026-12-01, bench/bench_profile.py: `gpu_suite.sh profile_8b`). An MLP's silu and multiply are two; in each of
# Qwen3.6-27B's 48 GDN layers the gated norm is seven (casts, the norm, silu, two multiplies) and the gates and head
# repeats about nine. A zero-centred norm is three (casts around `F.rms_norm`), a residual add one more, twice in
# each of a hybrid's layers.
SILU = ("SiLUActivation", "SiLU")           # transformers' ACT2FN["silu"] and torch's


def allow_recompiles(limit: int = 64) -> None:
    """Raise dynamo's recompile limit (per function) to at least `limit`: a compile for each shape takes an entry of
    its own, and past the limit a function runs uncompiled."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), limit))


class _Compiled:
    """`fn` compiled for each shape it meets, or `fn` itself once compiling it failed. Never dynamic: a dynamic
    compile serves every later shape, and dynamo tries its newest entry first, so a kernel tiled for one row count
    would serve all, and which method got it would depend on the order the steps compiled in (remote.models.gdn's
    conv over 16 windows, compiled dynamic after a 32-window verify, ran 6.7 us a layer in three CTAs where its
    static compile had 48: one H200, 2026-12-04, `python3 bench/bench_methods.py $Q35 --temperatures 0 --num-prompts
    6 --budgets 15,31 --timeline DIR`)."""

    def __init__(self, fn):
        allow_recompiles()
        self.fn, self.compiled = fn, torch.compile(fn, dynamic=False)

    def __call__(self, *args, **kwargs):
        if self.compiled is not None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception:       # noqa: BLE001 - inductor unavailable or failing here: the plain function
                self.compiled = None
        return self.fn(*args, **kwargs)


def plain(fn):
    """The function itself where `fn` is its compiled wrapper (to be traced inside another compiled function)."""
    return fn.fn if isinstance(fn, _Compiled) else fn


_CACHE: dict = {}       # function -> its _Compiled (compiled once per process)


def _compiled(fn) -> _Compiled:
    if fn not in _CACHE:            # not setdefault: that would build a torch.compile wrapper at every call
        _CACHE[fn] = _Compiled(fn)
    return _CACHE[fn]


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def zero_centred_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3.5 / Qwen3-Next's RMSNorm in float32 with `scale` (1 + weight, float32), rounded once."""
    return F.rms_norm(x.float(), (x.shape[-1],), scale, eps).type_as(x)


def add_zero_centred_norm(x: torch.Tensor, h: torch.Tensor, scale: torch.Tensor, eps: float):
    """(x + h, zero_centred_norm(x + h)): a residual add and the next zero-centred norm."""
    s = x + h
    return s, zero_centred_norm(s, scale, eps)


def add_rms_norm(x: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, eps: float):
    """(x + h, RMSNorm(x + h)) with a Qwen3 / Llama-style norm's weight: a residual add and the next norm."""
    s = x + h
    return s, F.rms_norm(s, (s.shape[-1],), weight, eps)


def norm_rotary(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                eps: float, cos: torch.Tensor, sin: torch.Tensor, rotate):
    """Qwen3's per-head q / k norms and the rotary `rotate` (the modeling module's `apply_rotary_pos_emb`) at once:
    q [1, T, Hq, D], k / v [1, T, Hkv, D] -> q [1, Hq, T, D] contiguous, K/V stacked [2, Hkv, T, D]."""
    q = F.rms_norm(q, (q.shape[-1],), q_weight, eps).transpose(1, 2)
    k = F.rms_norm(k, (k.shape[-1],), k_weight, eps).transpose(1, 2)
    q, k = rotate(q, k, cos, sin)
    return q.contiguous(), torch.stack([k[0], v[0].transpose(0, 1)])


def gated_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3.5 / Qwen3-Next's gated RMSNorm: weight * rms_norm(x) * silu(gate), rounding where transformers does."""
    normed = F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)
    return (weight * normed * F.silu(gate.float())).to(x.dtype)


def output_gate(o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """A gated attention's output (Qwen3.5 / Qwen3-Next): o * sigmoid(gate), both [1, T, Hq, D] -> [1, T, Hq * D]
    (`gate` may be a slice of the q projection: it is not flattened first, which would copy it)."""
    return (o * torch.sigmoid(gate)).reshape(o.shape[0], o.shape[1], -1)


_ACTIVE = [0]           # compiled_glue contexts open: `active` hands out compiled functions then


def active(fn):
    """`fn` compiled inside `compiled_glue`, `fn` itself elsewhere (for glue the caller calls, as remote.models.gdn's
    gates and remote.kernels.step's gated norm)."""
    return _compiled(fn) if _ACTIVE[0] else fn


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.down_proj(_compiled(silu_mul)(self.gate_proj(x), self.up_proj(x)))


def _silu_mlps(model: torch.nn.Module) -> list[torch.nn.Module]:
    """SiLU MLPs of the known shape whose forward is the class's own (accelerate's hooks wrap it per instance)."""
    return [m for m in model.modules() if type(m).__name__.endswith("MLP") and type(getattr(m, "act_fn", None)).__name__
            in SILU and all(hasattr(m, n) for n in ("gate_proj", "up_proj", "down_proj")) and "forward" not in vars(m)]


@contextlib.contextmanager
def compiled_glue(model: torch.nn.Module):
    """Yields the number of rotary functions and MLPs swapped."""
    modules = {sys.modules.get(type(m).__module__) for m in model.modules()}
    modules = [m for m in modules if m is not None and callable(getattr(m, "apply_rotary_pos_emb", None))
               and not isinstance(m.apply_rotary_pos_emb, _Compiled)]
    originals = [m.apply_rotary_pos_emb for m in modules]
    mlps = _silu_mlps(model)
    for module, fn in zip(modules, originals):
        module.apply_rotary_pos_emb = _compiled(fn)
    for mlp in mlps:
        mlp.forward = types.MethodType(_mlp_forward, mlp)
    _ACTIVE[0] += 1
    try:
        yield len(modules) + len(mlps)
    finally:
        _ACTIVE[0] -= 1
        for module, fn in zip(modules, originals):
            module.apply_rotary_pos_emb = fn
        for mlp in mlps:
            del mlp.forward
