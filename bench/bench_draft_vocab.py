"""What a reduced draft head costs in tau, and how much of AR's output falls outside it, on a model pair.

    python bench/bench_draft_vocab.py --pair demo-qwen3 --heads 0,2048,3072 --num-prompts 24 --max-new-tokens 128 \
        --device cpu --dtype float32 [--in-domain 24:80]

One process: AR on the dataset's first --num-prompts prompts (HumanEval, as the GPU figures), then per head (0: the
drafter's own; N: the N tokens most frequent in --calibration, remote.calibration) the share of AR's tokens
outside it and the tau of DFlash and of DDTree at --budgets, every method's tokens checked equal to AR's (T=0, so a
float32 run is exact). `--in-domain a:b` also counts each head on prompts a..b-1 and AR's continuations of them
(text of the benchmark's own kind that the run does not evaluate) and gives the share of the evaluated AR tokens
outside that: what the best calibration text could reach. Tau does not depend on the device's speed: the CPU gives
it as the GPU does, up to bf16 near-ties. The last stdout line is compact JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from bench_methods import draft_heads, use_head  # noqa: E402
from remote.assets import resolve  # noqa: E402
from remote.calibration import outside_share  # noqa: E402
from remote.models.draft_vocab import count_tokens, most_frequent  # noqa: E402
from remote.runner import Run  # noqa: E402
from remote.spec import CALIBRATION, DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec  # noqa: E402


def make_run(args, prompts: int) -> Run:
    models = resolve("assets:models")
    return Run(RunSpec(run_id="bench", device=args.device,
                       model=ModelSpec(path=f"{models}/{args.pair}", dtype=args.dtype),
                       drafter=DrafterSpec(path=f"{models}/{args.pair}-dflash"),
                       decoding=DecodingSpec(method="ddtree", max_new_tokens=args.max_new_tokens, warmup=0),
                       dataset=DatasetSpec(name=args.dataset, num_prompts=prompts, chat_template=True)))


def in_domain(run: Run, ar: list[list[int]], heads: list[int], span: str) -> dict:
    """Share of the evaluated AR tokens outside each head counted on prompts a..b-1 and AR's continuations."""
    first, last = (int(x) for x in span.split(":"))
    vocab = run.model.get_output_embeddings().weight.shape[0]
    text = "\n".join(run.prompts[first:last])
    counts = count_tokens(run.tokenizer, text, vocab) + torch.bincount(torch.tensor(
        [t for i in range(first, last) for t in run.generate("ar", i).tokens]), minlength=vocab)
    evaluated = torch.bincount(torch.tensor([t for g in ar for t in g]), minlength=vocab)
    return {f"in_domain_outside_{n}": round(1 - float(evaluated[most_frequent(counts, n)].sum() / evaluated.sum()), 4)
            for n in heads if n}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pair", default="demo-qwen3", help="a shipped pair: demo-qwen3 or demo-qwen3_5")
    p.add_argument("--dataset", default="humaneval")
    p.add_argument("--heads", default="0,2048")
    p.add_argument("--budgets", default="15,31,63")
    p.add_argument("--num-prompts", type=int, default=24)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--calibration", default=CALIBRATION)
    p.add_argument("--in-domain", help="a:b, prompts to count each head on as well (not evaluated)")
    args = p.parse_args(argv)
    heads = [int(h) for h in args.heads.split(",")]
    last = int(args.in_domain.split(":")[1]) if args.in_domain else args.num_prompts
    run = make_run(args, max(args.num_prompts, last))
    n = args.num_prompts
    ar = [run.generate("ar", i).tokens for i in range(n)]
    drafts = draft_heads(run, heads, args.calibration)
    out = {"pair": args.pair, "prompts": n, "max_new_tokens": args.max_new_tokens, "device": str(run.device)}
    for head in heads:
        use_head(run, drafts, head)
        out[f"outside_{head}"] = round(outside_share(run.drafter, [t for g in ar for t in g]), 4)
        for method, budget in [("dflash", 1)] + [("ddtree", int(b)) for b in args.budgets.split(",")]:
            run.spec.decoding.tree_budget = budget
            gens = [run.generate(method, i) for i in range(n)]
            if any(g.tokens != a for g, a in zip(gens, ar)) and args.dtype == "float32":
                raise SystemExit(f"{method} {budget} with head {head}: tokens differ from AR's")
            tau = sum(sum(g.committed) for g in gens) / sum(len(g.committed) for g in gens)
            out[f"tau_{method}{budget if method == 'ddtree' else ''}_{head}"] = round(tau, 4)
        print(json.dumps(out), flush=True)
    use_head(run, drafts, 0)
    if args.in_domain:
        out.update(in_domain(run, ar, heads, args.in_domain))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
