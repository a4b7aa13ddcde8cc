"""One benchmark run: load, check, warm up, run AR (unless `baseline=none`) and the method, taking turns prompt
by prompt (`run_methods`), `repeats` times over all prompts, write results.

Contract: `run(spec, run_dir)` writes into `run_dir` (names from RunFiles): `events.jsonl` (stage, start,
progress, prompt, warning, result; each but progress also as a `[runner]` line on stdout, runner.log),
`outputs.jsonl` (one line per prompt per method, AR included: method, prompt_index, token_ids, text, prompt; from
the first repeat) and, last and atomically, `results.json` = {version, method, metrics (with the run's own timing
noise, remote.noise), definitions, tag_definitions, environment, per_prompt (one entry per method, prompt and
repeat), paths (per method: the path its generations took, remote.fairness), divergences (the first repeat's, each
classified: remote.divergence), fairness ("ok", "mismatch: ...", "noisy: ..." where AR and a method both ran)}.
Every bad-input check (SpecError) happens before the first decoding step, a prompt past a model's positions among
them (`check_context`). Both methods see the same prompts and per-prompt sampling seeds (seed + prompt index) in every
repeat; warm-up generations are not recorded.
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import platform
import resource
import sys
import time
from dataclasses import dataclass

import torch
import transformers

from .assets import with_assets
from .calibration import draft_vocab_source, outside_share, reduce_draft_vocab
from .decoding.auto_budget import PLAIN, AutoBudget, buckets
from .decoding.graph import graph_decoder, graph_support
from .decoding.loop import EagerAR, EagerSpec, Generation, Steps, decode
from .decoding.phase_split import split_step
from .decoding.sampling import make_generator
from .divergence import Kept, classify, divergence_metrics
from .downloads import gigabytes, watching
from .errors import SpecError, first_line
from .events import EventWriter, RunnerStage, recorded, write_json_atomic
from .fairness import PathLog, verdict
from .files import RunFiles
from .kernels.gdn_paths import torch_gdn_path
from .metrics import (DEFINITIONS, TAG_DEFINITIONS, aggregate, auto_budget_metrics, by_repeat, compare,
                      first_divergence, prompt_metrics, versus_ar)
from .models.backends import build_target, is_hybrid
from .models.compat import input_device, output_device
from .models.drafter_io import check_pair
from .models.loading import load_drafter_for, load_target, load_tokenizer, pick_device
from .models.placement import describe
from .noise import conditions, noise_metrics, noisy
from .prompts import encode, load_prompts
from .spec import BASELINES, Method, RunSpec
from .timing import PhaseTimer

WARMUP_TOKENS = 32
AUTO_WARMUPS = 16      # most extra warm-up generations for tree_budget=auto's cost model (a few suffice)


def check_decoding(spec: RunSpec) -> Method:
    """The spec's method, once its decoding values are checked (a SpecError names what is wrong)."""
    d = spec.decoding
    method = Method.parse(d.method)
    if d.baseline not in BASELINES:
        raise SpecError(f"baseline must be one of {', '.join(BASELINES)}; got {d.baseline!r}")
    if d.tree_budget != "auto" and not isinstance(d.tree_budget, int):
        raise SpecError(f"tree_budget must be an integer or 'auto'; got {d.tree_budget!r}")
    if d.widest_budget < 1 or d.max_new_tokens < 1 or d.temperature < 0 or d.warmup < 0 or d.repeats < 1:
        raise SpecError(f"need tree_budget (or tree_budget_max) >= 1, max_new_tokens >= 1, temperature >= 0, "
                        f"warmup >= 0, repeats >= 1; got {d.widest_budget}, {d.max_new_tokens}, {d.temperature}, "
                        f"{d.warmup}, {d.repeats}")
    return method


