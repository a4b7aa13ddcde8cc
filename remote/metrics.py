"""Per-prompt and aggregate metrics, and what each one means (`DEFINITIONS`, copied into results.json).

Contract: `prompt_metrics(gen)` -> flat {name: float} for one prompt; `aggregate(gens, peak_mem_gb, depth)` ->
flat {name: float} pooled over prompts (and repeats: `gens` holds `repeats` whole passes over the prompts, pass by
pass, each in prompt order); `versus_ar(gens, ar_gens)` -> speedup with its interval and spread, paired by prompt;
`compare(gens, ar_gens)` -> exact match / first divergence vs AR.
Names follow DESIGN.md (interface): tau, tau_prompt_mean, accept_rate_depth_<i>, tokens_per_s, tpot_ms,
ttft_ms, speedup_vs_ar, draft_ms, tree_build_ms, verify_ms, commit_ms, peak_mem_gb, exact_match_vs_ar,
first_divergence_mean; AR baseline figures carry an `ar_` prefix. Intervals are 95% bootstraps over prompts
(remote.stats), seeded by the caller (the run's seed).
"""
from __future__ import annotations

from statistics import mean, stdev

from .decoding.auto_budget import PLAIN
from .decoding.loop import Generation
from .stats import percentile, ratio_interval
from .timing import PHASES

TPOT_PERCENTILES = (50, 90, 99)
REJECT_RANKS = 8                 # reject_target_rank_1 .. _8
REPEAT_SPREAD = ("tokens_per_s", "tpot_ms", "speedup_vs_ar")     # reported per repeat when repeats > 1

