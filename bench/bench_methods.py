"""AR, DFlash and DDTree side by side in one process: tau, per-depth acceptance, TPOT, speedup, time split.

    python bench/bench_methods.py --model remote/assets/models/demo-qwen3 \
        --drafter remote/assets/models/demo-qwen3-dflash --dataset humaneval --num-prompts 24 \
        --max-new-tokens 128 --budgets 16,32,64,128,256,512 --temperatures 0,1 --dtype bfloat16 --out OUT

One model load per temperature; every method decodes the same prompts with the same per-prompt seeds, after a
warm-up per method and budget (each budget is a new shape). `--ar-again` times AR once more after the other
methods and gives every speculative row's speedup against the mean of both AR rows too (`speedup_vs_ar_both`, the
`vs_both_ar` column). `--interleave` has the methods take turns prompt by prompt instead (`measure_interleaved`: a
drift of the GPU falls on each alike; one cache size for all; tree_budget=auto with a policy of its own; rows say
`interleaved`). `--stock-generate` adds transformers' own `generate` as a row, to keep our AR honest; `--methods`
measures fewer (AR always); `--floor` gives every row's step against the floor (the target's weight bytes / a device
copy's bandwidth, measured in the run). `--draft-vocabs 0,2048` measures DFlash and DDTree once per draft head (0:
the drafter's own; N: the N tokens most frequent in --calibration, remote.calibration), rows named `-v<N>`, AR once.
Writes summary.csv and the sweep plots (same functions as the orchestrator's sweep summary) to --out; every row is
printed as one JSON line and saved to rows.json as soon as it is measured (a run stopped at a time limit keeps them),
and the last stdout line is compact JSON.
`--profile DIR` adds, after the timed runs of the first temperature (so no reported time is taken under the
profiler), a torch.profiler chrome trace and a key_averages table of --profile-gens generations per method (ar,
dflash, ddtree at the budget with the best speedup, stock `generate`), with the decode phases (draft, tree_build,
verify, commit) as named ranges. Graphed runs report the GPU split of one replayed step (remote.decoding.phase_split:
each prefix of the step captured and timed; AR: forward_ms) in the draft/tree_build/verify/commit columns;
`--phase-kernels` prints, after every timed run, the slowest kernels of each phase (torch.profiler over the prefix
graphs' replays; with tree_budget=auto among --budgets, also auto's AR step, `ddtree-auto<max>-ar-step`). A split
replays one committed state (where the last generation ended, or the last length before it whose step the exactly
sized caches hold: remote.decoding.phase_split), so a data-dependent phase shows that state's cost, not the mean:
the tree search stops early on a bushy tree and runs every level on a spine. A split that fails is reported and
skipped; the run goes on. `--timeline DIR` (CUDA) traces --profile-gens generations of every method
and fixed budget after the timed runs and prints where their replayed steps leave the device idle
(bench/step_timeline.py), to DIR/timeline.json beside the traces.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import remote.runner  # noqa: E402
from auto_diagnostics import diagnostic, figures  # noqa: E402
from bench_profile import copy_bandwidth  # noqa: E402
from bench_verify import save_profile  # noqa: E402
from step_timeline import render, step_timeline  # noqa: E402
from orchestrator.tracking.compare_plots import summarize  # noqa: E402
from orchestrator.tracking.compare_table import render_table  # noqa: E402
from remote.decoding.auto_budget import PLAIN  # noqa: E402
from remote.decoding.phase_split import split_kernels  # noqa: E402
from remote.errors import first_line  # noqa: E402
from remote.kernels import gemv  # noqa: E402
from remote.assets import resolve  # noqa: E402
from remote.calibration import outside_share, reduce_draft_vocab  # noqa: E402
from remote.metrics import aggregate, compare  # noqa: E402
from remote.models.placement import describe  # noqa: E402
from remote.runner import Run, peak_memory_gb, reset_peak_memory, step_figures  # noqa: E402
from remote.spec import CALIBRATION, DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec  # noqa: E402
from remote.timing import PhaseTimer  # noqa: E402


def make_spec(args, temperature: float) -> RunSpec:
    random = json.loads(args.random) if args.random else None
    dataset = DatasetSpec(name=args.dataset, num_prompts=args.num_prompts)
    if args.dataset.startswith("jsonl:"):
        dataset = DatasetSpec(name="jsonl", path=args.dataset[6:], num_prompts=args.num_prompts)
    return RunSpec(
        run_id="bench", seed=0, device=args.device,
        model=ModelSpec(path=None if random else args.model, random=random, dtype=args.dtype,
                        device_map=json.loads(args.device_map) if (args.device_map or "").startswith("{")
                        else args.device_map),
        drafter=DrafterSpec(path=args.drafter, random=json.loads(args.random_drafter) if args.random_drafter else None),
        decoding=DecodingSpec(method="ddtree", max_new_tokens=args.max_new_tokens, temperature=temperature,
                              warmup=1, cuda_graphs=not args.no_graphs, compile_steps=args.compile,
                              compile_drafter=not args.eager_drafter),
        dataset=dataset,
    )


def draft_heads(run: Run, sizes: list[int], calibration: str) -> dict[int, object]:
    """The drafter's head for each of `sizes` (0: its own; N: the N most frequent in `calibration`), to put in
    place with `use_head` (a head is an attribute of the drafter: switching is free, each head's steps are captured
    apart)."""
    own, heads = run.drafter.vocab, {}
    for n in sizes:
        reduce_draft_vocab(run.drafter, DrafterSpec(draft_vocab=n or None, calibration=resolve(calibration)),
                           run.model, run.tokenizer, run.prompts)
        heads[n], run.drafter.vocab = run.drafter.vocab, own
    return heads


def use_head(run: Run, heads: dict[int, object], vocab: int) -> None:
    if run.drafter is not None and heads:
        run.drafter.vocab = heads[vocab]


def prepare(run: Run, method: str, budget: int | str) -> None:
    """Set the budget (an int, or "auto<max>": tree_budget=auto up to max, with a fresh cost model) and decode one
    full-length generation (and, under auto, more until its cost model is measured). Static caches are sized as a
    run of this method and budget alone sizes them. A full-length warm-up: a short one leaves first-time costs of
    longer sequences (allocator growth, new shapes) inside the first timed generations, which made the first method
    measured (AR) look 1.4-3x slower."""
    d = run.spec.decoding
    special = diagnostic(budget, run.device.type == "cuda")
    if special:
        d.tree_budget, d.tree_budget_max = "auto", special[0]
    else:
        set_budget(d, budget)
    run.reset_auto()
    if special:
        run.auto = special[1]
    if run.graphed:
        run.graphed.reserve(max(ids.shape[1] for ids in run.inputs), d.max_new_tokens, method, d.widest_budget,
                            exact=True)
    run.generate(method, 0)
    run.calibrate(d.max_new_tokens)


def save_trace(auto, gens: list, path: Path) -> None:
    """A `trace<b>` run's steps (bench/auto_diagnostics.TraceAuto), per measured generation, for
    bench/bench_auto_policy.py --trace: its warm-up's steps, recorded first, are left out."""
    counts = [len(g.committed) for g in gens]
    steps, prompts = auto.trace[len(auto.trace) - sum(counts):], []
    for n in counts:
        prompts.append([{"predicted": p, "nodes": nodes} for p, nodes in steps[:n]])
        steps = steps[n:]
    path.write_text(json.dumps({"sizes": auto.sizes, "budget": auto.budget, "prompts": prompts}))
    print(f"trace of {sum(counts)} steps: {path}", flush=True)