def check_context(inputs: list, max_new_tokens: int, limits: dict[str, int | None]) -> None:
    """Every prompt with its max_new_tokens must fit the positions of each model that reads it (`limits`: name ->
    max_position_embeddings, None where unknown): past them a run was measured on positions the model never learned
    (a 39,132-token prompt against 4,096 ran to the end, FINISHED). SpecError naming the prompts that do not fit."""
    known = {name: limit for name, limit in limits.items() if isinstance(limit, int) and limit > 0}
    if not known:
        return
    name, limit = min(known.items(), key=lambda item: item[1])
    needs = [ids.shape[1] + max_new_tokens for ids in inputs]
    over = [index for index, need in enumerate(needs) if need > limit]
    if not over:
        return
    worst = max(over, key=lambda index: needs[index])
    raise SpecError(f"{len(over)} of {len(inputs)} prompts do not fit the {name}'s {limit} positions "
                    f"(max_position_embeddings) with max_new_tokens={max_new_tokens}: prompt {worst} has "
                    f"{needs[worst] - max_new_tokens} tokens and needs {needs[worst]} positions (prompts "
                    f"{', '.join(map(str, over[:8]))}{', ...' if len(over) > 8 else ''}); use shorter prompts, fewer "
                    f"max_new_tokens, or num_prompts to leave them out")


