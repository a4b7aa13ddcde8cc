"""A hybrid target's reserved GDN states, every layer of a device stacked in one tensor, so that a verify's kept
node states and a commit serve all those layers at once.

Contract: `GdnStack(gdns)` for {layer: GDN module} on one device holds conv [G, C, K] and recurrent [G, HV, Dk, Dv]
float32 states (zeros); `state(layer)` gives a layer's [1, ...] slices, which the target installs into in place;
`GdnStack.reserved(gdns)` maps every layer to its device's stack.
`begin(n, keep)` makes a verify's banks [G, C, K + n] and, with `keep`, node states [G, n, HV, Dk, Dv], or with
remote.models.gdn.KEEP_INPUTS node inputs [G, n, HV, Dk + Dv + 2] (inside a captured step: the graph's pool);
`into(layer)` is what `remote.models.gdn.gdn_tree` writes a layer's there. `install(states, layout, last)`
installs, for every layer, the state after node `last` ([1]) of the tree `layout` (remote.models.gdn.TreeLayout,
its conv windows and paths) in one launch (remote.kernels.gdn_install: the kept state copied, or recomputed from
the kept inputs), when every layer's `NodeStates` kept its node states or inputs here (True), else leaves it to
the caller (False).
"""
from __future__ import annotations

import torch

from ..kernels import gdn_install
from ..kernels.gdn_tree import saved_width
from . import gdn
from .gdn import TreeLayout


# Why: a DDTree commit on reserved state installed the accepted node's conv window and kept recurrent state layer by
# layer, two gathers a GDN layer: 27.5 us of the demo hybrid's 45.6-us DDTree 31 commit, where DFlash's chunked commit
# took 16.5 (one H200, 2026-12-04, `python3 bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 6 --budgets 31
# --phase-kernels`). Stacked, it is one launch a device.
class GdnStack:
    def __init__(self, gdns: dict[int, torch.nn.Module]):
        self.layers = list(gdns)
        self._index = {layer: g for g, layer in enumerate(self.layers)}
        first = next(iter(gdns.values()))
        weight = first.conv1d.weight
        count = len(self.layers)
        self.conv = torch.zeros(count, weight.shape[0], first.conv_kernel_size, dtype=weight.dtype,
                                device=weight.device)
        self.rec = torch.zeros(count, first.num_v_heads, first.head_k_dim, first.head_v_dim, dtype=torch.float32,
                               device=weight.device)
        self.bank: torch.Tensor | None = None
        self.nodes: torch.Tensor | None = None

    @classmethod
    def reserved(cls, gdns: dict[int, torch.nn.Module]) -> dict[int, "GdnStack"]:
        """Every layer of `gdns` -> the stack of its device (as the attention layers' K/V stores)."""
        on: dict[torch.device, dict] = {}
        for i, module in gdns.items():
            on.setdefault(module.A_log.device, {})[i] = module
        return {i: stack for stack in map(cls, on.values()) for i in stack.layers}

    @property
    def device(self) -> torch.device:
        return self.conv.device

    def state(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`layer`'s (conv [1, C, K], recurrent [1, HV, Dk, Dv]): views, installed into in place."""
        g = self._index[layer]
        return self.conv[g:g + 1], self.rec[g:g + 1]

    def begin(self, n: int, keep: bool) -> None:
        count, channels, width = self.conv.shape
        self.bank = self.conv.new_empty(count, channels, width + n)
        heads, dk, dv = self.rec.shape[1:]
        node = (heads, saved_width(dk, dv)) if gdn.KEEP_INPUTS else (heads, dk, dv)
        self.nodes = self.rec.new_empty(count, n, *node) if keep else None

    def into(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        g = self._index[layer]
        return self.bank[g], None if self.nodes is None else self.nodes[g]

    def install(self, states: dict, layout: TreeLayout, last: torch.Tensor) -> bool:
        if self.nodes is None:
            return False
        if all(self._kept(layer, states.get(layer), "nodes") for layer in self.layers):
            gdn_install.install(self.bank, self.nodes, layout.conv_index, last, self.conv, self.rec)
        elif all(self._kept(layer, states.get(layer), "saved") for layer in self.layers):
            gdn_install.recompute(self.bank, self.nodes, layout.ancestors, layout.depth, layout.conv_index, last,
                                  self.conv, self.rec)
        else:
            return False
        return True

    def _kept(self, layer: int, states, field: str) -> bool:
        """Whether `layer`'s NodeStates were written into this verify's bank and node states (`field` "nodes") or
        node inputs ("saved")."""
        bank, nodes = self.into(layer)
        kept = None if states is None else getattr(states, field)
        return (kept is not None and states.needs_window and kept.data_ptr() == nodes.data_ptr()
                and states.bank.data_ptr() == bank.data_ptr())