def measure(run: Run, method: str, budget: int | str) -> tuple[list, dict]:
    started = time.perf_counter()
    prepare(run, method, budget)
    warmup_s = time.perf_counter() - started
    reset_peak_memory(run.device)
    waited = run.graphed.read_wait_s if run.graphed else 0.0
    gens = [run.generate(method, i) for i in range(len(run.inputs))]
    peak = peak_memory_gb(run.device) if run.device.type == "cuda" else None
    return gens, {**metrics_of(run, method, gens, peak, (run.graphed.read_wait_s - waited) if run.graphed else 0.0),
                  "warmup_s": warmup_s}


def metrics_of(run: Run, method: str, gens: list, peak, waited_s: float) -> dict:
    """A method's row figures from its timed generations, the peak memory they reached and the seconds the host
    waited for their steps' reads; the phase split replays the state the last generation left."""
    depth = run.drafter.block_size - 1 if method != "ar" else 0
    # ms a speculative step the host waited for the GPU's read of it: near zero where the host sets the pace
    steps = decode_steps(gens)
    wait = {"read_wait_ms": 1000 * waited_s / steps} \
        if run.graphed and run.device.type == "cuda" and method != "ar" and steps else {}
    return {**aggregate(gens, peak, depth), **step_figures(run, method, gens, print), **figures(run.auto), **wait}


