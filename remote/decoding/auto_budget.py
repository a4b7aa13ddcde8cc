"""`tree_budget=auto`: the node budget of each DDTree step, chosen for the most committed tokens per unit time.

Contract: `buckets(max_budget)` -> the candidate budgets, 2^k - 1 from 7 up to `max_budget`; a step's tree built with
them (remote.decoding.tree_build, `best_first_tree(logits, budget, buckets).expected`) predicts [K] long: E(c) in
thousandths per bucket, -1 where c is larger than the step's tree. `AutoBudget(buckets, cuda)`: `pick()` the next step's
budget; `with timing(budget) as span:` around its launch; `observe(budget, predicted, nodes, committed, span)` once it
is read (`nodes`: the accepted path's node indices below the root), or `dropped(budget, span)` if it never is; `costs`
(ms a step per bucket) once measured, `calibrating` until then. The choice is the budget b maximising 1 + A(b) - rate *
T(b): A what a tree of b nodes is expected to accept (`accepted`), T its measured step cost, rate the running tokens per
ms. With `plain` (the runner's) PLAIN is a candidate too: a step of the target alone, no draft, no tree (A = 0, T
measured as the trees' are), for texts where no tree pays for its draft and verify. Lossless by construction: every step
verifies a best-first tree of some size, as a fixed budget does, or is AR's. No host read is added: each step's
predictions ride in the read it has anyway.
"""
from __future__ import annotations

import itertools
import statistics
import time
from collections import deque
from contextlib import contextmanager

import torch


# (a) What a tree of each candidate size would accept: under the drafter's surrogate (a node's path holds with its path
# probability, the product of its tokens' drafter probabilities), a tree's expected accepted length is the sum of its
# nodes' path probabilities, and a best-first tree of n nodes is the first n of the best-first order, so a step's own
# tree gives E(c) exactly for every size c up to its own (the tree's `expected`, written by its builder on the device,
# inside the step). Larger sizes are scaled from it by the ratio E(c) / E(own) that steps of size >= c measured (a
# running mean per pair of sizes; calibration runs every size, and a step one size up is explored when a ratio grew
# stale). What the surrogate promises is checked against what was accepted, size by size: the accepted path's nodes are
# numbered best first, so a step of size b also tells what every tree of size c <= b would have accepted (its path
# nodes numbered <= c: ancestors come first, so they are a prefix of the path); what each size's extra nodes over the
# next smaller size accepted, against what E said they would, scales E's increments (`accepted`: a drafter is often
# surer of its deep, unlikely nodes than it should be), and as steps come an affine fit of what an increment accepted
# against the running mean's increment at the step's launch replaces that scale (the mean lags the text: a large
# forecast is worth more than its size, a small one less).
#
# (b) What a step of each size costs: every candidate size is its own captured step (as a fixed budget's is), timed on
# the device around each launch (CUDA events, read once the step is: no synchronisation). T(c) is the median of its
# warm steps in rounds: calibration runs each size TIMED_STEPS + 2 times in a row, a round each size twice in a row
# (ROUND_EVERY chosen steps after calibration, then twice as many after each round, up to ROUND_EVERY_MAX: a round's
# steps are mostly of sizes not chosen, ~1 step in 10 when they came every 96, and on six replayed traces fewer rounds
# lost less: 98.72% of the best fixed budget against 98.16; `python bench/bench_auto_policy.py --trace ...`,
# 2026-12-03), and a step counts only when the step before it was of its size and its graph had been replayed before.
# Warm, because a size's step costs more right after another size's (on one H200, demo-qwen3_5: budget 15 took
# 0.870 ms a step right after budget 7, 0.811 ms in a run of its own, while budget 63, chosen in a row, took what its
# fixed run took), and a size chosen runs in a row; cold medians compressed the sizes' differences, and auto then chose
# 63 where 31 was the faster budget (on that pair a mid size still costs more warm inside a mixed run than alone;
# 2026-12-01, `gpu_suite.sh q35_auto`). Rounds, because they time every size on the same texts.
#
# The choice, on the host, for each step it launches (a step is observed after the next one is launched, so that its
# bookkeeping overlaps the GPU's work), uses a renewal reward argument: at rate = the best achievable tokens per ms
# the per-step rule maximises the long-run rate; the running rate of the steps so far stands in for it. E is a
# running mean over the steps read back: the step in flight is not read (a verify's row count is fixed in its graph,
# and choosing among graphs on the device needs conditional graph nodes: torch >= 2.13, the GPU image has 2.11), so
# the newest tree the host knows is two steps old and tells the next step's little on its own (on one H200, choosing
# from it alone accepted no more than a fixed mixture of the same sizes, at more cost: 2026-12-01, `gpu_suite.sh
# q35_auto q3_auto`); the mean follows the text as it changes.
#
# (c) Where the host sets the pace: the device's time of a step is what it costs only while the device is the slower
# of the two. The host's loop (launch, read, bookkeeping, this choice) overlaps the device's work, so a step costs
# about max(device, host); with reads that come asynchronously (graphed steps) the decode loop reports the host's own
# time a step, its waits for the device left out (`host`), and every cost is at least its running median. Where
# it binds: a small pair on a fast GPU with a slow host. On one H200 at T=1 on demo-qwen3 the host's own time was
# 0.104 ms a pass against an AR step's 0.172 ms of device time, so there device times decided (2026-12-07,
# `gpu_suite.sh q3_auto_t1`; an earlier H100 figure of a 0.212 ms AR token against 0.186 of device time included a
# wait of AR's own token read, since fixed: remote.decoding.graph.GraphedAR). At deployed widths (an AR step of 6-19
# ms) the host never sets the pace.
TIMED_STEPS = 4          # timed steps per bucket before the first choice (after its capture and first replay)
COST_WINDOW = 32         # a bucket's cost: the median of its newest warm steps in rounds
ROUND_EVERY = 192        # chosen steps before the first round (a round: each bucket twice in a row) ...
ROUND_EVERY_MAX = 1536   # ... and between rounds, doubling each round up to this
EXPLORE_AFTER = 32       # steps without one of the next size up before one is taken
RATIO_WEIGHT = 0.1       # of the newest step in the running ratios
SMOOTHING = 0.15         # of the newest step in the running mean of E
PRIOR = 8.0              # predicted tokens' weight of the next smaller increment's factor in a size's own
FIT_PRIOR = 20.0         # steps' weight of the factor-scaled increment against an increment's affine fit
EVENTS = 16              # CUDA events in turn: two a step, at most two steps queued and one being read
HOST_WINDOW = 64         # the host's time a step: the median of its newest steps ...
HOST_EVERY = 16          # ... taken anew every this many (a median of 64 each step is ~5 us of a 0.2 ms step)
MAX_BUCKETS = 17         # buckets() of any budget below 2^20: what a step's read has room for
PLAIN = -1               # the budget of an AR step: the target alone on the last token (`plain`; DFlash's is 0)


