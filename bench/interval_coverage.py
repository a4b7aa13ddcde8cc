"""How often the runner's 95% interval of the speedup (remote.stats.ratio_interval, a percentile bootstrap over
prompts) covers the true speedup, by the number of prompts: why remote.noise.MIN_PROMPTS is what it is.

Usage:  python bench/interval_coverage.py [--trials 400] [--prompts 2,3,4,5,6,8,10,12,16,24] [--results RUN ...]

Each trial draws n prompts, each with an AR and a method time per token, and asks ratio_interval (10000 resamples,
as a run does) for the interval of sum(AR) / sum(method); the coverage is the share of trials whose interval holds
the truth. Prompts are drawn from a model (ratios normal around 1 with a 20% spread, times log-normal with a 30%
spread, independent) or, with --results, resampled from real runs' per-prompt times (results.json; the truth is
then the ratio over all of a run's prompts). One line of JSON per n, the last line all of them with the smallest n
whose coverage reaches 90% (a 95% interval that misses at most twice as often as it says).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remote.stats import ratio_interval  # noqa: E402

ENOUGH = 0.90


def modelled(n: int, generator: torch.Generator) -> tuple[list[float], list[float], float]:
    ratio = 1.0 + 0.2 * torch.randn(n, generator=generator, dtype=torch.float64)
    method = torch.exp(0.3 * torch.randn(n, generator=generator, dtype=torch.float64))
    return (ratio * method).tolist(), method.tolist(), 1.0


def resampled(pairs: list[tuple[float, float]], n: int, generator: torch.Generator):
    truth = sum(a for a, _ in pairs) / sum(m for _, m in pairs)
    picked = [pairs[i] for i in torch.randint(len(pairs), (n,), generator=generator).tolist()]
    return [a for a, _ in picked], [m for _, m in picked], truth


def run_pairs(paths: list[str]) -> list[list[tuple[float, float]]]:
    """Each run's (AR, method) time per token per prompt (first repeat)."""
    found = []
    for ref in paths:
        path = Path(ref) / "results.json" if Path(ref).is_dir() else Path(ref)
        results = json.loads(path.read_text())
        rows = {(r["method"], r["prompt_index"]): r["tpot_ms"] for r in results["per_prompt"]
                if r.get("repeat", 0) == 0 and "tpot_ms" in r}
        found.append([(rows[("ar", i)], rows[(m, i)]) for (m, i) in rows if m == results["method"]
                      and ("ar", i) in rows])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--prompts", default="2,3,4,5,6,8,10,12,16,24")
    parser.add_argument("--results", nargs="*", default=[], help="run dirs or results.json to resample prompts from")
    args = parser.parse_args()
    generator, runs = torch.Generator().manual_seed(0), run_pairs(args.results)
    rows = []
    for n in (int(x) for x in args.prompts.split(",")):
        covered = 0
        for trial in range(args.trials):
            ar, method, truth = resampled(runs[trial % len(runs)], n, generator) if runs else modelled(n, generator)
            low, high = ratio_interval(ar, method, seed=trial)
            covered += low <= truth <= high
        rows.append({"prompts": n, "coverage": covered / args.trials, "trials": args.trials,
                     "source": "runs" if runs else "model"})
        print(json.dumps(rows[-1]), flush=True)
    enough = next((r["prompts"] for r in rows if r["coverage"] >= ENOUGH), None)
    print(json.dumps({"rows": rows, "enough_coverage": ENOUGH, "enough_prompts": enough}))


if __name__ == "__main__":
    main()