def measure_interleaved(run: Run, configs: list[tuple[str, int | str, int]],
                        heads: dict[int, object]) -> dict[tuple[str, int | str, int], tuple[list, dict]]:
    """`measure` for every (method, budget, draft head) of `configs` at once: the methods take turns prompt by
    prompt, in reverse order on every other prompt (as remote.runner.run_methods), so that a drift of the GPU over
    the run (clocks, heat: the two AR rows of one `--ar-again` run differed by up to 5% on an H200, 2026-12-04; see
    docs/PERFORMANCE.md, "Order drift") falls on each alike.
    The static caches have one size, the widest config's: a method that writes fewer rows a step attends over a
    few rows more than when `measure` sizes them for it alone. Each config is warmed up first (tree_budget=auto:
    with a policy of its own, calibrated then and kept across its turns: `select`), and decodes one more prompt
    after the timed ones (untimed), so that its phase split replays a state of its own."""
    d, cuda, autos = run.spec.decoding, run.device.type == "cuda", {}
    wide = max(configs, key=lambda c: (c[0] != "ar", c[0] == "ddtree", widest(c[1])))
    select(run, wide, heads, autos)
    if run.graphed:
        run.graphed.reserve(max(ids.shape[1] for ids in run.inputs), d.max_new_tokens, wide[0], d.widest_budget,
                            exact=True)
    warmup_s = {}
    for config in configs:
        started = time.perf_counter()
        select(run, config, heads, autos)
        if isinstance(config[1], str):
            run.reset_auto()
            autos[config] = run.auto
        run.generate(config[0], 0)
        run.calibrate(d.max_new_tokens)
        warmup_s[config] = time.perf_counter() - started
    gens = {c: [] for c in configs}
    peaks, waits = dict.fromkeys(configs), dict.fromkeys(configs, 0.0)
    for index in range(len(run.inputs)):
        for config in configs if index % 2 == 0 else configs[::-1]:
            select(run, config, heads, autos)
            reset_peak_memory(run.device)
            waited = run.graphed.read_wait_s if run.graphed else 0.0
            gens[config].append(run.generate(config[0], index))
            waits[config] += (run.graphed.read_wait_s - waited) if run.graphed else 0.0
            if cuda:
                now = peak_memory_gb(run.device)
                peaks[config] = [max(a, b) for a, b in zip(now, peaks[config] or now)]
    measured = {}
    for config in configs:
        select(run, config, heads, autos)
        run.generate(config[0], len(run.inputs) - 1)
        measured[config] = gens[config], {**metrics_of(run, config[0], gens[config], peaks[config], waits[config]),
                                          "interleaved": True, "warmup_s": warmup_s[config]}
    return measured


def widest(budget: int | str) -> int:
    """The most nodes a step of `budget` (an int, or "auto<max>") verifies."""
    return int(budget.removeprefix("auto")) if isinstance(budget, str) else budget


def set_budget(d, budget: int | str) -> None:
    """The decoding spec `d` at `budget`: a fixed one (an int), or "auto<max>" (tree_budget=auto up to max)."""
    if isinstance(budget, str):
        d.tree_budget, d.tree_budget_max = "auto", widest(budget)
    else:
        d.tree_budget = budget


