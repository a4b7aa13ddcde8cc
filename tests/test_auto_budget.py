"""tree_budget=auto (remote.decoding.auto_budget): what a tree predicts of the trees up to its size, the choice
under two measured cost models, losslessness through both decoders (CPU, float32), the runner's report of its
choices and the orchestrator's knob."""
from __future__ import annotations

import math

import pytest
import torch

from remote.decoding.auto_budget import PLAIN, AutoBudget, buckets
from remote.decoding.graph import GraphDecoder, HybridGraphDecoder
from remote.decoding.loop import Generation, generate_ar, generate_spec
from remote.decoding.tree_build import best_first_tree, build_tree
from remote.metrics import auto_budget_metrics
from remote.runner import run
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_pair, tiny_spec
from tests.test_runner_e2e import _defined

# Step costs (ms) per budget, as measured on one H200 (docs/performance-history.md): Qwen3.6-27B widths, where rows cost
# (AR 23.1, DFlash's 16 rows 26.97, DDTree 32 27.3, DDTree 64 30.5; 7 and 127 extrapolated at 0.1 ms a row), and
# the demo pair, where they hardly do (DDTree 15-255 steps 0.68, 0.69, 0.74, 0.81, 1.10: 2026-12-01, `python3
# bench/bench_methods.py $Q3 --temperatures 0 --num-prompts 24 --max-new-tokens 128 --budgets 15,31,63,127,255`).
EXPENSIVE = {7: 26.2, 15: 26.97, 31: 27.3, 63: 30.5, 127: 36.9}
FLAT = {7: 0.675, 15: 0.68, 31: 0.69, 63: 0.74, 127: 0.81}


def drafts(confidence: float, depth: int = 15, vocab: int = 64, seed: int = 0) -> torch.Tensor:
    """Draft logits [depth, vocab] whose top token has probability `confidence` at every depth, the rest of the
    mass spread unevenly over the others (a synthetic drafter of controlled confidence)."""
    g = torch.Generator().manual_seed(seed)
    rest = torch.rand(depth, vocab - 1, generator=g) ** 3
    probs = torch.cat([torch.full((depth, 1), confidence), (1 - confidence) * rest / rest.sum(1, keepdim=True)], 1)
    return probs.log()


def test_buckets_are_powers_of_two_minus_one():
    assert buckets(127) == [7, 15, 31, 63, 127]
    assert buckets(100) == [7, 15, 31, 63]
    assert buckets(3) == [3]


@pytest.mark.parametrize("confidence", [0.3, 0.7, 0.95])
def test_a_tree_predicts_every_tree_up_to_its_own_size_exactly(confidence):
    logits, sizes = drafts(confidence), buckets(255)
    exact = {c: best_first_tree(logits, c).path_lp.exp().sum().item() for c in sizes}
    for budget in sizes:
        got = best_first_tree(logits, budget, tuple(sizes)).expected.tolist()
        assert all(abs(g - 1000 * exact[c]) <= 2 if c <= budget else g == -1 for c, g in zip(sizes, got)), got


def test_a_tree_holding_every_prefix_predicts_larger_trees_too():
    logits = drafts(0.5, depth=2, vocab=4)          # 4 + 16 prefixes: a budget of 31 holds them all
    got = best_first_tree(logits, 31, (7, 15, 31, 63)).expected
    assert got[-1] == got[-2] > got[0] > 0


def sampled_path(logits: torch.Tensor, budget: int, g: torch.Generator) -> list[int]:
    """The path a target that draws each token from the drafter's own distribution accepts through the best-first
    tree of `budget` nodes (a calibrated drafter): its nodes' verify indices below the root."""
    children, node, path = build_tree(logits, budget).children, 0, []
    for probs in logits.softmax(-1):
        token = int(torch.multinomial(probs, 1, generator=g))
        if token not in children[node]:
            break
        node = children[node][token]
        path.append(node)
    return path