class Run:
    """Loaded models and prompts for one spec; `generate(method, i)` decodes prompt i."""

    def __init__(self, spec: RunSpec):
        self.method = check_decoding(spec)
        self.spec = spec
        spec = with_assets(spec)
        self.device = pick_device(spec.device)
        torch.manual_seed(spec.seed)
        self.tokenizer = load_tokenizer(spec.model)
        self.model = load_target(spec.model, spec.seed, self.device)
        vocab = self.model.get_input_embeddings().weight.shape[0]
        if spec.model.random and len(self.tokenizer) > vocab:
            raise SpecError(f"tokenizer has {len(self.tokenizer)} tokens but the random model's vocab_size is {vocab}")
        self.drafter = None
        if self.method.uses_drafter:
            self.drafter = load_drafter_for(spec.drafter, self.model, self.tokenizer, spec.seed)
            check_pair(self.drafter, self.model, self.tokenizer)
        self.prompts = load_prompts(spec.dataset)
        if self.drafter is not None:           # counted on a text that holds none of these prompts
            reduce_draft_vocab(self.drafter, spec.drafter, self.model, self.tokenizer, self.prompts)
        self.inputs = encode(self.tokenizer, self.prompts, spec.dataset)
        check_context(self.inputs, spec.decoding.max_new_tokens, {
            "target": getattr(self.model.config.get_text_config(), "max_position_embeddings", None),
            "drafter": getattr(self.drafter.config, "max_position_embeddings", None) if self.drafter else None})
        self.target = build_target(self.model, self.drafter.target_layer_ids) if self.drafter else None
        why_not = graph_support(self.model, self.drafter, self.device) \
            if spec.decoding.cuda_graphs else "cuda_graphs=false"
        self.graphed = None if why_not else graph_decoder(
            self.model, self.drafter, self.drafter.target_layer_ids if self.drafter else None,
            compiled=spec.decoding.compile_steps, compiled_drafter=spec.decoding.compile_drafter)
        if self.graphed:     # sized once for every prompt: growing mid-run would re-capture inside a timing
            self.graphed.reserve(max(ids.shape[1] for ids in self.inputs), spec.decoding.max_new_tokens,
                                 self.method, spec.decoding.widest_budget)  # AR's rows: within any method's
        self._eager_because = why_not
        self.reset_auto()
        self.stop_ids = set() if spec.model.random else _stop_ids(self.model, self.tokenizer)

    @property
    def decode_path(self) -> str:
        """`cuda_graph` (`+compile` with compile_steps, `+compiled_drafter` with compile_drafter), or `eager (why)`:
        graphs unsupported for this run, or a capture that failed; a failed compile is named in parentheses."""
        if not (self.graphed and self.graphed.graphs):
            return f"eager ({self._eager_because or f'graph capture failed: {self.graphed.replays.fallback}'})"
        compiled = self.graphed.compile
        path = "cuda_graph+compile" if compiled.steps else \
            "cuda_graph+compiled_drafter" if compiled.drafter else "cuda_graph"
        if compiled.failed:
            path += f" (torch.compile failed: {compiled.failed})"
        return path

    def generate(self, method: Method | str, index: int, max_new: int | None = None,
                 path: PathLog | None = None) -> Generation:
        """Prompt `index` decoded by `method`; `path` hears the facts of the path it took (before and after: a
        capture or compile that fails mid-generation changes them)."""
        method = Method.parse(method)
        timer = PhaseTimer(self.device)
        ids, max_new = self.inputs[index], max_new or self.spec.decoding.max_new_tokens
        if path is not None:
            path.add(self.path_facts(method))
        # transformers sends its hybrid layers to fla whenever it is installed, also for CPU tensors
        with torch_gdn_path() if self.device.type == "cpu" else contextlib.nullcontext(), self._current_device():
            gen = self._generate(method, ids, max_new, self.spec.seed + index, timer)
        gen.times_ms = timer.totals_ms()
        if path is not None:
            path.add(self.path_facts(method))
        return gen

    def reset_auto(self) -> None:
        """tree_budget=auto: a fresh policy for the spec's decoding (its cost model measured anew; AR steps among
        its choices), else None. One policy serves the run, so that the cost model measured in warm-up serves every
        prompt."""
        d = self.spec.decoding
        self.auto = AutoBudget(buckets(d.tree_budget_max), self.device.type == "cuda", plain=True) \
            if d.auto_budget else None

    def calibrate(self, max_new: int) -> None:
        """tree_budget=auto measures its cost model in warm-up: ddtree generations of `max_new` tokens until it
        has (at most AUTO_WARMUPS of them; what is left is measured in the timed ones)."""
        for index in range(AUTO_WARMUPS):
            if not (self.auto and self.auto.calibrating):
                return
            self.generate(Method.DDTREE, index % len(self.inputs), max_new)

    def path_facts(self, method: Method) -> dict[str, str]:
        """What `method`'s next generation runs on (remote.fairness.FACTS)."""
        static = self.graphed is not None           # the graph decoder serves every method, graphs on or off
        if static:
            kernels = getattr(getattr(self.graphed, "target", None), "kernel_path", "torch")
        elif method.uses_drafter:
            kernels = str(getattr(self.target, "kernel_path", "torch"))
        else:      # the model's own forward: transformers' dispatch, held to torch on the CPU (torch_gdn_path)
            kernels = "transformers" if is_hybrid(self.model) and self.device.type != "cpu" else "torch"
        return {"device": str(self.device), "gpu_name": _gpu_name(self.device), "dtype": self.spec.model.dtype,
                "attn_implementation": str(self.spec.model.attn_implementation),
                "decode": ("cuda_graph" if self.graphed.graphs else "static_eager") if static else "eager",
                "compile": "steps" if static and self.graphed.compiled else "none", "kernel_path": kernels}

    def _current_device(self):
        """The LM head's GPU as the current device: the drafter, the tree build (Triton launches on the current
        device) and the timer's events live there; on a split target its stream waits for the other GPUs' work
        at every cross-device copy, so the events time whole steps."""
        out = output_device(self.model)
        return torch.cuda.device(out) if out.type == "cuda" else contextlib.nullcontext()

    def _generate(self, method: Method, ids, max_new, seed: int, timer) -> Generation:
        """One generation; at temperature > 0 sampled from `seed` (the run's seed + the prompt's index)."""
        auto = self.auto if method.builds_tree else None
        with eager_attention(self.device) if not self.graphed else contextlib.nullcontext():
            return decode(self._executor(method, ids, max_new, seed, auto), ids, max_new, self.stop_ids, timer, auto)

    def replay(self, method: Method, index: int, max_new: int, hear, auto=None) -> tuple[Generation, list]:
        """Prompt `index` decoded again at the run's temperature (0: the same tokens), untimed, each token choice's
        logits heard by `hear` (`Steps.listen`: the captured steps' kernels, uncaptured); `auto` stands in for
        tree_budget=auto's policy (remote.divergence replays the budgets a generation chose). Returns the
        generation and its steps as read."""
        ids, seed = self.inputs[index], self.spec.seed + index
        with torch_gdn_path() if self.device.type == "cpu" else contextlib.nullcontext(), self._current_device(), \
                eager_attention(self.device) if not self.graphed else contextlib.nullcontext():
            steps = self._executor(method, ids, max_new, seed, auto)
            steps.listen(hear)
            kept = Kept(steps)
            try:
                return decode(kept, ids, max_new, self.stop_ids, PhaseTimer(self.device), auto), kept.reads
            finally:
                steps.listen(None)

    def _executor(self, method: Method, ids, max_new: int, seed: int, auto) -> Steps:
        """The one place a generation's executor is chosen: the graph decoder's steps where it serves the run, else
        the eager loop's."""
        d = self.spec.decoding
        if self.graphed:
            return self.graphed.steps(method, ids.shape[1], max_new, d.widest_budget, auto, d.temperature, seed)
        generator = make_generator(self.model.get_output_embeddings().weight.device, seed)
        if not method.uses_drafter:
            return EagerAR(self.model, d.temperature, generator)
        sizes = tuple(auto.sizes) if auto else ()
        return EagerSpec(self.target, self.drafter, self.model, method, d.widest_budget, d.temperature, generator,
                         sizes)


