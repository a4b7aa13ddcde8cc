"""How many prompts and repeats a 5% difference needs, from a run's own figures (its results.json).

Usage:  python bench/noise_budget.py RUN_DIR_OR_RESULTS_JSON [...] [--resolve 0.05]

For each run: the per-prompt speedup ratios r_i = AR's time per token / the method's (each prompt's mean over its
repeats), their coefficient of variation, and what makes it up: timing noise (each prompt's spread over its repeats,
for AR and the method; without repeats, AR's spread across prompts, remote.noise, an upper bound) and content (what
the prompts themselves do to the ratio: the rest). The interval of the mean ratio is about +-1.96 CV_r / sqrt(n)
wide, so resolving a difference d (default 5%) needs n >= (1.96 CV_r / d)^2 prompts, and repeats R shrink only the
timing part: CV_r(R)^2 = content^2 + timing^2 / R (with at least remote.noise.MIN_PROMPTS prompts for the interval
to be one). One line of JSON per run, the last line all of them.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import mean, stdev

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remote.noise import MIN_PROMPTS  # noqa: E402

Z = 1.96


def _cv(values: list[float]) -> float:
    return stdev(values) / mean(values) if len(values) > 1 and mean(values) > 0 else 0.0


def budget(results: dict, resolve: float = 0.05, repeats: tuple[int, ...] = (1, 2, 3)) -> dict:
    """The figures and prompts needed (module docstring) of one run's results.json."""
    method = results["method"]
    tpot: dict[tuple[str, int], list[float]] = {}
    for row in results["per_prompt"]:
        if "tpot_ms" in row:
            tpot.setdefault((row["method"], row["prompt_index"]), []).append(row["tpot_ms"])
    prompts = sorted({i for m, i in tpot if m == method and ("ar", i) in tpot})
    ratios = [mean(tpot[("ar", i)]) / mean(tpot[(method, i)]) for i in prompts]
    ran = max((len(v) for v in tpot.values()), default=1)
    if ran > 1:    # the same tokens each repeat: their spread is timing alone, AR's and the method's add up
        timing = math.sqrt(mean(_cv(tpot[(m, i)]) ** 2 for i in prompts for m in ("ar", method)) * 2)
    else:
        timing = results["metrics"].get("timing_noise", 0.0) * math.sqrt(2)
    total = _cv(ratios)
    content = math.sqrt(max(total ** 2 - timing ** 2 / ran, 0.0))
    need = {r: max(MIN_PROMPTS, math.ceil((Z * math.sqrt(content ** 2 + timing ** 2 / r) / resolve) ** 2))
            for r in repeats}
    return {"method": method, "prompts": len(prompts), "repeats_run": ran, "speedup": results["metrics"].get(
            "speedup_vs_ar"), "cv_ratio": total, "cv_timing": timing, "cv_content": content,
            "resolve": resolve, "prompts_needed": {f"repeats={r}": n for r, n in need.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run dirs or their results.json")
    parser.add_argument("--resolve", type=float, default=0.05, help="the difference to resolve (0.05: 5%%)")
    args = parser.parse_args()
    found = []
    for ref in args.runs:
        path = Path(ref) / "results.json" if Path(ref).is_dir() else Path(ref)
        figures = {"run": str(path.parent), **budget(json.loads(path.read_text()), args.resolve)}
        print(json.dumps(figures))
        found.append(figures)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
