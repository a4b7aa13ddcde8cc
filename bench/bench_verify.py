"""Per-step cost of the target side of speculative decoding on a random-weight model: tree verify vs chain verify
vs one AR token, through the runner's own code paths.

    python bench/bench_verify.py --preset qwen3.6-27b --layers 16 --out verify_27b.json --profile prof_27b
    python bench/bench_verify.py --preset qwen3-8b --layers 36 --out verify_8b.json

What is measured, after a prompt prefill of --prompt-len random tokens (a fresh prefill before every measure, so
every measure sees the same context length; each step then commits --accept drafted tokens + the root):

- `tree`  : one DDTree verify + commit through `remote.models.backends.build_target` (AttentionTarget / HybridTarget),
            tree from `remote.decoding.tree_build.build_tree` at each --budgets value on synthetic draft logits
            (--draft peaked: a confident-then-fading drafter, realistic depth; random: flat, a depth-1 fan).
            `verify_ms` includes choosing the target token at every node (one host sync), as the runner's verify phase
            does.
- `chain` : the same number of tokens (budget + 1, the root included) verified as a chain, committing as many.
- `ar`    : ms per token of `remote.decoding.loop.generate_ar` (the runner's AR, TPOT as the runner reports it).
- `hf_generate` : ms per token of the model's own `generate` (greedy, KV cache), (t(n) - t(1)) / (n - 1).
- `prefill`: `Target.prefill` of the prompt.

Times are medians of --repeats samples (fewer when a measure outlasts --measure-s, never fewer than
--min-repeats), after --warmup untimed calls per measure and one untimed pass over every kind (the first
configuration of a process runs several times slower). Wall times are perf_counter deltas between
`torch.cuda.synchronize()` calls. On CUDA, `gpu_busy_ms` is the kernel time the profiler attributes to the same
region (the mean over --busy-steps profiled calls, taken after the timed ones); busy / wall near 1 means
compute-bound, far below 1 means the GPU waits on the host (launches, Python, syncs). `--profile DIR` also writes
chrome traces (gzipped when large) of --profile-kinds and one key_averages table per traced kind.

Output: a markdown table on stdout, {"meta", "rows"} as JSON at --out, and the last stdout line is compact JSON.
Non-goals: drafter cost (the drafter is not run), accuracy (random weights), several GPUs.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from conf import random_fields  # noqa: E402
from remote.models.backends import build_target  # noqa: E402
from remote.decoding.loop import generate_ar  # noqa: E402
from remote.models.drafter_io import even_layer_ids  # noqa: E402
from remote.models.loading import load_target, pick_device  # noqa: E402
from remote.spec import ModelSpec  # noqa: E402
from remote.timing import PhaseTimer  # noqa: E402
from remote.decoding.tree_build import build_tree  # noqa: E402

# Text widths of the published configs (Qwen/Qwen3.6-27B text_config, the orchestrator's model=random-qwen3.6-27b;
# Qwen/Qwen3-8B); --layers cuts the depth.
PRESETS: dict[str, dict] = {
    "qwen3.6-27b": random_fields("random-qwen3.6-27b"),
    "qwen3-8b": dict(
        model_type="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
        max_position_embeddings=40960, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # conf/model/tiny-qwen3_5.yaml and tiny-qwen3.yaml: for CPU tests
    "tiny-hybrid": random_fields("tiny-qwen3_5"),
    "tiny-qwen3": random_fields("tiny-qwen3"),
}
HYBRID_TYPES = ("qwen3_5_text", "qwen3_next")


def model_config(preset: str, layers: int | None, overrides: dict) -> dict:
    if preset not in PRESETS:
        raise SystemExit(f"--preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    fields = {**PRESETS[preset], **overrides}
    if layers:
        fields["num_hidden_layers"] = layers
    if fields["model_type"] in HYBRID_TYPES and "layer_types" not in overrides:
        # Qwen3.5/3.6: three Gated DeltaNet layers, then one full-attention layer, repeated
        fields["layer_types"] = ["full_attention" if i % 4 == 3 else "linear_attention"
                                 for i in range(fields["num_hidden_layers"])]
    return fields


def draft_logits(kind: str, depth: int, vocab: int, seed: int, device: torch.device) -> torch.Tensor:
    """Synthetic drafter output [depth, vocab] float32. `peaked`: six candidates per row well above a N(0, 1)
    floor, the favourite's margin fading with depth (top-1 p ~0.7 near the root, ~0.2 at depth 15 for a 248k
    vocabulary), so best-first trees grow a deep spine with bushy upper levels, like a trained drafter's.
    `random`: the floor alone, which makes build_tree fan out at depth 1."""
    if kind not in ("peaked", "random"):
        raise SystemExit(f"--draft must be one of peaked, random; got {kind!r}")
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(depth, vocab, generator=g)
    if kind == "peaked":
        offsets = torch.tensor([0.0, -1.5, -2.5, -3.0, -3.5, -4.0])
        top = math.log(vocab) + 3.5                     # above the floor's log-partition (~log V + 0.5)
        for d in range(depth):
            ids = torch.randperm(vocab, generator=g)[: len(offsets)]
            logits[d, ids] = top - 0.3 * d + offsets
    return logits.to(device)


def first_child_path(children: list[dict[int, int]], accept: int) -> list[int]:
    """Root-to-node path taking the best-scored child (the lowest index: build_tree adds best first)."""
    path = [0]
    while len(path) <= accept and children[path[-1]]:
        path.append(min(children[path[-1]].values()))
    return path


class Clock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def verify_step(target, tokens: list[int], parents: list[int], path: list[int], clock: Clock,
                device: torch.device) -> dict[str, float]:
    t0 = clock.now()
    with record_function("verify"):
        nodes = torch.tensor(tokens, device=device)                               # [N]
        verified = target.verify(nodes, parents)
        verified.logits.argmax(dim=-1).tolist()                                   # the runner's per-node choice
    t1 = clock.now()
    with record_function("commit"):
        target.commit(path)
        verified.features[path]                                                   # the drafter's next context
    t2 = clock.now()
    return {"step_ms": 1e3 * (t2 - t0), "verify_ms": 1e3 * (t1 - t0), "commit_ms": 1e3 * (t2 - t1)}


class Bench:
    """One model, one target, one prompt; `measure(kind, ...)` appends one row."""

    def __init__(self, args, model, device: torch.device, deadline: float):
        self.args, self.model, self.device, self.clock = args, model, device, Clock(device)
        layers = model.config.get_text_config().num_hidden_layers
        self.target = build_target(model, even_layer_ids(layers, min(args.target_layers, layers)))
        vocab = model.get_input_embeddings().weight.shape[0]
        g = torch.Generator().manual_seed(args.seed)
        self.prompt = torch.randint(0, vocab, (1, args.prompt_len), generator=g).to(device)   # [1, P]
        self.logits = draft_logits(args.draft, args.block_size - 1, vocab, args.seed, device)
        self.deadline = deadline
        self.rows: list[dict] = []
        self.traces: list[str] = []

    # ---- the kinds: `plan` returns (fn, row fields); fn() runs one sample and returns {name: ms} ------------------
    def plan(self, name: str, budget: int | None):
        if name == "prefill":
            return self._prefill_once, {"tokens": self.args.prompt_len}
        if name == "ar":
            return lambda: self._ar(self.args.ar_tokens), {"tokens": 1}
        if name == "hf_generate":
            return lambda: self._hf(self.args.ar_tokens), {"tokens": 1}
        tree = build_tree(self.logits, budget)
        tokens = [int(self.prompt[0, -1])] + tree.tokens                          # root + nodes
        path = first_child_path(tree.children, self.args.accept)
        if name == "chain":
            parents, path = list(range(-1, len(tokens) - 1)), list(range(len(path)))
            depth = len(tokens) - 1
        else:
            parents, depth = tree.verify_parents(), max(tree.depths, default=0)
        fields = {"tokens": len(tokens), "depth": depth, "accepted": len(path) - 1}
        return lambda: verify_step(self.target, tokens, parents, path, self.clock, self.device), fields

    def _prefill_once(self) -> dict[str, float]:
        t0 = self.clock.now()
        with record_function("prefill"):
            self.target.prefill(self.prompt)
        return {"step_ms": 1e3 * (self.clock.now() - t0)}

    def _ar(self, n: int) -> dict[str, float]:
        timer = PhaseTimer(self.device)
        with record_function(f"ar_{n}"):
            gen = generate_ar(self.model, self.prompt, n, 0.0, None, set(), timer)
        totals = timer.totals_ms()
        return {"step_ms": totals["decode"] / max(len(gen.tokens) - 1, 1), "ttft_ms": totals["ttft"]}

    def _hf(self, n: int) -> dict[str, float]:
        def gen(k: int) -> float:
            t0 = self.clock.now()
            with record_function(f"hf_{k}"):
                self.model.generate(self.prompt, attention_mask=torch.ones_like(self.prompt), max_new_tokens=k,
                                    min_new_tokens=k, do_sample=False, pad_token_id=0)
            return self.clock.now() - t0
        one, many = gen(1), gen(n)
        return {"step_ms": 1e3 * (many - one) / (n - 1)}

    def _build_ms(self, budget: int) -> float:
        """build_tree alone (top-k on the device, one copy to the host, the heap walk), median of a few."""
        times = []
        for _ in range(max(self.args.min_repeats, 3)):
            t0 = self.clock.now()
            build_tree(self.logits, budget)
            times.append(1e3 * (self.clock.now() - t0))
        return statistics.median(times)

    # ---- measuring ------------------------------------------------------------------------------------------
    def samples(self, fn, resets: bool) -> list[dict[str, float]]:
        a = self.args
        if resets:
            self.target.prefill(self.prompt)
        for _ in range(a.warmup):
            fn()
        out: list[dict[str, float]] = []
        start = time.perf_counter()
        while len(out) < a.repeats:
            spent, late = time.perf_counter() - start, time.perf_counter() > self.deadline
            if len(out) >= a.min_repeats and (spent > a.measure_s or late):
                break
            out.append(fn())
        return out

    def measure(self, name: str, budget: int | None = None) -> dict:
        """One row; a measure that raises becomes a row with the error (the GPU run is one shot: keep the rest)."""
        row = {"kind": name, "budget": budget}
        if time.perf_counter() > self.deadline:
            row["status"] = "skipped: --time-limit reached"
        else:
            try:
                row.update(self._measure(name, budget))
            except Exception as exc:                 # noqa: BLE001 - reported in the row and on stderr
                traceback.print_exc()
                first = (str(exc).strip().splitlines() or [""])[0]
                row["status"] = f"error: {type(exc).__name__}: {first}"
                if self.clock.cuda:
                    torch.cuda.empty_cache()
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row

    def _measure(self, name: str, budget: int | None) -> dict:
        row = {}
        fn, fields = self.plan(name, budget)
        resets = name in ("tree", "chain")          # every verify measure starts from the same context length
        got = self.samples(fn, resets)
        row.update(fields, status="ok", repeats=len(got))
        for key in got[0]:
            row[key] = statistics.median(s[key] for s in got)
        if name == "tree":
            row["build_ms"] = self._build_ms(budget)
        try:
            row.update(self.busy(name, budget, fn, resets))
        except Exception as exc:                     # noqa: BLE001 - the timings above still stand
            traceback.print_exc()
            row["busy_error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        return row

    def busy(self, name: str, budget: int | None, fn, resets: bool) -> dict:
        """Kernel ms per sample from a short profile (CUDA), and the trace when --profile-kinds names this kind."""
        label = name if budget is None else f"{name}-{budget}"
        keep = bool(self.args.profile) and label in self.args.profile_kinds.split(",")
        if not keep and not (self.clock.cuda and self.args.busy_steps):
            return {}
        if resets:
            self.target.prefill(self.prompt)
        n = self.args.ar_tokens
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.clock.cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(max(self.args.busy_steps, 2 if keep and resets else 1)):   # 2: a step after a step
                if name == "ar":        # per token: the difference of an n- and a 1-token generation
                    self._ar(n)
                    self._ar(1)
                elif name == "hf_generate":
                    self._hf(n)         # runs hf_1 and hf_n itself
                else:
                    with record_function("step"):
                        fn()
        if keep:
            self.traces += save_profile(prof, Path(self.args.profile), label)
        if not self.clock.cuda:
            return {}
        if name in ("ar", "hf_generate"):
            prefix = "ar" if name == "ar" else "hf"
            many, one = device_ms(prof, f"{prefix}_{n}"), device_ms(prof, f"{prefix}_1")
            return {"gpu_busy_ms": None if many is None or one is None else (many - one) / (n - 1)}
        out = {"gpu_busy_ms": device_ms(prof, "step")}
        if resets:
            out.update(verify_busy_ms=device_ms(prof, "verify"), commit_busy_ms=device_ms(prof, "commit"))
        return out


def device_ms(prof, label: str) -> float | None:
    """Mean kernel milliseconds launched inside each `record_function(label)` range (None when absent)."""
    events = [e for e in prof.events() if e.name == label and e.device_type == DeviceType.CPU]
    if not events:
        return None
    return sum(_kernel_us(e) for e in events) / 1e3 / len(events)


def _kernel_us(event) -> float:
    # A range's own "kernels" can be its GPU-side annotation span: count only what ops under it launched.
    own = 0.0 if getattr(event, "is_user_annotation", False) else sum(k.duration for k in event.kernels)
    return own + sum(_kernel_us(child) for child in event.cpu_children)


def save_profile(prof, directory: Path, name: str, gzip_over_mb: float = 2.0) -> list[str]:
    """Write `name`'s chrome trace (gzipped past `gzip_over_mb`; Perfetto opens .json.gz as it is)
    and its key_averages table; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    trace = directory / f"{name}.json"
    prof.export_chrome_trace(str(trace))
    if trace.stat().st_size > gzip_over_mb * 2**20:
        with open(trace, "rb") as src, gzip.open(f"{trace}.gz", "wb", compresslevel=6) as dst:
            dst.write(src.read())
        trace.unlink()
        trace = Path(f"{trace}.gz")
    cuda = any(e.device_type == DeviceType.CUDA for e in prof.events())
    table = directory / f"{name}.txt"
    table.write_text(f"{name}: top ops by self {'device' if cuda else 'CPU'} time\n" + prof.key_averages().table(
        sort_by="self_device_time_total" if cuda else "self_cpu_time_total", row_limit=40) + "\n")
    return [str(trace), str(table)]


