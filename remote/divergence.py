"""Each first divergence from AR, classified: a near-tie that the dtype's rounding can flip, or a wrong token.

Contract: `classify(run, method, gens, ar_gens)` takes the first repeat's generations (temperature 0) and, for each
prompt whose tokens differ from AR's at position p, decodes AR and the method again up to p (`Run.replay`: the same
executor and kernels, uncaptured, tree_budget=auto's budgets as chosen), hearing at every token choice the logits of
the two tokens at issue: AR's token a and the method's m. The gap in AR's forward is logit(a) - logit(m) at p, in
the method's logit(m) - logit(a) at the verify row that chose p. A divergence is a near-tie when both gaps are
within NEAR_TIE_ULPS units in the last place of the run's dtype at the logits' magnitude; otherwise the method's
logits differ from AR's beyond rounding: not lossless. A replay that does not give the timed tokens (not
`reproduced`) is not classified. `divergence_metrics(divergences)` and `Divergence.line(method)` (the not_lossless
warning the failure catalog matches) report them.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, field

import torch

from .metrics import first_divergence
from .spec import DTYPES, Method

# Why 4: two computations of one logit that differ only in rounding (a tree verify's matrix shapes and attention
# against AR's single row) part by the dtype's rounding of the hidden state the LM head reads (relative 2^-(m+1) an
# element, about one unit in the last place of the logit over a row) and of the logit itself (half a unit each), so
# two logits that rounding can swap lie within 2 units either way; 4 leaves a factor 2 for the layers below.
NEAR_TIE_ULPS = 4
MANTISSA_BITS = {"float32": 23, "bfloat16": 7, "float16": 10}
NOT_LOSSLESS = "NOT LOSSLESS"     # the failure catalog's not_lossless row matches Divergence.line


def ulp(value: float, dtype: str) -> float:
    """The spacing of the dtype's numbers at |value| (its unit in the last place)."""
    bits = MANTISSA_BITS[DTYPES.get(dtype, dtype)]
    exponent = math.frexp(max(abs(value), 2.0 ** -14))[1] - 1
    return 2.0 ** (exponent - bits)


@dataclass
class Divergence:
    prompt: int
    position: int
    ar_token: int | None          # None: that sequence ended there
    method_token: int | None
    reproduced: bool = False      # both replays gave the timed tokens up to the position: the gaps below are theirs
    ar_gap: float | None = None      # logit(a) - logit(m) in AR's forward at the position
    method_gap: float | None = None  # logit(m) - logit(a) in the method's verify row that chose it
    unit: float | None = None        # the dtype's unit in the last place at the logits' magnitude
    near_tie: bool | None = None

    @property
    def gap_ulps(self) -> float | None:
        return None if self.unit is None else max(self.ar_gap, self.method_gap) / self.unit

    def line(self, method: str) -> str:
        """The not_lossless warning (one line, values without spaces: orchestrator/failures/failures.yaml)."""
        return (f"{NOT_LOSSLESS}: method={method} prompt={self.prompt} position={self.position} "
                f"ar_token={self.ar_token} method_token={self.method_token} ar_gap={self.ar_gap:.4g} "
                f"method_gap={self.method_gap:.4g} ulps={self.gap_ulps:.3g} (not a near-tie: beyond "
                f"{NEAR_TIE_ULPS} units of rounding)")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Heard:
    """The logits of tokens `pair` at every token choice of one replay, call by call ([rows, 2] each)."""
    pair: tuple[int, int]
    calls: list = field(default_factory=list)

    def __call__(self, logits: torch.Tensor) -> None:
        index = torch.tensor(self.pair, device=logits.device)
        self.calls.append(logits.index_select(1, index).float().cpu())


class _Budgets:
    """tree_budget=auto's policy replayed: the budgets a generation chose, step by step, and nothing learnt."""

    calibrating = False

    def __init__(self, sizes, budgets: list[int]):
        self.sizes, self._budgets = sizes, list(budgets)

    def pick(self) -> int:
        return self._budgets.pop(0) if self._budgets else max(self.sizes)

    def timing(self, budget: int):
        return contextlib.nullcontext()

    def observe(self, *args) -> None:
        pass

    host = dropped = observe        # the decode loop's other reports to a policy: nothing to learn from either