def eager_attention(device: torch.device):
    """SDPA backends for eager (uncaptured) decoding on CUDA: all but cuDNN. cuDNN builds an execution plan for
    every new attention shape, and an eager loop meets a new key length at every step: eager DFlash / DDTree-64 took
    9.78 / 7.58 ms per token with cuDNN, 4.97 / 3.76 without it, AR unchanged (demo-qwen3, one H200, 2026-11-29,
    `python3 bench/bench_methods.py --model $M/demo-qwen3 --drafter $M/demo-qwen3-dflash --dataset
    jsonl:$M/heldout_prompts.jsonl --dtype bfloat16 --temperatures 0 --num-prompts 3 --max-new-tokens 64 --budgets
    64 --no-graphs --ar-again [--no-cudnn-sdpa]`). Captured steps have fixed shapes, where cuDNN is the fastest
    masked kernel."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _stop_ids(model, tokenizer) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids


def _param_count(module) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def _gpu_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "none"


def environment(run: Run) -> dict:
    cuda = run.device.type == "cuda"
    return {
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "python_version": platform.python_version(), "device": str(run.device),
        "gpu_name": _gpu_name(run.device),
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "dtype": run.spec.model.dtype, "attn_implementation": run.spec.model.attn_implementation,
        "kernel_path": str(getattr(run.target, "kernel_path", "torch")),
        "decode_path": run.decode_path,
        "device_split": describe(run.model),    # "" on one device
        "target_class": type(run.target).__name__ if run.target else "none",
        "model_params": _param_count(run.model), "drafter_params": _param_count(run.drafter),
        "block_size": run.drafter.block_size if run.drafter else 0,
        "draft_vocab_source": draft_vocab_source(run.drafter),
        # which GPUs the launcher gave this run: leases are checked against it
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)


def peak_memory_gb(device: torch.device) -> list[float]:
    """Per visible GPU on CUDA; [peak RSS] on the CPU."""
    if device.type == "cuda":
        return [torch.cuda.max_memory_allocated(i) / 2**30 for i in range(torch.cuda.device_count())]
    return [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20]     # Linux: KiB


@torch.inference_mode()
def warm_prompt_shapes(run: Run) -> None:
    """One uncached target forward per prompt, so that neither method is the first to meet a prompt length's
    kernels (that would bias TTFT towards whichever runs second)."""
    for ids in run.inputs:
        run.model(input_ids=ids.to(input_device(run.model)))


@dataclass
class Measured:
    """One method's timed generations (repeat by repeat, each in prompt order), peak memory and path."""
    gens: list[Generation]
    peak: list[float]          # GiB per GPU (one figure on the CPU), the most over all its generations
    path: PathLog
    warmup_s: float = 0.0      # its warm-up generations' wall time: where its compiles and graph captures fall


