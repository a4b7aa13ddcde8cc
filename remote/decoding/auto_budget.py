"""`tree_budget=auto`: the node budget of each DDTree step, chosen for the most committed tokens per unit time.

Two inputs. (a) What a tree of each candidate size would accept: under the drafter's surrogate (a node's path holds
with its path probability, the product of its tokens' drafter probabilities), a tree's expected accepted length is
the sum of its nodes' path probabilities, and a best-first tree of n nodes is the first n of the best-first order, so
a step's own tree gives E(c) exactly for every size c up to its own (`predictions`, on the device, inside the step).
Larger sizes are scaled from it by the ratio E(c) / E(own) that steps of size >= c measured (a running mean per
pair of sizes; calibration runs every size, and a step one size up is explored when a ratio grew stale). (b) What a
step of each size costs: every candidate size is its own captured step (as a fixed budget's is), timed on the device
during warm-up (`AutoBudget.timing`).

The choice, on the host, for each step it queues: the budget b maximising 1 + s E(b) - rate * T(b) (a renewal
reward argument: at rate = the best achievable tokens per ms this per-step rule maximises the long-run rate; the
running rate of the steps so far stands in for it), with E from the newest step read back, s = accepted / predicted
so far (the surrogate's calibration) and T the measured cost. Why not on the device: a verify's row count is fixed
in its graph, and choosing among graphs on the device needs conditional graph nodes (torch >= 2.13; the GPU image
has torch 2.11). So the choice uses the drafts of the steps already read (the step in flight is not), and adds no
host read: each step's predictions ride in the read it has anyway.

Contract: `buckets(max_budget)` -> the candidate budgets, 2^k - 1 from 7 up to `max_budget`. `predictions(path_lp,
budget, buckets)` -> [K] long: E(c) in thousandths per bucket, -1 where c is larger than the step's tree.
`AutoBudget(buckets, cuda)`: `pick()` the next step's budget, `timing(budget)` around its launch,
`observe(budget, predicted, accepted, committed)` once it is read; `costs` (ms a step per bucket) once measured,
`calibrating` until then. Lossless by construction: every step verifies a best-first tree of some size, as a fixed
budget does.
"""
from __future__ import annotations

import itertools
import statistics
from contextlib import contextmanager

import torch

from ..timing import PhaseTimer

TIMED_STEPS = 3          # timed steps per bucket for the cost model (after each bucket's first, which captures it)
EXPLORE_AFTER = 32       # steps without one of the next size up before one is taken
RATIO_WEIGHT = 0.1       # of the newest step in the running ratios
MAX_BUCKETS = 17         # buckets() of any budget below 2^20: what a step's read has room for


def buckets(max_budget: int) -> list[int]:
    """Candidate budgets: 7, 15, 31, ... (verify rows a power of two) up to `max_budget`; [max_budget] below 7."""
    sizes = [(1 << k) - 1 for k in range(3, 20) if (1 << k) - 1 <= max_budget]
    return sizes or [max_budget]


def predictions(path_lp: torch.Tensor, budget: int, sizes: list[int]) -> torch.Tensor:
    """Expected accepted drafted tokens (thousandths, long) of a best-first tree of each of `sizes` up to `budget`,
    -1 past it, from one step's tree of `budget` nodes whose path log-probs, best first, are `path_lp` [n] (n <
    budget: the tree holds every prefix there is, and no larger tree adds any). Static shapes: capturable."""
    n = path_lp.shape[0]
    cum = torch.cumsum(path_lp.float().exp(), 0)                                        # [n]: E(1..n)
    known = [c for c in sizes if c <= budget or n < budget]
    # views stacked, not an index tensor: a host list copied to the device cannot be captured
    out = (torch.stack([cum[min(c, n) - 1] for c in known]) * 1000).round().long()
    return torch.cat([out, out.new_full((len(sizes) - len(known),), -1)])