def buckets(max_budget: int) -> list[int]:
    """Candidate budgets: 7, 15, 31, ... (verify rows a power of two) up to `max_budget`; [max_budget] below 7."""
    sizes = [(1 << k) - 1 for k in range(3, 20) if (1 << k) - 1 <= max_budget]
    return sizes or [max_budget]


class AutoBudget:
    """The host's choice of each step's budget (the module docstring, and the comments above its constants); one per
    run, across its generations."""

    def __init__(self, sizes: list[int], cuda: bool, timed_steps: int = TIMED_STEPS, plain: bool = False):
        self.sizes, self.cuda, self.timed_steps = list(sizes), cuda, timed_steps
        self.options = ([PLAIN] if plain else []) + self.sizes           # what a step may be: AR's, or a tree
        self._events: list = []          # CUDA: timing events, reused in turn (a step's span is read within 3 steps)
        self._marked = 0
        self.costs: dict[int, float] | None = None         # ms a step, per budget, once every budget is timed
        self._host: deque = deque(maxlen=HOST_WINDOW)      # the host's own ms a step (`host`), newest last
        self.host_ms: float | None = None                  # their median, once the loop reports them
        self._host_seen = 0
        self._launched = dict.fromkeys(self.options, 0)
        self._timed: dict[int, deque] = {b: deque(maxlen=COST_WINDOW) for b in self.options}
        self._mean: list[float] | None = None              # running mean of E per bucket (past a tree: by ratio)
        self._ratio: dict[tuple[int, int], float] = {}    # (i, j), i < j: running E(sizes[j]) / E(sizes[i])
        self._stale = [0] * len(self.sizes)               # steps read since one of at least sizes[j] was
        # per bucket j, over the steps of at least its size: what growing the tree from bucket j-1's size to j's
        # added to E and to what was accepted (j = 0: E and the accepted of the smallest tree)
        self._gain_predicted = [0.0] * len(self.sizes)
        self._gain_accepted = [0.0] * len(self.sizes)
        # per bucket j: sums (n, x, y, xx, xy) over the steps of at least its size, x the running mean's increment
        # at the step's launch, y what the increment accepted (`accepted`'s affine fit)
        self._fit = [[0.0] * 5 for _ in self.sizes]
        self._tokens = self._time = 0.0                    # committed tokens and their measured ms, since calibrated
        # calibration's, then the current round's buckets still to launch, each in a row of its own
        self._round = [b for b in self.options for _ in range(timed_steps + 2)]
        self._timing = True                                # the last pick is calibration's or a round's
        self._last: int | None = None                      # the bucket launched last
        self._since_round = 0                              # steps picked since the last round began
        self._round_every = ROUND_EVERY                    # steps from one round to the next

    @property
    def calibrating(self) -> bool:
        return self.costs is None

    def pick(self) -> int:
        """The budget of the next step to launch."""
        self._timing = True            # whether this step times its bucket (`timing`)
        if self._round:
            return self._round.pop(0)
        if self.costs is None:         # calibration launched, not yet all read: the last bucket stays warm
            return self.sizes[-1]
        self._since_round += 1
        if self._since_round >= self._round_every:
            self._round, self._since_round = [b for b in self.options for _ in range(2)], 0
            self._round_every = min(2 * self._round_every, ROUND_EVERY_MAX)
            return self._round.pop(0)
        self._timing = False
        if self._mean is None:
            return self.sizes[-1]
        rate = self._tokens / self._time if self._time > 0 else 0.0
        gains = [1 + a - rate * self.cost(b) for b, a in zip(self.sizes, self.accepted())]
        best = max(range(len(gains)), key=lambda i: (gains[i], -i))      # ties: the smaller tree
        if PLAIN in self.costs and 1 - rate * self.cost(PLAIN) >= gains[best]:
            return PLAIN                   # no tree pays for its draft and verify at this rate (ties: AR)
        if best + 1 < len(self.sizes) and self._stale[best + 1] >= EXPLORE_AFTER:
            best += 1                      # one size up now and then, so that its ratio follows the text
            self._stale[best] = 0
        return self.sizes[best]

    def dropped(self, budget: int, span) -> None:
        """A step launched and never read (its generation ended first, at max_new_tokens or a stop token): one that
        was to time its bucket goes back to the front of the round, so that calibration still times every bucket
        (short of one timed step it would wait for it forever, choosing the largest). It follows a step of its own
        bucket, the one dropped, so it times."""
        if span and span[0] is not None:
            self._round.insert(0, budget)

    def cost(self, budget: int) -> float:
        """ms a step of `budget` takes: its device time, or the host's time a step where that is longer (c)."""
        return max(self.costs[budget], self.host_ms or 0.0)

    def host(self, ms: float) -> None:
        """One pass of the decode loop's own time on the host, its waits for the device's reads left out (c)."""
        self._host.append(ms)
        self._host_seen += 1
        if self.host_ms is None or self._host_seen % HOST_EVERY == 0:
            self.host_ms = statistics.median(self._host)

    def accepted(self) -> list[float]:
        """Drafted tokens a tree of each bucket's size is expected to accept next, increment by increment over the
        next smaller size. An increment of the running mean of E is scaled by what such increments were seen to
        accept (accepted / predicted, pulled towards the next smaller increment's factor while it has little data),
        then replaced, as steps come, by an affine fit of what the increment accepted against the running mean's
        increment at each step's launch: the mean lags the text, so what it promises is a forecast whose worth
        depends on how large it is (on real drafts of the demo pairs an increment's top tenth of forecasts accepted
        2-3x what was forecast, the rest about what was: `python bench/bench_auto_policy.py --pair demo-qwen3_5
        --dataset humaneval --num-prompts 12 --trace ...` on recorded traces, 2026-12-03).
        Increments, not totals: a size's figures then come from the same steps as its increment's, never from
        other texts than its neighbour's (total accepted / predicted per size, over different steps, once ranked 15
        above 31), and more nodes never accept less."""
        out, factor, total = [], 1.0, 0.0
        for x, predicted, accepted, fit in zip(self._increments(), self._gain_predicted, self._gain_accepted,
                                               self._fit):
            factor = (accepted + PRIOR * factor) / (predicted + PRIOR)
            total += max(_shrunk_fit(fit, x, factor * x), 0.0)
            out.append(total)
        return out

    def _increments(self) -> list[float] | None:
        """The running mean of E as increments over the next smaller bucket (never negative), None before any."""
        if self._mean is None:
            return None
        return [max(m - below, 0.0) for m, below in zip(self._mean, [0.0, *self._mean[:-1]])]

    @contextmanager
    def timing(self, budget: int):
        """Around one step's launch; yields the span to hand to `observe`: for a step that times its bucket, its
        start and end (CUDA events on the device's timeline, elsewhere the wall clock, the step having run by then),
        else None. A step times its bucket when it is a round's (calibration's included) and warm: the step before
        it was of the same bucket, whose graph had been replayed before (a budget's first launch captures its
        graph, a first replay may upload it). Other steps record no events (on the H200 a run of one bucket with
        an event pair around every step took 2-3% longer a token than that budget's fixed run)."""
        timed = self._times(budget)
        self._launched[budget] += 1
        self._last = budget
        forecast = self._increments()        # what the step is chosen on, for `accepted`'s fit once it is read
        span = [self._mark() if timed else None]
        yield span
        span += [self._mark() if timed else None, timed, forecast]

    def _times(self, budget: int) -> bool:
        """Whether the step of `budget` about to launch times its bucket (`timing`)."""
        return self._timing and self._last == budget and self._launched[budget] >= 2

    def _mark(self):
        """Now, on the device's timeline (CUDA) or the wall clock."""
        if not self.cuda:
            return time.perf_counter()
        if len(self._events) < EVENTS:
            self._events.append(torch.cuda.Event(enable_timing=True))
        event = self._events[self._marked % EVENTS]
        self._marked += 1
        event.record()
        return event

    def observe(self, budget: int, predicted: list[int], nodes: list[int], committed: int, span=None) -> None:
        """One step read back: its budget, its tree's `expected` (thousandths), the accepted path's node indices below
        the root (best-first numbers: node c is the c-th best), tokens committed, and its `timing` span. An AR step
        (PLAIN) has no tree: its cost and tokens count, nothing else."""
        if budget != PLAIN:
            self._learn(predicted, nodes, span)
        self._count(budget, committed, span)

    def _learn(self, predicted: list[int], nodes: list[int], span) -> None:
        """What a tree step's predictions and accepted nodes say (`accepted`'s statistics, the running mean of E)."""
        latest = [p / 1000 if p >= 0 else -1.0 for p in predicted]
        known = [j for j, e in enumerate(latest) if e >= 0]
        for i, j in itertools.combinations(known, 2):
            if latest[i] > 0:
                seen = latest[j] / latest[i]
                old = self._ratio.get((i, j))
                self._ratio[i, j] = seen if old is None else old + RATIO_WEIGHT * (seen - old)
        reached = [sum(1 for n in nodes if n <= self.sizes[j]) for j in known]     # what each smaller tree accepted
        forecast = span[3] if span and len(span) > 3 else None
        for j in known:
            gain = reached[j] - (reached[j - 1] if j else 0)
            self._gain_predicted[j] += latest[j] - (latest[j - 1] if j else 0.0)
            self._gain_accepted[j] += gain
            if forecast is not None:
                for k, v in enumerate((1.0, forecast[j], gain, forecast[j] ** 2, forecast[j] * gain)):
                    self._fit[j][k] += v
        self._stale = [0 if j <= known[-1] else n + 1 for j, n in enumerate(self._stale)]
        full = [e if e >= 0 else latest[known[-1]] * self._ratio.get((known[-1], j), 1.0) for j, e in enumerate(latest)]
        self._mean = full if self._mean is None else [m + SMOOTHING * (f - m) for m, f in zip(self._mean, full)]

    def _count(self, budget: int, committed: int, span) -> None:
        """A step's time (its bucket's cost, where the span timed it) and its tokens at the running rate."""
        ms = self._elapsed(budget, span)
        if ms is not None:
            self._timed[budget].append(ms)
            if self.costs is not None:
                self.costs[budget] = statistics.median(self._timed[budget])
            elif all(len(t) >= self.timed_steps for t in self._timed.values()):
                self.costs = {b: statistics.median(t) for b, t in self._timed.items()}
        if self.costs is not None:
            self._tokens += committed
            self._time += self.cost(budget) if ms is None else max(ms, self.host_ms or 0.0)

    def _elapsed(self, budget: int, span) -> float | None:
        if not span or span[0] is None:
            return None
        start, end = span[:2]
        if not self.cuda:
            return 1000.0 * (end - start)
        if not end.query():            # the eager loop's commit runs past its read; a graphed step's read follows it
            end.synchronize()
        return start.elapsed_time(end)


def _shrunk_fit(sums: list[float], x: float, prior: float) -> float:
    """The affine least-squares fit of y on x from `sums` (n, x, y, xx, xy), its slope at least 0, at `x`, pulled
    towards `prior` with the weight of FIT_PRIOR steps (all of it before two)."""
    n, sx, sy, sxx, sxy = sums
    if n < 2:
        return prior
    mx, my = sx / n, sy / n
    var = sxx / n - mx * mx
    slope = max((sxy / n - mx * my) / var, 0.0) if var > 1e-9 else 0.0
    return (n * (my + slope * (x - mx)) + FIT_PRIOR * prior) / (n + FIT_PRIOR)
