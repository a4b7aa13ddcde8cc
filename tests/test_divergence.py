"""First divergences from AR, classified by the runner (remote.divergence) and shown by `show`.

A verify whose logits are wrong at one node (one logit perturbed, in the timed generation and in its replay alike,
as a bug would be) makes the method emit a token AR's forward does not nearly tie with: the run reports
`not_lossless` naming the prompt and the position (the failure catalog's row matches the runner's line), its
metrics say no divergence was a near-tie, and `show` marks it. Near-ties are classified by the units in the last
place of the dtype at the logits' magnitude; bf16 figures on a GPU come from bench/gpu_suite.sh's `trust_q3` and
`trust_q35` steps (bench/trust_figures.py, whose broken verify is tried here on the CPU).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.failures import scan_text
from orchestrator.tracking import show
from remote.decoding.auto_budget import AutoBudget, buckets
from remote.decoding.graph import GraphDecoder
from remote.divergence import NEAR_TIE_ULPS, Divergence, _Budgets, divergence_metrics, ulp
from remote.models.attention_target import AttentionTarget
from remote.runner import run
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_pair, tiny_spec

PERTURBED_STEP = 2     # the second verify of every generation
BUMP = 100.0           # far beyond any rounding: the verify's lowest logit made its highest


@pytest.fixture
def broken_verify(monkeypatch):
    """AttentionTarget.verify with one logit of one node perturbed: the root's lowest-scored token, at the second
    verify of each generation (a prefill restarts the count), so every replay perturbs the same node."""
    verify, prefill = AttentionTarget.verify, AttentionTarget.prefill

    def counted_prefill(self, *args, **kwargs):
        self.verifies = 0
        return prefill(self, *args, **kwargs)

    def perturbed_verify(self, *args, **kwargs):
        out = verify(self, *args, **kwargs)
        self.verifies += 1
        if self.verifies == PERTURBED_STEP:
            out.logits[0, int(out.logits[0].argmin())] += BUMP
        return out

    monkeypatch.setattr(AttentionTarget, "prefill", counted_prefill)
    monkeypatch.setattr(AttentionTarget, "verify", perturbed_verify)


def test_a_perturbed_verify_is_reported_not_lossless(broken_verify, tmp_path, capsys):
    spec = tiny_spec("ddtree")
    (tmp_path / "spec.json").write_text(spec.to_json())       # what the orchestrator writes beside the run
    results = run(spec, str(tmp_path))
    m, found = results["metrics"], results["divergences"]
    assert m["exact_match_vs_ar"] == 0.0 and len(found) == 3          # every prompt of the tiny spec
    assert all(d["reproduced"] and d["near_tie"] is False for d in found), found
    assert all(d["method_gap"] > BUMP / 2 for d in found)              # the bump, seen in the method's verify
    assert m["divergence_near_tie_share"] == 0.0 and m["divergence_gap_max_ulps"] > NEAR_TIE_ULPS
    warnings = [json.loads(line)["message"] for line in (tmp_path / "events.jsonl").read_text().splitlines()
                if json.loads(line)["event"] == "warning"]
    for d in found:
        said = f"NOT LOSSLESS: method=ddtree prompt={d['prompt']} position={d['position']} "
        assert any(w.startswith(said) for w in warnings), warnings
    report = scan_text(capsys.readouterr().out)
    said = [w for w in report.warnings if w.finding.id == "not_lossless"]   # one variant per prompt and position
    assert sum(w.count for w in said) == 3 and any("prompt 0, position" in w.finding.message for w in said)

    (tmp_path / "config.yaml").write_text("model: {name: tiny-qwen3}\n")
    shown = show.load(tmp_path)
    assert all("NOT LOSSLESS" in p.verdict("ddtree") for p in shown.prompts)
    assert show.summary(shown).endswith("; near-ties 0, not lossless 3")


def test_an_unperturbed_float32_run_has_nothing_to_classify(tmp_path):
    results = run(tiny_spec("dflash"), str(tmp_path))
    assert results["metrics"]["exact_match_vs_ar"] == 1.0 and results["divergences"] == []
    assert not any(k.startswith("divergence_") for k in results["metrics"])


@pytest.mark.parametrize("dtype, value, unit", [("bfloat16", 20.0, 0.125), ("bfloat16", 1.5, 2 ** -7),
                                                 ("float16", 20.0, 2 ** -6), ("float32", 20.0, 2 ** -19),
                                                 ("bf16", -9.0, 2 ** -4)])
def test_ulp_is_the_dtypes_spacing_at_the_magnitude(dtype, value, unit):
    assert ulp(value, dtype) == unit


def test_near_ties_and_the_worst_gap():
    unit = ulp(18.0, "bfloat16")
    tie = Divergence(0, 5, 1, 2, True, 0.0, unit, unit, True)
    wrong = Divergence(1, 9, 3, 4, True, 2.0, 3.0, unit, False)
    ended = Divergence(2, 7, None, 4)
    m = divergence_metrics([tie, wrong, ended])
    assert m == {"divergence_near_tie_share": 0.5, "divergence_gap_max": 3.0, "divergence_gap_max_ulps": 3.0 / unit,
                 "divergence_unclassified": 1.0}
    assert wrong.line("dflash").startswith("NOT LOSSLESS: method=dflash prompt=1 position=9 ar_token=3 method_token=4")


def test_the_gpu_figures_script_reports_its_broken_verify_on_the_cpu(tmp_path):
    """bench/trust_figures.py, as gpu_suite.sh's trust steps run it, on the CPU: its broken verify is not lossless,
    and bench/noise_budget.py reads the run it wrote."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    proc = subprocess.run([sys.executable, str(bench / "trust_figures.py"), "--out", str(tmp_path), "--device", "cpu",
                           "--dtype", "float32", "--pairs", "q3", "--methods", "", "--broken", "q3", "--num-prompts",
                           "2", "--max-new-tokens", "4"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = json.loads(proc.stdout.splitlines()[-1])
    assert found["run"] == "q3-ddtree63-broken" and found["not_lossless"] == found["divergences"] == 2
    assert found["divergence_near_tie_share"] == 0.0 and set(found["prompts_needed_5pct"]) == {
        "repeats=1", "repeats=2", "repeats=3"}
    budget = subprocess.run([sys.executable, str(bench / "noise_budget.py"), str(tmp_path / found["run"])],
                            capture_output=True, text=True, timeout=120)
    assert budget.returncode == 0 and json.loads(budget.stdout.splitlines()[-1])[0]["prompts"] == 2


def test_a_replay_of_an_auto_generation_takes_its_budgets_again():
    """A divergence's replay of a tree_budget=auto generation steps through the budgets it chose, on the graph
    decoder's executor (whose loop also reports the host's time a pass and, at the end, a step launched unread)."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=3)[0]
    auto = AutoBudget(buckets(15), cuda=False, timed_steps=1)
    first = decoder.generate_spec(ids, 30, set(), PhaseTimer(ids.device), "ddtree", 15, auto)
    replayed = _Budgets(auto.sizes, first.budgets)
    again = decoder.generate_spec(ids, 30, set(), PhaseTimer(ids.device), "ddtree", 15, replayed)
    assert again.tokens == first.tokens and again.budgets == first.budgets and len(set(first.budgets)) == 2