def warm_everything(bench: Bench, budgets: list[int]) -> None:
    """One untimed pass over every kind and shape, so no measure pays for first-call costs (allocator growth,
    kernel autotuning and compilation, cuBLAS handles) that the previous one did not. A kind that fails here
    fails again in its measure, which records it."""
    def attempt(fn):
        try:
            fn()
        except Exception:                            # noqa: BLE001
            traceback.print_exc()

    for budget in budgets:
        for name in ("tree", "chain"):
            attempt(lambda: (bench.target.prefill(bench.prompt), bench.plan(name, budget)[0]()))
    attempt(lambda: bench._ar(4))
    if not bench.args.no_hf_generate:
        attempt(lambda: bench._hf(2))


def markdown(rows: list[dict]) -> str:
    """The rows as a table; `tree/chain` compares step times, `vs AR` is (step + tree build) / one AR token."""
    chain = {r["budget"]: r for r in rows if r["kind"] == "chain" and r.get("status") == "ok"}
    ar = next((r["step_ms"] for r in rows if r["kind"] == "ar" and r.get("status") == "ok"), None)
    cols = ["kind", "budget", "tokens", "depth", "step ms", "verify ms", "commit ms", "build ms", "GPU busy ms",
            "verify busy ms", "busy/wall", "tree/chain", "vs AR", "n"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    fmt = lambda v: "" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {r['kind']} | {fmt(r['budget'])} | {r.get('status')} |" + " |" * (len(cols) - 3))
            continue
        busy = r.get("gpu_busy_ms")
        ratio = r["step_ms"] / chain[r["budget"]]["step_ms"] if r["kind"] == "tree" and r["budget"] in chain else None
        vs_ar = (r["step_ms"] + r.get("build_ms", 0.0)) / ar if ar and r["kind"] in ("tree", "chain") else None
        lines.append("| " + " | ".join(fmt(v) for v in (
            r["kind"], r["budget"], r.get("tokens"), r.get("depth"), r["step_ms"], r.get("verify_ms"),
            r.get("commit_ms"), r.get("build_ms"), busy, r.get("verify_busy_ms"),
            busy / r["step_ms"] if busy else None, ratio, vs_ar, r["repeats"])) + " |")
    return "\n".join(lines)


def meta(args, fields: dict, model, bench: Bench, device: torch.device, dtype: str) -> dict:
    has = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    return {
        "preset": args.preset, "layers": fields["num_hidden_layers"], "model_type": fields["model_type"],
        "params_b": sum(p.numel() for p in model.parameters()) / 1e9, "dtype": dtype, "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "none",
        "target_class": type(bench.target).__name__,
        # HybridTarget's GDN path; the model's own forward (ar, hf_generate) picks fla by itself when installed
        "kernel_path": str(getattr(bench.target, "kernel_path", "torch")),
        "fla_installed": has("fla"), "causal_conv1d_installed": has("causal_conv1d"),
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "prompt_len": args.prompt_len, "accept": args.accept, "draft": args.draft, "block_size": args.block_size,
        "target_layers": len(getattr(bench.target, "layer_ids", None) or getattr(bench.target, "target_layer_ids")),
        "ar_tokens": args.ar_tokens, "config": fields,
    }


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="tiny-hybrid", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    p.add_argument("--config", default="{}", help="JSON transformers config fields overriding the preset")
    p.add_argument("--budgets", default="16,32,64,128,256")
    p.add_argument("--draft", default="peaked", help="synthetic draft logits: peaked | random")
    p.add_argument("--block-size", type=int, default=16, help="drafter block: trees are at most block-1 deep")
    p.add_argument("--accept", type=int, default=4, help="drafted tokens committed per step (tau - 1)")
    p.add_argument("--target-layers", type=int, default=5, help="feature layers handed to the (absent) drafter")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--ar-tokens", type=int, default=32, help="tokens per AR / generate sample")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--min-repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before each measure")
    p.add_argument("--measure-s", type=float, default=2.0, help="stop a measure after this long (>= min-repeats)")
    p.add_argument("--time-limit", type=float, default=90.0,
                   help="seconds from the start after which a running measure stops at --min-repeats and the "
                        "remaining ones are skipped (rows with a status saying so)")
    p.add_argument("--busy-steps", type=int, default=1, help="profiled calls per kind for gpu_busy_ms (CUDA)")
    p.add_argument("--no-hf-generate", action="store_true")
    p.add_argument("--dtype", help="default: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", help="directory for chrome traces and key_averages tables")
    p.add_argument("--profile-kinds", default="tree-64,chain-64,ar",
                   help="comma list of <kind>[-<budget>] to trace (traces of every kind are too large to keep)")
    p.add_argument("--out", default="bench_verify.json")
    return p.parse_args(argv)