DEFINITIONS = {
    "tau": "pooled mean acceptance length: committed tokens / verify steps over all prompts, bonus token "
           "included (capped at max_new_tokens / stop token); the prefill token is not counted",
    "tau_prompt_mean": "mean over prompts of each prompt's committed tokens / verify steps (DFlash/DDTree papers)",
    "accept_rate_depth_<i>": "unconditional: fraction of verify steps that accepted at least i drafted tokens",
    "tokens_per_s": "end to end: generated tokens / (prefill + decode) wall time, pooled over prompts (and "
                    "repeats)",
    "tpot_ms": "decode only: mean over prompts (and repeats) of decode time / tokens generated after the first "
               "one; decode time starts after the first token and includes the drafter's first pass over the "
               "prompt; it ends when the step that produced the last token ended (a step queued ahead of a stop "
               "token is not in it)",
    "ttft_ms": "mean over prompts of the time to the first token (target prefill + first token choice)",
    "warmup_s": "wall time of the method's warm-up generations, before any timed one (s): its torch.compile "
                "compiles and CUDA graph captures fall here, and tree_budget=auto's calibration",
    "speedup_vs_ar": "ar_tpot_ms / tpot_ms, AR run in the same process on the same prompts",
    "speedup_vs_ar_ci_low": "95% percentile-bootstrap interval of speedup_vs_ar, lower end: prompts resampled with "
                            "replacement (10000 resamples, seeded by the run's seed), each drawn with its own AR "
                            "and method TPOT (paired); absent with fewer than two prompts",
    "speedup_vs_ar_ci_high": "upper end of the interval of speedup_vs_ar_ci_low",
    "tau_ci_low": "95% percentile-bootstrap interval of tau (pooled committed tokens / verify steps over the "
                  "resampled prompts), lower end; resampling as for speedup_vs_ar_ci_low",
    "tau_ci_high": "upper end of the interval of tau_ci_low",
    **{f"tpot_ms_p{q}": f"{q}th percentile of the per-generation TPOT (decode time / tokens after the first) over "
                        f"prompts and repeats, linear interpolation" for q in TPOT_PERCENTILES},
    **{f"{name}_repeat_{kind}": f"repeats > 1: {what} of {name} computed over each repeat (one timed pass over "
                                f"every prompt) on its own"
       for name in REPEAT_SPREAD for kind, what in (("std", "sample standard deviation"), ("min", "smallest"),
                                                    ("max", "largest"))},
    "accept_rate_cond_depth_<i>": "conditional: of the verify steps whose accepted path reached depth i-1, the "
                                  "fraction that reached depth i (EAGLE's n-alpha; for trees, depth along the "
                                  "accepted path)",
    "accepted_depth_hist_<d>": "fraction of verify steps whose accepted path has depth d (d drafted tokens "
                               "accepted, d = 0 .. block_size - 1)",
    "reject_target_rank_<k>": "of the verify steps that missed, the fraction where the target's token at the "
                              "first missed depth was the drafter's rank-k candidate there (k = 1..8; rank 1 = "
                              "the drafter's top token: 1 + the number of tokens it scored strictly higher); the "
                              "rest had rank > 8. A step misses at the first depth where the target's token was "
                              "not the drafter's top token on the walk's path: the walk took a sibling there "
                              "(reject_in_tree), or it ended there (also where the tree held no node there: then "
                              "the rank can be 1); a step that accepted the top token at every drafted depth has "
                              "no miss",
    "reject_in_tree": "of the verify steps that missed, the fraction where the tree held the target's token at the "
                      "first missed depth: a sibling of the drafter's top token that the walk took (0 for dflash's "
                      "chain)",
    "nodes_per_token": "rows of the verify forwards (the root and every drafted node) per committed token",
    "draft_ms": "drafter forward + draft logits, per verify step (pooled mean); graphed runs (decode_path "
                "cuda_graph): GPU time of this phase in one replayed step (remote.decoding.phase_split), likewise "
                "below",
    "tree_build_ms": "tree (ddtree) or chain (dflash) construction from draft logits, per verify step",
    "verify_ms": "target forward over the tree/chain + choosing the target token at every node, per verify step",
    "commit_ms": "tree walk + KV compaction + drafter context selection (+ the step's tree statistics, see "
                 "reject_in_tree), per verify step",
    "forward_ms": "graphed AR: GPU time of one replayed decoding step (forward + argmax)",
    "peak_mem_gb": "CUDA: max memory allocated during the method (GiB, summed over devices); "
                   "CPU: peak resident set size of the process so far (GiB)",
    "peak_mem_gb_gpu<i>": "several visible GPUs: max memory allocated on GPU i (CUDA_VISIBLE_DEVICES order) "
                          "during the method (GiB)",
    "exact_match_vs_ar": "temperature 0 only: fraction of prompts whose generated token ids equal AR's",
    "first_divergence_mean": "temperature 0 only: mean index of the first differing token over prompts that "
                             "differ from AR (absent when none differs)",
    "auto_budget_mean": "tree_budget=auto: mean node budget chosen per step, an AR step's 0 "
                        "(remote.decoding.auto_budget)",
    "auto_budget_share_<b>": "tree_budget=auto: fraction of steps whose tree had budget b (the histogram of the "
                             "budgets chosen)",
    "auto_ar_share": "tree_budget=auto: fraction of steps it made plain AR steps (no draft, no tree: where no tree "
                     "paid for its draft and verify at the run's rate); tau and the per-depth figures count "
                     "verify steps only",
    "auto_predicted_accept_mean": "tree_budget=auto: mean over verify steps of the drafted tokens the chosen tree "
                                  "was expected to accept, under the drafter's surrogate (a node's path holds "
                                  "with the product of its tokens' drafter probabilities)",
    "auto_accepted_mean": "tree_budget=auto: mean drafted tokens accepted per verify step (tau - 1, before the "
                          "max_new_tokens cap): what auto_predicted_accept_mean predicted",
    "auto_calibration": "tree_budget=auto: auto_accepted_mean / auto_predicted_accept_mean (1 = calibrated; "
                        "below 1 the surrogate is overconfident)",
    "auto_cost_ms_<b>": "tree_budget=auto: the cost model at the run's end, the median device time of budget b's "
                        "last warm steps in rounds (each budget twice in a row, the second timed; up to 32, warm-up "
                        "included; graphed: a replayed step; eager: the whole step)",
    "auto_cost_ms_ar": "tree_budget=auto: an AR step's cost in the same cost model (timed as the budgets' are)",
    "auto_cost_explained": "tree_budget=auto: the steps read, each at its budget's cost in the model at the run's "
                           "end, over the decode time they took (1: the model accounts for all of it; below 1: time "
                           "outside its steps' costs, as the drafter's passes over AR steps' features, an idle "
                           "device, or steps slower than their median)",
    "auto_host_ms": "tree_budget=auto, graphed steps: the host's own time a pass of the decode loop (launch, read, "
                    "bookkeeping; its waits for the device left out), the median of its last 64 passes at the run's "
                    "end; a step whose device time is shorter counts at this, since host and device overlap",
    "draft_vocab": "tokens the drafter's head ranks: the target's vocabulary, or a reduced draft vocabulary (a "
                   "speculators checkpoint's, or drafter.draft_vocab's most frequent in drafter.calibration; the "
                   "draft_vocab_source tag says which)",
    "ar_outside_draft_vocab": "share of AR's generated tokens outside the draft vocabulary: tokens the drafter "
                              "could never have drafted (0 with the target's whole vocabulary)",
    "new_tokens_mean": "mean generated tokens per prompt",
    "verify_steps": "total verify steps over all prompts (and repeats)",
    "num_prompts": "prompts decoded: the param num_prompts, or all the dataset has when it has fewer",
    "ar_<metric>": "the same metric for the AR baseline of this run",
    "timing_noise": "how much the run's own timings wander (remote.noise): the larger of timing_noise_prompts and "
                    "timing_noise_repeats; above 0.10 the run's fairness is `noisy` and its speedup not to be "
                    "trusted",
    "timing_noise_prompts": "coefficient of variation (sd / mean) across prompts of AR's time per token (each prompt "
                            "averaged over its repeats): AR does the same work a token on every prompt, so this is "
                            "the machine's noise",
    "timing_noise_repeats": "repeats > 1: root mean square over prompts of each prompt's coefficient of variation of "
                            "the reference's time per token across its repeats (the same tokens each time)",
    "host_load_before": "the host's 1-minute load average per CPU core just before the timed passes (1 = every "
                        "core busy)",
    "host_load_after": "the same, just after the timed passes",
    "gpu_other_processes_before": "CUDA: compute processes of others on the run's GPUs (nvidia-smi) before the "
                                  "timed passes",
    "gpu_other_processes_after": "the same, after the timed passes",
    "gpu_sm_clock_mhz_before": "CUDA: the lowest SM clock of the run's GPUs (MHz, nvidia-smi) before the timed passes",
    "gpu_sm_clock_mhz_after": "the same, after the timed passes",
    "gpu_slowdown_before": "CUDA: 1 if a run's GPU was slowing its clocks (thermal or hardware slowdown, power "
                           "brake) before the timed passes, else 0",
    "gpu_slowdown_after": "the same, after the timed passes",
    "divergence_near_tie_share": "temperature 0: of the first repeat's first divergences from AR whose replay "
                                 "reproduced them, the fraction that are near-ties: AR's two tokens there within 4 "
                                 "units in the last place of the dtype, in AR's forward and in the method's "
                                 "(remote.divergence); the others are not_lossless warnings",
    "divergence_gap_max": "the worst such divergence: the larger of its two gaps (logit of AR's token minus the "
                          "method's in AR's forward, the reverse in the method's verify), in logits",
    "divergence_gap_max_ulps": "divergence_gap_max in units in the last place of the dtype at the logits' magnitude",
    "divergence_unclassified": "first divergences that could not be classified (a sequence ended there, or the "
                               "replay did not give the timed tokens)",
}

