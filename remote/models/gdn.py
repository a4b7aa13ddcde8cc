"""Tree-aware Gated DeltaNet (GDN) math: the token-mixing step of one linear-attention layer over a token tree.

Contract: `gdn_sequence` runs a plain sequence from a state (prefill); `gdn_tree` runs N tree nodes on top of a
committed state so that every node sees exactly its ancestors: its causal-conv window is built from its ancestors'
conv inputs (falling back to the committed conv state above the tree), and its recurrent state starts from its
parent's state. The whole tree is one recurrent-kernel call per layer and no host value is read (a verify can be
captured in a CUDA graph); the sequential steps equal the tree depth, not its size. Both return `NodeStates`, from
which commit gets the state after the accepted path (`NodeStates.after`). `gdn_step` runs one token and updates the
states in place (static addresses: a CUDA graph can replay it). All weights are the model's own (the layer's
transformers module: `Qwen3_5GatedDeltaNet`, `Qwen3NextGatedDeltaNet`, `Qwen3_5MoeGatedDeltaNet`); only the
per-token state flow is ours, the recurrence is the kernel bundle of `remote.kernels.gdn_paths`. State layouts are
transformers' `LinearAttentionLayer`'s: conv state [1, C, K] (the last K pre-conv inputs, C = 2*key_dim + value_dim,
K = conv kernel size; the oldest column is never read), recurrent state [1, HV, Dk, Dv] float32.
Non-goals: batch > 1, padding masks.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kernels import conv_gates as conv_gates_kernel
from ..kernels.gdn_paths import GdnKernels, activate
from ..kernels.glue import active
from ..tree import Ancestry


@dataclass
class TreeLayout:
    """Index tensors derived once per verify from the tree's `Ancestry` (shared by every layer), all on the device:
    building it reads nothing back to the host, so a verify can be captured in a CUDA graph."""

    depth: torch.Tensor              # [N] long, 0 for nodes attached to the prefix
    ancestors: torch.Tensor          # [N, H] each node's ancestor at every depth (itself past its own depth)
    visible: torch.Tensor            # [N, N] bool, visible[i, j] = j is i or an ancestor of i
    conv_index: torch.Tensor         # [N, K] columns of cat(conv_state [K], tree inputs [N]) forming each node's window
    chain: bool = False              # parents == [-1, 0, 1, ...]: one sequence

    @classmethod
    def build(cls, tree: Ancestry, conv_kernel: int) -> "TreeLayout":
        return cls(tree.depth, tree.ancestors, tree.visible, _conv_index(tree, conv_kernel), tree.chain)

    def window(self, last: torch.Tensor) -> torch.Tensor:
        """[K] the bank columns of node `last`'s ([1], on the device) conv window."""
        return self.conv_index.index_select(0, last)[0]

    def to(self, device: torch.device) -> "TreeLayout":
        """The layout on `device` (layers of a device_map model may sit on several)."""
        if self.depth.device == device:
            return self
        move = lambda t: t.to(device)  # noqa: E731
        return TreeLayout(move(self.depth), move(self.ancestors), move(self.visible), move(self.conv_index),
                          self.chain)


def _conv_index(tree: Ancestry, k: int) -> torch.Tensor:
    """[N, K] bank columns of each node's K-wide conv window, oldest first: the node and its ancestors inside the
    tree at K + index, then the committed conv state's last columns (K-1, K-2, ...) above the tree."""
    back = torch.arange(k - 1, -1, -1, device=tree.depth.device)[None]          # [1, K] steps up from the node
    depth = tree.depth[:, None]                                                  # [N, 1]
    inside = tree.ancestors.gather(1, (depth - back).clamp(min=0)) + k           # ancestor back steps up
    return torch.where(back <= depth, inside, k - (back - depth))


