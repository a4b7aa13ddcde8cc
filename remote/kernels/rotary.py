"""The model's own rotary embedding, torch.compile'd for the captured steps: one fused kernel for q and k.

Why: transformers' `apply_rotary_pos_emb` is five kernels for q and five for k (multiply, negate, cat, multiply,
add), every layer and step. In the eager profile of one Qwen3-8B AR pass they were 0.59 ms of 7.3
(bench/bench_profile.py, H200, session 14); inductor makes them one kernel.

Contract: `compiled_rotary(model)` swaps the `apply_rotary_pos_emb` of every modeling module `model`'s layers come
from for its compiled self (the same function: partial rotary and mrope stay the model's), undone on exit. The
compiled function computes in float32 and rounds once where transformers rounds after each op (equal up to that
rounding). A function that fails to compile runs as transformers' own from then on, so a step never fails here.
Callers look the function up in its module at each call (as transformers' attention does).
"""
from __future__ import annotations

import contextlib
import sys

import torch


class _Compiled:
    """`fn` compiled (dynamic row counts after the second), or `fn` itself once compiling it failed."""

    def __init__(self, fn):
        self.fn, self.compiled = fn, torch.compile(fn, dynamic=None)

    def __call__(self, *args, **kwargs):
        if self.compiled is not None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception:       # noqa: BLE001 - inductor unavailable or failing here: the plain function
                self.compiled = None
        return self.fn(*args, **kwargs)


_CACHE: dict = {}       # transformers' function -> its _Compiled (compiled once per process)


@contextlib.contextmanager
def compiled_rotary(model: torch.nn.Module):
    """Yields the number of modeling modules whose rotary was swapped."""
    modules = {sys.modules.get(type(m).__module__) for m in model.modules()}
    modules = [m for m in modules if m is not None and callable(getattr(m, "apply_rotary_pos_emb", None))
               and not isinstance(m.apply_rotary_pos_emb, _Compiled)]
    originals = [m.apply_rotary_pos_emb for m in modules]
    for module, fn in zip(modules, originals):
        module.apply_rotary_pos_emb = _CACHE.setdefault(fn, _Compiled(fn))
    try:
        yield len(modules)
    finally:
        for module, fn in zip(modules, originals):
            module.apply_rotary_pos_emb = fn
