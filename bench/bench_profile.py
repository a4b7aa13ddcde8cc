"""Kernel-level profile of one target pass by op class, against the bytes each class must read: the AR step
(--rows 1) and DDTree verifies of R rows (a best-first tree of R-1 nodes + the root, as `Bench.plan("tree", R-1)`
builds it) on a random-weight model at a published width (bench_verify's PRESETS), through the runner's targets.

    python bench/bench_profile.py --preset qwen3-8b --rows 1,33,65 --prompt-len 256 --out prof
    python bench/bench_profile.py --preset qwen3.6-27b --layers 16 --rows 1,33,65 --prompt-len 256 --out prof

A pass is `Target.verify` of R tokens after a fresh prefill of --prompt-len random tokens (the same context for every
pass; R=1 verifies the root alone: the AR step), after one untimed pass per R. Classes are record_function ranges
"cls:<class>" that forward hooks open: lm_head, embedding; gemm_attn / gemm_mlp / gemm_gdn (Linear modules of
full-attention, MLP, Gated DeltaNet modules; gemm_other: any other); norm (every RMSNorm, the GDN's gated one too);
rotary (the rotary module and apply_rotary_pos_emb, wrapped at run time); attention (the rest of a full-attention
layer: SDPA, K/V writes - AttentionTarget's DynamicCache cat copies the whole cache -, Qwen3.5's output gate); gdn
(the rest of a GDN layer: conv windows and depthwise conv, gates, the recurrence, whose kernel calls alone are
`recurrence_ms`); mlp_act (SiLU, gate product); other (residual adds, casts, tree mask and layout, feature concat,
logits to float32). HybridTarget runs its own layer loop (the attention and GDN modules' forward never runs), so its
`_attention`, `_gdn`, `_rotary_fn` and GDN kernel bundle are wrapped on the instance while profiling. An op's own time
(CUDA: the kernels kineto links to it, Triton launches included; CPU: self CPU time) goes to its innermost class
range, so classes sum to the total; mean of --repeats passes.

Bytes a class must read: its modules' parameters (unlabelled submodules', e.g. the GDN's conv1d, A_log, dt_bias, go
to the nearest labelled ancestor); embedding: the R rows gathered; attention: + K/V at context P+R (2 x layers x kv
heads x head_dim x (P+R) x dtype bytes); gdn: + recurrent (float32) and conv states, read and written. Activations are
not counted. Per R also: wall_ms (eager, no hooks or profiler, synchronize around, median of --repeats), weight bytes
(every parameter once, embedding table included), floor_ms = weight bytes / copy bandwidth, floor_read_ms = summed
class bytes / copy bandwidth. Copy bandwidth: a device-to-device copy of --copy-mib (1 GiB on CUDA), median of 5 by
CUDA events, as bytes moved / time (a copy of N bytes reads N and writes N: 2N, the memory's throughput, which a
weight-reading GEMV can at best reach); on CPU a 64 MiB copy timed by the clock, only so the number exists.
Output: markdown tables on stdout and in OUT/profile_<preset>.md, {"meta", "passes"} in OUT/profile_<preset>.json,
last stdout line compact JSON; --trace adds per R a chrome trace and a key_averages table. Non-goals: the drafter,
commit, CUDA-graph replay (eager launches only: the captured steps' norms are a fused kernel, not transformers').
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from bench_verify import PRESETS, Bench, model_config, save_profile  # noqa: E402
from remote.decoding.tree_build import build_tree  # noqa: E402
from remote.models.loading import load_target, pick_device  # noqa: E402
from remote.spec import ModelSpec  # noqa: E402
from remote.tree import Ancestry  # noqa: E402

PASS, REC = "profile_pass", "sub:gdn_recurrence"
CLASSES = ("lm_head", "embedding", "gemm_attn", "gemm_mlp", "gemm_gdn", "gemm_other", "norm", "rotary", "attention",
           "gdn", "mlp_act", "other")
is_attention = lambda m: m is not None and all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj"))  # noqa
is_gdn = lambda m: "GatedDeltaNet" in type(m).__name__  # noqa: E731


def class_labels(model) -> dict[str, str]:
    """{module name: class} of the modules that open a range; the others run inside their caller's range."""
    mods, out = dict(model.named_modules()), {}
    for name, m in mods.items():
        parent, kind = mods.get(name.rpartition(".")[0]) if name else None, type(m).__name__
        if m is model.get_output_embeddings() or m is model.get_input_embeddings():
            out[name] = "lm_head" if m is model.get_output_embeddings() else "embedding"
        elif isinstance(m, torch.nn.Linear):     # by the owner's role: attribute names differ across versions
            out[name] = ("gemm_gdn" if parent is not None and is_gdn(parent) else "gemm_attn" if is_attention(parent)
                         else "gemm_mlp" if ".mlp." in f".{name}." or "MLP" in type(parent).__name__ else "gemm_other")
        elif "RMSNorm" in kind or isinstance(m, torch.nn.LayerNorm):
            out[name] = "norm"
        elif "RotaryEmbedding" in kind:
            out[name] = "rotary"
        elif is_attention(m) or is_gdn(m) or "MLP" in kind:
            out[name] = "attention" if is_attention(m) else "gdn" if is_gdn(m) else "mlp_act"
    return out