class Kept:
    """An executor whose reads are kept (`reads`: each step's tokens and accepted nodes): which verify row chose which
    token. Everything else is the executor's own."""

    def __init__(self, steps):
        self.steps, self.reads = steps, []

    def __getattr__(self, name):
        return getattr(self.steps, name)

    def read(self, held):
        step = self.steps.read(held)
        self.reads.append(step)
        return step


def _row(heard: _Heard, reads: list | None, position: int) -> torch.Tensor | None:
    """The heard [2] logits of the row that chose token `position`: call `position` for AR (one row a call); for a
    speculative method the prefill's call for token 0, else the step's call and the row of its path (root first)."""
    if reads is None:
        return heard.calls[position][0] if position < len(heard.calls) else None
    if position == 0:
        return heard.calls[0][0]
    done = 1
    for call, step in enumerate(reads, start=1):
        if position < done + len(step.tokens):
            offset = position - done
            row = 0 if offset == 0 else step.nodes[offset - 1]
            return heard.calls[call][row] if call < len(heard.calls) else None
        done += len(step.tokens)
    return None


def _replay(run, method: Method, index: int, upto: int, pair: tuple[int, int], budgets: list[int]):
    """Prompt `index` decoded again by `method` to `upto` tokens: (its tokens, the heard logits at `upto - 1`)."""
    heard = _Heard(pair)
    auto = _Budgets(run.auto.sizes, budgets) if method.builds_tree and run.auto else None
    gen, reads = run.replay(method, index, upto, heard, auto)
    return gen.tokens, _row(heard, reads if method.uses_drafter else None, upto - 1)


def classify_one(run, method: Method, index: int, gen, ar_gen) -> Divergence | None:
    """The first divergence of prompt `index` (gen: the method's generation, ar_gen: AR's), classified; None when
    they agree."""
    position = first_divergence(gen.tokens, ar_gen.tokens)
    if position is None:
        return None
    a = ar_gen.tokens[position] if position < len(ar_gen.tokens) else None
    m = gen.tokens[position] if position < len(gen.tokens) else None
    found = Divergence(index, position, a, m)
    if a is None or m is None:       # one of them stopped there: no pair of logits to weigh
        return found
    ar_tokens, ar_row = _replay(run, Method.AR, index, position + 1, (a, m), [])
    tokens, row = _replay(run, method, index, position + 1, (a, m), gen.budgets)
    if ar_tokens != ar_gen.tokens[:position + 1] or tokens != gen.tokens[:position + 1] or ar_row is None \
            or row is None:
        return found
    la, lm, ma, mm = float(ar_row[0]), float(ar_row[1]), float(row[0]), float(row[1])
    unit = ulp(max(abs(la), abs(lm), abs(ma), abs(mm)), run.spec.model.dtype)
    found.reproduced, found.ar_gap, found.method_gap, found.unit = True, la - lm, mm - ma, unit
    found.near_tie = max(found.ar_gap, found.method_gap) <= NEAR_TIE_ULPS * unit
    return found


def classify(run, method: Method, gens: list, ar_gens: list) -> list[Divergence]:
    """Every first divergence of the first repeat (`gens`, `ar_gens`: one generation per prompt, in prompt
    order), classified where its replays reproduce it."""
    found = [classify_one(run, method, i, g, a) for i, (g, a) in enumerate(zip(gens, ar_gens))]
    return [d for d in found if d is not None]


def divergence_metrics(divergences: list[Divergence]) -> dict[str, float]:
    """divergence_near_tie_share and the worst gap over the classified ones; how many could not be classified."""
    out: dict[str, float] = {}
    judged = [d for d in divergences if d.near_tie is not None]
    if judged:
        out["divergence_near_tie_share"] = sum(d.near_tie for d in judged) / len(judged)
        worst = max(judged, key=lambda d: d.gap_ulps)
        out["divergence_gap_max"] = max(worst.ar_gap, worst.method_gap)
        out["divergence_gap_max_ulps"] = worst.gap_ulps
    if len(judged) < len(divergences):
        out["divergence_unclassified"] = float(len(divergences) - len(judged))
    return out
