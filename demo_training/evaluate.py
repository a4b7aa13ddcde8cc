"""Acceptance of a saved pair at temperature 0, measured from disk with the runner's own code.

Contract: `open_pair(target_dir, drafter_dir, prompts_file, ...)` loads the pair exactly as a benchmark run would
(`remote.runner.Run` on a `RunSpec` with `model.path` / `drafter.path` and the held-out prompts as a `jsonl`
dataset: same loaders, pair check, tokenization, stop tokens). `simulated_taus(run, ...)` gives DFlash and DDTree
taus on every prompt by exact simulation (demo_training.simulate); `runner_check(run, ...)` decodes the first
prompts with the runner's own loop (`Run.generate`: AR, DFlash, DDTree at each budget), prompt by prompt until a
deadline, and reports its taus, the exact-match rate against AR and the simulation's taus on the same prompts.
Non-goal: speed figures (no warm-up; the benchmark itself measures speed).
"""
from __future__ import annotations

import time
from statistics import mean

from remote.metrics import aggregate, compare
from remote.runner import Run
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec

from .common import log
from .simulate import simulate_pair


def open_pair(target_dir: str, drafter_dir: str, prompts_file: str, *, num_prompts: int, max_new_tokens: int,
              device: str, dtype: str, seed: int, name: str) -> Run:
    spec = RunSpec(run_id=f"train-eval-{name}", model=ModelSpec(path=target_dir, dtype=dtype),
                   drafter=DrafterSpec(path=drafter_dir),
                   decoding=DecodingSpec(method="ddtree", max_new_tokens=max_new_tokens, temperature=0.0, warmup=0),
                   dataset=DatasetSpec(name="jsonl", path=prompts_file, num_prompts=num_prompts),
                   seed=seed, device=device)
    run = Run(spec)
    # The simulation feeds the model directly, so prompts go to its device once here (the targets move them
    # themselves).
    weight = run.model.get_input_embeddings().weight
    run.inputs = [ids.to(weight.device) for ids in run.inputs]
    return run


def simulated_taus(run: Run, budgets: list[int], name: str) -> dict:
    started = time.time()
    result = simulate_pair(run.model, run.drafter, run.inputs, max_new_tokens=run.spec.decoding.max_new_tokens,
                           budgets=budgets, stop_ids=run.stop_ids)
    summary = ", ".join(f"{m} {r['tau']:.2f}" for m, r in result.items())
    log(f"{name}: simulated tau on {len(run.inputs)} prompts x {run.spec.decoding.max_new_tokens} tokens: {summary} "
        f"({time.time() - started:.1f}s)")
    return {"num_prompts": len(run.inputs), "max_new_tokens": run.spec.decoding.max_new_tokens,
            "kernel_path": str(getattr(run.target, "kernel_path", "torch")), **result}


def _mean_known(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return round(mean(known), 3) if known else None


def runner_check(run: Run, budgets: list[int], max_prompts: int, deadline: float, simulated: dict,
                 name: str) -> dict:
    """Runner decoding of prompts 0.. (all methods per prompt) while time.time() < deadline."""
    methods = [("dflash", "dflash", None)] + [(f"ddtree{b}", "ddtree", b) for b in budgets]
    gens: dict[str, list] = {label: [] for label, _, _ in methods}
    ar = []
    started = time.time()
    for index in range(min(max_prompts, len(run.inputs))):
        if time.time() >= deadline:
            log(f"{name}: runner check stops at {index} prompts (time budget)")
            break
        ar.append(run.generate("ar", index))
        for label, method, budget in methods:
            if budget is not None:
                run.spec.decoding.tree_budget = budget        # Run.generate reads the budget from the spec
            gens[label].append(run.generate(method, index))
    done = len(ar)
    out: dict = {"num_prompts": done, "s": round(time.time() - started, 1)}
    if not done:
        return out
    depth = run.drafter.block_size - 1
    for label, _, _ in methods:
        metrics = {**aggregate(gens[label], None, depth), **compare(gens[label], ar)}
        out[label] = {"tau": round(metrics["tau"], 3), "tau_prompt_mean": round(metrics["tau_prompt_mean"], 3),
                      "sim_tau_prompt_mean": _mean_known(simulated.get(label, {}).get("per_prompt", [])[:done]),
                      "exact_match_vs_ar": round(metrics["exact_match_vs_ar"], 3)}
        if "first_divergence_mean" in metrics:
            out[label]["first_divergence_mean"] = round(metrics["first_divergence_mean"], 1)
    summary = ", ".join(f"{label} {out[label]['tau_prompt_mean']:.2f} (sim {out[label]['sim_tau_prompt_mean']}, "
                        f"exact {out[label]['exact_match_vs_ar']})" for label, _, _ in methods)
    log(f"{name}: runner on {done} prompts, tau per prompt: {summary} ({out['s']:.1f}s)")
    return out