def _settle(costs: dict[int, float], logits: torch.Tensor, steps: int = 80, host: float | None = None) -> list[int]:
    """The budgets auto picks, step after step, for drafts that are always `logits`, the cost model `costs`, and
    a target that agrees with the drafter as often as its probabilities say. With PLAIN among `costs`, AR steps
    are among the choices (each commits one token), from a running rate of one token an AR step. `host`: the
    decode loop's own ms a pass, as the graphed loop reports it."""
    plain = PLAIN in costs
    auto = AutoBudget(sorted(b for b in costs if b != PLAIN), cuda=False, plain=plain)
    auto.costs, g, chosen = dict(costs), torch.Generator().manual_seed(0), []
    if host is not None:
        auto.host(host)
    if plain:
        auto._tokens, auto._time = 1.0, costs[PLAIN]
    for _ in range(steps):
        budget = auto.pick()
        if budget == PLAIN:
            auto.observe(PLAIN, [], [], 1)
        else:
            expected = best_first_tree(logits, budget, tuple(auto.sizes)).expected.tolist()
            nodes = sampled_path(logits, budget, g)
            auto.observe(budget, expected, nodes, len(nodes) + 1)
        chosen.append(budget)
    return chosen[steps // 2:]


def test_expensive_rows_make_smaller_trees_than_flat_costs():
    """The acceptance's CPU check: for the same drafts, the cost model of Qwen3.6-27B widths makes auto choose
    smaller trees than the demo pair's flat one, at every confidence, strictly at some."""
    means = {}
    for confidence in (0.5, 0.7, 0.85):
        logits = drafts(confidence, seed=int(confidence * 100))
        expensive, flat = _settle(EXPENSIVE, logits), _settle(FLAT, logits)
        means[confidence] = (sum(expensive) / len(expensive), sum(flat) / len(flat))
        assert means[confidence][0] <= means[confidence][1], means
    assert any(e < f for e, f in means.values()), means


def test_calibration_times_each_bucket_in_a_row_of_its_own_before_choosing():
    auto = AutoBudget([7, 15, 31], cuda=False, timed_steps=2)
    launched = []
    while auto.calibrating:
        budget = auto.pick()
        with auto.timing(budget) as span:
            pass
        launched.append((budget, span[2]))
        auto.observe(budget, [1000, 1500, -1] if budget < 31 else [1000, 1500, 1800], [1], 2, span)
    # per bucket: its capture and its first replay (not timed), then two warm steps timed
    assert launched == [(b, timed) for b in (7, 15, 31) for timed in (False, False, True, True)]
    assert sorted(auto.costs) == [7, 15, 31] and all(ms >= 0 for ms in auto.costs.values())


def test_a_timed_step_never_read_is_timed_again_so_calibration_ends():
    """A generation can end with a step launched and unread (at max_new_tokens or a stop token): a calibration step
    lost so is launched again, warm behind the one dropped, and calibration still ends with every bucket timed."""
    auto = AutoBudget([7, 15], cuda=False, timed_steps=2)
    launched, dropped = [], False
    while auto.calibrating and len(launched) < 20:
        budget = auto.pick()
        with auto.timing(budget) as span:
            pass
        launched.append((budget, span[2]))
        if budget == 7 and span[2] and not dropped:
            auto.dropped(budget, span)            # its generation ended before it was read
            dropped = True
            continue
        auto.observe(budget, [1000, 1500], [1], 2, span)
    assert launched == [(7, False), (7, False), (7, True), (7, True), (7, True), (15, False), (15, False),
                        (15, True), (15, True)]
    assert not auto.calibrating


def _calibrated(sizes: list[int], ms: float) -> tuple[AutoBudget, object]:
    """An AutoBudget calibrated with every step taking `ms`, and a `read(budget, span)` that observes a step."""
    auto = AutoBudget(sizes, cuda=False, timed_steps=1)
    read = lambda budget, span: auto.observe(budget, [1000, 1500][:len(sizes)], [1], 2, span)  # noqa: E731
    while auto.calibrating:
        budget = auto.pick()
        with auto.timing(budget) as span:
            pass
        if span[2]:
            span[:2] = [0.0, ms / 1000]
        read(budget, span)
    return auto, read


def test_only_warm_steps_of_rounds_time_the_buckets():
    """After calibration, a round (each bucket twice in a row) comes after ROUND_EVERY chosen steps, the next after
    twice as many, and only a round's second step of a bucket times it (no other step has a span): a step right
    after another bucket's costs more than one in a row (as a chosen bucket runs), and a step the policy chose for
    its text says nothing of another size's cost."""
    from remote.decoding.auto_budget import ROUND_EVERY

    auto, read = _calibrated([7, 15], ms=1.0)
    assert auto.costs == {7: 1.0, 15: 1.0}
    picks = []
    for _ in range(3 * ROUND_EVERY + 8):
        budget = auto.pick()
        with auto.timing(budget) as span:
            pass
        picks.append((budget, span[2]))
        if span[2]:
            span[:2] = [0.0, 0.002]
        read(budget, span)
    assert all(not timed for _, timed in picks[:ROUND_EVERY - 1])
    assert picks[ROUND_EVERY - 1:ROUND_EVERY + 3] == [(7, False), (7, True), (15, False), (15, True)]
    second = ROUND_EVERY + 3 + 2 * ROUND_EVERY - 1
    assert all(not timed for _, timed in picks[ROUND_EVERY + 3:second])
    assert picks[second:second + 4] == [(7, False), (7, True), (15, False), (15, True)]
    assert auto.costs == {7: 2.0, 15: 2.0}      # medians of the calibration's 1 ms and the two rounds' 2 ms


def test_a_size_is_judged_by_what_its_extra_nodes_accepted():
    """A drafter that promises twice as much of the large tree as of the small one, while only the small tree's
    nodes are ever accepted: what the larger size's extra nodes accepted (the accepted nodes' best-first numbers
    tell) turns auto to the small tree, which the overall calibration (accepted / predicted: 0.5 for both) would
    not prefer."""
    auto = AutoBudget([7, 63], cuda=False)
    auto.costs = {7: 1.0, 63: 1.2}
    for _ in range(40):
        auto.observe(63, [2000, 4000], [1, 3], 3)      # E(63) = 2 E(7), yet what was accepted lay in the first 7
    small, large = auto.accepted()
    assert small == pytest.approx(2.0) and 2.0 <= large < 2.3
    assert auto.pick() == 7


def test_an_increment_is_judged_by_what_it_accepted_when_forecast_as_large():
    """The running mean lags the text, so its increments are forecasts of uneven worth: here the 63-tree's extra
    nodes accepted 2 tokens whenever the forecast at launch was 1.0 and none when it was 0.2. With the mean's
    increment now 1.0, auto expects about 2 of them (the affine fit, pulled a little towards the overall factor),
    where accepted / predicted over all steps (1.0) would say 1."""
    auto = AutoBudget([7, 63], cuda=False)
    for i in range(60):
        high = i % 2 == 0
        forecast = [1.0, 1.0 if high else 0.2]               # the mean's increments at the step's launch
        nodes = [1, 20, 30] if high else [1]                  # nodes 20 and 30 lie in the 63-tree only
        auto.observe(63, [1000, 2000], nodes, len(nodes) + 1, [None, None, False, forecast])
    small, large = auto.accepted()
    assert small == pytest.approx(1.0) and large - small > 1.5


def test_auto_is_lossless_through_both_decoders():
    """Token for token AR's, through the eager loop and the graph decoder's steps (run eagerly), while the policy
    calibrates (every bucket) and then chooses."""
    model, drafter, target = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    eager_auto, static_auto = AutoBudget(buckets(63), cuda=False), AutoBudget(buckets(63), cuda=False)
    used = set()
    for ids in prompts(model, 6, seed=4):
        timer = PhaseTimer(ids.device)
        ar = generate_ar(model, ids, 40, 0.0, None, set(), timer).tokens
        eager = generate_spec(target, drafter, model, ids, 40, 0.0, None, set(), timer, "ddtree", 63, eager_auto)
        static = decoder.generate_spec(ids, 40, set(), timer, "ddtree", 63, static_auto)
        assert eager.tokens == ar and static.tokens == ar
        for gen in (eager, static):
            assert len(gen.budgets) == len(gen.predicted) == len(gen.accepted)
            assert [s.nodes - 1 for s in gen.stats] == gen.budgets      # the tree verified is the one chosen
            used.update(gen.budgets)
    assert not eager_auto.calibrating and not static_auto.calibrating
    assert used == {7, 15, 31, 63}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graphed_auto_replays_the_eager_tokens():
    """On CUDA every bucket is captured as its own step, timed by events, and replayed: the tokens stay AR's; the
    loop reports the host's own time a pass (its reads come asynchronously)."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    model, drafter = model.cuda(), drafter.cuda()
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids)
    auto, inputs = AutoBudget(buckets(31), cuda=True), [ids.cuda() for ids in prompts(model, 6, seed=6)]
    # caches for the longest prompt first: a cache that grows drops the graphs, and once calibrated auto may never
    # take a small bucket again (on the H200 the last assertion failed so)
    decoder.reserve(max(ids.shape[1] for ids in inputs), 40, "ddtree", 31)
    for ids in inputs:
        timer = PhaseTimer(ids.device)
        ar = decoder.generate_ar(ids, 40, set(), timer).tokens
        assert decoder.generate_spec(ids, 40, set(), timer, "ddtree", 31, auto).tokens == ar
    assert decoder.graphs, decoder.replays.fallback
    assert not auto.calibrating and all(ms > 0 for ms in auto.costs.values()) and auto.host_ms > 0
    assert {("spec", "ddtree", b, (7, 15, 31), 0.0, 0) for b in (7, 15, 31)} <= set(decoder.replays.captured)


def test_auto_is_lossless_on_a_hybrid_target():
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model, drafter, target = tiny_hybrid_pair("3to1")
    decoder = HybridGraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    auto = AutoBudget(buckets(31), cuda=False)
    for ids in prompts(model, 4, seed=5):
        timer = PhaseTimer(ids.device)
        ar = generate_ar(model, ids, 32, 0.0, None, set(), timer).tokens
        assert decoder.generate_spec(ids, 32, set(), timer, "ddtree", 31, auto).tokens == ar
        assert generate_spec(target, drafter, model, ids, 32, 0.0, None, set(), timer, "ddtree", 31,
                             AutoBudget(buckets(31), cuda=False)).tokens == ar


def test_a_run_reports_its_choices_and_its_cost_model(tmp_path):
    spec = tiny_spec("ddtree", decoding={"tree_budget": "auto", "tree_budget_max": 15, "warmup": 1,
                                         "max_new_tokens": 24})
    results = run(spec, str(tmp_path))
    m = results["metrics"]
    assert m["exact_match_vs_ar"] == 1.0
    assert set(m) >= {"auto_cost_ms_7", "auto_cost_ms_15", "auto_cost_ms_ar", "auto_budget_mean", "auto_ar_share"}
    assert "auto_host_ms" not in m      # an eager step runs whole on the host: its timed span is all of it
    assert 0 <= m["auto_budget_mean"] <= 15
    assert m["auto_cost_explained"] > 0          # its sum: the test below (on a busy CPU medians stray from means)
    assert m["auto_ar_share"] + m["auto_budget_share_7"] + m["auto_budget_share_15"] == pytest.approx(1.0)
    if m["auto_ar_share"] < 1:     # (on a busy CPU the tiny pair's trees may never pay: every step AR's)
        assert set(m) >= {"auto_predicted_accept_mean", "auto_accepted_mean", "auto_calibration"}
        assert m["auto_accepted_mean"] == pytest.approx(m["tau"] - 1, abs=0.2)    # tau counts the bonus, capped
    assert all(_defined(k, results["definitions"]) for k in m if k.startswith("auto_"))


def test_auto_cost_explained_is_the_steps_modelled_cost_over_their_decode_time():
    """Each step read counts at its budget's modelled cost (the host's time a pass where that is longer), over the
    decode time the generations took: what the cost model leaves out shows as a share under 1."""
    auto = AutoBudget([7], cuda=False, plain=True)
    auto.costs = {PLAIN: 1.0, 7: 3.0}
    gens = [Generation(budgets=[PLAIN, PLAIN, 7], times_ms={"decode": 8.0}),
            Generation(budgets=[7], times_ms={"decode": 4.0})]
    assert auto_budget_metrics(gens, auto)["auto_cost_explained"] == pytest.approx((1 + 1 + 3 + 3) / 12)
    auto.host(2.0)                                   # a host slower than an AR step's device: AR steps cost its time
    assert auto_budget_metrics(gens, auto)["auto_cost_explained"] == pytest.approx((2 + 2 + 3 + 3) / 12)


def test_the_orchestrator_sends_auto_names_it_and_dedupes_the_max():
    from hydra import compose, initialize_config_dir

    from orchestrator.config.plan import make_plan
    from orchestrator.paths import CONF_DIR
    from orchestrator.sweep import dedupe
    from orchestrator.tracking import names as naming

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        auto = compose(config_name="config", overrides=["tree_budget=auto", "tree_budget_max=63"])
        fixed = compose(config_name="config", overrides=["tree_budget=31", "tree_budget_max=63"])
    plan = make_plan(auto, run_id="r")
    spec = plan.spec
    assert (spec.decoding.tree_budget, spec.decoding.tree_budget_max, spec.decoding.widest_budget) == ("auto", 63, 63)
    assert naming.run_name(plan) == f"ddtree-bauto-{plan.model}"
    # a fixed budget never reads tree_budget_max: a sweep over it is one job
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        other = compose(config_name="config", overrides=["tree_budget=31", "tree_budget_max=255"])
    assert dedupe.as_read(make_plan(fixed, run_id="a")) == dedupe.as_read(make_plan(other, run_id="b"))
    assert dedupe.as_read(plan)["decoding"]["tree_budget_max"] == 63


class Scripted(AutoBudget):
    """AutoBudget whose steps follow `pattern` (PLAIN: an AR step), over and over; nothing is timed."""

    def __init__(self, pattern: list[int], sizes: list[int]):
        super().__init__(sizes, cuda=False, plain=True)
        self.pattern, self.costs, self._step = pattern, {b: 1.0 for b in self.options}, 0

    def pick(self) -> int:
        self._timing, self._step = False, self._step + 1
        return self.pattern[(self._step - 1) % len(self.pattern)]


# AR steps in runs longer than the drafter's pending context holds (block 8, 4 blocks: 32 rows), so that it is
# absorbed, then trees after them; and AR steps between trees
PATTERN = [PLAIN] * 40 + [7, 15, PLAIN, 7, PLAIN, PLAIN, 15]


@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_ar_steps_among_trees_are_lossless_and_keep_the_drafter_in_step(kind):
    """tree_budget=auto's AR steps (PLAIN), in long runs and between trees: AR's tokens through both decoders, and
    the graph decoder's steps accept exactly what the eager loop's do, so its drafter saw every committed token's
    features in order (its pending context absorbed when AR steps filled it), as the eager drafter does."""
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    if kind == "attention":
        model, drafter, target = tiny_pair("narrow", block_size=8)
        decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
        inputs = prompts(model, 3, seed=4)
    else:
        model, drafter, target = tiny_hybrid_pair("3to1")
        decoder = HybridGraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
        inputs = prompts(model, 2, seed=5)
    decoder.context_blocks = 4
    absorbed = []           # the pending rows at each absorb: all of the context's where AR steps filled it
    absorb = decoder._absorb_step
    decoder._absorb_step = lambda: absorbed.append(int(decoder.state.context_rows)) or absorb()
    trees = 0
    for ids in inputs:
        timer = PhaseTimer(ids.device)
        ar = generate_ar(model, ids, 90, 0.0, None, set(), timer).tokens
        eager = generate_spec(target, drafter, model, ids, 90, 0.0, None, set(), timer, "ddtree", 15,
                              Scripted(PATTERN, [7, 15]))
        static = decoder.generate_spec(ids, 90, set(), timer, "ddtree", 15, Scripted(PATTERN, [7, 15]))
        assert eager.tokens == ar and static.tokens == ar
        assert static.accepted == eager.accepted and static.stats == eager.stats
        assert static.budgets == eager.budgets and static.plain_steps == eager.plain_steps >= 40
        assert len(eager.accepted) == len(eager.predicted) == len(eager.budgets) - eager.plain_steps
        trees += sum(a > 0 for a in static.accepted[1:])     # trees after the long AR run accepted drafts
    assert trees and 4 * drafter.block_size in absorbed, absorbed


def test_auto_takes_ar_steps_where_no_tree_pays_and_trees_where_they_do():
    """Trees at 1.5x an AR step's cost: with a drafter that knows nothing (uniform over 4096 tokens: a tree of 31
    commits ~1.008 tokens for 1.6 steps' time) auto settles on AR steps, with a confident one on trees."""
    costs = {PLAIN: 1.0, 7: 1.5, 15: 1.55, 31: 1.6}
    unsure = _settle(costs, torch.full((15, 4096), -math.log(4096)), steps=120)
    sure = _settle(costs, drafts(0.9, seed=4), steps=120)
    assert unsure.count(PLAIN) >= 0.9 * len(unsure), unsure
    assert sure.count(PLAIN) == 0, sure