def class_bytes(model, labels: dict[str, str], rows: int, context: int) -> dict[str, int]:
    out, seen, emb = defaultdict(int), set(), model.get_input_embeddings()
    for name, m in model.named_modules():
        if m is emb:                           # a lookup reads R rows, not the table (tied: lm_head reads it)
            out["embedding"] += rows * emb.weight.shape[1] * emb.weight.element_size()
            continue
        owner = name
        while owner and owner not in labels:
            owner = owner.rpartition(".")[0]
        for p in m.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                out[labels.get(owner, "other")] += p.numel() * p.element_size()
        if is_attention(m):                    # K and V of the whole context, once
            out["attention"] += 2 * m.k_proj.weight.shape[0] * context * m.k_proj.weight.element_size()
        elif is_gdn(m):                        # recurrent [HV, Dk, Dv] float32 and conv [C, K]: read and written
            conv = m.conv1d.weight
            out["gdn"] += 2 * (m.num_v_heads * m.head_k_dim * m.head_v_dim * 4 + conv.numel() * conv.element_size())
    return dict(out)


def ranged(fn, name: str):
    def call(*args, **kwargs):
        with record_function(name):
            return fn(*args, **kwargs)
    return call


class Ranges:
    """The class ranges while profiling: module hooks, plus wrappers of what HybridTarget calls directly."""

    def __init__(self, model, target, labels: dict[str, str]):
        self.stack, self.undo, mods = [], [], dict(model.named_modules())
        for name, cls in labels.items():       # modules nest, so their ranges close in LIFO order
            opened = lambda m, a, c="cls:" + cls: self.stack.append(record_function(c).__enter__())  # noqa: E731
            self.undo += [mods[name].register_forward_pre_hook(opened).remove, mods[name].register_forward_hook(
                lambda m, a, o: self.stack.pop().__exit__(None, None, None)).remove]
        for attr, cls in (("_attention", "cls:attention"), ("_gdn", "cls:gdn"), ("_rotary_fn", "cls:rotary")):
            if hasattr(target, attr):
                self._set(target, attr, ranged(getattr(target, attr), cls))
        if (k := getattr(target, "kernels", None)) is not None:
            self._set(target, "kernels", dataclasses.replace(k, chunk=ranged(k.chunk, REC), step=ranged(k.step, REC),
                                                             tree=k.tree and ranged(k.tree, REC)))
        for module in {sys.modules[type(m).__module__] for m in model.modules() if is_attention(m)}:
            if hasattr(module, "apply_rotary_pos_emb"):      # looked up at call time by the attention forward
                self._set(module, "apply_rotary_pos_emb", ranged(module.apply_rotary_pos_emb, "cls:rotary"))

    def _set(self, obj, attr: str, value) -> None:
        had, old = attr in vars(obj), vars(obj).get(attr)
        setattr(obj, attr, value)
        self.undo.append(lambda: setattr(obj, attr, old) if had else delattr(obj, attr))

    def close(self) -> None:
        for fn in reversed(self.undo):
            fn()