def warm_up(run: Run, methods: list[Method]) -> dict[Method, float]:
    """Each method's untimed warm-up generations (and tree_budget=auto's calibration); their wall time (s)."""
    seconds = {}
    for method in methods:
        started = time.perf_counter()
        for _ in range(run.spec.decoding.warmup):
            run.generate(method, 0, min(WARMUP_TOKENS, run.spec.decoding.max_new_tokens))
        if run.spec.decoding.warmup and method.builds_tree:
            run.calibrate(min(WARMUP_TOKENS, run.spec.decoding.max_new_tokens))
        seconds[method] = time.perf_counter() - started
    return seconds


def run_methods(run: Run, methods: list[Method], events: EventWriter, outputs) -> dict[str, Measured]:
    """Decode every prompt with each of `methods`, `repeats` times over all prompts.

    The methods take turns prompt by prompt, in reverse order on every other generation: a process that gets
    faster as it runs (kernel plan caches filling, allocator growth, clocks) would otherwise favour whichever is
    timed last (measured on an H200: eager AR timed first ran 1.4-3.2x slower than the same AR timed after the
    others). outputs.jsonl gets the first repeat's tokens (later repeats decode the same prompts with the same
    seeds); every generation's figures go to a `prompt` event."""
    measured = {m: Measured([], [], PathLog()) for m in methods}
    events.stage(RunnerStage.DECODING)
    n, repeats = len(run.inputs), run.spec.decoding.repeats
    tokens, wall = dict.fromkeys(methods, 0), dict.fromkeys(methods, 0.0)
    for repeat in range(repeats):
        for index in range(n):
            for method in methods if (repeat * n + index) % 2 == 0 else methods[::-1]:
                got = measured[method]
                reset_peak_memory(run.device)
                gen = run.generate(method, index, path=got.path)
                now = peak_memory_gb(run.device)
                got.peak = [max(a, b) for a, b in zip(now, got.peak or now)]
                got.gens.append(gen)
                per = prompt_metrics(gen)
                tokens[method] += len(gen.tokens)
                wall[method] += (per["ttft_ms"] + per["decode_ms"]) / 1000.0
                events.emit("prompt", method=method, index=index, repeat=repeat, **per)
                events.emit("progress", method=method, done=repeat * n + index + 1, total=n * repeats,
                            tokens_per_s=tokens[method] / wall[method] if wall[method] > 0 else 0.0)
                if repeat == 0:
                    text = run.tokenizer.decode(gen.tokens, skip_special_tokens=False)
                    outputs.write(json.dumps({"method": method, "prompt_index": index, "token_ids": gen.tokens,
                                              "text": text, "prompt": run.prompts[index]}) + "\n")
                    outputs.flush()
    return measured


def run(spec: RunSpec, run_dir: str) -> dict:
    return recorded(spec, run_dir, _run)


def report_lossless_failures(method: str, gens: list[Generation], ar_gens: list[Generation],
                             events: EventWriter, repeats: int = 1) -> None:
    """In float32 at temperature 0 every method must emit AR's tokens exactly; a difference is a bug of ours.
    The line format is what the orchestrator's failure catalog (lossless_check_failed) matches (with repeats,
    the repeat follows it)."""
    for repeat, (passed, ar_passed) in enumerate(zip(by_repeat(gens, repeats), by_repeat(ar_gens, repeats))):
        for i, (g, a) in enumerate(zip(passed, ar_passed)):
            pos = first_divergence(g.tokens, a.tokens)
            if pos is not None:
                expected = a.tokens[pos] if pos < len(a.tokens) else "end"
                got = g.tokens[pos] if pos < len(g.tokens) else "end"
                line = f"LOSSLESS CHECK FAILED: method={method} prompt={i} position={pos} expected={expected} " \
                       f"got={got}" + (f" repeat={repeat}" if repeats > 1 else "")
                print(line, flush=True)
                events.emit("warning", message=line)


