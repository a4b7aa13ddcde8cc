"""What every metric and tag a run logs means, whatever its exact name.

Contract: `definition_of(name, definitions)` is the meaning of a metric named `name` from the runner's definitions
(results.json's `definitions`, remote.metrics): an exact entry; a headline copy (`1.speedup_vs_ar`, run_note) by
its metric; AR's figures (`ar_tpot_ms`) by the metric they repeat; a numbered family (`accept_rate_depth_3`) by its
template (`accept_rate_depth_<i>`); "" when none says. `tag_definition_of(name, runner_tags)` does the same for tags:
the runner's (results.json's `tag_definitions`), then the orchestrator's own (TAGS), then families by their prefix
(`preflight.`, `failure.`, ...). MLflow's own `mlflow.*` tags are MLflow's to define.
"""
from __future__ import annotations

import re
from typing import Mapping

HEADLINE_PREFIX = re.compile(r"\d+\.(.+)")

TAGS = {
    "method": "what the run measured: ar, dflash, ddtree (our runner), an engine arm's option (vllm, vllm-dflash, "
              "sglang, openai, ...) or script (a user's)",
    "engine": "an engine arm's serving engine (vllm, sglang, openai): its own decoding, against its own AR",
    "engine_version": "the serving engine's version, as its server reported it",
    "engine_command": "the command that started the engine's server (engine_command.txt has each phase's)",
    "stop_unconfirmed": "a stop was asked of a run whose host did not confirm it: attach, stop or reap settle it",
    "dataset": "the dataset option the prompts came from (its config file's name, e.g. code, humaneval)",
    "host": "where the run ran (the host's name)",
    "host_kind": "local, ssh or ray",
    "gpu": "the GPUs the runner used, by name (cpu without one)",
    "gpus": "the GPU indices the run was given (CUDA_VISIBLE_DEVICES)",
    "run_dir": "the run's local directory (its records, logs and results)",
    "run_id_local": "the run's own id (its directory's name): how `sync`, `attach` and `reap` find it",
    "project_commit": "the specbench commit (or installed version) that ran it; -dirty with local changes",
    "status": "how the run ended: FINISHED, FAILED, KILLED (skipped: a sweep's duplicate)",
    "fairness": "whether AR and the method compare: ok; mismatch (they ran different paths: device, dtype, decode "
                "path, kernels); noisy (the run's own timings wandered beyond the limit: timing_noise)",
    "timing_noise": "low, or noisy and why: AR's time per token spread beyond 10% across prompts or repeats, the "
                    "host's load above 1 a core, others' processes on the GPUs, slowed clocks (metrics timing_noise, "
                    "host_load_*, gpu_*)",
    "warnings": "the failure catalog's warnings found in the runner's output (their ids)",
    "stopped_by": "what stopped the run: user (Ctrl-C), SIGTERM, SIGHUP, stall_timeout or a failure id (fail_fast)",
    "exit_code": "the runner's exit code on a failed run",
    "script": "runner=script: the script's file name",
    "skipped": "true: a sweep's job whose effective config another job ran (duplicate_of names it)",
    "sweep": "parent: the run of a sweep that holds its jobs as children",
    "sweep_dir": "a sweep's local directory",
}
TAG_FAMILIES = {
    "preflight.": "what the host's preflight found (Python, torch, CUDA, driver, GPUs and their use, free disk)",
    "failure.": "why the run failed: the failure catalog's id, category and hint, and the stage it failed in",
    "duplicate_of": "the job of the sweep whose run holds this skipped job's result",
    "sweep.": "a sweep's facts: its overrides, jobs planned, failed and skipped, its compare link",
    "ray.": "host=ray: the node Ray placed the job on (ray.node_id, ray.node_ip)",
    "supersedes": "the MLflow run of this sweep job's earlier attempt, which `specbench resume` ran again",
}


def _template(name: str, definitions: Mapping[str, str]) -> str:
    """A family's definition: a one-letter placeholder (`<i>`, `<N>`, `<q>`) stands for a number, a word
    (`<metric>`) for a name."""
    for key, text in definitions.items():
        pattern = re.sub(r"<([A-Za-z]+)>", lambda m: r"\d+" if len(m.group(1)) == 1 else r"[^.]+", re.escape(key))
        if "<" in key and re.fullmatch(pattern, name):
            return text
    return ""


def definition_of(name: str, definitions: Mapping[str, str]) -> str:
    if name in definitions:
        return definitions[name]
    if found := HEADLINE_PREFIX.fullmatch(name):
        meaning = definition_of(found.group(1), definitions)
        return f"{meaning} (rounded to 4 significant digits and listed first)" if meaning else ""
    if name.startswith("ar_") and (meaning := definition_of(name[3:], definitions)):
        return f"AR baseline of this run: {meaning}"
    return _template(name, {k: v for k, v in definitions.items() if k != "ar_<metric>"})


def tag_definition_of(name: str, runner_tags: Mapping[str, str]) -> str:
    if name in runner_tags:
        return runner_tags[name]
    if name in TAGS:
        return TAGS[name]
    return next((text for prefix, text in TAG_FAMILIES.items() if name.startswith(prefix)), "")
