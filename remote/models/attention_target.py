"""`Target` for pure-attention models (Qwen3, Llama-style): a transformers KV cache plus tree verification.

Contract (see remote.models.target): `verify(tokens, tree)` runs the N tree nodes in one forward with position
ids `prefix_len + depth` and a 4-D additive float mask [1, 1, N, prefix_len + N] in which the committed prefix
is visible to every node and inside the tree a node sees only itself and its ancestors; a chain
(parents = [-1, 0, 1, ...]) takes the model's own causal path instead (no custom mask). Because RoPE is
applied with depth positions and nodes never see siblings, each node's logits and hidden states equal those of
a plain forward along its ancestor path. `commit(path)` compacts the KV of the accepted nodes to the front of
the appended window and truncates the rest (`compact_kv`); the path may stay on the device, so nothing in verify or
commit reads a value back to the host. The cache is built from the model config
(`DynamicCache(config=...)`) by `prefill`; `forward(ids, positions, mask)` runs tokens on whatever `cache` holds
and returns logits and drafter features (remote.decoding.graph gives it a static cache and its own masks).
Non-goal: sliding-window or recurrent layers (refused / routed elsewhere).
"""
from __future__ import annotations

import torch

from ..errors import SpecError
from ..tree import Ancestry
from .compat import attention_layers, cache_kwarg, input_device, make_cache, output_device
from .target import Target, Verified


def compact_kv(cache, start: int, path: torch.Tensor, in_place: bool) -> None:
    """Keep rows `start + path` ([keep] long, on the cache's device) of every layer's appended K/V window at
    `start..start+keep`; drop the rest. `in_place`: the caller knows path == 0..keep-1 (a chain), so only truncate."""
    keep = path.shape[0]
    for layer in attention_layers(cache):
        if not in_place:
            rows = path.to(layer.keys.device) + start
            layer.keys[:, :, start:start + keep] = layer.keys.index_select(2, rows)    # [B, H, keep, D]
            layer.values[:, :, start:start + keep] = layer.values.index_select(2, rows)
        layer.keys = layer.keys[:, :, :start + keep]
        layer.values = layer.values[:, :, :start + keep]


class AttentionTarget(Target):
    def __init__(self, model: torch.nn.Module, target_layer_ids: list[int] | None):
        self.model = model
        self.layer_ids = list(target_layer_ids or [])
        self.cache_kw = cache_kwarg(model)
        self._in, self._out = input_device(model), output_device(model)
        self._dtype = model.get_input_embeddings().weight.dtype
        self.cache = None
        self._length = 0
        self._pending = 0                           # nodes appended by the last verify, not yet committed
        self._pending_chain = False                 # the last verify was a chain: any accepted path is a prefix
        probe = make_cache(model)
        if any(getattr(layer, "is_sliding", False) for layer in attention_layers(probe)):
            raise SpecError("target has sliding-window attention layers; the attention target supports full "
                            "attention only")

    @property
    def length(self) -> int:
        return self._length

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                 last_only: bool = False) -> Verified:
        # ids, positions [1, N]; mask None or [1, 1, N, prefix + N]
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                         output_hidden_states=bool(self.layer_ids), logits_to_keep=1 if last_only else 0,
                         **{self.cache_kw: self.cache})
        logits = out.logits[0].float()                                          # [N, V] ([1, V] if last_only)
        return Verified(logits, tuple(out.hidden_states[i + 1][0].to(self._out) for i in self.layer_ids))

    def prefill(self, input_ids: torch.Tensor) -> Verified:
        self.cache = make_cache(self.model)
        n = input_ids.shape[1]
        positions = torch.arange(n, device=self._in)[None]
        verified = self.forward(input_ids.to(self._in), positions, None, last_only=True)
        self._length, self._pending = n, 0
        return verified

    def tree_mask(self, tree: Ancestry) -> torch.Tensor:
        """Additive mask [1, 1, N, prefix + N]: 0 where visible (prefix, self, ancestors), dtype-min elsewhere."""
        n, start = tree.size, self._length
        mask = torch.zeros(1, 1, n, start + n, dtype=self._dtype, device=self._in)
        mask[0, 0, :, start:].masked_fill_(~tree.visible, torch.finfo(self._dtype).min)
        return mask

    def verify(self, tokens: torch.Tensor, tree: Ancestry | list[int]) -> Verified:
        if self._pending:
            raise RuntimeError("verify called twice without commit")
        tree = Ancestry.from_parents(tree, self._in) if isinstance(tree, list) else tree.to(self._in)
        n, start = tree.size, self._length
        if tree.chain:
            positions, mask = torch.arange(start, start + n, device=self._in), None
        else:
            positions, mask = start + tree.depth, self.tree_mask(tree)
        verified = self.forward(tokens.to(self._in).view(1, n), positions[None], mask)
        self._pending, self._pending_chain = n, tree.chain
        return verified

    def commit(self, path: torch.Tensor | list[int]) -> None:
        in_place = self._pending_chain or len(path) == 1           # the root alone never moves
        if isinstance(path, list):
            in_place = in_place or path == list(range(len(path)))
            path = torch.tensor(path, dtype=torch.long, device=self._in)
        compact_kv(self.cache, self._length, path, in_place)
        self._length += path.shape[0]
        self._pending = 0