KEEP_LIMIT = 64 << 20      # bytes of per-node recurrent states one layer keeps for commit (else recomputed)
# Where a verify would keep node states in a device's stack (remote.models.gdn_stack), keep each node's inputs
# instead (Dk + Dv + 2 floats a head, not Dk x Dv) and recompute the accepted node's state at commit, every layer in
# one launch (remote.kernels.gdn_install.recompute): a verify's 1 MiB of node states a layer pushed the weights
# out of L2 (every weight-reading kernel 3-5% slower in DDTree than in DFlash in the device timeline: one H200,
# 2026-12-04, `python3 bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 6 --budgets 15,31 --timeline DIR`).
# On the hybrid demo pair DDTree 15 1.6-3.8% faster a token, commit 0.014-0.023 ms against 0.027-0.039 (one H200,
# 2026-12-05, `bench_methods.py $Q35 --temperatures 0 --num-prompts 24 --interleave --budgets 15`, each variant its
# own process). Only where the states would be kept (KEEP_LIMIT): at Qwen3.6-27B widths they are not.
KEEP_INPUTS = True


@dataclass
class NodeStates:
    """What commit needs to install the state after any root-to-node path of a verified tree. Per-node recurrent
    states (HV x Dk x Dv float32 each: 3 MiB per node and layer at Qwen3.6-27B widths) are kept only where the tree
    kernel made them within KEEP_LIMIT; the chunked kernel's per-node corrections (`solved`: [N, HV, Dv]) rebuild
    the accepted node's state in one launch; otherwise the state after the path is recomputed from the committed
    one over the path's inputs (a path is at most a drafter block long)."""

    bank: torch.Tensor                 # [C, K + N] the committed conv state, then every node's pre-conv input
    inputs: tuple                      # q, k, v, g, beta [1, N, ...] of every node
    state: torch.Tensor                # [1, HV, Dk, Dv] the committed recurrent state the tree started from
    layout: TreeLayout
    kernels: GdnKernels
    nodes: torch.Tensor | None = None  # [N, HV, Dk, Dv] float32 every node's state, where kept
    saved: torch.Tensor | None = None  # [N, HV, Dk + Dv + 2] float32 every node's inputs, where kept instead
    solved: tuple | None = None        # the chunked kernel's (u, log decay) of every node, where it ran

    @property
    def needs_window(self) -> bool:
        """Whether `after` uses a `window` its caller gathered (the chunked kernel reads its own columns)."""
        return self.solved is None

    def after(self, path: torch.Tensor, length: torch.Tensor | None = None, window: torch.Tensor | None = None,
              into: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(conv [1, C, K], recurrent [1, HV, Dk, Dv]) after the last node of the root-to-node `path` [L]. With
        `length` (a device scalar) only the first `length` steps count: `path` is padded with its last node to a
        static length (the tree kernel needs only that last node: its depth says how far to run). `window`: that
        node's conv columns (`TreeLayout.window`, the same in every layer: a commit gathers them once; the chunked
        kernel reads them itself). `into`: (conv, recurrent) to write the states into and return (a reserved
        state: gathers and the chunked kernel write there directly, other paths copy)."""
        last = path[-1:]
        conv = self.bank.new_empty(1, self.bank.shape[0], self.layout.conv_index.shape[1]) if into is None \
            else into[0]
        if not self.needs_window:       # one launch: the conv window and the state, in place where reserved
            rec = self.kernels.chunked_state(self.inputs[1][0], self.solved, self.state[0], self.layout.visible,
                                             last, out=None if into is None else into[1],
                                             conv=(self.bank, self.layout.conv_index, conv[0]))
            return conv, rec
        torch.index_select(self.bank, 1, self.layout.window(last) if window is None else window, out=conv[0])
        if self.nodes is not None:
            rec = (self.nodes.index_select(0, last) if into is None
                   else torch.index_select(self.nodes, 0, last, out=into[1]))
        elif self.kernels.tree is not None:
            q, k, v, g, beta = (x[0] for x in self.inputs)
            rows = self.layout.ancestors.index_select(0, last), self.layout.depth.index_select(0, last)
            # in place where reserved: each program reads its slice of the committed state before writing it
            rec = self.kernels.tree(q, k, v, g, beta, self.state[0], *rows, keep=True,
                                    states=None if into is None else into[1])[1]
        else:
            q, k, v, g, beta = (x.index_select(1, path) for x in self.inputs)
            if length is not None:      # a padding step (gate 0, beta 0) leaves the recurrent state as it is
                real = (torch.arange(path.shape[0], device=path.device) < length)[None, :, None]      # [1, L, 1]
                g, beta = g * real, beta * real
            rec = self.kernels.step(q, k, v, g, beta, self.state)[1].float()
        if into is not None and rec is not into[1]:
            rec = into[1].copy_(rec)
        return conv, rec


def project(gdn: torch.nn.Module, h: torch.Tensor):
    """Input projections of one GDN layer. h [1, T, H] -> mixed_qkv [1, T, C], z [1, T, HV, Dv], b, a [1, T, HV]."""
    t = h.shape[1]
    if hasattr(gdn, "in_proj_qkvz"):  # qwen3_next: q, k, v, z interleaved per key-head group
        q, k, v, z, b, a = gdn.fix_query_key_value_ordering(gdn.in_proj_qkvz(h), gdn.in_proj_ba(h))
        mixed = torch.cat([x.reshape(1, t, -1) for x in (q, k, v)], dim=-1)
        return mixed, z.reshape(1, t, -1, gdn.head_v_dim), b, a
    z = gdn.in_proj_z(h).reshape(1, t, -1, gdn.head_v_dim)
    return gdn.in_proj_qkv(h), z, gdn.in_proj_b(h), gdn.in_proj_a(h)


def _shape(gdn: torch.nn.Module) -> tuple[int, int, int, int, int]:
    """`gates`' shape argument for `gdn`."""
    return gdn.key_dim, gdn.value_dim, gdn.head_k_dim, gdn.head_v_dim, gdn.num_v_heads // gdn.num_k_heads


