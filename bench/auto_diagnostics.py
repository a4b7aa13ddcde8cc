"""bench_methods' diagnostic budgets: a fixed budget, or a fixed pattern of budgets, run through tree_budget=auto's
machinery (its captured steps, its device timing), to tell what auto's cost model measures from what its steps
cost.

- `only<b>[@<max>]`: auto with the one bucket b (caches for `max`, default b): its `auto_cost_ms_<b>` against the
  fixed run's step.
- `cycle<b1>.<b2>....`: the budgets in this order, over and over, every step timed; the row gets
  `after_ms_<prev>_<b>`, the median device time of a b step launched right after a prev step (say
  `cycle31.31.31.127`: what a 31 step costs after a 31 and after a 127 one).
- `trace<b>`: budget b every step, each step's predictions for every bucket up to b and its accepted path kept
  (`TraceAuto.trace`): what every smaller tree would have accepted at the same steps (the trees are nested), for
  bench/bench_auto_policy.py's `--trace` to replay policies on.

Contract: `diagnostic(budget, cuda)` -> (widest budget, AutoBudget) for such a token, None for any other;
`figures(auto)` -> the extra row entries of that AutoBudget (empty for a plain one).
"""
from __future__ import annotations

import itertools
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote.decoding.auto_budget import AutoBudget, buckets  # noqa: E402


class CycleAuto(AutoBudget):
    """AutoBudget launching `pattern` in turn, forever, timing every step but each budget's first (its capture)."""

    def __init__(self, pattern: list[int], cuda: bool):
        super().__init__(sorted(set(pattern)), cuda, timed_steps=1)
        self._pattern = itertools.cycle(pattern)
        self.after: dict[tuple[int, int], list[float]] = defaultdict(list)
        self._observed: int | None = None

    def pick(self) -> int:
        self._timing = True
        return next(self._pattern)

    def _times(self, budget: int) -> bool:
        return self._launched[budget] > 0

    def _elapsed(self, budget: int, span) -> float | None:
        ms = super()._elapsed(budget, span)
        if ms is not None and self._observed is not None:
            self.after[self._observed, budget].append(ms)
        return ms

    def observe(self, budget, predicted, nodes, committed, span=None) -> None:
        super().observe(budget, predicted, nodes, committed, span)
        self._observed = budget              # steps are observed in launch order


class TraceAuto(AutoBudget):
    """AutoBudget over every bucket up to `budget` that launches `budget` every step and keeps what each step read
    back: `trace`, one (predictions in thousandths per bucket, accepted path's node numbers) a step, in order."""

    def __init__(self, budget: int, cuda: bool):
        super().__init__(buckets(budget), cuda)
        self.budget, self.trace = budget, []
        self.costs = {}                    # no cost model to measure: no calibration generations

    def pick(self) -> int:
        self._timing = False
        return self.budget

    def observe(self, budget, predicted, nodes, committed, span=None) -> None:
        self.trace.append((list(predicted), list(nodes)))


def diagnostic(budget, cuda: bool) -> tuple[int, AutoBudget] | None:
    if not isinstance(budget, str):
        return None
    if budget.startswith("only"):
        size, _, widest = budget.removeprefix("only").partition("@")
        return int(widest or size), AutoBudget([int(size)], cuda)
    if budget.startswith("cycle"):
        pattern = [int(b) for b in budget.removeprefix("cycle").split(".")]
        return max(pattern), CycleAuto(pattern, cuda)
    if budget.startswith("trace"):
        size = int(budget.removeprefix("trace"))
        return size, TraceAuto(size, cuda)
    return None


def figures(auto) -> dict[str, float]:
    after = getattr(auto, "after", {})
    return {f"after_ms_{prev}_{b}": statistics.median(ms) for (prev, b), ms in sorted(after.items())}
