"""Acceptance: at temperature 1, DDTree's output distribution equals AR's. The exact AR distribution of the first
tokens is computed by enumeration; DDTree samples (seeded, independent) must fit it (chi-square, p > 0.01).
Three tokens are checked jointly as well: the third one is the first that can come out of a tree walk."""
from __future__ import annotations

import itertools

import pytest
import torch

from remote.decoding.loop import generate_spec
from remote.timing import PhaseTimer
from tests.runner_fixtures import tiny_drafter, tiny_model  # noqa: F401

stats = pytest.importorskip("scipy.stats")

SAMPLES = 2000
PROMPT = torch.tensor([[1, 2, 3, 4]])


@torch.inference_mode()
def _exact(model, temperature: float, length: int) -> dict[tuple, float]:
    """P(first `length` tokens) of AR sampling at `temperature`, by enumerating all continuations."""
    vocab = model.config.vocab_size
    seqs = list(itertools.product(range(vocab), repeat=length))
    ids = torch.cat([PROMPT.expand(len(seqs), -1), torch.tensor(seqs)], dim=1)
    logp = torch.log_softmax(model(ids).logits.double() / temperature, dim=-1)      # [S, P+L, V]
    p0 = PROMPT.shape[1] - 1
    out = {}
    for s, seq in enumerate(seqs):
        out[seq] = float(sum(logp[s, p0 + i, t] for i, t in enumerate(seq)).exp())
    return out


def _chi2(counts: dict[tuple, int], exact: dict[tuple, float], n: int) -> float:
    """Goodness of fit; cells expecting fewer than 5 samples are pooled into one."""
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for key, p in exact.items():
        if p * n >= 5:
            obs.append(counts.get(key, 0))
            exp.append(p * n)
        else:
            rest_o, rest_e = rest_o + counts.get(key, 0), rest_e + p * n
    obs.append(rest_o)
    exp.append(rest_e)
    assert len(obs) >= 8, "distribution too flat for a meaningful test"
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.fixture(scope="module")
def samples():
    model = tiny_model("narrow", initializer_range=0.3)
    drafter = tiny_drafter(model, block_size=4)
    from remote.models.backends import build_target
    target = build_target(model, drafter.target_layer_ids)
    timer = PhaseTimer(torch.device("cpu"))
    out, walked = [], 0
    for seed in range(SAMPLES):
        g = torch.Generator().manual_seed(seed)
        gen = generate_spec(target, drafter, model, PROMPT, 3, 1.0, g, set(), timer, "ddtree", 16)
        out.append(tuple(gen.tokens))
        walked += gen.accepted[0] > 0
    assert walked > SAMPLES // 10, "the tree walk must accept drafted tokens often for the test to mean anything"
    return model, out


@pytest.mark.parametrize("length", [2, 3])
def test_ddtree_matches_ar_distribution(samples, length):
    model, seqs = samples
    counts: dict[tuple, int] = {}
    for seq in seqs:
        counts[seq[:length]] = counts.get(seq[:length], 0) + 1
    p = _chi2(counts, _exact(model, 1.0, length), len(seqs))
    print(f"\nchi-square p (first {length} tokens, T=1, {len(seqs)} samples): {p:.3f}")
    assert p > 0.01


def test_chi_square_detects_a_different_distribution(samples):
    """Power check: the same samples do not fit AR at temperature 1.5."""
    model, seqs = samples
    counts: dict[tuple, int] = {}
    for seq in seqs:
        counts[seq[:2]] = counts.get(seq[:2], 0) + 1
    assert _chi2(counts, _exact(model, 1.5, 2), len(seqs)) < 0.01