def attribute(prof, cuda: bool) -> list[tuple[dict, float]]:
    """Per profiled pass ({class: {op: us}}, recurrence us): each op's own time goes to its innermost class range,
    keyed by the outermost op under that range (a kernel launched straight from a range, e.g. Triton: its name)."""
    ours = lambda name: name.startswith(("cls:", "sub:")) or name == PASS  # noqa: E731 - also their GPU-side spans
    found = []
    for top in (e for e in prof.events() if e.name == PASS and e.device_type == DeviceType.CPU):
        tally, rec = defaultdict(lambda: defaultdict(float)), [0.0]

        def walk(ev, cls, op, sub):
            if getattr(ev, "is_user_annotation", False) or ours(ev.name):
                own = [(k.name, k.duration) for k in ev.kernels if not ours(k.name)] if cuda else []
            else:
                own = [(op, sum(k.duration for k in ev.kernels) if cuda else ev.self_cpu_time_total)]
            for label, us in own:
                tally[cls][op or label] += us
                rec[0] += us if sub else 0.0
            for ch in ev.cpu_children:
                if ch.name.startswith("cls:"):
                    walk(ch, ch.name[4:], None, sub)
                else:
                    annotation = ch.name == REC or getattr(ch, "is_user_annotation", False)
                    walk(ch, cls, op if annotation else op or ch.name, sub or ch.name == REC)
        walk(top, "other", None, False)
        found.append((tally, rec[0]))
    return found


