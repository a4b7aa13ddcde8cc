"""The figures behind "numbers a user can trust" on a GPU: the demo pairs in bf16, each first divergence from AR
classified (remote.divergence: near-tie or not lossless), the run's own timing noise, and a verify broken on purpose.

Usage:  python bench/trust_figures.py --out DIR [--pairs q3,q35] [--methods dflash,ddtree63,ddtreeauto]
            [--num-prompts 24] [--max-new-tokens 128] [--broken q3] [--device cpu --dtype float32: a try on a CPU]

Each run is the runner's own (`remote.runner.run`, as `python -m remote` runs it on a host: graphs, the drafter
compiled) on the held-out prompts shipped with the pairs, into DIR/<pair>-<method>/ (results.json, events.jsonl,
outputs.jsonl). `--broken PAIR` runs DDTree 63 once more with every verify's root row made wrong at one logit (its
lowest, raised by 100: a tensor op, so the captured step keeps it): that run must report not_lossless. One line of
JSON per run (exact match, divergences and their near-tie share, the worst gap in units of rounding, timing noise,
fairness, prompts needed for a 5% difference: bench/noise_budget.py), the last line all of them.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from noise_budget import budget  # noqa: E402
from remote.runner import run  # noqa: E402
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec  # noqa: E402

PAIRS = {"q3": "demo-qwen3", "q35": "demo-qwen3_5"}
METHODS = {"dflash": ("dflash", 63), "ddtree63": ("ddtree", 63), "ddtreeauto": ("ddtree", "auto")}
BUMP = 100.0


def spec(pair: str, method: str, prompts: int, tokens: int, device: str = "cuda", dtype: str = "bfloat16") -> RunSpec:
    name, budget_ = METHODS[method]
    model = PAIRS[pair]
    return RunSpec(run_id=f"{pair}-{method}", model=ModelSpec(path=f"assets:models/{model}", dtype=dtype),
                   drafter=DrafterSpec(path=f"assets:models/{model}-dflash"),
                   decoding=DecodingSpec(method=name, tree_budget=budget_, max_new_tokens=tokens, temperature=0.0),
                   dataset=DatasetSpec(name="jsonl", path="assets:models/heldout_prompts.jsonl", num_prompts=prompts),
                   device=device)


@contextlib.contextmanager
def broken_verify():
    """Every verify's root row made wrong at its lowest logit, on the graphed path and the eager one alike."""
    from remote.decoding.graph import GraphDecoder, HybridGraphDecoder
    from remote.models.attention_target import AttentionTarget
    from remote.models.hybrid_target import HybridTarget

    def bump(logits: torch.Tensor) -> None:    # no host read: a captured step keeps it
        logits[0].scatter_add_(0, logits[0].argmin().view(1), torch.full((1,), BUMP, device=logits.device))

    saved = {(GraphDecoder, "_verify"): GraphDecoder._verify, (HybridGraphDecoder, "_verify"):
             HybridGraphDecoder._verify, (AttentionTarget, "verify"): AttentionTarget.verify,
             (HybridTarget, "verify"): HybridTarget.verify}

    def broken(kind, name):
        def verify(self, *args, **kwargs):
            out = saved[(kind, name)](self, *args, **kwargs)
            bump((out[0] if isinstance(out, tuple) else out).logits)     # a graph decoder's: (verified, commit)
            return out
        return verify

    for kind, name in saved:
        setattr(kind, name, broken(kind, name))
    try:
        yield
    finally:
        for (kind, name), fn in saved.items():
            setattr(kind, name, fn)


KEPT = ("exact_match_vs_ar", "divergence_near_tie_share", "divergence_gap_max_ulps", "first_divergence_mean",
        "speedup_vs_ar", "timing_noise")


def figures(name: str, results: dict) -> dict:
    found, env = results.get("divergences", []), results["environment"]
    return {"run": name, "decode_path": env["decode_path"], "gpu": env["gpu_name"], "divergences": len(found),
            "near_ties": sum(d["near_tie"] is True for d in found),
            "not_lossless": sum(d["near_tie"] is False for d in found),
            "unclassified": sum(d["near_tie"] is None for d in found),     # a replay that did not reproduce it
            **{k: results["metrics"].get(k) for k in KEPT}, "fairness": results.get("fairness"),
            "prompts_needed_5pct": budget(results)["prompts_needed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--pairs", default="q3,q35")
    parser.add_argument("--methods", default="dflash,ddtree63,ddtreeauto")
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--broken", default="q3", help="pairs whose DDTree 63 runs again with a broken verify")
    parser.add_argument("--device", default="cuda", help="cuda (the figures), or cpu to try the script")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    plan = [(p, m, False) for p in args.pairs.split(",") for m in args.methods.split(",") if p and m]
    plan += [(p, "ddtree63", True) for p in args.broken.split(",") if p]
    found = []
    for pair, method, broken in plan:
        name = f"{pair}-{method}" + ("-broken" if broken else "")
        out = Path(args.out) / name
        out.mkdir(parents=True, exist_ok=True)
        with broken_verify() if broken else contextlib.nullcontext():
            results = run(spec(pair, method, args.num_prompts, args.max_new_tokens, args.device, args.dtype),
                          str(out))
        found.append(figures(name, results))
        print(json.dumps(found[-1]), flush=True)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
