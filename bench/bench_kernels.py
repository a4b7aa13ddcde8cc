"""Micro-benchmarks of the building blocks of one decoding step, each timed inside a CUDA graph (as the runner's
graph decoder replays them), to choose how a step computes them.

    python bench/bench_kernels.py --preset demo-qwen3 --caps 1024,2048 --out kernels.json
    python bench/bench_kernels.py --preset qwen3-8b --caps 2048
    python bench/bench_kernels.py --kinds tree --budgets 64,128,256,512 [--vocab 151936]

What is timed (microseconds per call: --calls calls captured in one graph, median of --repeats replays):
- `attention/<variant>` for queries Q (1 = AR, 16 = drafter block, 17/65/129/257 = verify) over a static cache of
  C rows with an additive [Q, C] mask, shaped as the preset's attention layers:
    repeat-<backend>   transformers' SDPA path with a mask: K/V repeated to every query head, then SDPA
    packed-<backend>   the query heads of one K/V head stacked along the query axis (one K/V read, no copy)
    kernel-default     remote.kernels.attention (one Triton kernel, bool mask), whatever the head size
  with <backend> default (torch's choice), cudnn, efficient or math.
- `norm/<variant>` over [Q, hidden]: transformers' Qwen3RMSNorm (six kernels) vs F.rms_norm.
- `select/<variant>`: one level of the best-first tree build (remote.decoding.tree_build): top-`budget` of the
  candidate scores, torch.topk, a stable descending sort, or pairwise ranking (`remote.decoding.tree_build.ranked`),
  also torch.compile'd.
- `tree/<variant>`: a whole tree from [15, --vocab] draft logits, spread or a confident spine (`tree_fns`): `torch`
  (remote.decoding.tree_build's torch ops), `kernel` (the runner's: remote.kernels.tree_search's top-k and search),
  `search-w<N>` (the search kernel alone at N warps), `top_k-c<C>` (the draft top-k alone, C vocabulary entries a
  stage-1 program).
- `proj/<group>-<separate|fused>`: the projections that share an input (q/k/v, gate/up, a GDN layer's in_proj_*)
  of --proj-preset's first layers, each member its own GEMM against one GEMM over the concatenated weight
  (remote.kernels.fused_linear), for --queries rows; `gbps` is the weights' bytes read per second. Up to 128 rows
  also `<group>-gemv` and, for o_proj, down_proj and lm_head, `<name>-<cublas|gemv>`: cuBLAS against the one-row
  and few-row kernels (remote.kernels.gemv); from 2 rows `-split`, the few rows split over K
  (remote.kernels.gemm_split).
- `glue/<piece>-<eager|compiled>`: each piece of remote.kernels.glue (rotary, silu_mul; on a hybrid preset also
  the gated norm, the GDN gates, the zero-centred norm and a residual add with it) at --proj-preset's widths for
  --queries rows, plain against torch.compile'd.
- `gdn/<variant>`: one GDN layer's tree recurrence for a DFlash chain of 16 and best-first trees of --budgets + 1
  nodes from two drafts (`spine`: a confident drafter's, one token a depth far ahead, a 15-deep spine and its
  siblings; `spread`: an unsure one's, shallow and bushy, as random weights draw), at the value-head shapes of
  --gdn-preset: `node-v<BV>-w<W>` the per-node kernel (remote.kernels.gdn_tree, BV value columns a program, W
  warps), `chunk-n<BN>-v<BV>-w<W>-<dot>` the chunked one (remote.kernels.gdn_chunked, blocks of BN nodes, float32
  products at `dot` precision), `solve-v<BV>-w<W>-<dot>-<dot>` the two-launch one (remote.kernels.gdn_solve:
  BV value columns a program of its second launch, W warps, its products' precisions; `solve-first` its first
  launch alone, the per-head solve of T and M; `solve-powers-v<BV>` its FORM "powers"), `state` the chunked
  commit's state build after the deepest node, `node-none` /
  `node-keep` / `node-save` the per-node kernel keeping nothing / every node's state / every node's inputs,
  `commit-install-6` / `commit-recompute-6` a DDTree commit of 6 stacked layers from kept states / from kept inputs
  (remote.kernels.gdn_install), `token-1` our one-token step (AR's without fla: gdn_tree.token_step), `fla-step-1`
  fla's (AR's with it), where installed.
- `sample/<variant>`: one temperature draw for each of --queries rows of --vocab logits (remote.decoding.sampling):
  `torch` (softmax, cumulative sum and searchsorted), `kernel-c<C>` (remote.kernels.sample_rows, C logits a
  program; the runner's chunk is its CHUNK).
- `conv/<variant>`: one GDN layer's conv over 1 / 16 / 32 / 64 windows and its gates at --gdn-preset's widths:
  `compiled` / `compiled-dynamic` (torch.compile'd for the shape / for any), `kernel` (remote.kernels.conv_gates, one
  launch), `eager`.
The last stdout line is compact JSON; --out writes the rows.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from fnmatch import fnmatch
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm  # noqa: E402

from remote.kernels import attention as attention_kernel, gemv, sample_rows, tree_search  # noqa: E402
from remote.decoding.sampling import inverse_cdf  # noqa: E402
from remote.decoding.tree_build import _plan, _sizes, kernel_tree, ranked, torch_tree  # noqa: E402

SHAPES = {   # (query heads, K/V heads, head dim, hidden size)
    "demo-qwen3": (4, 2, 64, 256),
    "qwen3-8b": (32, 8, 128, 4096),
    "qwen3.6-27b": (24, 4, 256, 5120),
}
GDN_SHAPES = {   # (value heads, key head dim, value head dim) of the GDN layers
    "demo-qwen3_5": (4, 64, 64),
    "qwen3.6-27b": (48, 128, 128),
    "hv16-d128": (16, 128, 128),        # between them: a 1 MiB recurrent state (remote.kernels.gdn_paths)
}
BACKENDS = {"default": None, "cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "math": SDPBackend.MATH}


def graph_us(fn, calls: int, repeats: int) -> float | None:
    """Median microseconds per call of `fn` replayed in a CUDA graph of `calls` calls; None if it cannot run."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception:          # noqa: BLE001 - a variant this host cannot run (backend, Triton resources)
        return None
    graph.replay()
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def attention_fns(heads: int, kv_heads: int, dim: int, q: int, cap: int, backend) -> dict:
    groups = heads // kv_heads
    query = torch.randn(1, heads, q, dim, device="cuda", dtype=torch.bfloat16)
    key, value = (torch.randn(1, kv_heads, cap, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    visible = torch.rand(q, cap, device="cuda") < 0.6
    visible[:, 0] = True
    mask = torch.zeros(q, cap, device="cuda", dtype=torch.bfloat16).masked_fill_(~visible, -3e38)[None, None]

    def repeat():
        k = key[:, :, None].expand(1, kv_heads, groups, cap, dim).reshape(1, heads, cap, dim)
        v = value[:, :, None].expand(1, kv_heads, groups, cap, dim).reshape(1, heads, cap, dim)
        with sdpa_kernel(backend) if backend else _null():
            return F.scaled_dot_product_attention(query, k, v, attn_mask=mask)

    def packed():
        stacked = query.view(1, kv_heads, groups * q, dim)
        tiled = mask.expand(1, groups, q, cap).reshape(1, 1, groups * q, cap)
        with sdpa_kernel(backend) if backend else _null():
            out = F.scaled_dot_product_attention(stacked, key, value, attn_mask=tiled)
        return out.view(1, heads, q, dim)

    fns = {"repeat": repeat, "packed": packed}
    if backend is None:      # the runner's Triton kernel, also past the head sizes `available` admits
        fns["kernel"] = lambda: attention_kernel.attention(query, key, value, visible, dim ** -0.5)
    return fns


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def norm_fns(hidden: int, q: int) -> dict:
    module = Qwen3RMSNorm(hidden, eps=1e-6).to("cuda", torch.bfloat16)
    x = torch.randn(1, q, hidden, device="cuda", dtype=torch.bfloat16)
    return {"qwen3": lambda: module(x),
            "rms_norm": lambda: F.rms_norm(x, (hidden,), module.weight, module.variance_epsilon)}


def select_fns(budget: int) -> dict:
    plan = _plan(15, budget, budget, torch.device("cuda"))
    scores = torch.randn(plan.parent.shape[0], device="cuda")
    return {"topk": lambda: torch.topk(scores, budget),
            "sort": lambda: torch.sort(scores, descending=True, stable=True)[0][:budget],
            "rank": lambda: ranked(scores, budget),
            "rank-compiled": torch.compile(lambda: ranked(scores, budget))}


def tree_fns(vocab: int, budget: int, draft: str) -> dict:
    """`draft`: `spread` logits (N(0, 9): a bushy tree, whose search stops after a few levels, like the demo
    drafters') or a `spine` (one token far ahead at every depth, as from a confident drafter: all 15 levels)."""
    logits = torch.randn(15, vocab, device="cuda") * (3 if draft == "spread" else 1)
    if draft == "spine":
        logits[:, 0] += 12
    k = min(budget, vocab)
    plan = _plan(15, k, budget, torch.device("cuda"))
    top_lp, top_ids = tree_search.top_k(logits, k)
    search = {f"search-w{w}": (lambda w=w: tree_search._launch(
        lambda kernel: kernel, top_lp, top_ids, plan.parent, plan.rank, _sizes((budget,), top_lp.device), budget,
        plan.levels, min(budget, plan.real), num_warps=w)) for w in (1, 2, 4, 8, 16)}
    # the draft top-k alone at several chunk widths (a program sorts one chunk of a row; the merge stays)
    chunks = {f"top_k-c{c}": (lambda c=c: tree_search._launch_top_k(lambda kernel: kernel, logits, k, c))
              for c in (256, 512, 1024, 2048, 4096) if c <= max(vocab, 512)}
    return {"torch": lambda: torch_tree(logits, budget, k, plan),
            "kernel": lambda: kernel_tree(logits, budget, k, plan, ()), **search, **chunks}


def sample_fns(vocab: int, q: int) -> dict:
    logits = torch.randn(q, vocab, device="cuda", dtype=torch.bfloat16) * 3
    u = torch.rand(q, 1, device="cuda")
    kernels = {f"kernel-c{c}": (lambda c=c: sample_rows._launch(logits, 1.0, u, c)) for c in (1024, 2048, 4096, 8192)}
    return {"torch": lambda: inverse_cdf(logits, 1.0, u), **kernels}


def conv_fns(preset: str, nodes: int) -> dict:
    """One GDN layer's conv over `nodes` windows (1: AR's step, from the bank's last columns) and its gates at
    --gdn-preset's widths (key heads repeated 3x at Qwen3.6-27B's): torch.compile'd for this shape, and dynamic (what
    remote.kernels.glue's compile serves a second shape with), the one-launch kernel (remote.kernels.conv_gates), and
    the torch ops."""
    from remote.kernels import conv_gates as kernel
    from remote.models.gdn import conv_gates

    heads, dk, dv = GDN_SHAPES[preset]
    rep = 3 if preset == "qwen3.6-27b" else 1
    key_dim, value_dim, width = heads // rep * dk, heads * dv, 4
    channels = 2 * key_dim + value_dim
    cuda = dict(device="cuda", dtype=torch.bfloat16)
    bank = torch.randn(channels, width + nodes, **cuda)
    index = None if nodes == 1 else torch.randint(0, width + nodes, (nodes, width), device="cuda")
    weight, bias = torch.randn(channels, width, **cuda), None
    b, a = torch.randn(1, nodes, heads, **cuda), torch.randn(1, nodes, heads, **cuda)
    a_log, dt_bias = torch.randn(heads, device="cuda"), torch.randn(heads, device="cuda")
    args = (bank, index, weight, bias, b, a, a_log, dt_bias, (key_dim, value_dim, dk, dv, rep), "silu")
    static, dynamic = torch.compile(conv_gates, dynamic=False), torch.compile(conv_gates, dynamic=True)
    return {"compiled": lambda: static(*args), "compiled-dynamic": lambda: dynamic(*args),
            "kernel": lambda: kernel.conv_gates(*args), "eager": lambda: conv_gates(*args)}


def gdn_fns(preset: str, nodes: int, draft: str = "spine") -> dict:
    """One GDN layer's tree recurrence for a chain (nodes 16) or a best-first tree of `nodes - 1` draft nodes from
    `draft` (module docstring): the per-node kernel (remote.kernels.gdn_tree, node states kept) and the chunked one
    (remote.kernels.gdn_chunked) at several blockings, the chunked commit's state build after the deepest node, what
    a DDTree verify keeps for its commit and that commit both ways, and the one-token step: ours, and fla's where
    installed."""
    from remote.kernels import gdn_chunked, gdn_tree
    from remote.decoding.tree_build import best_first_tree
    from remote.tree import Ancestry

    heads, dk, dv = GDN_SHAPES[preset]
    if nodes == 16:
        tree = Ancestry.chain_of(16, torch.device("cuda"))
    else:
        logits = torch.randn(15, 4096, device="cuda")
        if draft == "spine":
            logits[:, 0] += 12
        tree = best_first_tree(logits, nodes - 1).ancestry()
    n, visible = tree.size, tree.visible
    q, k = (torch.randn(n, heads, dk, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(n, heads, dv, device="cuda", dtype=torch.bfloat16)
    g, beta = -torch.rand(n, heads, device="cuda"), torch.rand(n, heads, device="cuda")
    state = torch.randn(heads, dk, dv, device="cuda")
    _, solved = gdn_chunked.tree_recurrence(q, k, v, g, beta, state, visible, tree.height)
    deepest = tree.depth.argmax().view(1)

    def variant(module, fn, **knobs):
        def run():
            saved = {knob: getattr(module, knob) for knob in knobs}
            for knob, value in knobs.items():
                setattr(module, knob, value)
            try:
                fn()
            finally:
                for knob, value in saved.items():
                    setattr(module, knob, value)
        return run

    per_node = lambda: gdn_tree.tree_recurrence(q, k, v, g, beta, state, tree.ancestors, tree.depth,  # noqa: E731
                                                keep=True)
    chunked = lambda: gdn_chunked.tree_recurrence(q, k, v, g, beta, state, visible, tree.height)  # noqa: E731
    commit = lambda: gdn_chunked.node_state(k, solved, state, visible, deepest)                    # noqa: E731
    fns = {f"node-v{bv}-w{w}": variant(gdn_tree, per_node, BLOCK_V=bv, NUM_WARPS=w)
           for bv, w in ((4, 1), (8, 1), (16, 1), (16, 2), (32, 1))}
    # slower at 27B widths on one H200 with --kinds gdn --gdn-preset qwen3.6-27b: TF32x3 and 8 warps (2026-12-03);
    # 16 columns, 2 warps, blocks of 32 nodes (2026-12-04)
    shapes = [(16, 32, 4, "ieee"), (16, 64, 4, "ieee")]
    fns.update({f"chunk-n{bn}-v{bv}-w{w}-{dot}": variant(gdn_chunked, chunked, BLOCK_N=bn, BLOCK_V=bv, NUM_WARPS=w,
                                                          DOT=dot) for bn, bv, w, dot in shapes if bv <= dv})
    fns["state"] = commit
    fns.update(solve_fns(variant, (q, k, v, g, beta, state, visible), tree.height, solved, deepest))
    return {**fns, **commit_fns((q, k, v, g, beta, state), tree, deepest)}


def commit_fns(inputs: tuple, tree, deepest: torch.Tensor) -> dict:
    """What a DDTree verify keeps for its commit, and the commit of 6 stacked layers (the demo hybrid's GDN layers):
    node states then a copy (remote.kernels.gdn_install.install), or node inputs then a recompute (.recompute); the
    one-token step, ours and fla's where installed."""
    from remote.kernels import gdn_install, gdn_tree

    q, k, v, g, beta, state = inputs
    (n, heads, dk), dv, fns = k.shape, v.shape[-1], {}
    layers, channels = 6, 2 * heads * dk + heads * dv
    kept = torch.zeros(layers, n, heads, dk, dv, device="cuda")
    saved = torch.empty(layers, n, heads, gdn_tree.saved_width(dk, dv), device="cuda")

    def node(**kept_as):
        return lambda: gdn_tree.tree_recurrence(q, k, v, g, beta, state, tree.ancestors, tree.depth, **kept_as)
    fns.update({"node-none": node(keep=False), "node-keep": node(keep=True, states=kept[0]),
                "node-save": node(keep=False, saved=saved[0])})
    fns["node-save"]()
    bank = torch.randn(layers, channels, 4 + n, device="cuda", dtype=torch.bfloat16)
    conv_index = torch.randint(0, 4 + n, (n, 4), device="cuda")
    conv, rec = torch.empty(layers, channels, 4, device="cuda", dtype=torch.bfloat16), state.repeat(layers, 1, 1, 1)
    saved.copy_(saved[:1].expand_as(saved))
    fns[f"commit-install-{layers}"] = lambda: gdn_install.install(  # noqa: E731
        bank, kept, conv_index, deepest, conv, rec)
    fns[f"commit-recompute-{layers}"] = lambda: gdn_install.recompute(  # noqa: E731
        bank, saved, tree.ancestors, tree.depth, conv_index, deepest, conv, rec)
    one, token_state = [x[:1][None] for x in (q, k, v, g, beta)], state[None].clone()
    fns["token-1"] = lambda: gdn_tree.token_step(*one, token_state)                    # noqa: E731
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_step
    except ImportError:
        return fns
    fns["fla-step-1"] = lambda: fla_step(*one[:3], g=one[3], beta=one[4], initial_state=state[None],
                                         output_final_state=True, use_qk_l2norm_in_kernel=True)
    return fns


# remote.kernels.gdn_solve's tiles and precisions: (value columns a program, warps, the N x N products', the second
# launch's); the first is the module's default
SOLVE_SHAPES = [(32, 4, "tf32x3", "tf32x3"), (16, 4, "tf32x3", "tf32x3"), (64, 4, "tf32x3", "tf32x3"),
                (32, 8, "tf32x3", "tf32x3"), (16, 2, "tf32x3", "tf32x3"), (32, 4, "tf32x3", "ieee"),
                (32, 4, "ieee", "ieee"), (32, 4, "tf32", "tf32")]


def solve_fns(variant, inputs: tuple, height: int, solved: tuple, deepest: torch.Tensor) -> dict:
    """`solve-v<BV>-w<W>-<solve dot>-<apply dot>`: remote.kernels.gdn_solve's tree recurrence of `inputs` (q, k, v, g,
    beta, state, visible) at SOLVE_SHAPES (the chunked kernel's contract: `chunk-...` rows are its rivals; past its
    MAX_NODES it is the chunked kernel); `solve-state-v<BV>`: its commit state build after the deepest node (the
    chunked one's: `state`)."""
    from remote.kernels import gdn_solve

    k, state, visible, dv = inputs[1], inputs[5], inputs[6], inputs[2].shape[-1]
    run = lambda: gdn_solve.tree_recurrence(*inputs, height)                                # noqa: E731
    build = lambda: gdn_solve.node_state(k, solved, state, visible, deepest)               # noqa: E731
    fns = {f"solve-v{bv}-w{w}-{solve}-{apply}": variant(gdn_solve, run, BLOCK_V=bv, NUM_WARPS=w, DOT_SOLVE=solve,
                                                        DOT_APPLY=apply)
           for bv, w, solve, apply in SOLVE_SHAPES if bv <= max(dv, 16)}
    fns["solve-first"] = lambda: gdn_solve.solve_launch(*inputs[:2], *inputs[3:5], visible, height)  # noqa: E731
    fns.update({f"solve-powers-v{bv}": variant(gdn_solve, run, FORM="powers", BLOCK_V=bv) for bv in (16, 32)})
    fns.update({f"solve-state-v{bv}": variant(gdn_solve, build, BLOCK_V=bv) for bv in (16, 32, 64)
                if bv <= max(dv, 16)})
    return fns


def glue_fns(preset: str, q: int) -> dict:
    """{variant: fn}: each piece of remote.kernels.glue at `preset`'s widths (bench_verify.PRESETS) for q rows, eager
    (transformers' / our plain function) against compiled."""
    import importlib

    from bench_verify import model_config
    from remote.kernels import glue
    from remote.models.gdn import gates

    c = model_config(preset, 4, {})
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    heads, kv, dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    hybrid = "linear_num_value_heads" in c
    modeling = importlib.import_module("transformers.models.qwen3_5.modeling_qwen3_5" if hybrid else
                                       "transformers.models.qwen3.modeling_qwen3")
    rot = int(dim * c.get("rope_parameters", {}).get("partial_rotary_factor", 1.0))
    qs, ks = torch.randn(1, heads, q, dim, **bf16), torch.randn(1, kv, q, dim, **bf16)
    cos, sin = torch.randn(1, q, rot, **bf16), torch.randn(1, q, rot, **bf16)
    gate, up = torch.randn(1, q, c["intermediate_size"], **bf16), torch.randn(1, q, c["intermediate_size"], **bf16)
    pieces = {"rotary": (modeling.apply_rotary_pos_emb, (qs, ks, cos, sin)), "silu_mul": (glue.silu_mul, (gate, up))}
    if hybrid:
        hv, hk, dk, dv = (c[f"linear_{n}"] for n in ("num_value_heads", "num_key_heads", "key_head_dim",
                                                       "value_head_dim"))
        x, z = torch.randn(q * hv, dv, **bf16), torch.randn(q * hv, dv, **bf16)
        conv = torch.randn(1, q, 2 * hk * dk + hv * dv, **bf16)
        b, a = torch.randn(1, q, hv, **bf16), torch.randn(1, q, hv, **bf16)
        a_log, dt_bias = torch.randn(hv, device="cuda"), torch.randn(hv, device="cuda")
        pieces["gated_norm"] = (glue.gated_norm, (x, z, torch.randn(dv, **bf16), 1e-6))
        pieces["gates"] = (gates, (conv, b, a, a_log, dt_bias, (hk * dk, hv * dv, dk, dv, hv // hk)))
        hidden, scale = torch.randn(1, q, c["hidden_size"], **bf16), torch.randn(c["hidden_size"], device="cuda")
        pieces["norm"] = (glue.zero_centred_norm, (hidden, scale, 1e-6))
        pieces["add_norm"] = (glue.add_zero_centred_norm, (hidden, hidden.clone(), scale, 1e-6))
    fns = {}
    for name, (fn, args) in pieces.items():
        fns[f"{name}-eager"] = lambda fn=fn, args=args: fn(*args)
        fns[f"{name}-compiled"] = lambda fn=glue._compiled(fn), args=args: fn(*args)
    return fns


def preset_model(preset: str):
    """`preset`'s first four layers (a hybrid's: three GDN layers and one attention layer) at random, bf16, on CUDA."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from bench_verify import model_config

    fields = model_config(preset, 4, {})
    with torch.device("cuda"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(fields.pop("model_type"), **fields),
                                                torch_dtype=torch.bfloat16)


def group_name(group) -> str:
    """A fused projection group's name: its members' without `_proj`, joined by "+" (q+k+v, gate+up)."""
    return "+".join(n.removesuffix("_proj") for n in group.names)


def proj_fns(preset: str, q: int) -> dict:
    """{variant: (fn, weight bytes)} for each distinct projection group of `preset` (bench_verify.PRESETS)."""
    from remote.kernels import gemm_split
    from remote.kernels.fused_linear import fuse

    model = preset_model(preset)
    x = torch.randn(1, q, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
    fns = {}
    for group in fuse(model):
        name = group_name(group)
        if f"{name}-fused" in fns:
            continue
        size = group.weight.numel() * group.weight.element_size()
        members = [(m.weight, m.bias) for m in group.members]
        fns[f"{name}-separate"] = (lambda ms=members: [F.linear(x, w, b) for w, b in ms], size)
        fns[f"{name}-fused"] = (lambda g=group: F.linear(x, g.weight, g.bias), size)
        if q <= gemv.MAX_ROWS:
            fns[f"{name}-gemv"] = (lambda g=group: gemv._op(x, g.weight, g.bias), size)
        if 1 < q <= gemv.MAX_ROWS:
            fns[f"{name}-split"] = (lambda g=group: gemm_split.split_linear(x, g.weight, g.bias), size)
    layer = model.model.layers[-1]
    for name, linear in [("o", getattr(layer.self_attn, "o_proj", None)), ("down", layer.mlp.down_proj),
                         ("lm_head", model.lm_head)] if q <= gemv.MAX_ROWS else ():
        if linear is not None:
            size = linear.weight.numel() * linear.weight.element_size()
            xi = torch.randn(1, q, linear.in_features, device="cuda", dtype=torch.bfloat16)
            fns[f"{name}-cublas"] = (lambda m=linear, xi=xi: F.linear(xi, m.weight, m.bias), size)
            fns[f"{name}-gemv"] = (lambda m=linear, xi=xi: gemv._op(xi, m.weight, m.bias), size)
            if q > 1:
                fns[f"{name}-split"] = (lambda m=linear, xi=xi: gemm_split.split_linear(xi, m.weight, m.bias), size)
    return fns


def gdn_rows(args, kinds: list[str], record) -> None:
    """The `gdn` kind's rows (those --gdn-variants names) and the `conv` kind's, at --gdn-preset's widths."""
    trees = [(16, "chain"), *((b + 1, d) for b in map(int, args.budgets.split(",")) for d in ("spine", "spread"))]
    for nodes, draft in trees if "gdn" in kinds else ():
        for name, fn in gdn_fns(args.gdn_preset, nodes, draft).items():
            if any(fnmatch(name, pattern) for pattern in args.gdn_variants.split(",")):
                record("gdn", name, graph_us(fn, args.calls, args.repeats), nodes=nodes, draft=draft,
                       preset=args.gdn_preset)
    for nodes in (1, 16, 32, 64) if "conv" in kinds else ():
        for name, fn in conv_fns(args.gdn_preset, nodes).items():
            record("conv", name, graph_us(fn, args.calls, args.repeats), nodes=nodes, preset=args.gdn_preset)


def fastest_attention(rows: list[dict]) -> dict:
    """{q<queries>-c<cap>: (variant, us)}: the fastest attention variant of each shape."""
    best = {}
    for row in rows:
        if row["kind"] == "attention" and row["us"] is not None:
            key = f"q{row['q']}-c{row['cap']}"
            if key not in best or row["us"] < best[key][1]:
                best[key] = (row["variant"], round(row["us"], 2))
    return best


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="demo-qwen3", choices=sorted(SHAPES))
    p.add_argument("--caps", default="1024,2048", help="static cache rows, comma-separated")
    p.add_argument("--queries", default="1,16,17,65,129,257")
    p.add_argument("--budgets", default="16,64,128,256,512")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--kinds", default="attention,norm,select,tree", help="which blocks to time")
    p.add_argument("--vocab", type=int, default=4096, help="vocabulary of the `tree` and `sample` kinds")
    p.add_argument("--proj-preset", default="qwen3-8b", help="widths of the proj and glue kinds (bench_verify.PRESETS)")
    p.add_argument("--gdn-preset", default="demo-qwen3_5", choices=sorted(GDN_SHAPES))
    p.add_argument("--gdn-variants", default="*", help="which gdn variants to time: comma-separated fnmatch patterns")
    p.add_argument("--out")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_kernels needs a CUDA device")
    heads, kv_heads, dim, hidden = SHAPES[args.preset]
    rows = []

    def record(kind: str, variant: str, us: float | None, **shape):
        rows.append({"kind": kind, "variant": variant, "us": us, **shape})
        print(f"{kind:10s} {variant:18s} {json.dumps(shape):34s} {'-' if us is None else f'{us:8.2f}'}", flush=True)

    kinds = args.kinds.split(",")
    with torch.inference_mode():
        for cap in map(int, args.caps.split(",")) if "attention" in kinds else ():
            for q in map(int, args.queries.split(",")):
                for name, backend in BACKENDS.items():
                    for layout, fn in attention_fns(heads, kv_heads, dim, q, cap, backend).items():
                        record("attention", f"{layout}-{name}", graph_us(fn, args.calls, args.repeats), q=q, cap=cap)
        for q in map(int, args.queries.split(",")) if "norm" in kinds else ():
            for name, fn in norm_fns(hidden, q).items():
                record("norm", name, graph_us(fn, args.calls, args.repeats), q=q)
        for budget in map(int, args.budgets.split(",")) if "select" in kinds else ():
            for name, fn in select_fns(budget).items():
                record("select", name, graph_us(fn, args.calls, args.repeats), budget=budget)
        for budget in map(int, args.budgets.split(",")) if "tree" in kinds else ():
            for draft in ("spread", "spine"):
                for name, fn in tree_fns(args.vocab, budget, draft).items():
                    record("tree", name, graph_us(fn, args.calls, args.repeats), budget=budget, vocab=args.vocab,
                           draft=draft)
        for q in map(int, args.queries.split(",")) if "proj" in kinds else ():
            for name, (fn, size) in proj_fns(args.proj_preset, q).items():
                us = graph_us(fn, args.calls, args.repeats)
                record("proj", name, us, q=q, preset=args.proj_preset, gbps=us and round(size / us / 1e3))
        for q in map(int, args.queries.split(",")) if "glue" in kinds else ():
            for name, fn in glue_fns(args.proj_preset, q).items():
                record("glue", name, graph_us(fn, args.calls, args.repeats), q=q, preset=args.proj_preset)
        gdn_rows(args, kinds, record)
        for q in map(int, args.queries.split(",")) if "sample" in kinds else ():
            for name, fn in sample_fns(args.vocab, q).items():
                record("sample", name, graph_us(fn, args.calls, args.repeats), q=q, vocab=args.vocab)
    meta = {"preset": args.preset, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(json.dumps({"meta": meta, "fastest_attention": fastest_attention(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