def summarize(found, nbytes: dict[str, int], present: set[str]) -> dict:
    n, classes = len(found), {}
    us = {c: sum(sum(t[c].values()) for t, _ in found if c in t) / n for c in CLASSES}
    total = sum(us.values())
    for c in (c for c in CLASSES if c in present or us[c] or nbytes.get(c)):
        ops = defaultdict(float)
        for t, _ in found:
            for op, v in t.get(c, {}).items():
                ops[op] += v / n / 1e3
        b, ms = nbytes.get(c, 0), us[c] / 1e3
        classes[c] = {"ms": round(ms, 4), "share": round(us[c] / total, 4) if total else 0.0, "bytes": b,
                      "gb": b / 1e9, "gbps": round(b / ms / 1e6, 2) if ms and b else None,
                      "ops": {k: round(v, 4) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:12]}}
    if "gdn" in classes:
        classes["gdn"]["recurrence_ms"] = round(sum(r for _, r in found) / n / 1e3, 4)
    return {"classes": classes, "kernel_ms": round(total / 1e3, 4)}


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """GB/s a tensor copy of `nbytes` moves (read and written: the memory's throughput, what a GEMV reading its
    weights can at best reach), median of 5 after a warm-up (CUDA events; on CPU the clock)."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)        # written once: its pages are real
    dst, times = torch.empty_like(src), []
    for _ in range(6):
        if device.type != "cuda":
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * nbytes / statistics.median(times[1:]) / 1e9


def pass_inputs(bench: Bench, rows: int):
    """(tokens [R], Ancestry, depth), made once on the device: the pass itself copies nothing from the host."""
    tree = build_tree(bench.logits, rows - 1) if rows > 1 else None
    tokens = torch.tensor([int(bench.prompt[0, -1])] + (tree.tokens if tree else []), device=bench.device)
    return tokens, Ancestry.from_parents(tree.verify_parents() if tree else [-1], bench.device), \
        max(tree.depths, default=0) if tree else 0


def one_pass(bench: Bench, nodes, tree) -> float:
    bench.target.prefill(bench.prompt)
    t0 = bench.clock.now()
    with record_function(PASS):
        bench.target.verify(nodes, tree)
    return 1e3 * (bench.clock.now() - t0)


def table(p: dict) -> str:
    what = "AR step" if p["rows"] == 1 else f"verify, tree of {p['rows'] - 1} nodes + root, depth {p['depth']}"
    lines = [f"### {p['rows']} rows ({what}), context {p['context']}", "",
             "| class | ms | share | GB | GB/s |", "|---|---:|---:|---:|---:|"]
    for c, v in p["classes"].items():
        gbps = "" if v["gbps"] is None else f"{v['gbps']:.1f}"
        lines.append(f"| {c} | {v['ms']:.3f} | {100 * v['share']:.1f}% | {v['gb']:.4g} | {gbps} |")
    lines.append(f"| **total** | {p['kernel_ms']:.3f} | 100% | {p['read_bytes'] / 1e9:.4g} | |")
    return "\n".join(lines) + (f"\n\nkernel {p['kernel_ms']:.3f} ms, eager wall {p['wall_ms']:.3f} ms (busy/wall "
                               f"{p['kernel_ms'] / p['wall_ms']:.2f}), weights {p['weight_bytes'] / 1e9:.4g} GB, floor "
                               f"{p['floor_ms']:.3f} ms (read floor {p['floor_read_ms']:.3f} ms)\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="tiny-hybrid", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--rows", default="1,33,65", help="rows per pass: 1 = AR step, R > 1 = tree of R-1 nodes + root")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--out", default="profile_out", help="directory for profile_<preset>.json / .md")
    p.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    p.add_argument("--dtype", help="default: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=3, help="timed and profiled passes per row count")
    p.add_argument("--draft", default="peaked", help="synthetic draft logits: peaked | random")
    p.set_defaults(block_size=16, target_layers=5)      # bench_verify's: trees <= 15 deep, 5 feature layers
    p.add_argument("--copy-mib", type=int, help="copy-bandwidth tensor (default 1024 on CUDA, 64 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", action="store_true", help="also a chrome trace and key_averages table per row count")
    return p.parse_args(argv)


@torch.inference_mode()
def main(argv=None) -> None:
    args = parse_args(argv)
    device = pick_device(args.device)
    cuda, rows = device.type == "cuda", [int(r) for r in args.rows.split(",")]
    dtype = args.dtype or ("bfloat16" if cuda else "float32")
    if min(rows) < 1 or args.repeats < 1:
        raise SystemExit("need --rows >= 1 and --repeats >= 1")
    fields = model_config(args.preset, args.layers, {})
    model = load_target(ModelSpec(random=fields, dtype=dtype), args.seed, device)
    bench = Bench(args, model, device, deadline=float("inf"))
    copy_bytes = (args.copy_mib or (1024 if cuda else 64)) << 20
    gbps, labels = copy_bandwidth(device, copy_bytes), class_labels(model)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())   # parameters() dedups ties
    inputs = {r: pass_inputs(bench, r) for r in rows}
    for r in rows:                               # first calls of a shape pay for allocator growth, autotuning
        one_pass(bench, *inputs[r][:2])
    out_dir, passes, traces = Path(args.out), [], []
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in rows:
        nodes, tree, depth = inputs[r]
        wall = [one_pass(bench, nodes, tree) for _ in range(args.repeats)]      # before any hook is installed
        ranges = Ranges(model, bench.target, labels)
        try:
            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
                for _ in range(args.repeats):
                    one_pass(bench, nodes, tree)
        finally:
            ranges.close()
        nbytes = class_bytes(model, labels, r, args.prompt_len + r)
        passes.append({"rows": r, "depth": depth, "context": args.prompt_len + r,
                       **summarize(attribute(prof, cuda), nbytes, set(labels.values()) | {"other"}),
                       "wall_ms": round(statistics.median(wall), 4), "wall_samples_ms": [round(w, 4) for w in wall],
                       "weight_bytes": weight_bytes, "read_bytes": sum(nbytes.values()),
                       "floor_ms": round(weight_bytes / gbps / 1e6, 4),
                       "floor_read_ms": round(sum(nbytes.values()) / gbps / 1e6, 4)})
        if args.trace:
            traces += save_profile(prof, out_dir, f"trace_{args.preset}_r{r}")
    info = {"preset": args.preset, "layers": fields["num_hidden_layers"], "dtype": dtype, "device": str(device),
            "params_b": sum(p.numel() for p in model.parameters()) / 1e9, "target_class": type(bench.target).__name__,
            "gpu_name": torch.cuda.get_device_name(device) if cuda else "none",
            "kernel_path": getattr(bench.target, "kernel_path", "torch"),
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "time_basis": "CUDA kernel time (kineto)" if cuda else "CPU self time of ops", "copy_bytes": copy_bytes,
            "copy_gbps": round(gbps, 2), "prompt_len": args.prompt_len, "repeats": args.repeats, "draft": args.draft,
            "traces": traces, "torch": torch.__version__, "transformers": transformers.__version__, "config": fields}
    stem = out_dir / f"profile_{args.preset}"
    text = (f"{args.preset}, {info['layers']} layers ({info['params_b']:.3g} B params), {dtype} on "
            f"{info['gpu_name'] if cuda else 'cpu'}, {info['target_class']} kernel_path={info['kernel_path']}, prompt "
            f"{args.prompt_len}, {info['time_basis']}, copy {gbps:.1f} GB/s moved\n\n" + "\n".join(map(table, passes)))
    Path(f"{stem}.json").write_text(json.dumps({"meta": info, "passes": passes}, indent=1))
    Path(f"{stem}.md").write_text(text)
    print("\n" + text)
    print(json.dumps({"out": f"{stem}.json", "preset": args.preset, "layers": info["layers"], "copy_gbps": info[
        "copy_gbps"], "passes": [{k: p[k] for k in ("rows", "kernel_ms", "wall_ms", "floor_ms")} for p in passes]},
        separators=(",", ":")))


if __name__ == "__main__":
    main()