def select(run: Run, config: tuple[str, int | str, int], heads: dict[int, object], autos: dict) -> None:
    """`run` set up for a generation of `config` (method, budget, draft head) among configs taking turns: its budget
    (`set_budget`), its draft head, and its own tree_budget=auto policy from `autos` (None for the others: a fixed
    budget's steps must not be chosen by an auto's policy), so that an auto keeps what it learnt."""
    set_budget(run.spec.decoding, config[1])
    use_head(run, heads, config[2])
    run.auto = autos.get(config)


def auto_verdicts(rows: list[dict], temperature: float) -> list[str]:
    """A line per tree_budget=auto row of `temperature` against that temperature's fixed DDTree budgets (the bar auto
    is held to: at least 97% of the best one's tokens a second, and above the median), by decode time a token."""
    ddtree = [r for r in rows if r["method"] == "ddtree" and r["temperature"] == temperature and r.get("tpot_ms")
              and not r.get("draft_vocab_cut")]
    fixed = {r["tree_budget"]: r["tpot_ms"] for r in ddtree if isinstance(r["tree_budget"], int)}
    if len(fixed) < 2:
        return []
    best, median = min(fixed, key=fixed.get), statistics.median(fixed.values())
    return [f"{r['tree_budget']}-T{temperature:g}: {fixed[best] / r['tpot_ms']:.1%} of the best fixed budget ({best}: "
            f"{fixed[best]:.4f} ms a token), {'above' if r['tpot_ms'] < median else 'not above'} the median of "
            f"{len(fixed)} ({median:.4f})" for r in ddtree if str(r["tree_budget"]).startswith("auto")]


def bracket(rows: list[dict], temperature: float, out: Path) -> None:
    """With --ar-again: every speculative row of `temperature` also against the mean of the two AR rows that
    bracket it (`speedup_vs_ar_both`), which a drift of AR between them (up to 9% on an H200 in a demo-qwen3 run with
    `--budgets 31,63 --ar-again`, 2026-12-04) moves half as much as the first row alone; rows.json is rewritten with
    it."""
    ar = [r["tpot_ms"] for r in rows if r["method"] == "ar" and r["temperature"] == temperature and r.get("tpot_ms")]
    if len(ar) < 2:
        return
    both = sum(ar) / len(ar)
    for r in rows:
        if r["temperature"] == temperature and r["method"] in ("dflash", "ddtree") and r.get("tpot_ms"):
            r["speedup_vs_ar_both"] = both / r["tpot_ms"]
    (out / "rows.json").write_text(json.dumps(rows, indent=1))


def parse_budgets(text: str, auto_max: int) -> list[int | str]:
    """`15,31,auto,auto127,only15@127` -> [15, 31, "auto63", "auto127", "only15@127"] (auto alone: up to
    `auto_max`; only<b>[@<max>], cycle<b>.<b>... and trace<b>: bench/auto_diagnostics.py)."""
    return [f"auto{b.removeprefix('auto') or auto_max}" if b.startswith("auto") else b
            if b.startswith(("only", "cycle", "trace")) else int(b) for b in text.split(",")]


def phase_kernels(run: Run, method: str, budget: int, out: Path, top: int = 12) -> None:
    """Print the slowest kernels of each phase of a replayed step (remote.decoding.phase_split.split_kernels) and
    add them to out/phase_kernels.json. Runs after every timed run: the profiler left methods timed after it up to 4%
    slower (the hybrid demo's DDTree with `--budgets 31 --phase-kernels` on an H200, 2026-11-30: 1.274x DFlash
    against 1.309-1.315x without). One generation first leaves a real committed state to split."""
    if not (run.graphed and run.graphed.graphs) or run.graphed.compiled:
        return
    prepare(run, method, budget)
    name = method if method != "ddtree" else f"ddtree-{budget}"
    if isinstance(budget, str):                 # tree_budget=auto: its AR step, the one step auto adds
        name, budget = f"{name}-ar-step", PLAIN
    try:
        split = split_kernels(run.graphed, method, budget)
    except Exception as exc:                        # noqa: BLE001 - a measurement, not the run
        print(f"phase kernels of {name} skipped: {first_line(exc)}", flush=True)
        return
    for phase, rows in split.items():
        print(f"{name} {phase}: {sum(r[1] for r in rows):.1f} us in {sum(r[2] for r in rows):.0f} launches")
        for kernel, us, calls in rows[:top]:
            print(f"    {us:7.1f} us {calls:5.1f}x  {kernel[:110]}")
    path = out / "phase_kernels.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**kept, name: split}, indent=1))