def step_figures(run: Run, method: Method | str, gens: list[Generation], warn) -> dict[str, float]:
    """What a method's steps say beyond its generations: tree_budget=auto's choices and cost model, and the phase
    split of a replayed step (graphed_split; under auto at its most chosen budget)."""
    out, budget, method = {}, run.spec.decoding.widest_budget, Method.parse(method)
    if method.builds_tree and run.auto:
        out.update(auto_budget_metrics(gens, run.auto))
        chosen = collections.Counter(b for g in gens for b in g.budgets if b != PLAIN)     # trees: AR has no split
        budget = chosen.most_common(1)[0][0] if chosen else budget
    return {**out, **graphed_split(run, method, warn, budget)}


def graphed_split(run: Run, method: Method, warn, budget: int) -> dict[str, float]:
    """A replayed step's phases (remote.decoding.phase_split) for a graphed run, whose timers see only whole steps; {}
    otherwise. `warn(message)` hears why a split failed (the run's results stand without it)."""
    decoder = run.graphed
    if not (decoder and decoder.graphs) or decoder.compiled:    # compiled: each prefix would compile again
        return {}
    try:
        return split_step(decoder, method, budget)
    except Exception as exc:                        # noqa: BLE001 - a measurement, not the run
        warn(f"phase split of the {method} step skipped: {first_line(exc)}")
        return {}


