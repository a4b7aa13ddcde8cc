"""Kernel-path selection for Gated DeltaNet (GDN) layers: fast kernels where installed, the model's torch math
where not.

Contract: `select_gdn_kernels(gdn_module, device, prefer)` returns one `GdnKernels` bundle whose functions (its
fields say what each computes) compute the same math whichever path is chosen, so a caller never branches on the
path. `prefer`: "torch" = the model's own reference functions (from its transformers modeling module, undecorated,
so transformers' hub/package dispatch and its fallback warnings stay out of it); "auto" = flash-linear-attention's
chunk and fused-recurrent kernels and causal_conv1d's conv, each where installed and the tensors are on CUDA, the
torch function otherwise, and our tree kernels where Triton runs. `path` names what runs: "torch", or the fast
parts joined by "+" ("fla", "causal_conv1d", and "tree" where trees run per node, "chunked" where chunked, "solve"
where remote.kernels.gdn_solve stands in for that, "token" where AR's step is ours). `torch_gdn_path()` holds
transformers' own GDN layers to their torch functions. Non-goal: the ancestor conv windows of a tree, plain tensor
indexing in `remote.models.gdn` on every path.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from . import gdn_chunked, gdn_solve
from . import gdn_tree as gdn_tree_kernel

KERNEL_CHOICES = ("auto", "torch")


@dataclass(frozen=True)
class GdnKernels:
    # chunk(q, k, v, g, beta, initial_state) -> (out, final_state): a whole sequence from one state (prefill).
    # q, k [B, T, HV, Dk] (already repeated to the value heads, NOT l2-normalised: the kernel does it), v [B, T, HV,
    # Dv], g, beta [B, T, HV]; initial_state [B, HV, Dk, Dv] float32 or None (zeros); out [B, T, HV, Dv] in q's
    # dtype, final_state [B, HV, Dk, Dv] float32.
    chunk: Callable
    # step(q, k, v, g, beta, state, final=True) -> (out, new_state): the same, one state per batch row (a tree verify
    # runs every node's root-to-node path as one row); `final=False`: new_state is None, never materialised.
    step: Callable
    # conv(x, weight, bias, activation) -> y: the causal depthwise conv over a fresh sequence, x [B, C, T] with zero
    # left padding, weight [C, K]; y [B, C, T].
    conv: Callable
    path: str
    # remote.kernels.gdn_tree.tree_recurrence (every node of a token tree from its parent's state, one launch) where
    # Triton runs on the device and `prefer` is "auto", else None (remote.models.gdn then runs each node's path
    # through `step`)
    tree: Callable | None = None
    # with `tree`: remote.kernels.gdn_chunked's `tree_recurrence` and `node_state` (the chunked form), which
    # remote.models.gdn runs for chains, and for trees too where `chunked_trees` (a layer's recurrent state of
    # CHUNKED_TREES_FROM bytes or more)
    chunked: Callable | None = None
    chunked_state: Callable | None = None
    chunked_trees: bool = False
    # with `tree` and without fla, remote.kernels.gdn_tree.token_step (one token, the state advanced in place: AR's
    # step in one launch, not the torch step's ~15), else None
    token: Callable | None = None


# Trees go through the chunked form from this recurrent-state size a layer up (HV x Dk x Dv float32). The per-node
# kernel re-reads the committed state for every node and re-runs every node's path, so its cost grows with HV and
# the tree's depth; the chunked form reads the state once a block of 16 nodes, in few programs (HV x Dv / 64 or
# / 32), at a cost nearly flat in HV. Us a layer at 33 / 65 nodes, per-node against chunked (each with its committed
# blocking: 16 value columns a program; 64, or 32 at 16 heads), on a confident drafter's deep tree and on a bushy one
# (one H200, 2026-12-03, `gpu_suite.sh gdn`: bench_kernels --kinds gdn):
#   3 MiB (Qwen3.6-27B): deep 101.5 / 198.6 against 48.0 / 89.1; bushy 60.4 / 114.8 against 44.2 / 78.7
#   1 MiB (16 heads):    deep 35.0 / 70.3 against 31.5 / 65.6; bushy 19.7 / 42.5 against 31.6 / 56.1
#   64 KiB (demo):       64 nodes deep 8.5, bushy 4.7 against 32.0 / 26.6
# At 2 MiB (32 heads), between those rows, deep trees (a trained drafter's) gain where bushy ones about break even.
CHUNKED_TREES_FROM = 2 << 20


def _model_function(gdn_module: torch.nn.Module, name: str) -> Callable:
    """The modeling module's torch reference function `name`, without transformers' kernel-dispatch wrapper."""
    module = sys.modules[type(gdn_module).__module__]
    fn = getattr(module, name, None)
    if fn is None:
        raise RuntimeError(f"{module.__name__} has no {name}: this transformers version is not supported")
    return getattr(fn, "__wrapped__", fn)


def _torch_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    # Same op as transformers' causal_conv1d_fn: depthwise conv1d with K-1 zero columns on the left, cut to T.
    seq_len = x.shape[-1]
    y = F.conv1d(x.to(weight.dtype), weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])
    return activate(y[..., :seq_len], activation).to(x.dtype)


def activate(x: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation is None:
        return x
    if activation in ("silu", "swish"):
        return F.silu(x)
    raise ValueError(f"GDN conv activation must be silu (got {activation!r})")


def _import_fla() -> tuple[Callable, Callable] | None:
    try:
        ops = importlib.import_module("fla.ops.gated_delta_rule")
        return ops.chunk_gated_delta_rule, ops.fused_recurrent_gated_delta_rule
    except Exception:  # not installed, or installed without a working triton: the torch path is correct anyway
        return None


def _import_causal_conv1d() -> Callable | None:
    try:
        return importlib.import_module("causal_conv1d").causal_conv1d_fn
    except Exception:
        return None


def _causal_conv1d_conv(cc1d: Callable) -> Callable:
    def conv(x, weight, bias, activation):
        return cc1d(x, weight, bias, activation=activation)
    return conv


def _bundle(chunk_fn: Callable, step_fn: Callable, conv: Callable, path: str, tree: Callable | None,
            chunked_trees: bool = False, token: Callable | None = None) -> GdnKernels:
    """Wrap two gated-delta-rule functions of the transformers / fla signature into the bundle's calls."""
    def chunk(q, k, v, g, beta, initial_state):
        return chunk_fn(q, k, v, g=g, beta=beta, initial_state=initial_state, output_final_state=True,
                        use_qk_l2norm_in_kernel=True)

    def step(q, k, v, g, beta, state, final=True):
        return step_fn(q, k, v, g=g, beta=beta, initial_state=state.contiguous(), output_final_state=final,
                       use_qk_l2norm_in_kernel=True)

    fast = tree is not None     # the chunked tree kernels run wherever the per-node one does
    solve = gdn_solve.tree_recurrence if gdn_solve.ENABLED else gdn_chunked.tree_recurrence    # the same contract
    return GdnKernels(chunk=chunk, step=step, conv=conv, path=path, tree=tree,
                      chunked=solve if fast else None,
                      chunked_state=(gdn_solve.node_state if gdn_solve.ENABLED else gdn_chunked.node_state)
                      if fast else None, chunked_trees=chunked_trees,
                      token=token)


