"""tree_budget=auto's choices replayed on a trace of real drafts against a given cost table: tokens per GPU-ms of
auto (and of any other policy) and of every fixed budget, on the same steps, on any device (the CPU included).

    python bench/bench_auto_policy.py --pair demo-qwen3_5 --trace /tmp/q35.json \
        --costs '{"7":0.672,"15":0.711,"31":0.744,"63":0.827,"127":0.924}' \
        --extras '{"7":[0,0.05],"15":[0.01,0.05],"31":[0.02,0.041],"63":[0.01,0.04]}'

A trace is what a run at the largest budget read back step by step: each step's predictions for every bucket and
its accepted path (bench_methods.py `--budgets trace127`, on a GPU in bf16 for the real thing, file
`trace127-T0.json`; or made here when `--trace` names a file that does not exist: the pair decoded in float32 on
this machine's device). Best-first trees are nested, so a step of the largest tree tells exactly what every smaller
tree would have accepted at the same point: the policies and the fixed budgets are compared pairwise on the same
steps, and the comparison is exact up to the steps themselves (a policy's run would meet other steps, past its first
different choice: the trace stands in for the text's states). Each replayed policy sees what the runner shows it:
a step observed once two more are queued, its predictions up to its own size, its accepted nodes in its tree.

The costs are ms a step per budget as measured on a GPU (bench_methods.py's step_ms of each fixed budget, or auto's
`auto_cost_ms_<b>`). `--extras` adds what a step costs more right after a smaller and right after a larger budget's
step (bench_methods' `cycle...` rows, `after_ms_<prev>_<b>`, less the step in a row): on the demo hybrid a small
step after a large one costs 5-10% more (one H200, 2026-12-03, bench/gpu_suite.sh's q35_cycle step;
docs/performance-history.md), and a policy that switches often pays it. `--policy module:Class` replays another
AutoBudget subclass beside auto (bench/ on the path). Non-goal: wall time (a policy's host costs are not priced).
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))          # bench_methods, and --policy modules beside it

from remote.decoding.auto_budget import AutoBudget  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "remote" / "assets" / "models"


def priced(steps: list[int], table: dict[int, float], extras: dict[int, tuple[float, float]]) -> float:
    """ms of a generation's steps: each budget's cost, plus its extra when the step before was of another size."""
    total, last = 0.0, None
    for b in steps:
        up, down = extras.get(b, (0.0, 0.0))
        total += table[b] + (0.0 if last in (None, b) else up if last < b else down)
        last = b
    return total


def priced_policy(cls: type[AutoBudget], sizes: list[int], table: dict[int, float]) -> AutoBudget:
    """An instance of `cls` whose timed steps cost what `table` says (by budget), not what the device took."""
    class Priced(cls):
        def _elapsed(self, budget, span):
            return None if not span or span[0] is None else table[budget]

    return Priced(sizes, cuda=False)


def step_as(step: dict, sizes: list[int], budget: int) -> tuple[list[int], list[int]]:
    """A trace step as a step of `budget` would have read it: predictions up to its size (-1 past it), and the
    accepted path's nodes inside its tree (numbered best first, ancestors before descendants: a prefix)."""
    predicted = [p if c <= budget else -1 for c, p in zip(sizes, step["predicted"])]
    return predicted, [n for n in step["nodes"] if n <= budget]


def replay(trace: dict, auto: AutoBudget) -> list[list[int]]:
    """`auto` through every generation of `trace` as remote.decoding.graph drives it (up to two steps queued; a
    step's read is observed once two more are queued); the budgets it chose, per generation. Its buckets are the
    trace's first ones (all, or those up to a smaller tree_budget_max)."""
    chosen = []
    for steps in trace["prompts"]:
        queued, observed, budgets = deque(), None, []
        for i in range(len(steps)):
            while len(queued) < 2 and len(budgets) < len(steps):
                budget = auto.pick()
                with auto.timing(budget) as span:
                    pass
                queued.append((budget, span))
                budgets.append(budget)
            if observed:
                auto.observe(*observed)
            budget, span = queued.popleft()
            predicted, nodes = step_as(steps[i], trace["sizes"], budget)
            observed = (budget, predicted[:len(auto.sizes)], nodes, len(nodes) + 1, span)
        if observed:
            auto.observe(*observed)
        chosen.append(budgets)
    return chosen


