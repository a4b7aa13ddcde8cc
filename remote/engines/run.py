"""The engine arm's run, step by step (remote.engines says what it writes)."""
from __future__ import annotations

import json
import os
import platform
import shlex
import socket
import sys
import time

import transformers

from ..assets import with_assets
from ..events import EventWriter, RunnerStage, recorded, write_json_atomic
from ..files import RunFiles
from ..metrics import DEFINITIONS, TAG_DEFINITIONS
from ..models.loading import load_tokenizer
from ..prompts import encode, load_prompts
from ..spec import DTYPES, RunSpec
from .base import Engine, Launch
from .checks import REFERENCE, low_acceptance, not_lossless, reference
from .kinds import engine_of
from .measure import Phase, measure
from .summary import ENGINE_DEFINITIONS, ENGINE_TAG_DEFINITIONS, generations, phase_metrics, versus

AR = "ar"


def run(spec: RunSpec, run_dir: str) -> dict:
    return recorded(spec, run_dir, _run)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def speculative_config(spec: RunSpec) -> dict | None:
    """The arm's speculative config with our drafter's resolved path where the arm takes it (drafter_into)."""
    e = spec.engine
    if not e.speculative:
        return None
    config = dict(e.speculative)
    if e.drafter_into and spec.drafter.path:
        config[e.drafter_into] = spec.drafter.path
    return config


def launch_of(spec: RunSpec, speculative: dict | None) -> Launch:
    e = spec.engine
    return Launch(python=e.python or sys.executable, model=spec.model.path, port=e.port or free_port(),
                  dtype=DTYPES.get(e.dtype or spec.model.dtype, e.dtype or spec.model.dtype),   # fp32: float32
                  tensor_parallel=e.tensor_parallel, max_model_len=e.max_model_len,
                  enforce_eager=e.enforce_eager, speculative=speculative, extra_args=tuple(e.extra_args),
                  command=tuple(e.command or ()), url=e.url)


def _run(spec: RunSpec, files: RunFiles, events: EventWriter) -> dict:
    started = time.time()
    spec = with_assets(spec)
    engine = engine_of(spec.engine.kind)
    events.stage(RunnerStage.LOADING, detail=f"{spec.model.path} tokenizer and prompts")
    tokenizer = load_tokenizer(spec.model)
    prompts = load_prompts(spec.dataset)
    ids = [t[0].tolist() for t in encode(tokenizer, prompts, spec.dataset)]
    speculative, method = speculative_config(spec), spec.decoding.method
    # the arm itself first: a speculative configuration the engine refuses ends the run at its first server start,
    # not after a whole AR baseline (vLLM CPU, tests/test_engines.py's failing start in the full suite: 117 s with the
    # baseline first, 54 with the arm first, 22 alone; 2026-12-07)
    turns = [(method, speculative)] + ([(AR, None)] if speculative and spec.decoding.baseline == AR else [])
    events.emit("start", run_id=spec.run_id, method=method, num_prompts=len(ids), **_environment(engine, spec))
    events.stage(RunnerStage.DECODING, detail=", ".join(m for m, _ in turns))
    phases: dict[str, Phase] = {}
    with open(files.outputs, "w", encoding="utf-8") as outputs:
        for name, config in turns:
            phases[name] = measure(engine, launch_of(spec, config), ids, spec, events, name)
            _record(phases[name], prompts, tokenizer, events, outputs)
    with open(files.engine_command, "w", encoding="utf-8") as f:
        f.write("".join(f"{name}: {_shell(p.command)}\n" for name, p in phases.items()))
    metrics = _metrics(spec, engine, phases, events)
    metrics["num_prompts"] = float(len(ids))   # how far its intervals can be read (remote.noise.too_few)
    metrics["wall_s"] = time.time() - started
    env = {**_environment(engine, spec), "engine_version": phases[method].version,
           "engine_command": _shell(phases[method].command)}
    results = {"version": 1, "method": method, "metrics": metrics,
               "definitions": {**DEFINITIONS, **ENGINE_DEFINITIONS, "wall_s": "whole run including server starts"},
               "tag_definitions": {**TAG_DEFINITIONS, **ENGINE_TAG_DEFINITIONS}, "environment": env,
               "per_prompt": _per_prompt(phases)}
    events.emit("result", metrics=metrics)
    write_json_atomic(files.results, results)
    return results