def select_gdn_kernels(gdn_module: torch.nn.Module, device: torch.device | str, prefer: str = "auto") -> GdnKernels:
    if prefer not in KERNEL_CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_CHOICES)} (got {prefer!r})")
    chunk_fn = _model_function(gdn_module, "torch_chunk_gated_delta_rule")
    step_fn = _model_function(gdn_module, "torch_recurrent_gated_delta_rule")
    conv, parts, tree, chunked_trees, token = _torch_conv, [], None, False, None
    if prefer == "auto" and torch.device(device).type == "cuda":
        fla = _import_fla()
        if fla is not None:
            # fla takes the same [B, T, H, D] layout, l2-normalises in-kernel and keeps float32 states, as torch's.
            # Its step kernel is ~3.6x faster than the torch step per call and matches it to 1e-7 in float32; its
            # chunk kernel (TF32 dots in float32) matches to ~1e-3 (one H200, by 2026-11-29: fla 0.6.0, torch 2.11,
            # Qwen3.6-27B layer widths).
            chunk_fn, step_fn = fla
            parts.append("fla")
        cc1d = _import_causal_conv1d()
        if cc1d is not None:
            conv = _causal_conv1d_conv(cc1d)
            parts.append("causal_conv1d")
        if gdn_tree_kernel.available(torch.device(device)):
            tree = gdn_tree_kernel.tree_recurrence
            state_bytes = 4 * gdn_module.num_v_heads * gdn_module.head_k_dim * gdn_module.head_v_dim
            chunked_trees = state_bytes >= CHUNKED_TREES_FROM
            parts.append(("solve" if gdn_solve.ENABLED else "chunked") if chunked_trees else "tree")
            if fla is None:         # fla's own one-token step where it is installed (not measured against ours)
                token = gdn_tree_kernel.token_step
                parts.append("token")
    return _bundle(chunk_fn, step_fn, conv, "+".join(parts) or "torch", tree, chunked_trees, token)


@contextlib.contextmanager
def torch_gdn_path():
    """Make transformers' own Qwen3.5 / Qwen3-Next GDN layers call their plain torch functions while the block runs
    (restored afterwards). Where flash-linear-attention is installed transformers routes those layers to it
    whatever the tensors' device, so a CPU forward dies in Triton ("cannot be accessed from Triton (cpu tensor?)");
    and fla's training backward is refused on some Triton versions."""
    patched = []
    for name in ("transformers.models.qwen3_5.modeling_qwen3_5", "transformers.models.qwen3_next.modeling_qwen3_next"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                   "causal_conv1d_update"):
            current = getattr(module, fn, None)
            if current is not None:
                patched.append((module, fn, current))
                setattr(module, fn, inspect.unwrap(current))
    try:
        yield
    finally:
        for module, fn, current in patched:
            setattr(module, fn, current)
