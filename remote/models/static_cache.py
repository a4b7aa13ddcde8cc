"""Preallocated K/V caches whose every update is a device-indexed write: nothing in a step depends on a host value,
so a whole decoding step can be captured once as a CUDA graph and replayed (remote.decoding.graph).

Contract: `StaticKV(model, capacity)` stands in for a transformers cache in a pure-attention model's forward (it
implements the two methods those forwards call: `update` and `get_seq_length`). Before each forward the caller sets
`slots` ([n] long, on the device): the cache rows the n new tokens' K/V go to. `update` writes them there and
returns all `capacity` rows, so the caller's 4-D mask (`visibility_mask`) decides which rows a query sees: rows past
the committed length hold stale or padding K/V and must be masked. `write(layer, kv)` is `update` for K/V stacked
[2, Hkv, n, D] in one kernel (remote.models.attention_loop). `StaticDrafterKV` is the same for the DFlash
drafter's context K/V (remote.models.drafter calls `begin` and `attend_rows`). `compact(start, path)` keeps the path's
rows at `start..start+H-1` (the accepted path of a verify, padded to the tree height: rows past the accepted
length are stale copies, masked later). Non-goal: sliding-window layers and recurrent (hybrid) layers.
"""
from __future__ import annotations

import torch

from ..kernels.rows import MAX_ROWS, gather_rows
from ..kernels.step import additive_mask


def _zeros(layers: int, heads: int, capacity: int, head_dim: int, dtype, device) -> list[torch.Tensor]:
    return list(torch.zeros(layers, 1, heads, capacity, head_dim, dtype=dtype, device=device))


def move_rows(caches: tuple[torch.Tensor, ...], start: torch.Tensor | int, path: torch.Tensor) -> None:
    """In each cache [..., rows, D] (rows on dim -2), copy rows `start + path[i]` to `start + i` (all read first):
    the accepted path of a verify moved to the front of its window, one launch a cache on CUDA
    (remote.kernels.rows). `start`: a host int or a device scalar."""
    for cache in caches:
        gather_rows(cache, start, path, cache, start)


def visibility_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask [1, 1, Q, K] from a bool [Q, K] (True = may attend)."""
    return additive_mask(visible, dtype)[None, None]


class StaticKV:
    def __init__(self, model: torch.nn.Module, capacity: int):
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        weight, layers = model.get_input_embeddings().weight, config.num_hidden_layers
        # every layer's keys and values in one tensor (layer i's at 2i and 2i + 1): a commit moves the accepted rows
        # of all in two kernels, a step writes a layer's K/V in one (`write`)
        self.store = torch.zeros(2 * layers, config.num_key_value_heads, capacity, head_dim, dtype=weight.dtype,
                                 device=weight.device)
        self.keys = list(self.store[0::2, None])             # per layer [1, Hkv, capacity, D], views of `store`
        self.values = list(self.store[1::2, None])
        self.capacity = capacity
        self.slots: torch.Tensor | None = None
        self._rows = torch.arange(capacity, device=weight.device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.keys[layer_idx].index_copy_(2, self.slots, key_states)
        self.values[layer_idx].index_copy_(2, self.slots, value_states)
        return self.keys[layer_idx], self.values[layer_idx]

    def write(self, layer_idx: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`update` for K/V stacked [2, Hkv, n, D], whose `slots` are consecutive rows (every caller's are): a
        step's rows in one `gather_rows` launch (PyTorch's `index_copy_` took 2.8 us a layer for a verify's 32 rows
        of the demo target and 1.65 for AR's one: one H200, 2026-12-04, `python3 bench/bench_methods.py $Q3
        --temperatures 0 --num-prompts 4 --budgets 31 --phase-kernels`)."""
        store = self.store[2 * layer_idx:2 * layer_idx + 2]
        if kv.shape[2] <= MAX_ROWS:
            gather_rows(kv, 0, self._rows[:kv.shape[2]], store, self.slots[0])
        else:                   # a prompt, or a tree over 63 nodes: one launch still, where gather_rows' would be two
            store.index_copy_(2, self.slots, kv)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0      # only read by forwards given no position_ids; ours always pass them

    def compact(self, start: torch.Tensor, path: torch.Tensor) -> None:
        move_rows((self.store,), start, path)


class StaticDrafterKV:
    """Context K/V of the drafter, and the block's own rows right after it: rows up to the block's last position are
    visible (`visible`), the rest masked. One spare row past `capacity` takes the padding context rows, so that one
    write a layer places the context and the block without two writes to one row."""

    def __init__(self, layers: int, heads: int, head_dim: int, capacity: int, dtype, device):
        self.keys = _zeros(layers, heads, capacity + 1, head_dim, dtype, device)
        self.values = _zeros(layers, heads, capacity + 1, head_dim, dtype, device)
        self.capacity = capacity
        self._rows = torch.arange(capacity + 1, device=device)
        self.slots: torch.Tensor | None = None
        self.visible: torch.Tensor | None = None

    def begin(self, positions: torch.Tensor, c_len: int) -> None:
        """positions [C + B]: the new context's rows (padding ones at or past the block's start, see
        remote.decoding.loop.draft) and the block's, which follow the committed context."""
        context, block = positions[:c_len], positions[c_len:]
        self.slots = torch.cat([context.masked_fill(context >= block[0], self.capacity), block])
        self.visible = (self._rows <= block[-1])[None]                                     # [1, capacity + 1]

    def attend_rows(self, layer: int, k: torch.Tensor, v: torch.Tensor, c_len: int) -> tuple[torch.Tensor, ...]:
        """k / v [1, Hkv, C + B, D] written to their rows; returns the whole cache (`visible` says which rows)."""
        self.keys[layer].index_copy_(2, self.slots, k)
        self.values[layer].index_copy_(2, self.slots, v)
        return self.keys[layer], self.values[layer]