def _metrics(spec: RunSpec, engine: Engine, phases: dict[str, Phase], events: EventWriter) -> dict[str, float]:
    """The arm's metrics (its AR's prefixed `ar_`), the comparison with its AR and, where the engine drafts with our
    drafter, with our runner's DFlash."""
    method, seed = spec.decoding.method, spec.seed
    metrics = phase_metrics(phases[method], seed, engine.latency)
    if AR in phases:
        metrics.update({f"ar_{k}": v for k, v in phase_metrics(phases[AR], seed, engine.latency).items()})
        metrics.update(versus(phases[method], phases[AR], seed))
        if spec.decoding.temperature == 0:
            gens, ar_gens = (generations(phases[m].levels[0]) for m in (method, AR))
            _warn(events, not_lossless(method, gens, ar_gens, spec.engine.dtype or spec.model.dtype))
    elif not spec.engine.speculative:
        metrics.update({f"ar_{k}": v for k, v in metrics.items()})
    if spec.engine.reference and spec.engine.drafter_into and spec.drafter.path and "tau" in metrics:
        events.stage(RunnerStage.DECODING, detail="our runner's dflash on the same prompts (the reference)")
        tokens = [r.token_ids for r in phases[method].levels[0].replies]

        def said(index: int, tau: float | None) -> None:
            events.emit("prompt", method=REFERENCE, index=index, **({"tau": tau} if tau is not None else {}))
            events.emit("progress", method=REFERENCE, done=index + 1, total=len(tokens))
        metrics.update(reference(spec, tokens, said))
        _warn(events, low_acceptance(method, metrics))
    return metrics


def _warn(events: EventWriter, line: str | None) -> None:
    if line:
        print(line, flush=True)
        events.emit("warning", message=line)


def _record(phase: Phase, prompts: list[str], tokenizer, events: EventWriter, outputs) -> None:
    """`prompt` events for every level's requests; outputs.jsonl gets the first level's."""
    for level in phase.levels:
        for index, reply in enumerate(level.replies):
            tpot = reply.decode_s / (reply.tokens - 1) * 1000.0 if reply.tokens > 1 else None
            own = level.per_request[index] if level.per_request else None
            events.emit("prompt", method=phase.method, index=index, concurrency=level.streams,
                        new_tokens=reply.tokens, ttft_ms=reply.ttft_s * 1000.0, decode_ms=reply.decode_s * 1000.0,
                        **({"tpot_ms": tpot} if tpot is not None else {}),
                        **({"tau": own.tau} if own is not None and own.tau is not None else {}))
    for index, reply in enumerate(phase.levels[0].replies):
        text = tokenizer.decode(reply.token_ids, skip_special_tokens=False) if reply.token_ids else reply.text
        outputs.write(json.dumps({"method": phase.method, "prompt_index": index, "token_ids": reply.token_ids,
                                  "text": text, "prompt": prompts[index]}) + "\n")
    outputs.flush()


def _per_prompt(phases: dict[str, Phase]) -> list[dict]:
    return [{"method": name, "prompt_index": i, "concurrency": level.streams, "new_tokens": float(r.tokens),
             "ttft_ms": r.ttft_s * 1000.0, "decode_ms": r.decode_s * 1000.0}
            for name, phase in phases.items() for level in phase.levels for i, r in enumerate(level.replies)]


def _environment(engine: Engine, spec: RunSpec) -> dict:
    return {"engine": engine.name, "transformers_version": transformers.__version__,
            "python_version": platform.python_version(), "dtype": spec.engine.dtype or spec.model.dtype,
            "decode_path": f"engine {engine.name}", "concurrency": ",".join(map(str, spec.engine.concurrency)),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def _shell(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