def spin_up(device: torch.device, seconds: float = 3.0) -> None:
    """Keep the GPU busy for a few seconds before the first timing: an idle GPU sits at low clocks, and a
    host-bound first measurement (AR) would otherwise run on a slower GPU than the ones after it."""
    if device.type != "cuda":
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()


def stock_generate_tpot(run: Run) -> float:
    """transformers' `generate` (greedy, KV cache), ms per token after the first, mean over the prompts."""
    n = run.spec.decoding.max_new_tokens
    tpots = []
    for ids in [run.inputs[0]] + list(run.inputs):   # the first is a warm-up
        ids = ids.to(run.model.device)
        sync = torch.cuda.synchronize if run.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        run.model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
        sync()
        t1 = time.perf_counter()
        run.model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        sync()
        t2 = time.perf_counter()
        tpots.append(((t2 - t1) - (t1 - t0)) * 1000 / (n - 1))
    return sum(tpots[1:]) / len(tpots[1:])


class LabelledTimer(PhaseTimer):
    """PhaseTimer whose phases also show as named ranges in a profiler trace."""

    @contextmanager
    def phase(self, name: str):
        with record_function(name), super().phase(name) as span:
            yield span


def profile_methods(run: Run, budget: int, directory: Path, gens: int) -> list[str]:
    """Trace `gens` generations of each method (ddtree at `budget`); returns the files written."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device.type == "cuda" else [])
    written = []
    with mock.patch.object(remote.runner, "PhaseTimer", LabelledTimer):   # Run.generate builds its own timer
        for method, b in (("ar", 1), ("dflash", 1), ("ddtree", budget)):
            run.spec.decoding.tree_budget = b
            with profile(activities=activities) as prof:
                for i in range(min(gens, len(run.inputs))):
                    run.generate(method, i)
            written += save_profile(prof, directory, method if method != "ddtree" else f"ddtree-{b}")
        with profile(activities=activities) as prof:
            run.model.generate(run.inputs[0].to(run.model.device), max_new_tokens=32, min_new_tokens=32,
                               do_sample=False)
        written += save_profile(prof, directory, "hf_generate")
    return written


def timelines(run: Run, configs: list[tuple[str, int]], directory: Path, gens: int) -> dict:
    """The device timeline of `gens` generations of each (method, budget) (bench/step_timeline.py), each after
    `prepare` sized its caches: replays' spans, busy time, gaps and the positions where the device idles most.
    Printed, written to directory/timeline.json with each trace beside it."""
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    found = {}
    for method, budget in configs:
        name = method if method != "ddtree" else f"ddtree-{budget}"
        prepare(run, method, budget)
        with profile(activities=activities) as prof:
            for i in range(min(gens, len(run.inputs))):
                run.generate(method, i)
        trace = save_profile(prof, directory, f"timeline_{name}")[0]
        with (gzip.open if trace.endswith(".gz") else open)(trace, "rt") as f:
            found[name] = step_timeline(json.load(f))
        print(render(name, found[name]), flush=True)
    (directory / "timeline.json").write_text(json.dumps(found, indent=1))
    return found


def decode_steps(gens: list) -> int:
    """A speculative run's steps: its verify steps and, under tree_budget=auto, the AR steps it chose (each one
    step's time: counting verify steps alone put auto's AR-step time on its 24 tree steps, 13.7 ms a "step" for
    a 0.2 ms one, one H100, 2026-12-07)."""
    return sum(len(g.committed) + g.plain_steps for g in gens)


def row(method, budget, temperature, metrics, ar_metrics, gens, ar_gens, vocab: int = 0) -> dict:
    """vocab: the draft head's tokens where --draft-vocabs gave several (0: the drafter's own)."""
    name = f"{method}{'' if budget is None else f'-{budget}'}{f'-v{vocab}' if vocab else ''}-T{temperature:g}"
    r = {"run": name, "status": "FINISHED", "model": "", "method": method, "tree_budget": budget,
         "temperature": temperature, **metrics}
    if method != "ar":
        r["speedup_vs_ar"] = ar_metrics["tpot_ms"] / metrics["tpot_ms"]
        if temperature == 0:
            r.update(compare(gens, ar_gens))
    steps = decode_steps(gens)
    r["step_ms"] = sum(g.times_ms["decode"] for g in gens) / steps if steps else metrics.get("tpot_ms")
    r["accept_by_depth"] = [metrics[k] for k in sorted(
        (k for k in metrics if k.startswith("accept_rate_depth_")), key=lambda k: int(k.rsplit("_", 1)[1]))]
    return r


def set_constant(assignment: str) -> None:
    """`remote.kernels.gdn_solve.ENABLED=true`: the module's constant set to the JSON value (printed)."""
    import importlib

    name, _, value = assignment.partition("=")
    module, _, constant = name.rpartition(".")
    target = importlib.import_module(module)
    if not hasattr(target, constant):
        raise SystemExit(f"--set: {module} has no {constant}")
    setattr(target, constant, json.loads(value))
    print(f"set {name} = {getattr(target, constant)!r}", flush=True)