@torch.inference_mode()
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    device = pick_device(args.device)
    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    fields = model_config(args.preset, args.layers, json.loads(args.config))
    budgets = [int(b) for b in args.budgets.split(",")]
    if args.ar_tokens < 2 or args.min_repeats < 1 or args.repeats < args.min_repeats:
        raise SystemExit("need --ar-tokens >= 2 and 1 <= --min-repeats <= --repeats")
    model = load_target(ModelSpec(random=fields, dtype=dtype), args.seed, device)     # built on `device`
    bench = Bench(args, model, device, deadline=started + args.time_limit)
    built = time.perf_counter()
    warm_everything(bench, budgets)
    bench.measure("prefill")
    bench.measure("ar")
    if not args.no_hf_generate:
        bench.measure("hf_generate")
    for budget in budgets:
        bench.measure("tree", budget)
        bench.measure("chain", budget)
    info = {**meta(args, fields, model, bench, device, dtype), "build_s": built - started,
            "total_s": time.perf_counter() - started, "traces": bench.traces}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"meta": info, "rows": bench.rows}, indent=1))
    os.replace(tmp, out)
    print(f"\n{args.preset}, {info['layers']} layers ({info['params_b']:.2f} B params), {dtype} on "
          f"{info['gpu_name'] if device.type == 'cuda' else 'cpu'}, {info['target_class']} kernel_path="
          f"{info['kernel_path']}, fla installed: {info['fla_installed']}, prompt {args.prompt_len}, "
          f"accept {args.accept}\n")
    print(markdown(bench.rows) + "\n")
    ok = {(r["kind"], r["budget"]): r["step_ms"] for r in bench.rows if r.get("status") == "ok"}
    print(json.dumps({"out": str(out), "preset": args.preset, "layers": info["layers"],
                      "kernel_path": info["kernel_path"], "total_s": round(info["total_s"], 1),
                      "tree_ms": {b: ok.get(("tree", b)) for b in budgets},
                      "chain_ms": {b: ok.get(("chain", b)) for b in budgets},
                      "ar_ms": ok.get(("ar", None)), "hf_generate_ms": ok.get(("hf_generate", None)),
                      "skipped": sum(r["status"].startswith("skipped") for r in bench.rows),
                      "errors": sum(r["status"].startswith("error") for r in bench.rows)}, separators=(",", ":")))
    if any(r["status"].startswith("error") for r in bench.rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