class AutoBudget:
    """The host's choice of each step's budget (see the module docstring); one per run, across its generations."""

    def __init__(self, sizes: list[int], cuda: bool, timed_steps: int = TIMED_STEPS):
        self.sizes, self.cuda, self.timed_steps = list(sizes), cuda, timed_steps
        self._clock = PhaseTimer(torch.device("cuda" if cuda else "cpu"))   # its marks: events on CUDA
        self.costs: dict[int, float] | None = None         # ms a step, per budget, once measured
        self._launched = dict.fromkeys(self.sizes, 0)     # steps launched per budget while calibrating
        self._marks: dict[int, list] = {b: [] for b in self.sizes}
        self._latest: list[float] | None = None           # E per bucket from the newest step read (-1: past its tree)
        self._ratio: dict[tuple[int, int], float] = {}    # (i, j), i < j: running E(sizes[j]) / E(sizes[i])
        self._stale = [0] * len(self.sizes)               # steps read since one of at least sizes[j] was
        self._predicted = self._accepted = 0.0            # calibration of the surrogate, over every step read
        self._tokens = self._time = 0.0                    # committed tokens and their predicted ms, since measured

    @property
    def calibrating(self) -> bool:
        return self.costs is None

    def pick(self) -> int:
        """The budget of the next step to launch."""
        if self.costs is None:
            return next(b for b in self.sizes if self._launched[b] < 1 + self.timed_steps)
        if self._latest is None:
            return self.sizes[-1]
        scale = self._accepted / self._predicted if self._predicted > 0 else 1.0
        rate = self._tokens / self._time if self._time > 0 else 0.0
        gains = [1 + scale * e - rate * self.costs[b] for b, e in zip(self.sizes, self.expected())]
        best = max(range(len(gains)), key=lambda i: (gains[i], -i))      # ties: the smaller tree
        if best + 1 < len(self.sizes) and self._stale[best + 1] >= EXPLORE_AFTER:
            best += 1                      # one size up now and then, so that its ratio follows the text
            self._stale[best] = 0
        return self.sizes[best]

    def expected(self) -> list[float]:
        """E per bucket for the next step: the newest step's own, scaled by the running ratios past its tree."""
        known = max(j for j, e in enumerate(self._latest) if e >= 0)
        base = self._latest[known]
        return [e if e >= 0 else base * self._ratio.get((known, j), 1.0) for j, e in enumerate(self._latest)]

    @contextmanager
    def timing(self, budget: int):
        """Around one step's launch: while calibrating, every step of a budget after its first is timed (on CUDA
        with events, on the device's timeline; elsewhere on the wall clock, the step having run by then)."""
        timed = self.costs is None and 1 <= self._launched.get(budget, 0) <= self.timed_steps
        if budget in self._launched:
            self._launched[budget] += 1
        start = self._clock.mark() if timed else None
        yield
        if timed:
            self._marks[budget].append((start, self._clock.mark()))
            if all(len(marks) == self.timed_steps for marks in self._marks.values()):
                self._measure()

    def observe(self, budget: int, predicted: list[int], accepted: int, committed: int) -> None:
        """One step read back: its budget, its `predictions` (thousandths), drafted tokens accepted, committed."""
        self._latest = [p / 1000 if p >= 0 else -1.0 for p in predicted]
        known = [j for j, e in enumerate(self._latest) if e >= 0]
        for i, j in itertools.combinations(known, 2):
            if self._latest[i] > 0:
                seen = self._latest[j] / self._latest[i]
                old = self._ratio.get((i, j))
                self._ratio[i, j] = seen if old is None else old + RATIO_WEIGHT * (seen - old)
        self._stale = [0 if j <= known[-1] else n + 1 for j, n in enumerate(self._stale)]
        self._predicted += self._latest[self.sizes.index(budget)]
        self._accepted += accepted
        if self.costs is not None:
            self._tokens += committed
            self._time += self.costs[budget]

    def _measure(self) -> None:
        """The cost model from the timed steps, once the last is launched (one synchronisation a run)."""
        def ms(start, end) -> float:
            if self.cuda:
                end.synchronize()
                return start.elapsed_time(end)
            return 1000.0 * (end - start)
        self.costs = {b: statistics.median(ms(s, e) for s, e in marks) for b, marks in self._marks.items()}
        self._marks = {}