def test_a_step_the_host_sets_the_pace_of_costs_the_hosts_time():
    """Trees at ~2x an AR step's device time and drafts that accept ~1.5 tokens a step: by device time AR steps
    pay; once the loop reports 1.5 ms of its own a pass (longer than an AR step's device time, shorter than a
    tree's: host and device overlap), an AR step costs 1.5 ms and trees pay. The decode loop reports it where its
    reads come asynchronously (graphed steps), never for an eager step, which runs its whole step on the host."""
    costs = {PLAIN: 1.0, 7: 1.9, 15: 1.95, 31: 2.0}
    for confidence in (0.3, 0.4):
        logits = drafts(confidence, seed=4)
        device_only = _settle(costs, logits, steps=160)
        host_bound = _settle(costs, logits, steps=160, host=1.5)
        assert device_only.count(PLAIN) == len(device_only) and PLAIN not in host_bound, (device_only, host_bound)
    auto = AutoBudget([7, 15], cuda=False, plain=True)
    auto.costs = {PLAIN: 1.0, 7: 1.9, 15: 1.95}
    auto.host(0.5)                          # the first pass's time stands until the median is taken
    assert (auto.host_ms, auto.cost(PLAIN)) == (0.5, 1.0)
    for ms in [0.2, 1.4, 1.4] * 5:          # the 16th pass: the median of all 16
        auto.host(ms)
    assert (auto.host_ms, auto.cost(PLAIN), auto.cost(15)) == (1.4, 1.4, 1.95)
