"""The verify's few-row projections, configuration by configuration: where remote.kernels.gemv's few-row kernel and
remote.kernels.gemm_split's split kernel lose bandwidth against the one-row kernel reading the same weight.

    python bench/sweep_rows.py --preset qwen3.6-27b --queries 33,64 --out rows.json

For each weight of --preset's first layers (the fused groups, o_proj, down_proj) and each row count of --queries,
every configuration of the few-row kernel (columns a program BN, K block BK, warps, pipeline stages; rows padded
to a power of two), of the same product read through TMA descriptors (`tma-<rows>`) and of the split kernel (SPLIT
parts over K), beside cuBLAS and the one-row kernel's time for the same bytes: microseconds a call in a CUDA graph
(bench_kernels.graph_us), a JSON line a timing as it is taken (so a run cut short keeps what it took), then per
weight and row count the best of each against the one-row kernel (the goal: within 5%).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from fnmatch import fnmatch
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from bench_kernels import graph_us, group_name, preset_model  # noqa: E402

SMEM = 220 * 1024       # bytes of shared memory a program may hold (an H100's 227 KB less the compiler's own)


def weights(preset: str) -> dict[str, torch.Tensor]:
    from remote.kernels.fused_linear import fuse

    model = preset_model(preset)
    found = {group_name(g): g.weight for g in fuse(model)}
    layer = model.model.layers[-1]
    found["down"] = layer.mlp.down_proj.weight
    if getattr(layer.self_attn, "o_proj", None) is not None:
        found["o"] = layer.self_attn.o_proj.weight
    return found


def row_configs(bm: int):
    for bn, bk, (warps, stages) in itertools.product((32, 64, 128, 256), (64, 128), ((4, 3), (4, 4), (8, 4))):
        if stages * (bm + bn) * bk * 2 <= SMEM:
            yield {"BN": bn, "BK": bk, "num_warps": warps, "num_stages": stages}


def split_configs(bm: int):
    for bn, split, bk in itertools.product((64, 128, 256), (2, 4, 8), (64, 128)):
        if 4 * (bm + bn) * bk * 2 <= SMEM:
            yield {"BN": bn, "BK": bk, "SPLIT": split, "num_warps": 4 if bn < 256 else 8, "num_stages": 4}


@triton.jit
def _rows_tma(xd, wd, out, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The few-row product with both operands read by the tensor memory accelerator (host-made descriptors: rows
    past x's and columns past w's read as zeros, no masks), pipelined over stages like the cp.async kernel."""
    first = tl.program_id(0) * BN
    acc = tl.zeros([BM, BN], tl.float32)
    for start in range(0, K, BK):
        acc = tl.dot(xd.load([0, start]), tl.trans(wd.load([first, start])), acc)
    cols, ms = first + tl.arange(0, BN), tl.arange(0, BM)
    tl.store(out + ms[:, None] * N + cols[None, :], acc.to(out.dtype.element_ty),
             mask=(ms < M)[:, None] & (cols < N)[None, :])


def variants(w: torch.Tensor, q: int):
    """(kernel, configuration, fn) for every way to multiply q rows by w."""
    from remote.kernels import gemm_split, gemv

    n, k = w.shape
    x = torch.randn(q, k, device="cuda", dtype=w.dtype)
    out = torch.empty(q, n, device="cuda", dtype=w.dtype)
    yield "cublas", {}, lambda: F.linear(x, w)
    bm = gemv.bucket(q)
    if bm > gemv.MAX_ROWS:
        return
    for config in row_configs(bm):
        grid = (triton.cdiv(n, config["BN"]),)
        yield f"rows-{bm}", config, lambda g=grid, c=config: gemv._rows_fixed[g](
            x, w, x, out, q, n, k, w.stride(0), HAS_BIAS=False, BM=bm, **c)
        xd = TensorDescriptor.from_tensor(x, [bm, config["BK"]])
        wd = TensorDescriptor.from_tensor(w, [config["BN"], config["BK"]])
        yield f"tma-{bm}", config, lambda g=grid, c=config, xd=xd, wd=wd: _rows_tma[g](
            xd, wd, out, q, n, k, BM=bm, **c)
    gemm_split.MAX_SPLIT = 8
    part, count = gemm_split._workspace(n, bm, x.device)
    for config in split_configs(bm):
        grid = (triton.cdiv(n, config["BN"]), config["SPLIT"])
        yield f"split-{bm}", config, lambda g=grid, c=config: gemm_split._split_kernel[g](
            x, w, x, out, part, count, q, n, k, w.stride(0), HAS_BIAS=False, BM=bm, **c)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen3.6-27b", help="widths (bench_verify.PRESETS)")
    p.add_argument("--queries", default="33,64", help="row counts (past remote.kernels.gemv.MAX_ROWS: cuBLAS only)")
    p.add_argument("--kernels", default="*", help="comma-separated patterns of the kernels to time (fnmatch)")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="write the rows (JSON) here too")
    args = p.parse_args()
    from remote.kernels import gemv

    rows, best = [], []
    for name, w in weights(args.preset).items():
        size = w.numel() * w.element_size()
        one = graph_us(lambda w=w, x=torch.randn(1, w.shape[1], device="cuda", dtype=w.dtype): gemv._op(x, w, None),
                       args.calls, args.repeats)
        for q in map(int, args.queries.split(",")):
            found = {}
            for kernel, config, fn in variants(w, q):
                if not any(fnmatch(kernel, pattern) for pattern in args.kernels.split(",")):
                    continue
                us = graph_us(fn, args.calls, args.repeats)
                row = {"weight": name, "q": q, "kernel": kernel, **config, "us": us,
                       "gbps": us and round(size / us / 1e3), "one_row_us": one}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if us and us < found.get(kernel, {"us": float("inf")})["us"]:
                    found[kernel] = row
            for row in found.values():
                best.append({**row, "x_one_row": one and round(row["us"] / one, 3)})
    print("\nbest of each kernel, against the one-row kernel reading the same weight:")
    for row in best:
        print(f"{row['weight']:>12} q={row['q']:<3} {row['kernel']:<10} {row['us']:8.2f} us  {row['gbps']:>5} GB/s"
              f"  x{row['x_one_row']}  " + " ".join(f"{k}={row[k]}" for k in ("BN", "BK", "SPLIT", "num_warps",
                                                                                    "num_stages") if k in row))
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "best": best}, indent=1))


if __name__ == "__main__":
    main()