def _load(spec: RunSpec, events: EventWriter, started: float) -> Run:
    """The run's models and prompts, the loading stage's events saying what is being fetched."""
    events.stage(RunnerStage.LOADING, detail=spec.model.path or "(random weights)")
    sources = (spec.model.path, spec.model.tokenizer, spec.drafter.path)
    with watching(sources, lambda line: events.stage(RunnerStage.LOADING, detail=line)) as hub:
        r = Run(spec)
    if hub is not None and hub.downloaded:
        print(f"hub: downloaded {gigabytes(hub.downloaded)} for {hub.label}; "
              f"loading took {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    return r


def _start(r: Run, events: EventWriter) -> dict:
    """The `start` event and the warnings known before decoding; returns the run's environment."""
    spec, env = r.spec, environment(r)
    events.emit("start", run_id=spec.run_id, method=spec.decoding.method, num_prompts=len(r.inputs), **env)
    if r.device.type == "cpu":
        events.emit("warning", message="running on CPU: timings are not representative of a GPU host")
    if (asked := spec.dataset.num_prompts) is not None and len(r.inputs) < asked:
        which = os.path.basename(spec.dataset.path or spec.dataset.name)   # its file: `jsonl` names a format
        events.emit("warning", message=f"dataset {which} has only {len(r.inputs)} prompts: running {len(r.inputs)} "
                                       f"of num_prompts={asked} (the run's num_prompts metric says how many ran)")
    return env


def _summarise(r: Run, measured: dict[Method, Measured], events: EventWriter) -> tuple[dict, list[dict]]:
    """The run's metrics (AR's prefixed `ar_`, the method's as they are) and its per-prompt rows."""
    d, n = r.spec.decoding, len(r.inputs)
    metrics: dict[str, float] = {}
    per_prompt: list[dict] = []
    for method, got in measured.items():
        depth = (r.drafter.block_size - 1) if method.uses_drafter else 0
        method_metrics = aggregate(got.gens, got.peak, depth, r.spec.seed, d.repeats)
        method_metrics.update(step_figures(r, method, got.gens,
                                           lambda message: events.emit("warning", message=message)))
        method_metrics["warmup_s"] = got.warmup_s
        per_prompt += [{"method": method, "prompt_index": i % n, "repeat": i // n, **prompt_metrics(g)}
                       for i, g in enumerate(got.gens)]
        if method is Method.AR:
            metrics.update({f"ar_{k}": v for k, v in method_metrics.items()})
        if method is r.method:
            metrics.update(method_metrics)
    return metrics, per_prompt


def _versus_ar(r: Run, measured: dict[Method, Measured], events: EventWriter) -> tuple[dict[str, float], list]:
    """The method against AR where both ran, and at temperature 0 the first repeat's divergences from AR, each
    classified (remote.divergence: one that is not a near-tie is a `not_lossless` warning); in float32 a token that
    differs is a lossless failure."""
    spec, d = r.spec, r.spec.decoding
    if not (r.method.uses_drafter and Method.AR in measured):
        return {}, []
    gens, ar_gens = measured[r.method].gens, measured[Method.AR].gens
    metrics = versus_ar(gens, ar_gens, spec.seed, d.repeats)
    metrics["ar_outside_draft_vocab"] = outside_share(r.drafter, [t for g in ar_gens for t in g.tokens])
    if d.temperature != 0:
        return metrics, []
    metrics.update(compare(gens, ar_gens))
    first, ar_first = by_repeat(gens, d.repeats)[0], by_repeat(ar_gens, d.repeats)[0]
    divergences = classify(r, r.method, first, ar_first)
    metrics.update(divergence_metrics(divergences))
    for found in divergences:
        if found.near_tie is False:
            print(found.line(d.method), flush=True)
            events.emit("warning", message=found.line(d.method))
    if spec.model.dtype == "float32":
        report_lossless_failures(d.method, gens, ar_gens, events, d.repeats)
    return metrics, divergences


def _noise(r: Run, measured: dict[Method, Measured], before: dict, after: dict) -> dict[str, float]:
    """remote.noise's figures from AR's time per token, the same work for every prompt; without AR from the
    method's spread over repeats alone (its prompts differ in what they accept, not only in noise)."""
    reference = measured.get(Method.AR) or measured[r.method]
    tpots = [prompt_metrics(g).get("tpot_ms") for g in reference.gens]
    return noise_metrics(tpots, r.spec.decoding.repeats, before, after, across_prompts=Method.AR in measured)


def _run(spec: RunSpec, files: RunFiles, events: EventWriter) -> dict:
    started = time.time()
    r = _load(spec, events, started)
    d, env = spec.decoding, _start(r, events)
    methods = d.methods
    if d.warmup:
        events.stage(RunnerStage.WARMUP, detail=", ".join(methods))
        warm_prompt_shapes(r)
    warmed = warm_up(r, methods)
    before = conditions(r.device.type == "cuda")
    with open(files.outputs, "w", encoding="utf-8") as outputs:
        measured = run_methods(r, methods, events, outputs)     # method=ar: one AR pass serves as both
    after = conditions(r.device.type == "cuda")
    for method, seconds in warmed.items():
        measured[method].warmup_s = seconds
    if r.decode_path != env["decode_path"]:
        events.emit("warning", message=f"decode path changed during the run: {r.decode_path}")
        env = environment(r)
    metrics, per_prompt = _summarise(r, measured, events)
    if r.drafter is not None:
        metrics["draft_vocab"] = float(r.drafter.vocab.size if r.drafter.vocab else r.drafter.config.vocab_size)
    metrics.update(_noise(r, measured, before, after))
    versus, divergences = _versus_ar(r, measured, events)
    metrics.update(versus)
    paths = {method: got.path.as_dict() for method, got in measured.items()}
    fairness = verdict(paths, d.method, noisy(metrics))
    if fairness and fairness.startswith("mismatch"):
        events.emit("warning", message=f"AR and {d.method} did not run on the same path, speedup_vs_ar compares "
                                       f"unlike things: {fairness.removeprefix('mismatch: ')}")
    metrics["wall_s"] = time.time() - started
    definitions = {**DEFINITIONS, "wall_s": "whole run including loading and warm-up (s)"}
    results = {"version": 1, "method": d.method, "metrics": metrics, "definitions": definitions,
               "tag_definitions": TAG_DEFINITIONS, "environment": env, "per_prompt": per_prompt, "paths": paths,
               "divergences": [found.as_dict() for found in divergences],
               **({"fairness": fairness} if fairness else {})}
    events.emit("result", metrics=metrics)
    write_json_atomic(files.results, results)
    return results