def head_figures(run: Run, ar_gens: list, vocab: int) -> dict:
    """A speculative row's draft head: its tokens, AR's generated tokens outside it, and whether it is a cut of
    --draft-vocabs (auto's verdicts compare rows of the drafter's own head)."""
    size = run.drafter.vocab.size if run.drafter.vocab is not None else run.drafter.config.vocab_size
    return {"draft_vocab": size, "ar_outside_draft_vocab": outside_share(run.drafter, [t for g in ar_gens
                                                                                        for t in g.tokens]),
            **({"draft_vocab_cut": True} if vocab else {})}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model")
    p.add_argument("--drafter")
    p.add_argument("--random", help="JSON transformers config for a random target (instead of --model)")
    p.add_argument("--random-drafter", help="JSON drafter overrides for a random drafter (instead of --drafter)")
    p.add_argument("--dataset", default="builtin", help="builtin | humaneval | jsonl:<path>")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--budgets", default="16,32,64,128,256,512",
                   help="ddtree budgets; auto (tree_budget=auto up to --auto-max) or auto<N> (up to N) among them; "
                        "only<b>[@<N>], cycle<b>.<b>..., trace<b>: fixed budgets through auto's machinery "
                        "(bench/auto_diagnostics.py)")
    p.add_argument("--auto-max", type=int, default=DecodingSpec.tree_budget_max,
                   help="tree_budget_max of a bare `auto` in --budgets")
    p.add_argument("--methods", default="ar,dflash,ddtree",
                   help="methods to measure (AR always: the baseline), e.g. `ar` alone at a wide preset, where each "
                        "method's capture and compile take a minute")
    p.add_argument("--temperatures", default="0")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="auto")
    p.add_argument("--device-map", help="spread the target over the visible GPUs: auto | balanced | sequential | "
                                        "JSON {module: gpu index}")
    p.add_argument("--stock-generate", action="store_true")
    p.add_argument("--no-cudnn-sdpa", action="store_true",
                   help="keep torch's SDPA off cuDNN (which builds an execution plan for every new sequence length)")
    p.add_argument("--ar-again", action="store_true", help="measure AR again after the other methods (drift check)")
    p.add_argument("--interleave", action="store_true",
                   help="the methods take turns prompt by prompt on one cache size (the widest budget's), instead "
                        "of one method's prompts after another's each on caches of its own size; fixed budgets only")
    p.add_argument("--no-graphs", action="store_true", help="eager steps even where CUDA graphs are supported")
    p.add_argument("--compile", action="store_true", help="torch.compile each graphed step (compile_steps=true)")
    p.add_argument("--eager-drafter", action="store_true",
                   help="graphed steps without torch.compile on the drafter forward (compile_drafter=false)")
    p.add_argument("--out", default="bench_out")
    p.add_argument("--profile", help="directory for profiler traces and tables (after the timed runs)")
    p.add_argument("--profile-gens", type=int, default=2, help="generations per method under the profiler")
    p.add_argument("--timeline", help="directory for the device timeline of --profile-gens generations per method "
                                      "(bench/step_timeline.py: where a replayed step idles), after the timed runs")
    p.add_argument("--floor", action="store_true",
                   help="measure the copy bandwidth and give every row's step against the floor: the target's "
                        "weight bytes / that bandwidth (what one step that reads every weight once takes at best)")
    p.add_argument("--draft-vocabs", default="0",
                   help="draft heads to measure DFlash and DDTree with, e.g. 0,2048 (0: the drafter's own; N: its "
                        "head over the N tokens most frequent in --calibration)")
    p.add_argument("--calibration", default=CALIBRATION, help="the text --draft-vocabs counts on (assets:... or "
                                                                   "a file)")
    p.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=JSON",
                   help="set a module constant before anything loads, e.g. remote.kernels.gdn_solve.ENABLED=true "
                        "(a switch that is off until measured), repeatable")
    p.add_argument("--phase-kernels", action="store_true",
                   help="print (and save to phase_kernels.json) the kernels of each phase of a replayed step")
    args = p.parse_args(argv)
    for assignment in args.set:
        set_constant(assignment)
    methods = set(args.methods.split(",")) | {"ar"}
    if methods - {"ar", "dflash", "ddtree"}:
        raise SystemExit(f"--methods: one or more of ar, dflash, ddtree; got {args.methods!r}")
    budgets = parse_budgets(args.budgets, args.auto_max) if "ddtree" in methods else []
    fixed = [b for b in budgets if isinstance(b, int)]      # what the phase kernels and the profile take
    if args.interleave and any(isinstance(b, str) and not b.startswith("auto") for b in budgets):
        raise SystemExit(f"--interleave: fixed budgets and auto<max> only (the diagnostic policies are timed alone); "
                         f"got {args.budgets!r}")
    if args.profile and not fixed:
        raise SystemExit("--profile traces ddtree at a fixed budget: give one in --budgets (and ddtree in --methods)")
    if args.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rows, out, traces = [], Path(args.out), []
    out.mkdir(parents=True, exist_ok=True)

    floor: dict[str, float] = {}

    def record(r: dict) -> None:
        """Each row is printed and saved as it finishes, so a run stopped at a time limit keeps what it measured."""
        if floor and r.get("step_ms"):
            r.update(floor, step_vs_floor=r["step_ms"] / floor["floor_ms"])
        rows.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "accept_by_depth"}), flush=True)
        (out / "rows.json").write_text(json.dumps(rows, indent=1))

    for temperature in temperatures:
        run = Run(make_spec(args, temperature))
        split = describe(run.model)
        print(f"T={temperature:g}: decode_path {run.decode_path}" + (f"; split {split}" if split else ""), flush=True)
        spin_up(run.device)
        if args.floor and not floor:
            gbps = copy_bandwidth(run.device, 2**30 if run.device.type == "cuda" else 2**26)
            weights = sum(p.numel() * p.element_size() for p in run.model.parameters())
            floor.update(floor_ms=weights / gbps / 1e6, copy_gbps=gbps, weight_gb=weights / 1e9)
            print(f"floor: {weights / 1e9:.2f} GB of weights at {gbps:.0f} GB/s (a copy's) = "
                  f"{floor['floor_ms']:.3f} ms a step", flush=True)
        vocabs = [int(v) for v in args.draft_vocabs.split(",")]
        heads = draft_heads(run, vocabs, args.calibration) if run.drafter is not None and vocabs != [0] else {}
        speculative = [(m, b, v) for v in vocabs for m, b in [*([("dflash", 1)] if "dflash" in methods else []),
                                                              *(("ddtree", b) for b in budgets)]]
        measured = measure_interleaved(run, [("ar", 1, 0), *speculative], heads) if args.interleave else {}
        ar_gens, ar_metrics = measured.get(("ar", 1, 0)) or measure(run, "ar", 1)
        record(row("ar", None, temperature, ar_metrics, ar_metrics, ar_gens, ar_gens))
        if args.stock_generate and temperature == 0:
            tpot = stock_generate_tpot(run)
            record({"run": "hf_generate-T0", "status": "FINISHED", "model": "", "method": "hf_generate",
                    "tree_budget": None, "temperature": 0.0, "tpot_ms": tpot, "step_ms": tpot,
                    "speedup_vs_ar": ar_metrics["tpot_ms"] / tpot, "accept_by_depth": []})
        for method, budget, vocab in speculative:
            use_head(run, heads, vocab)
            gens, metrics = measured.get((method, budget, vocab)) or measure(run, method, budget)
            r = row(method, budget if method == "ddtree" else None, temperature, metrics, ar_metrics, gens, ar_gens,
                    vocab)
            record({**r, **head_figures(run, ar_gens, vocab)})
            if getattr(run.auto, "trace", None) is not None:
                save_trace(run.auto, gens, out / f"{budget}-T{temperature:g}.json")
        use_head(run, heads, 0 if 0 in heads else vocabs[0])
        for line in auto_verdicts(rows, temperature):
            print(line, flush=True)
        if args.ar_again:         # order effects (clocks, allocator, caches) show as a drift between the two AR rows
            gens, metrics = measure(run, "ar", 1)
            again = row("ar", None, temperature, metrics, ar_metrics, gens, ar_gens)
            record({**again, "run": f"ar-again-T{temperature:g}",
                    "speedup_vs_ar": ar_metrics["tpot_ms"] / metrics["tpot_ms"]})
            bracket(rows, temperature, out)
        if args.phase_kernels:
            autos = [b for b in budgets if isinstance(b, str)][:1]
            for method, budget in [("ar", 1), *([("dflash", 1)] if "dflash" in methods else []),
                                   *(("ddtree", b) for b in fixed + autos)]:
                phase_kernels(run, method, budget, out)
        if args.profile and temperature == temperatures[0]:
            best = max((r for r in rows if r["method"] == "ddtree" and r["temperature"] == temperature
                        and isinstance(r["tree_budget"], int)), key=lambda r: r.get("speedup_vs_ar", 0))["tree_budget"]
            traces = profile_methods(run, best, Path(args.profile), args.profile_gens)
        if args.timeline and temperature == temperatures[0] and run.device.type != "cuda":
            print("--timeline skipped: it reads graph replays, which run on CUDA only", flush=True)
        elif args.timeline and temperature == temperatures[0]:
            timelines(run, [("ar", 1), *([("dflash", 1)] if "dflash" in methods else []),
                            *(("ddtree", b) for b in budgets)], Path(args.timeline), args.profile_gens)
        del run
    if gemv.FASTER:            # which projection shapes and row buckets the kernels serve (remote.kernels.gemv)
        print("gemv: " + ", ".join(f"{'x'.join(map(str, key[0]))}/{key[-1]} {chosen}"
                                   for key, chosen in gemv.FASTER.items()), flush=True)
    from rich.console import Console

    Console(width=200).print(render_table(rows, "bench_methods"))
    for r in rows:
        print(f"{r['run']:>18}  tau={r.get('tau', 1) or 1:.2f}  tpot={r.get('tpot_ms', 0):.2f}ms  "
              f"step={r.get('step_ms') or 0:.2f}ms  "
              f"speedup={r.get('speedup_vs_ar', 1) or 1:.2f}  forward={r.get('forward_ms', 0):.3f} "
              f"draft={r.get('draft_ms', 0):.3f} "
              f"build={r.get('tree_build_ms', 0):.3f} verify={r.get('verify_ms', 0):.3f} "
              f"commit={r.get('commit_ms', 0):.3f}  exact={r.get('exact_match_vs_ar', '-')}"
              + (f"  vs_floor={r['step_vs_floor']:.2f}x" if "step_vs_floor" in r else "")
              + (f"  vs_both_ar={r['speedup_vs_ar_both']:.3f}" if "speedup_vs_ar_both" in r else ""))
    summarize(rows, out)
    print(json.dumps({"rows": len(rows), "out": str(out),
                      "best_ddtree": max((r for r in rows if r["method"] == "ddtree"),
                                         key=lambda r: r.get("speedup_vs_ar", 0), default={}).get("run"),
                      **({"profile": traces} if args.profile else {})}))


if __name__ == "__main__":
    main()
