"""A draft tree as data: the shapes the decoding loop builds and a `Target` verifies against.

Contract: `DeviceTree` is a tree on the device (what the builders in remote.decoding.tree_build return); its
`ancestry()` is the `Ancestry` a `Target` (remote.models.target) verifies against; `Tree` is the same tree as host
lists for offline tools and tests. Both the models and the decoding loop use these types, so they live below both.

Layout used everywhere (verify index space): index 0 = root (the last committed token), index i >= 1 = node i-1 of
`tokens`. The `Target`'s convention (`Ancestry`, `parents`) puts the root on the committed prefix: parent -1.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Tree:
    """A draft tree as host lists (for offline tools and tests; the decoding loop uses `DeviceTree`)."""

    tokens: list[int]               # [n] token id of each non-root node
    parents: list[int]              # [n] verify index of each node's parent (0 = root); parents[i] <= i
    depths: list[int]               # [n] depth of each node, root = 0
    children: list[dict[int, int]] = field(default_factory=list)  # [n+1] per verify index: child token -> index

    def __post_init__(self):
        if not self.children:
            self.children = [{} for _ in range(len(self.tokens) + 1)]
            for index, (token, parent) in enumerate(zip(self.tokens, self.parents), start=1):
                self.children[parent][token] = index

    @property
    def size(self) -> int:
        return len(self.tokens)

    def verify_parents(self) -> list[int]:
        """Parents in the Target's convention: [-1 (root on the committed prefix)] + node parents."""
        return [-1] + self.parents


@dataclass
class Ancestry:
    """The structure of N verified nodes in the Target's convention (parents[i] < i, -1 = on the committed
    prefix), as device tensors. `height` is a host value fixed when the tree is built."""

    parents: torch.Tensor            # [N] long
    depth: torch.Tensor              # [N] long, 0 for nodes on the prefix
    ancestors: torch.Tensor          # [N, H] long: ancestor of node i at depth d; i itself for d >= depth[i]
    chain: bool                      # parents == [-1, 0, 1, ...]: the model's own causal path applies

    @property
    def size(self) -> int:
        return self.parents.shape[0]

    @property
    def height(self) -> int:
        return self.ancestors.shape[1]

    @property
    def visible(self) -> torch.Tensor:
        """[N, N] bool: visible[i, j] iff j is i or an ancestor of i (j is i's ancestor at depth[j])."""
        n = self.size
        at_depth_j = self.ancestors.gather(1, self.depth[None].expand(n, n))
        return at_depth_j == torch.arange(n, device=self.depth.device)[None]

    def to(self, device: torch.device) -> "Ancestry":
        if self.parents.device == torch.device(device):
            return self
        return Ancestry(self.parents.to(device), self.depth.to(device), self.ancestors.to(device), self.chain)

    @classmethod
    def of(cls, parents: torch.Tensor, depth: torch.Tensor, height: int, chain: bool = False) -> "Ancestry":
        """From device parents / depth ([N] long) with max depth < `height`: H - 1 gathers, no host read."""
        n = parents.shape[0]
        index = torch.arange(n, device=parents.device)
        up = torch.where(parents < 0, index, parents)          # a top node is its own parent: the chase saturates
        steps = [index]                                          # steps[s][i] = s-th ancestor of i
        for _ in range(height - 1):
            steps.append(up.index_select(0, steps[-1]))
        steps = torch.stack(steps, dim=1)                        # [N, H]
        back = (depth[:, None] - torch.arange(height, device=parents.device)[None]).clamp(min=0)
        return cls(parents, depth, steps.gather(1, back), chain)

    @classmethod
    def from_parents(cls, parents: list[int], device: torch.device | str = "cpu") -> "Ancestry":
        """From a host parents list (tests, offline tools); checks that parents precede children."""
        if not parents:
            raise ValueError("a tree needs at least one node")
        depth: list[int] = []
        for i, p in enumerate(parents):
            if not -1 <= p < i:
                raise ValueError(f"parents[{i}] = {p}: each parent must precede its child (or be -1)")
            depth.append(0 if p < 0 else depth[p] + 1)
        if is_chain(parents):
            return cls.chain_of(len(parents), device)
        as_long = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
        return cls.of(as_long(parents), as_long(depth), max(depth) + 1)

    @classmethod
    def chain_of(cls, n: int, device: torch.device | str) -> "Ancestry":
        """The chain [-1, 0, 1, ..., n-2], built on the device from aranges."""
        index = torch.arange(n, device=device)
        ancestors = torch.minimum(index[None, :], index[:, None])      # ancestor of i at depth d: min(d, i)
        return cls(index - 1, index, ancestors, True)


@dataclass
class DeviceTree:
    """A draft tree on the device, in the verify index space (see the module docstring)."""

    tokens: torch.Tensor     # [n] long, token of each non-root node
    parents: torch.Tensor    # [n] long, verify index of each node's parent (0 = root); parents[i] <= i
    depths: torch.Tensor     # [n] long, root = 0
    height: int              # static bound: every depth < height
    chain: bool = False
    built: Ancestry | None = None    # the ancestry, where the builder made it (remote.kernels.tree_search)
    path_lp: torch.Tensor | None = None   # [n] float32: each node's path log-prob (best-first builder only)
    expected: torch.Tensor | None = None  # [K] long: tree_budget=auto's predictions, when built with its buckets

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    def ancestry(self) -> Ancestry:
        """The structure of [root] + nodes as the Target sees it (root on the committed prefix)."""
        if self.built is not None:
            return self.built
        if self.chain:
            return Ancestry.chain_of(self.size + 1, self.tokens.device)
        parents = torch.cat([self.parents.new_full((1,), -1), self.parents])
        depth = torch.cat([self.depths.new_zeros(1), self.depths])
        return Ancestry.of(parents, depth, self.height)

    def host(self) -> Tree:
        """The same tree as host lists (one copy)."""
        tokens, parents, depths = torch.stack([self.tokens, self.parents, self.depths]).tolist()
        return Tree(tokens=tokens, parents=parents, depths=depths)


def is_chain(parents: list[int]) -> bool:
    """True for parents == [-1, 0, 1, ..., N-2] (a chain hanging off the committed prefix)."""
    return all(p == i - 1 for i, p in enumerate(parents))


def depths_of(parents: list[int]) -> list[int]:
    """Depth of every node of `parents` (Target convention, -1 = on the prefix): roots have depth 0."""
    depths: list[int] = []
    for p in parents:
        depths.append(0 if p < 0 else depths[p] + 1)
    return depths


def ancestor_mask(parents: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """visible [N, N] bool: visible[i, j] is True iff j is i or an ancestor of i (Target convention)."""
    return Ancestry.from_parents(parents, device).visible
