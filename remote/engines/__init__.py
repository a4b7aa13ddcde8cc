"""Engine arms: a serving engine's own decoding (vLLM, SGLang, any OpenAI-compatible server) measured by the runner
on the host, with the same files and metric names as our methods.

Contract: `run(spec, run_dir)` (spec.engine set) starts the engine's server as the runner's child, once without
speculation (the AR baseline, unless baseline=none or the arm has no speculative config) and once with it, one
server at a time, in that order; sends the run's prompts (token ids from the target's tokenizer, as ours) at each
concurrency level; stops each server on every path; and writes events.jsonl (stage, start, progress, prompt, warning,
result), outputs.jsonl (method, prompt_index, token_ids, text, prompt) and, last and atomically, results.json
(metrics with DEFINITIONS and ENGINE_DEFINITIONS, environment with the engine's name, version and server command).
Where the engine drafts with our DFlash drafter it also decodes the prompts with our runner's DFlash
(remote.engines.checks) and warns when the engine's acceptance is far below ours or its output not its own AR's.
A server that cannot start raises EngineStartError (exit 1, its last lines in runner.log).
"""
from __future__ import annotations

from .run import run

__all__ = ["run"]
