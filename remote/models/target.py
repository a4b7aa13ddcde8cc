"""The target model as the decoding methods see it: prefill, verify a token tree, commit the accepted path.

Contract: after `prefill(prompt)` the target holds the prompt. `verify(tokens, tree)` runs one forward over
N new tokens arranged as a tree (parents[i] < i, -1 = attached to the committed prefix; a chain is
parents = [-1, 0, 1, ...]) and returns each node's logits and drafter features as if that node had been run
after exactly its ancestor path. `commit(path)` keeps only the nodes of `path` (a root-to-node chain of
indices into the last verify, root first) so the target then holds prefix + those tokens, exactly as a plain
forward over that sequence would. Every implementation (pure attention, hybrid recurrent) keeps this contract;
the decoding loop (`remote.decoding.loop`) only uses it.

Host synchronisation: the loop hands over the tree as a `remote.tree.Ancestry` (device tensors) and the path as
a device tensor, and a target does not read either back to the host. Host lists are accepted too (tests, offline
tools) and are converted.
"""
from __future__ import annotations

import abc
import functools
from dataclasses import dataclass

import torch

from ..tree import Ancestry


@dataclass
class Verified:
    logits: torch.Tensor                  # [N, vocab] float32, node i's next-token logits
    taps: tuple[torch.Tensor, ...] = ()   # [N, H] each: node i's hidden states at the drafter's target_layer_ids

    @functools.cached_property
    def features(self) -> torch.Tensor:
        """[N, F]: the taps concatenated, the drafter's context features of node i (captured steps move the taps'
        rows to where the drafter reads them without this copy: remote.kernels.rows)."""
        if not self.taps:
            return self.logits.new_zeros(self.logits.shape[0], 0)
        return torch.cat(self.taps, dim=-1)


class Target(abc.ABC):
    """A stateful view of one target model decoding one sequence."""

    @abc.abstractmethod
    def prefill(self, input_ids: torch.Tensor) -> Verified:
        """Reset the state and run the prompt `input_ids` [1, P]; returns the last position's logits [1, V]
        (all P rows would cost P x vocab floats: 1 GB for 1k tokens of a 248k vocabulary) and the features of
        all P positions [P, F] (the drafter's first context)."""

    @abc.abstractmethod
    def verify(self, tokens: torch.Tensor, tree: Ancestry | list[int]) -> Verified:
        """Run the tree `tokens` [N] with structure `tree` (or its parents list [N]) on top of the committed
        prefix."""

    @abc.abstractmethod
    def commit(self, path: torch.Tensor | list[int]) -> None:
        """Keep the nodes `path` ([L] long) of the last verify (root-to-node chain) and drop every other node."""

    @property
    @abc.abstractmethod
    def length(self) -> int:
        """Number of committed tokens whose state the target holds."""
