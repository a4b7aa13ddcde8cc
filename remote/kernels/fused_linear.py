"""Projections that read the same input (q/k/v, gate/up, a GDN layer's in_proj_*) as one GEMM in captured steps.

Contract: `fuse(model)` concatenates each group's weights (and biases) into one tensor and makes every member's
weight a view of its rows, so memory is unchanged and every other caller (prefill, the eager loop, stock
`generate`) reads the same values. A group is fused only where its members are plain `nn.Linear` of one dtype and
device with the same input size (a member without a bias gets zeros in the group's); `fuse` is idempotent and
re-fuses a group whose weights were replaced (a `.to()`, a reload). Inside `grouped(model)` outputs equal the
members' own up to GEMM rounding (another blocking of the same dot products). `concatenate` is the weight side
alone (the drafter's projections use it directly).
"""
from __future__ import annotations

import contextlib
import itertools
import types
import weakref

import torch
from torch import nn

from . import gemv

# Why: at decode sizes (1 to 65 rows) a projection is a read of its weight, and a small weight reads slower than a
# large one. At Qwen3-8B widths the separate q/k/v GEMVs read 2240 GB/s where the MLP's read 3762 and lm_head 4389
# (one H200, 2026-12-01, bench/bench_profile.py: `gpu_suite.sh profile_8b`); each is also one more launch a layer,
# which on the demo targets is most of a projection's time.
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"),
          ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"), ("in_proj_qkvz", "in_proj_ba"))


def concatenate(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias: zeros for a member without) for linears that read the same input, their rows stacked;
    each linear's weight (and bias) becomes a view of it, so nothing is held twice. Not for training (detached)."""
    weight = torch.cat([lin.weight.detach() for lin in linears])
    has_bias = any(lin.bias is not None for lin in linears)
    bias = torch.cat([lin.bias.detach() if lin.bias is not None else weight.new_zeros(lin.out_features)
                      for lin in linears]) if has_bias else None
    start = 0
    for lin in linears:
        rows = slice(start, start + lin.out_features)
        lin.weight = nn.Parameter(weight[rows], requires_grad=False)
        if has_bias:
            lin.bias = nn.Parameter(bias[rows], requires_grad=False)
        start += lin.out_features
    return weight, bias


class Group:
    """Linears of one owner sharing their input, their weights views of one [sum(out), in] tensor."""

    def __init__(self, names: tuple[str, ...], members: list[nn.Linear]):
        self.names, self.members = names, members
        self.sizes = [m.out_features for m in members]
        with torch.inference_mode(False):
            self.weight, self.bias = concatenate(members)
        self._stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}    # member -> (input, its output)

    def current(self) -> bool:
        """Whether every member still reads this group's tensor (nothing replaced its weight since)."""
        row = self.weight.stride(0) * self.weight.element_size()
        starts = itertools.accumulate([0, *self.sizes[:-1]])
        return all(m.weight.data_ptr() == self.weight.data_ptr() + s * row for m, s in zip(self.members, starts))

    def output(self, index: int, x: torch.Tensor) -> torch.Tensor:
        held = self._stash.pop(index, None)
        if held is not None and held[0] is x:
            return held[1]
        outs = gemv.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)
        self._stash = {i: (x, out) for i, out in enumerate(outs) if i != index}
        return outs[index]

    def clear(self) -> None:
        self._stash = {}


_FUSED: "weakref.WeakKeyDictionary[nn.Module, list[Group]]" = weakref.WeakKeyDictionary()


def _eligible(members: list) -> bool:
    if not all(type(m) is nn.Linear for m in members):
        return False
    first = members[0].weight
    return all(m.weight.dtype == first.dtype and m.weight.device == first.device and
               m.in_features == members[0].in_features for m in members)


def fuse(model: nn.Module) -> list[Group]:
    """Every eligible group of `model`, fused (once; again where a group's weights were replaced)."""
    groups = _FUSED.get(model)
    if groups is not None and all(g.current() for g in groups):
        return groups
    groups = []
    for owner in model.modules():
        for names in GROUPS:
            members = [getattr(owner, n, None) for n in names]
            if all(m is not None for m in members) and _eligible(members):
                groups.append(Group(names, members))
    _FUSED[model] = groups
    return groups


def _member_forward(group: Group, index: int):
    return lambda self, x: group.output(index, x)


def _single_forward(self, x: torch.Tensor) -> torch.Tensor:
    return gemv.linear(x, self.weight, self.bias)


@contextlib.contextmanager
def grouped(model: nn.Module):
    """Inside, each fused group of `model` runs as one GEMM per input. Yields the number of groups."""
    # A member's forward runs the whole group's GEMM once for an input and hands the other members their slices when
    # they are called with that same input tensor; called with another input, a member computes its own. So the
    # modules' own forwards (transformers' attention and MLP, remote.models.gdn's projections) need no change,
    # whatever order they call the members in. Every GEMM here, the groups' and every other plain `nn.Linear`'s, goes
    # through remote.kernels.gemv, which takes an AR step's one-row products and a verify's few-row ones where it
    # streams the weight faster than cuBLAS.
    # a member whose forward is already wrapped (accelerate's device hooks set an instance `forward`) keeps it
    fused = fuse(model)
    groups = [g for g in fused if not any("forward" in vars(m) for m in g.members)]
    for group in groups:
        for i, member in enumerate(group.members):
            member.forward = types.MethodType(_member_forward(group, i), member)
    members = {id(m) for g in fused for m in g.members}
    singles = [m for m in model.modules() if type(m) is nn.Linear and id(m) not in members and "forward" not in vars(m)]
    for single in singles:
        single.forward = types.MethodType(_single_forward, single)
    try:
        yield len(groups)
    finally:
        for group in groups:
            group.clear()
            for member in group.members:
                del member.forward           # back to nn.Linear's own
        for single in singles:
            del single.forward