def rate(trace: dict, chosen: list[list[int]], table, extras) -> tuple[float, float]:
    """Tokens per ms of the budgets `chosen` at the trace's steps, and their mean budget."""
    tokens = ms = 0.0
    for steps, budgets in zip(trace["prompts"], chosen):
        tokens += sum(len(step_as(s, trace["sizes"], b)[1]) + 1 for s, b in zip(steps, budgets))
        ms += priced(budgets, table, extras)
    flat = [b for budgets in chosen for b in budgets]
    return tokens / ms, sum(flat) / max(len(flat), 1)


def make_trace(path: Path, args) -> None:
    """Decode the pair at budget `args.max` with bench_methods' `trace<max>` (float32, this machine's device)."""
    import bench_methods

    out = path.parent / f"{path.stem}.run"
    bench_methods.main(["--model", str(MODELS / args.pair), "--drafter", str(MODELS / f"{args.pair}-dflash"),
                        "--dataset", args.dataset, "--num-prompts", str(args.num_prompts), "--max-new-tokens",
                        str(args.max_new_tokens), "--methods", "ddtree", "--budgets", f"trace{args.max}",
                        "--temperatures", "0", "--dtype", "float32", "--out", str(out)])
    (out / f"trace{args.max}-T0.json").rename(path)


def load_policy(spec: str) -> type[AutoBudget]:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", required=True, help="a trace<b> JSON of bench_methods (made here if it does not exist)")
    p.add_argument("--costs", required=True, help='JSON {"budget": ms a step}, every bucket of the trace included')
    p.add_argument("--extras", default="{}",
                   help='JSON {"budget": [ms after a smaller budget\'s step, ms after a larger one\'s]} over its cost')
    p.add_argument("--policy", action="append", default=[], help="module:Class, an AutoBudget to replay beside auto")
    p.add_argument("--max", type=int, default=127, help="making a trace: the budget it runs at (auto's largest)")
    p.add_argument("--auto-max", type=int, help="tree_budget_max of the replayed policies (default: the trace's)")
    p.add_argument("--pair", default="demo-qwen3", help="making a trace: a target under remote/assets/models")
    p.add_argument("--dataset", default=f"jsonl:{MODELS / 'heldout_prompts.jsonl'}")
    p.add_argument("--num-prompts", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=128)
    args = p.parse_args(argv)
    path = Path(args.trace)
    if not path.exists():
        make_trace(path, args)
    trace = json.loads(path.read_text())
    sizes = trace["sizes"]
    table = {int(b): float(ms) for b, ms in json.loads(args.costs).items()}
    extras = {int(b): (float(up), float(down)) for b, (up, down) in json.loads(args.extras).items()}
    missing = [b for b in sizes if b not in table]
    if missing:
        raise SystemExit(f"--costs has no cost for budget(s) {missing} (the trace's buckets: {sizes})")
    steps = sum(len(s) for s in trace["prompts"])
    rates = {str(b): rate(trace, [[b] * len(s) for s in trace["prompts"]], table, extras) for b in sizes}
    for name, cls in [("auto", AutoBudget), *((spec, load_policy(spec)) for spec in args.policy)]:
        auto = priced_policy(cls, [b for b in sizes if b <= (args.auto_max or sizes[-1])], table)
        for prompt in itertools.cycle(trace["prompts"]):     # warm-up up to calibrated, as bench_methods does
            replay({**trace, "prompts": [prompt]}, auto)
            if not auto.calibrating:
                break
        rates[name] = rate(trace, replay(trace, auto), table, extras)
    best = max(v for b, (v, _) in rates.items() if b.isdigit())
    for name, (value, mean) in rates.items():
        print(f"{name:>12}: {value:.4f} tokens per GPU-ms ({value / best:.1%} of the best fixed budget), "
              f"mean budget {mean:.1f}", flush=True)
    print(json.dumps({"trace": str(path), "steps": steps, "auto_vs_best_fixed": rates["auto"][0] / best,
                      "rates": {name: value for name, (value, _) in rates.items()}}))


if __name__ == "__main__":
    main()
