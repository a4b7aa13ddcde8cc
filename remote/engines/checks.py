"""The checks an engine arm's run makes of the engine: against our runner's DFlash with the same drafter on the same
prompts (`reference`, `low_acceptance`), and against the engine's own AR (`not_lossless`).

Contract: `reference(spec)` decodes the run's prompts with our runner's DFlash (the engine's drafter, the run's
target, dtype and max_new_tokens; warm-up and AR skipped) and returns its tau and unconditional acceptance per depth
as `ours_*` metrics. `low_acceptance(metrics)` returns the warning line when the engine's tau is below
ENGINE_LOW_RATIO of ours; `not_lossless(method, gens, ar_gens, dtype)` the line when, at temperature 0, the engine's
speculative tokens differ from its own AR's on any prompt. Both lines are what the failure catalog's
engine_low_acceptance / engine_not_lossless rows match. Each prints nothing itself.
"""
from __future__ import annotations

import dataclasses

from ..metrics import aggregate, first_divergence
from ..spec import Method, RunSpec
from ..stats import ratio_interval

# Below this fraction of our tau the engine is flagged. Both decode the same prompts greedily with the same drafter
# weights, so taus that differ by more than a few percent differ in how the drafter is fed, not by chance:
# demo-qwen3 in float32 on this 2-core CPU: vLLM 0.32 tau 2.45 against ours 2.5 on 6 prompts (ratio ~0.98);
# the hybrid demo pair with prefix caching off: 1.13 against 3.9 (0.29).
ENGINE_LOW_RATIO = 0.9
REFERENCE = "dflash (ours)"    # the `method` of the reference's prompt events


def reference(spec: RunSpec, engine_tokens: list[list[int]], emit) -> dict[str, float]:
    """Our runner's DFlash on the same prompts: ours_tau, ours_tau_ci_low/high, ours_accept_rate_depth_<i> and, at
    temperature 0, the fraction of prompts on which the engine's tokens equal ours (ours_exact_match); each
    prompt's tau goes to `emit(index, tau)` as it ends (tau None for a prompt done at its first token)."""
    from ..runner import Run

    ours = dataclasses.replace(spec, engine=None, decoding=dataclasses.replace(
        spec.decoding, method=Method.DFLASH.value, baseline="none", warmup=0, repeats=1))
    run = Run(ours)
    gens, counts = [], []
    for index in range(len(run.inputs)):     # each prompt said as it ends: the stall watch hears a slow reference
        gens.append(run.generate(Method.DFLASH, index))
        counts.append(as_engines_count(gens[-1]))
        kept, steps = counts[-1]
        emit(index, kept / steps if steps else None)
    metrics = aggregate(gens, None, run.drafter.block_size - 1, spec.seed)
    out = {f"ours_{k}": v for k, v in metrics.items() if k.startswith("accept_rate_depth_")}
    prompts = [p for p in counts if p[1]]
    if prompts:
        out["ours_tau"] = sum(k for k, _ in prompts) / sum(s for _, s in prompts)
        interval = ratio_interval(*map(list, zip(*prompts)), spec.seed)
        if interval:
            out["ours_tau_ci_low"], out["ours_tau_ci_high"] = interval
    if spec.decoding.temperature == 0:
        out["ours_exact_match"] = sum(g.tokens == t for g, t in zip(gens, engine_tokens)) / len(gens)
    return out


def as_engines_count(gen) -> tuple[int, int]:
    """A generation's (1 + drafted tokens accepted) summed over its verify steps, and its verify steps: tau as an
    engine counts it, tokens accepted past max_new_tokens included (vLLM counts a step's accepted tokens before the
    request's trim to max_tokens; our runner's `tau` counts the tokens kept). On demo-qwen3, 8 prompts x 64 tokens,
    vLLM 0.32 drafting exactly our drafts counted 2.784 where our `tau` read 2.598 (2026-12-07)."""
    return len(gen.accepted) + sum(gen.accepted), len(gen.accepted)


def low_acceptance(method: str, metrics: dict[str, float]) -> str | None:
    """The warning line (None when the engine's tau is within ENGINE_LOW_RATIO of ours); `engine_tau_ratio` is
    added to `metrics`. `from_depth`: the first depth whose acceptance is below ENGINE_LOW_RATIO of ours, where the
    engine starts to fall behind (1: the drafter's features; deeper: the block's later positions)."""
    tau, ours = metrics.get("tau"), metrics.get("ours_tau")
    if tau is None or not ours:
        return None
    metrics["engine_tau_ratio"] = tau / ours
    if tau >= ENGINE_LOW_RATIO * ours:
        return None
    depths = sorted(int(k.rsplit("_", 1)[1]) for k in metrics if k.startswith("ours_accept_rate_depth_"))
    rates = [(d, metrics.get(f"accept_rate_depth_{d}", 0.0), metrics[f"ours_accept_rate_depth_{d}"]) for d in depths]
    behind = next((d for d, engine, own in rates if engine < ENGINE_LOW_RATIO * own), 0)
    per = " ".join(f"{d}:{engine:.2f}/{own:.2f}" for d, engine, own in rates[:8])
    return (f"ENGINE LOW ACCEPTANCE: method={method} tau={tau:.3f} ours={ours:.3f} ratio={tau / ours:.2f} "
            f"from_depth={behind} per_depth(engine/ours)={per}")


def not_lossless(method: str, gens, ar_gens, dtype: str) -> str | None:
    diverged = [(i, first_divergence(g.tokens, a.tokens)) for i, (g, a) in enumerate(zip(gens, ar_gens))]
    diverged = [(i, p) for i, p in diverged if p is not None]
    if not diverged:
        return None
    where = " ".join(f"{i}@{p}" for i, p in diverged[:8])
    return (f"ENGINE NOT LOSSLESS: method={method} prompts={len(diverged)}/{len(gens)} dtype={dtype} "
            f"first_divergence(prompt@token)={where}")
