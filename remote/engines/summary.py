"""An engine run's metrics, with the same names and definitions as our runner's (remote.metrics), from its phases.

Contract: `generations(level)` turns one level's Replies into Generations (token ids, TTFT and decode time from the
client's clock), so `aggregate`, `versus_ar` and `compare` compute tokens_per_s, tpot_ms, ttft_ms, the percentiles,
speedup_vs_ar and exact_match_vs_ar exactly as for our methods. `phase_metrics(phase, seed)` adds what the engine
itself says: tau and accept_rate_depth_<i> from its counters' deltas over exactly the measured requests, its own TTFT
and TPOT and the client's difference from them, inter-token latency percentiles, start time and peak memory; with
several concurrency levels, each level's throughput, TPOT and tau suffixed `_c<N>` (the first level's are also the
plain names). ENGINE_DEFINITIONS says what each added name means.
"""
from __future__ import annotations

from ..decoding.loop import Generation
from ..metrics import aggregate, compare, versus_ar
from ..stats import percentile, ratio_interval
from .measure import Level, Phase

ITL_PERCENTILES = (50, 90, 99)
ENGINE_DEFINITIONS = {
    "tau (engine arms)": "1 + accepted / drafts from the engine's own counters (vLLM: vllm:spec_decode_num_drafts, "
                         "_num_accepted_tokens), deltas over exactly the measured requests; bonus token included",
    "tau_ci_low (engine arms)": "concurrency 1: each request's own counter deltas (it is alone on the server) "
                                "resampled by prompt as ours; absent at higher concurrency",
    "accept_rate_depth_<i> (engine arms)": "vLLM's accepted_tokens_per_pos{position=i-1} / drafts: unconditional, "
                                           "as ours",
    "tpot_ms (engine arms)": "client side: (last token's arrival - first token's) / (tokens - 1), per request, "
                             "mean over prompts (as vLLM's benchmark); ttft_ms: request sent to first token",
    "itl_ms_p<q>": "engine arms: q-th percentile of the gaps between streamed chunks (a chunk may carry several "
                   "tokens under speculation)",
    "engine_tpot_ms": "the engine's own mean TPOT over the measured requests (vLLM's "
                      "vllm:request_time_per_output_token_seconds histogram, sum/count deltas)",
    "engine_ttft_ms": "the engine's own mean TTFT (vllm:time_to_first_token_seconds, sum/count deltas)",
    "client_minus_engine_tpot_ms": "tpot_ms - engine_tpot_ms: what the HTTP stream adds per token",
    "client_minus_engine_ttft_ms": "ttft_ms - engine_ttft_ms: what the request's way in and out adds",
    "server_start_s": "seconds from starting the engine's server to its first 200 on the ready path",
    "peak_mem_gb (engine arms)": "the server's process tree: GPU memory in use on the run's GPUs where "
                                 "nvidia-smi answers, else peak resident set size summed over its processes (GiB)",
    "<metric>_c<N>": "the metric at concurrency N (N streams at once); tokens_per_s_c<N> is all streams' tokens / "
                     "the level's wall time",
    "ours_tau": "our runner's DFlash tau on the same prompts with the same drafter, counted as the engine counts "
                "it: 1 + drafted tokens accepted / verify steps, those past max_new_tokens included (the engine's "
                "reference; the runner's own `tau` counts the tokens kept)",
    "ours_tau_ci_low": "95% interval of ours_tau, lower end (as tau_ci_low)",
    "ours_tau_ci_high": "upper end of the interval of ours_tau_ci_low",
    "ours_accept_rate_depth_<i>": "our runner's unconditional acceptance at depth i, same prompts and drafter",
    "engine_tau_ratio": "engine tau / ours_tau (engine_low_acceptance below ENGINE_LOW_RATIO)",
    "ours_exact_match": "temperature 0: fraction of prompts whose engine tokens equal our runner's DFlash tokens",
}


ENGINE_TAG_DEFINITIONS = {
    "engine": "the serving engine that decoded (vllm, sglang, openai)",
    "concurrency": "the concurrency levels measured, one after another (streams at once)",
}


def generations(level: Level) -> list[Generation]:
    return [Generation(tokens=list(r.token_ids) or [-1] * r.tokens,
                       times_ms={"ttft": 1000.0 * r.ttft_s, "decode": 1000.0 * r.decode_s}) for r in level.replies]


def level_metrics(level: Level, seed: int) -> dict[str, float]:
    gens = generations(level)
    out = aggregate(gens, None, 0, seed)      # timings; acceptance comes from the engine's counters below
    tokens = sum(len(g.tokens) for g in gens)
    if level.streams > 1:   # concurrent streams overlap: the level's throughput is all tokens over its wall time
        out["tokens_per_s"] = tokens / level.wall_s if level.wall_s > 0 else 0.0
    gaps = [b[0] - a[0] for r in level.replies for a, b in zip(r.chunks, r.chunks[1:])]
    if gaps:
        out.update({f"itl_ms_p{q}": 1000.0 * percentile(gaps, q) for q in ITL_PERCENTILES})
    acc = level.acceptance
    if acc is not None and acc.tau is not None:
        out["tau"] = acc.tau
        out["verify_steps"] = acc.drafts
        out.update({f"accept_rate_depth_{i + 1}": n / acc.drafts for i, n in sorted(acc.per_position.items())})
        own = [(a.drafts + a.accepted, a.drafts) for a in level.per_request if a is not None and a.drafts]
        interval = ratio_interval(*zip(*own), seed) if len(own) > 1 else None
        if interval:
            out["tau_ci_low"], out["tau_ci_high"] = interval
    return out


def phase_metrics(phase: Phase, seed: int, engine_latency) -> dict[str, float]:
    """The phase's metrics: the first level's under the plain names, every level's under `_c<N>` where several ran;
    `engine_latency(delta)`: the engine's own TTFT/TPOT from a level's /metrics delta."""
    out: dict[str, float] = {}
    for index, level in enumerate(phase.levels):
        metrics = {**level_metrics(level, seed), **engine_latency(level.delta)}
        for key in ("tpot", "ttft"):
            if f"engine_{key}_ms" in metrics and f"{key}_ms" in metrics:
                metrics[f"client_minus_engine_{key}_ms"] = metrics[f"{key}_ms"] - metrics[f"engine_{key}_ms"]
        if index == 0:
            out.update(metrics)
        if len(phase.levels) > 1:
            out.update({f"{k}_c{level.streams}": metrics[k] for k in ("tokens_per_s", "tpot_ms", "ttft_ms", "tau")
                        if k in metrics})
    out["server_start_s"] = phase.start_s
    out["peak_mem_gb"] = phase.peak_gpu_gb if phase.peak_gpu_gb is not None else phase.peak_rss_gb
    return out


def versus(phase: Phase, ar: Phase, seed: int) -> dict[str, float]:
    """speedup_vs_ar (with its interval) and, at temperature 0, exact_match_vs_ar, level by level against the same
    engine without speculation."""
    out: dict[str, float] = {}
    for index, (level, ar_level) in enumerate(zip(phase.levels, ar.levels)):
        gens, ar_gens = generations(level), generations(ar_level)
        metrics = {**versus_ar(gens, ar_gens, seed), **compare(gens, ar_gens)}
        if index == 0:
            out.update(metrics)
        if len(phase.levels) > 1 and "speedup_vs_ar" in metrics:
            out[f"speedup_vs_ar_c{level.streams}"] = metrics["speedup_vs_ar"]
    return out
