"""Does a rescored draft build better trees? DDTree's tau when the drafter's logits are tempered, or each depth's
log-probs penalised, before the best-first tree is built (a calibration check of the drafter).

    python bench/bench_tree_scoring.py --model remote/assets/models/demo-qwen3_5 \
        --drafter remote/assets/models/demo-qwen3_5-dflash --budget 15 --num-prompts 24 \
        --temperatures 0.7,1,1.4,2 --depth-penalties 0,-0.1,-0.3

Runs on the CPU in float32, eagerly (tau does not depend on the device; a GPU's graphed step builds its tree with
remote.kernels.tree_search, which this does not rescore). Each variant rescales the draft's top-k log-probs in
remote.kernels.tree_search.torch_top_k, the torch path's: log_softmax(logits / temperature) + penalty x depth, so a
negative penalty makes bushier trees. Verification is untouched, so every variant is lossless and only tau moves.
Prints one JSON line per variant (tau, steps, seconds); the last line is all of them as compact JSON.
On the demo hybrid (dev machine, 2026-12-04, `--budget 15 --num-prompts 24 --temperatures 0.7,1,1.4,2` and
`--depth-penalties -0.3,-0.1`) the untempered, unpenalised product of marginals built the best trees: tau 3.256
against 2.655-3.229 (docs/performance-history.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from remote.kernels import tree_search  # noqa: E402
from remote.runner import Run  # noqa: E402
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec  # noqa: E402


@contextmanager
def rescored(temperature: float, penalty: float):
    """tree_search.torch_top_k with the draft tempered and each depth's log-probs penalised."""
    plain = tree_search.torch_top_k

    def top_k(logits: torch.Tensor, k: int):
        lp, ids = torch.topk(torch.log_softmax(logits.float() / temperature, dim=-1), k, dim=-1)
        return lp + penalty * torch.arange(1, lp.shape[0] + 1, device=lp.device)[:, None], ids

    tree_search.torch_top_k = top_k
    try:
        yield
    finally:
        tree_search.torch_top_k = plain


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--drafter", required=True)
    p.add_argument("--dataset", default="humaneval")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--budget", type=int, default=15)
    p.add_argument("--temperatures", default="1")
    p.add_argument("--depth-penalties", default="0", help="added to depth d's log-probs x d; <= 0 (log-probs stay "
                                                          "<= 0, as the search needs)")
    args = p.parse_args(argv)
    penalties = [float(x) for x in args.depth_penalties.split(",")]
    if any(x > 0 for x in penalties):
        raise SystemExit(f"--depth-penalties: each <= 0 (a positive one makes log-probs > 0); "
                         f"got {args.depth_penalties}")
    spec = RunSpec(run_id="scoring", seed=0, device="cpu", model=ModelSpec(path=args.model, dtype="float32"),
                   drafter=DrafterSpec(path=args.drafter),
                   decoding=DecodingSpec(method="ddtree", tree_budget=args.budget, max_new_tokens=args.max_new_tokens,
                                         temperature=0.0, warmup=0, cuda_graphs=False, compile_drafter=False),
                   dataset=DatasetSpec(name=args.dataset, num_prompts=args.num_prompts))
    run, rows = Run(spec), []
    for penalty in penalties:
        for temperature in (float(x) for x in args.temperatures.split(",")):
            start = time.perf_counter()
            with rescored(temperature, penalty):
                steps = [n for i in range(len(run.inputs)) for n in run.generate("ddtree", i).committed]
            rows.append({"budget": args.budget, "temperature": temperature, "depth_penalty": penalty,
                         "tau": sum(steps) / len(steps), "steps": len(steps),
                         "seconds": round(time.perf_counter() - start, 1)})
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps(rows, separators=(",", ":")))
    return rows


if __name__ == "__main__":
    main()