# What the runner's tags (results.json's `environment`) mean; the orchestrator's own are in
# orchestrator.tracking.run_note.
TAG_DEFINITIONS = {
    "torch_version": "torch on the host", "transformers_version": "transformers on the host",
    "python_version": "the host's Python", "device": "where the run decoded (cpu, cuda)",
    "gpu_name": "the GPU's name (none on the CPU)", "gpu_count": "GPUs visible to the runner",
    "dtype": "the target's dtype", "attn_implementation": "the target's attention implementation",
    "kernel_path": "which kernels the target's speculative steps used (torch, or the Triton/CUDA paths)",
    "decode_path": "how the steps ran: cuda_graph (+compile, +compiled_drafter) or eager (with why)",
    "device_split": "which layers went to which GPU under model.device_map (empty on one device)",
    "target_class": "the target wrapper that verified trees (AttentionTarget, HybridTarget; none for AR)",
    "model_params": "parameters of the target", "drafter_params": "parameters of the drafter (0 without one)",
    "block_size": "the drafter's block size (0 without one)",
    "cuda_visible_devices": "the GPUs the launcher gave the run (CUDA_VISIBLE_DEVICES)",
    "draft_vocab_source": "where the drafter's head came from: the target's (all its tokens), a checkpoint's reduced "
                          "vocabulary, or drafter.draft_vocab's N most frequent tokens of the calibration text",
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
        out["committed_tokens"] = float(sum(gen.committed))
        out["tau"] = sum(gen.committed) / steps
        if gen.stats:
            out["nodes_verified"] = float(sum(s.nodes for s in gen.stats))
        for phase in PHASES:
            if phase in t:          # a step replayed as one CUDA graph has no inner phases
                out[f"{phase}_ms"] = t[phase] / steps
    return out


def by_repeat(gens: list, repeats: int) -> list[list]:
    """`gens` (repeat by repeat, each in prompt order) split into its repeats."""
    if repeats < 1 or len(gens) % repeats:
        raise ValueError(f"{len(gens)} generations are not {repeats} whole repeats")
    n = len(gens) // repeats
    return [gens[r * n:(r + 1) * n] for r in range(repeats)]


def by_prompt(gens: list, repeats: int) -> list[list]:
    """`gens` grouped per prompt: each prompt's generations over the repeats."""
    return [list(group) for group in zip(*by_repeat(gens, repeats))]


def aggregate(gens: list[Generation], peak_mem_gb: list[float] | None, depth: int, seed: int = 0,
              repeats: int = 1) -> dict[str, float]:
    """`peak_mem_gb`: per visible GPU (or one figure on the CPU); `depth`: the deepest draft (block_size - 1)."""
    per = [prompt_metrics(g) for g in gens]
    out = {"num_prompts": float(len(gens) // repeats), **_speed(gens, per)}
    tpots = [p["tpot_ms"] for p in per if "tpot_ms" in p]
    if tpots:
        out.update({f"tpot_ms_p{q}": percentile(tpots, q) for q in TPOT_PERCENTILES})
    if peak_mem_gb:
        out["peak_mem_gb"] = sum(peak_mem_gb)
        if len(peak_mem_gb) > 1:
            out.update({f"peak_mem_gb_gpu{i}": gb for i, gb in enumerate(peak_mem_gb)})
    if repeats > 1:
        passes = [_speed(run, [prompt_metrics(g) for g in run]) for run in by_repeat(gens, repeats)]
        out.update(_spread({k: [p[k] for p in passes if k in p] for k in ("tokens_per_s", "tpot_ms")}))
    steps = sum(len(g.committed) for g in gens)
    if steps:
        out["verify_steps"] = float(steps)
        out["tau"] = sum(sum(g.committed) for g in gens) / steps
        out["tau_prompt_mean"] = mean(p["tau"] for p in per if "tau" in p)
        prompts = [(sum(sum(g.committed) for g in group), sum(len(g.committed) for g in group))
                   for group in by_prompt(gens, repeats)]
        prompts = [p for p in prompts if p[1]]             # a prompt done at its first token has no steps
        interval = ratio_interval(*zip(*prompts), seed) if len(prompts) > 1 else None
        if interval:
            out["tau_ci_low"], out["tau_ci_high"] = interval
        out.update(acceptance([a for g in gens for a in g.accepted], depth))
        out.update(tree_metrics(gens))
        for phase in PHASES:
            if any(phase in g.times_ms for g in gens):
                out[f"{phase}_ms"] = sum(g.times_ms.get(phase, 0.0) for g in gens) / steps
    return out


def _speed(gens: list[Generation], per: list[dict]) -> dict[str, float]:
    """Pooled tokens/s, mean TTFT and TPOT of `gens` (their `prompt_metrics` in `per`)."""
    tokens = sum(len(g.tokens) for g in gens)
    wall_s = sum(p["ttft_ms"] + p["decode_ms"] for p in per) / 1000.0
    out = {"new_tokens_mean": tokens / len(gens), "tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
           "ttft_ms": mean(p["ttft_ms"] for p in per)}
    tpots = [p["tpot_ms"] for p in per if "tpot_ms" in p]
    if tpots:
        out["tpot_ms"] = mean(tpots)
    return out


def _spread(values: dict[str, list[float]]) -> dict[str, float]:
    out = {}
    for name, xs in values.items():
        if len(xs) > 1:
            out.update({f"{name}_repeat_std": stdev(xs), f"{name}_repeat_min": min(xs),
                        f"{name}_repeat_max": max(xs)})
    return out


def acceptance(accepted: list[int], depth: int) -> dict[str, float]:
    """Per-depth acceptance of verify steps that accepted `accepted` drafted tokens each: unconditional,
    conditional on reaching the depth above, and the histogram of accepted depths."""
    steps = len(accepted)
    out = {}
    for i in range(1, depth + 1):
        out[f"accept_rate_depth_{i}"] = sum(a >= i for a in accepted) / steps
        reached = sum(a >= i - 1 for a in accepted)
        if reached:
            out[f"accept_rate_cond_depth_{i}"] = sum(a >= i for a in accepted) / reached
    for d in range(depth + 1):
        out[f"accepted_depth_hist_{d}"] = sum(a == d for a in accepted) / steps
    return out


def tree_metrics(gens: list[Generation]) -> dict[str, float]:
    """From the steps' `StepStats`, where the decoder read them (remote.decoding.loop.miss_stats)."""
    read = [g for g in gens if g.stats]
    if not read:
        return {}
    stats = [s for g in read for s in g.stats]
    out = {"nodes_per_token": sum(s.nodes for s in stats) / sum(sum(g.committed) for g in read)}
    missed = [s for s in stats if s.miss_depth]
    if missed:
        out.update({f"reject_target_rank_{k}": sum(s.miss_rank == k for s in missed) / len(missed)
                    for k in range(1, REJECT_RANKS + 1)})
        out["reject_in_tree"] = sum(s.in_tree for s in missed) / len(missed)
    return out


def auto_budget_metrics(gens: list[Generation], auto) -> dict[str, float]:
    """tree_budget=auto's choices (gens' budgets and predictions) and cost model (`auto`: an AutoBudget)."""
    budgets = [b for g in gens for b in g.budgets]
    out = {f"auto_cost_ms_{'ar' if b == PLAIN else b}": ms for b, ms in (auto.costs or {}).items()}
    if auto.host_ms is not None:
        out["auto_host_ms"] = auto.host_ms
    if not budgets:
        return out
    decode = sum(g.times_ms.get("decode", 0.0) for g in gens)
    if auto.costs and decode > 0:
        out["auto_cost_explained"] = sum(auto.cost(b) for b in budgets) / decode
    trees = [p for g in gens for p in g.predicted]             # verify steps only: AR steps have no tree
    predicted = mean(trees) if trees else None
    accepted = mean(a for g in gens for a in g.accepted) if trees else None
    out.update({"auto_budget_mean": mean(max(b, 0) for b in budgets),
                "auto_ar_share": budgets.count(PLAIN) / len(budgets),
                **{f"auto_budget_share_{b}": budgets.count(b) / len(budgets) for b in auto.sizes}})
    if predicted is not None:
        out.update(auto_predicted_accept_mean=predicted, auto_accepted_mean=accepted)
    if predicted:
        out["auto_calibration"] = accepted / predicted
    return out


def versus_ar(gens: list[Generation], ar_gens: list[Generation], seed: int = 0, repeats: int = 1) -> dict[str, float]:
    """speedup_vs_ar = AR's mean TPOT / the method's, its interval paired by prompt (each prompt's TPOT averaged
    over its repeats), and its spread over repeats. Both lists hold the same prompts in the same order."""
    ar, method = mean_tpot(ar_gens), mean_tpot(gens)
    if ar is None or method is None:
        return {}
    out = {"speedup_vs_ar": ar / method}
    paired = [(a, m) for a, m in zip(*(map(mean_tpot, by_prompt(x, repeats)) for x in (ar_gens, gens)))
              if a is not None and m is not None]
    interval = ratio_interval(*zip(*paired), seed) if len(paired) > 1 else None
    if interval:
        out["speedup_vs_ar_ci_low"], out["speedup_vs_ar_ci_high"] = interval
    if repeats > 1:
        passes = zip(*(map(mean_tpot, by_repeat(x, repeats)) for x in (ar_gens, gens)))
        out.update(_spread({"speedup_vs_ar": [a / m for a, m in passes if a is not None and m is not None]}))
    return out


def mean_tpot(gens: list[Generation]) -> float | None:
    """Mean TPOT (ms) over the generations that have one (more than one token), None if none has."""
    tpots = [prompt_metrics(g)["tpot_ms"] for g in gens if len(g.tokens) > 1]
    return mean(tpots) if tpots else None


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
