"""tree_budget=auto's choices replayed against a given cost table, with a real pair's drafts: tokens per GPU-ms of
auto and of every fixed budget, on any device (the CPU included).

    python bench/bench_auto_policy.py --pair demo-qwen3 \
        --costs '{"7":0.70,"15":0.7011,"31":0.7091,"63":0.7455,"127":0.8175}'
    python bench/bench_auto_policy.py --pair demo-qwen3_5 \
        --costs '{"7":0.668,"15":0.704,"31":0.77,"63":0.824,"127":0.914}' \
        --extras '{"7":[0,0.057],"15":[0.048,0.062],"31":[0.002,0.021]}'

The costs are ms a step per budget as measured on a GPU (bench_methods.py's step_ms of each fixed budget, or auto's
`auto_cost_ms_<b>`). `--extras` adds what a step costs more right after a smaller and right after a larger budget's
step (bench_methods' `cycle...` rows, `after_ms_<prev>_<b>`, less the step in a row): on the demo hybrid a small
step after a large one costs up to 10% more (docs/PERFORMANCE.md, session 17), and a policy that switches often
pays it. The runner decodes the prompts (fp32, the graph decoder stepped eagerly) once per fixed budget and once
under auto, whose cost model is the table instead of its own timings (its choices, calibration and exploration
are the real ones); each generation's steps are then priced from the table and the extras. What it separates: the
policy's choices from what a GPU run adds (graph launch costs, host gaps). Non-goal: wall time (the CPU's own costs
are ignored). With session 17's costs and extras of the hybrid (the second command, 12 prompts, ~15 minutes on a
2-core CPU) auto came to 96.5% of the best fixed budget, where the H200 measured 96.4%, though the fixed budgets
rank differently here (fp32 drafts of held-out prompts: 63 best; bf16 HumanEval there: 15), and two policies that
differ in little can differ by ~2% here (their choices part at the first differing step): try a policy here first.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote.decoding.auto_budget import AutoBudget, buckets  # noqa: E402
from remote.runner import Run  # noqa: E402
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "remote" / "assets" / "models"


class PricedAuto(AutoBudget):
    """AutoBudget whose timed steps cost what `table` says (by budget), not what the device took."""

    def __init__(self, sizes: list[int], table: dict[int, float]):
        super().__init__(sizes, cuda=False)
        self.table = table

    def _elapsed(self, budget, span):
        return None if not span or span[0] is None else self.table[budget]


def priced(steps: list[int], table: dict[int, float], extras: dict[int, tuple[float, float]]) -> float:
    """ms of a generation's steps: each budget's cost, plus its extra when the step before was of another size."""
    total, last = 0.0, None
    for b in steps:
        up, down = extras.get(b, (0.0, 0.0))
        total += table[b] + (0.0 if last in (None, b) else up if last < b else down)
        last = b
    return total


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pair", default="demo-qwen3", help="a target under remote/assets/models (its -dflash drafter)")
    p.add_argument("--costs", required=True, help='JSON {"budget": ms a step}, every bucket of --max included')
    p.add_argument("--extras", default="{}",
                   help='JSON {"budget": [ms after a smaller budget\'s step, ms after a larger one\'s]} over its cost')
    p.add_argument("--max", type=int, default=127, help="tree_budget_max of the auto run")
    p.add_argument("--dataset", default=f"jsonl:{MODELS / 'heldout_prompts.jsonl'}")
    p.add_argument("--num-prompts", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=128)
    args = p.parse_args(argv)
    table = {int(b): float(ms) for b, ms in json.loads(args.costs).items()}
    extras = {int(b): (float(up), float(down)) for b, (up, down) in json.loads(args.extras).items()}
    missing = [b for b in buckets(args.max) if b not in table]
    if missing:
        raise SystemExit(f"--costs has no cost for budget(s) {missing} (auto up to {args.max} needs them)")
    name, path = args.dataset.split(":", 1) if ":" in args.dataset else (args.dataset, None)
    run = Run(RunSpec(
        run_id="policy", seed=0, device="cpu",
        model=ModelSpec(path=str(MODELS / args.pair), dtype="float32"),
        drafter=DrafterSpec(path=str(MODELS / f"{args.pair}-dflash")),
        decoding=DecodingSpec(method="ddtree", max_new_tokens=args.max_new_tokens, warmup=0, cuda_graphs=False),
        dataset=DatasetSpec(name=name, path=path, num_prompts=args.num_prompts)))
    rates = {}
    for budget in [b for b in sorted(table) if b <= args.max] + ["auto"]:
        d = run.spec.decoding
        if budget == "auto":
            d.tree_budget, d.tree_budget_max = "auto", args.max
            run.auto = PricedAuto(buckets(args.max), table)
            run.calibrate(args.max_new_tokens)
        else:
            d.tree_budget, run.auto = budget, None
        tokens = ms = 0.0
        chosen: list[int] = []
        for i in range(len(run.inputs)):
            gen = run.generate("ddtree", i)
            steps = gen.budgets if budget == "auto" else [budget] * len(gen.committed)
            tokens, ms, chosen = tokens + sum(gen.committed), ms + priced(steps, table, extras), chosen + steps
        rates[budget] = tokens / ms
        print(f"{budget!s:>5}: {rates[budget]:.3f} tokens per GPU-ms, mean budget {sum(chosen) / len(chosen):.1f}, "
              f"{tokens / len(chosen):.3f} tokens a step", flush=True)
    best = max(v for b, v in rates.items() if b != "auto")
    print(json.dumps({"pair": args.pair, "auto_vs_best_fixed": rates["auto"] / best,
                      "rates": {str(b): v for b, v in rates.items()}}))


if __name__ == "__main__":
    main()