def gates(conv_out: torch.Tensor, b: torch.Tensor, a: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
          shape: tuple[int, int, int, int, int]):
    """conv_out [B, T, C] -> q, k [B, T, HV, Dk] (repeated to value heads), v [B, T, HV, Dv], g, beta [B, T, HV];
    `shape`: key_dim, value_dim, head_k_dim, head_v_dim, value heads per key head."""
    key_dim, value_dim, head_k, head_v, rep = shape
    bsz, t, _ = conv_out.shape
    q, k, v = torch.split(conv_out, [key_dim, key_dim, value_dim], dim=-1)
    q = q.reshape(bsz, t, -1, head_k)
    k = k.reshape(bsz, t, -1, head_k)
    v = v.reshape(bsz, t, -1, head_v)
    if rep > 1:  # each key head serves `rep` consecutive value heads
        q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    beta = b.sigmoid()
    # float32 so exp(A_log) cannot overflow in half precision (as the model does)
    g = -a_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias)
    return q, k, v, g, beta


def _output(gdn: torch.nn.Module, core: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Gated RMSNorm per value head, then out_proj. core, z [1, T, HV, Dv] -> [1, T, H]. The norm takes them
    unflattened: z is a slice of the fused projections' output, and flattening T and HV would copy it."""
    return gdn.out_proj(gdn.norm(core, z).reshape(1, core.shape[1], -1))


def gdn_sequence(gdn: torch.nn.Module, h: torch.Tensor, kernels: GdnKernels):
    """A fresh sequence (prefill). h [1, T, H] -> (out [1, T, H], conv_state [1, C, K], recurrent [1, HV, Dk, Dv])."""
    mixed, z, b, a = project(gdn, h)
    x = mixed.transpose(1, 2)                                     # [1, C, T]
    kernel = gdn.conv_kernel_size
    conv_out = kernels.conv(x, gdn.conv1d.weight.squeeze(1), gdn.conv1d.bias, gdn.activation)
    # The conv state is the last K pre-conv inputs, zero-padded on the left for prompts shorter than K.
    conv_state = torch.nn.functional.pad(x, (max(kernel - x.shape[-1], 0), 0))[..., -kernel:].contiguous()
    q, k, v, g, beta = active(gates)(conv_out.transpose(1, 2), b, a, gdn.A_log, gdn.dt_bias, _shape(gdn))
    core, state = kernels.chunk(q, k, v, g, beta, None)
    return _output(gdn, core, z), conv_state, state.float()


def _conv_gates(gdn: torch.nn.Module, bank: torch.Tensor, index: torch.Tensor | None, b: torch.Tensor,
                a: torch.Tensor):
    """`conv_gates` with the layer's weights (compiled in captured steps: the window gather, the conv, its
    activation and the gates are then one or two kernels, not a gathered [N, C, K] copy and a depthwise conv)."""
    args = (bank, index, gdn.conv1d.weight.squeeze(1), gdn.conv1d.bias, b, a, gdn.A_log, gdn.dt_bias, _shape(gdn),
            gdn.activation)
    if conv_gates_kernel.usable(*args):                              # one launch, not three
        return conv_gates_kernel.conv_gates(*args)
    return active(conv_gates)(*args)


def conv_gates(bank: torch.Tensor, index: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None,
               b: torch.Tensor, a: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
               shape: tuple[int, int, int, int, int], activation: str | None):
    """The depthwise conv of N K-wide windows of pre-conv inputs, activated and rounded to the inputs' dtype (as
    causal-conv1d does), then `gates`. bank [C, M] the inputs, index [N, K] each window's columns of it, oldest
    first (None: one window, the last K columns); weight [C, K]. -> q, k, v, g, beta [1, N, ...]."""
    windows = bank[:, index] if index is not None else bank[:, None, -weight.shape[-1]:]             # [C, N, K]
    x = (windows.float() * weight.float()[:, None, :]).sum(-1)
    if bias is not None:
        x = x + bias.float()[:, None]
    conv_out = activate(x, activation).to(bank.dtype).t().contiguous()[None]     # [1, N, C], C-contiguous (kernels)
    return gates(conv_out, b, a, a_log, dt_bias, shape)


def gdn_step(gdn: torch.nn.Module, h: torch.Tensor, conv_state: torch.Tensor, recurrent: torch.Tensor,
             kernels: GdnKernels) -> torch.Tensor:
    """One token after (conv_state [1, C, K], recurrent [1, HV, Dk, Dv]), both advanced in place.
    h [1, 1, H] -> out [1, 1, H]."""
    mixed, z, b, a = project(gdn, h)
    bank = torch.cat([conv_state[0], mixed[0].transpose(0, 1).to(conv_state.dtype)], dim=-1)      # [C, K + 1]
    conv_state.copy_(bank[None, :, 1:])
    q, k, v, g, beta = _conv_gates(gdn, bank, None, b, a)                                         # [1, 1, ...]
    if kernels.token is not None and recurrent.is_contiguous():     # one launch, the state advanced in place
        return _output(gdn, kernels.token(q, k, v, g, beta, recurrent), z)
    core, state = kernels.step(q, k, v, g, beta, recurrent)
    recurrent.copy_(state)
    return _output(gdn, core, z)


def _chunked(kernels: GdnKernels, layout: TreeLayout) -> bool:
    """Whether `gdn_tree` solves `layout` in the chunked form: chains, and every tree at wide layers."""
    return kernels.chunked is not None and (layout.chain or kernels.chunked_trees)


def keeps_nodes(kernels: GdnKernels, layout: TreeLayout, n: int, state_numel: int) -> bool:
    """Whether `gdn_tree` runs the n nodes of `layout` through the per-node kernel and keeps every node's state
    (recurrent states of `state_numel` floats): not in the chunked form, and only within KEEP_LIMIT."""
    return not _chunked(kernels, layout) and kernels.tree is not None and n * state_numel * 4 <= KEEP_LIMIT


def gdn_tree(gdn: torch.nn.Module, h: torch.Tensor, layout: TreeLayout, conv_state: torch.Tensor,
             recurrent: torch.Tensor, kernels: GdnKernels, into: tuple | None = None):
    """N tree nodes on top of the committed (conv_state [1, C, K], recurrent [1, HV, Dk, Dv]). `into`: (bank
    [C, K + N], nodes [N, HV, Dk, Dv] or None) where the conv bank and kept node states go (a layer's slices of
    remote.models.gdn_stack's, so that a commit installs every layer's state at once).

    h [1, N, H] -> (out [1, N, H], NodeStates).
    """
    # Where Triton runs, remote.kernels.gdn_tree walks every node's ancestors in one launch and can keep each node's
    # state, and a chain (all depth: per-node paths would run N(N+1)/2 steps) is solved in the chunked form by
    # remote.kernels.gdn_chunked, as is every tree where a layer's recurrent state is large
    # (`GdnKernels.chunked_trees`: the per-node kernel re-reads it for every node); elsewhere every node runs its own
    # root-to-node path through the sequence kernel (batch N, length = tree height) and a chain runs as one sequence.
    n = h.shape[1]
    mixed, z, b, a = project(gdn, h)
    # Conv: each node's window of pre-conv inputs (its ancestors, then committed columns) is gathered from the bank
    # inside the conv, so no [N, C, K] windows are written; commit gathers the accepted node's alone.
    columns = [conv_state[0], mixed[0].transpose(0, 1).to(conv_state.dtype)]
    bank = torch.cat(columns, dim=-1, out=into[0]) if into else torch.cat(columns, dim=-1)     # [C, K + N]
    q, k, v, g, beta = _conv_gates(gdn, bank, layout.conv_index, b, a)                        # [1, N, ...]
    states = NodeStates(bank, (q, k, v, g, beta), recurrent, layout, kernels)
    if _chunked(kernels, layout):                   # node corrections kept for commit
        core, states.solved = kernels.chunked(q[0], k[0], v[0], g[0], beta[0], recurrent[0], layout.visible,
                                              layout.ancestors.shape[1])       # the tree's height bounds its solve
        return _output(gdn, core[None], z), states
    if kernels.tree is not None:    # one launch: every node from its parent's state, node states kept if small
        keep = keeps_nodes(kernels, layout, n, recurrent.numel())
        kept = into[1] if into else None
        if keep and kept is not None and KEEP_INPUTS:       # a stack's commit recomputes the state from these
            states.saved = kept
            core, _ = kernels.tree(q[0], k[0], v[0], g[0], beta[0], recurrent[0], layout.ancestors, layout.depth,
                                   keep=False, saved=kept)
        else:
            core, states.nodes = kernels.tree(q[0], k[0], v[0], g[0], beta[0], recurrent[0], layout.ancestors,
                                              layout.depth, keep=keep, states=kept)
        return _output(gdn, core[None], z), states
    if layout.chain:        # one sequence: the recurrent kernel runs all of it in one call
        return _output(gdn, kernels.step(q, k, v, g, beta, recurrent)[0], z), states
    # Every node runs its own root-to-node path as one sequence from the committed state: one kernel call for the
    # whole tree, batch N, length H (the tree height). Past its depth a path repeats the node (`ancestors`); its
    # output is read at its own depth, before those steps, and no final state is made (commit recomputes the
    # accepted one). The states read are the same N as depth by depth; the extra steps are compute only.
    height = layout.ancestors.shape[1]
    paths = [x[0].index_select(0, layout.ancestors.reshape(-1)).view(n, height, *x.shape[2:])
             for x in (q, k, v, g, beta)]                                                     # [N, H, ...]
    out = kernels.step(*paths, recurrent.expand(n, -1, -1, -1), final=False)[0]               # [N, H, HV, Dv]
    core = out.gather(1, layout.depth.view(n, 1, 1, 1).expand(n, 1, *out.shape[2:]))         # each node's own step
    return _output(gdn, core.transpose(0, 1), z), states
