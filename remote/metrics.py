"""Per-prompt and aggregate metrics, and what each one means (`DEFINITIONS`, copied into results.json).

Contract: `prompt_metrics(gen)` -> flat {name: float} for one prompt; `aggregate(gens, peak_mem_gb, depth)` ->
flat {name: float} pooled over prompts; `compare(gens, ar_gens)` -> exact match / first divergence vs AR.
Names follow DESIGN.md (interface): tau, tau_prompt_mean, accept_rate_depth_<i>, tokens_per_s, tpot_ms,
ttft_ms, speedup_vs_ar, draft_ms, tree_build_ms, verify_ms, commit_ms, peak_mem_gb, exact_match_vs_ar,
first_divergence_mean; AR baseline figures carry an `ar_` prefix.
"""
from __future__ import annotations

from statistics import mean

from .decoding.loop import Generation
from .timing import PHASES

DEFINITIONS = {
    "tau": "pooled mean acceptance length: committed tokens / verify steps over all prompts, bonus token "
           "included (capped at max_new_tokens / stop token); the prefill token is not counted",
    "tau_prompt_mean": "mean over prompts of each prompt's committed tokens / verify steps (DFlash/DDTree papers)",
    "accept_rate_depth_<i>": "unconditional: fraction of verify steps that accepted at least i drafted tokens",
    "tokens_per_s": "end to end: generated tokens / (prefill + decode) wall time, pooled over prompts",
    "tpot_ms": "decode only: mean over prompts of decode time / tokens generated after the first one; decode "
               "time starts after the first token and includes the drafter's first pass over the prompt; it ends "
               "when the step that produced the last token ended (a step queued ahead of a stop token is not in it)",
    "ttft_ms": "mean over prompts of the time to the first token (target prefill + first token choice)",
    "speedup_vs_ar": "ar_tpot_ms / tpot_ms, AR run in the same process on the same prompts",
    "draft_ms": "drafter forward + draft logits, per verify step (pooled mean); graphed runs (decode_path "
                "cuda_graph): GPU time of this phase in one replayed step (remote.decoding.phase_split), likewise "
                "below",
    "tree_build_ms": "tree (ddtree) or chain (dflash) construction from draft logits, per verify step",
    "verify_ms": "target forward over the tree/chain + choosing the target token at every node, per verify step",
    "commit_ms": "tree walk + KV compaction + drafter context selection, per verify step",
    "forward_ms": "graphed AR: GPU time of one replayed decoding step (forward + argmax)",
    "peak_mem_gb": "CUDA: max memory allocated during the method (GiB, summed over devices); "
                   "CPU: peak resident set size of the process so far (GiB)",
    "peak_mem_gb_gpu<i>": "several visible GPUs: max memory allocated on GPU i (CUDA_VISIBLE_DEVICES order) "
                          "during the method (GiB)",
    "exact_match_vs_ar": "temperature 0 only: fraction of prompts whose generated token ids equal AR's",
    "first_divergence_mean": "temperature 0 only: mean index of the first differing token over prompts that "
                             "differ from AR (absent when none differs)",
    "new_tokens_mean": "mean generated tokens per prompt",
    "verify_steps": "total verify steps over all prompts",
    "num_prompts": "prompts decoded",
    "ar_<metric>": "the same metric for the AR baseline of this run",
}


def prompt_metrics(gen: Generation) -> dict[str, float]:
    n, steps, t = len(gen.tokens), len(gen.committed), gen.times_ms
    out = {"new_tokens": float(n), "ttft_ms": t.get("ttft", 0.0), "decode_ms": t.get("decode", 0.0)}
    if n > 1:
        out["tpot_ms"] = out["decode_ms"] / (n - 1)
    total_s = (out["ttft_ms"] + out["decode_ms"]) / 1000.0
    out["tokens_per_s"] = n / total_s if total_s > 0 else 0.0
    if steps:
        out["verify_steps"] = float(steps)
        out["tau"] = sum(gen.committed) / steps
        for phase in PHASES:
            if phase in t:          # a step replayed as one CUDA graph has no inner phases
                out[f"{phase}_ms"] = t[phase] / steps
    return out


def aggregate(gens: list[Generation], peak_mem_gb: list[float] | None, depth: int) -> dict[str, float]:
    """`peak_mem_gb`: per visible GPU (or one figure on the CPU)."""
    per = [prompt_metrics(g) for g in gens]
    tokens = sum(len(g.tokens) for g in gens)
    wall_s = sum(p["ttft_ms"] + p["decode_ms"] for p in per) / 1000.0
    out = {"num_prompts": float(len(gens)), "new_tokens_mean": tokens / len(gens),
           "tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
           "ttft_ms": mean(p["ttft_ms"] for p in per)}
    tpots = [p["tpot_ms"] for p in per if "tpot_ms" in p]
    if tpots:
        out["tpot_ms"] = mean(tpots)
    if peak_mem_gb:
        out["peak_mem_gb"] = sum(peak_mem_gb)
        if len(peak_mem_gb) > 1:
            out.update({f"peak_mem_gb_gpu{i}": gb for i, gb in enumerate(peak_mem_gb)})
    steps = sum(len(g.committed) for g in gens)
    if steps:
        out["verify_steps"] = float(steps)
        out["tau"] = sum(sum(g.committed) for g in gens) / steps
        out["tau_prompt_mean"] = mean(p["tau"] for p in per if "tau" in p)
        accepted = [a for g in gens for a in g.accepted]
        for i in range(1, depth + 1):
            out[f"accept_rate_depth_{i}"] = sum(a >= i for a in accepted) / steps
        for phase in PHASES:
            if any(phase in g.times_ms for g in gens):
                out[f"{phase}_ms"] = sum(g.times_ms.get(phase, 0.0) for g in gens) / steps
    return out


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, or None when the sequences are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(gens: list[Generation], ar_gens: list[Generation]) -> dict[str, float]:
    divergences = [first_divergence(g.tokens, a.tokens) for g, a in zip(gens, ar_gens)]
    out = {"exact_match_vs_ar": sum(d is None for d in divergences) / len(divergences)}
    differing = [d for d in divergences if d is not None]
    if differing:
        out["first_divergence_mean"] = mean(differing)
    return out
