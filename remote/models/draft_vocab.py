"""A reduced draft vocabulary: the drafter's head over N of the target's V tokens, and the maps between their ids.

Contract: `DraftVocab(ids, weight, vocab_size, source)`: `ids` [N] long, the target ids of the draft vocabulary in
ascending order (draft id i is target id ids[i]); `weight` [N, H] the head's rows (a checkpoint's own, or the target
LM head's rows at `ids`: `from_head`). `logits(hidden)` -> [..., N]; `to_target(draft_ids)` the target's ids;
`to_draft(target_ids)` the draft ids, -1 for a token outside. `offsets_to_ids(d2t)` reads the speculators format
(target id = draft id + d2t[draft id]). `most_frequent(counts, n, among)`: the n most frequent ids of `counts` [V]
(ties and never-seen ids by lower id), optionally among a vocabulary's own ids. `count_tokens(tokenizer, text, V)`:
how often each id occurs in the text. A head over fewer tokens is lossless: the target verifies every drafted token,
and a token outside the draft vocabulary can only be the bonus token. Buffers, not parameters: they move with the
drafter's `.to()` and stay out of its state dict (the published checkpoint format).
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import SpecError
from ..kernels import gemv


class DraftVocab(nn.Module):
    def __init__(self, ids: torch.Tensor, weight: torch.Tensor, vocab_size: int, source: str):
        super().__init__()
        ids = ids.long()
        if ids.ndim != 1 or weight.shape[0] != ids.shape[0]:
            raise SpecError(f"draft vocabulary of {ids.shape[0]} ids has a head of {weight.shape[0]} rows")
        if ids.numel() < 2 or bool((ids[1:] <= ids[:-1]).any()) or int(ids[0]) < 0 or int(ids[-1]) >= vocab_size:
            raise SpecError(f"draft vocabulary ids must be ascending target ids in 0..{vocab_size - 1} "
                            f"(at least two), got {ids.shape[0]} ids from {int(ids.min())} to {int(ids.max())}")
        ids = ids.to(weight.device)     # the maps beside the head: a graphed step indexes them on the GPU
        inverse = torch.full((vocab_size,), -1, dtype=torch.long, device=ids.device)
        inverse[ids] = torch.arange(ids.shape[0], device=ids.device)
        self.register_buffer("ids", ids, persistent=False)            # [N] draft id -> target id
        self.register_buffer("inverse", inverse, persistent=False)    # [V] target id -> draft id, -1 outside
        self.register_buffer("weight", weight.detach(), persistent=False)   # [N, H]
        self.source = source          # where the vocabulary came from (the run reports it)

    @classmethod
    def from_head(cls, ids: torch.Tensor, lm_head: torch.Tensor, source: str) -> "DraftVocab":
        """The target LM head's rows [V, H] at `ids`."""
        return cls(ids, lm_head.detach().index_select(0, ids.to(lm_head.device)), lm_head.shape[0], source)

    @property
    def size(self) -> int:
        return self.ids.shape[0]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> [..., N]: one skinny GEMM over N rows where the full head reads V
        (remote.kernels.gemv where it streams faster than cuBLAS)."""
        return gemv.linear(hidden, self.weight)

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.ids.index_select(0, draft_ids.reshape(-1)).view(draft_ids.shape)

    def to_draft(self, target_ids: torch.Tensor) -> torch.Tensor:
        return self.inverse.index_select(0, target_ids.reshape(-1)).view(target_ids.shape)

    def restricted(self, keep: torch.Tensor, source: str) -> "DraftVocab":
        """The vocabulary of the draft ids `keep` (ascending) only."""
        keep = keep.to(self.ids.device)
        return DraftVocab(self.ids.index_select(0, keep), self.weight.index_select(0, keep), self.inverse.shape[0],
                          source)


def offsets_to_ids(d2t: torch.Tensor) -> torch.Tensor:
    """The speculators format's draft-to-target map (offsets: target id = draft id + d2t[draft id]) as target ids."""
    return torch.arange(d2t.shape[0], dtype=torch.long) + d2t.long().cpu()


def count_tokens(tokenizer, text: str, vocab_size: int) -> torch.Tensor:
    """[V] long: occurrences of each id in `text` tokenized (no special tokens added); ids past V are not counted."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"], dtype=torch.long)
    ids = ids[ids < vocab_size]
    return torch.bincount(ids, minlength=vocab_size)


def most_frequent(counts: torch.Tensor, n: int, among: torch.Tensor | None = None) -> torch.Tensor:
    """Positions into `among` (or ids, without it) of the n most frequent, ascending: by count, then by lower id
    (ids never seen come last, lowest first: byte-level BPE gives its most common merges the lowest ids)."""
    ids = torch.arange(counts.shape[0]) if among is None else among.cpu()
    if not 2 <= n <= ids.shape[0]:
        raise SpecError(f"drafter.draft_vocab must be from 2 to {ids.shape[0]} (the drafter's vocabulary), got {n}")
    seen = counts.cpu().long().index_select(0, ids)
    key = -seen * (int(ids.max()) + 1) + ids          # by count, then by id: one sort
    return torch.sort(torch.argsort(key)[:n]).values
