"""How far a run's timings can be trusted: the noise the run measured on itself, and whether its sample of prompts
can carry an interval.

Contract: `conditions(cuda)` snapshots the host's load (1-minute load average per CPU core) and, on CUDA, the run's
GPUs through nvidia-smi (compute processes of others on them, SM clock, thermal or hardware clock slowdown); the
runner takes one before its timed passes and one after. `noise_metrics(tpots, repeats, before, after)` turns them and
the reference's per-generation time per token (AR's, where AR ran) into metrics: `timing_noise` is the larger of its
spread across prompts and across repeats (coefficient of variation). `noisy(metrics)` is the one-line reason a
comparison's timings cannot be trusted (None when they can): timing_noise above NOISE_LIMIT, the host's load above
HOST_LOAD_LIMIT a core, others' processes on the GPUs, or clocks slowed. `too_few(n)`: an interval over n prompts
is no 95% interval (MIN_PROMPTS).
Non-goal: imports beyond the standard library (the orchestrator reads results with it).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from statistics import mean, stdev
from typing import Mapping

# Why 10%: AR's time per token is the same work for every prompt (the graphed steps attend over the whole static
# cache), so its spread is the machine's noise. On a quiet GPU it is small: AR's ms a token ranged 0.186-0.189 over
# five runs on one H200 (docs/PERFORMANCE.md, 2026-12-05). At 10% a default run's 8 prompts leave AR's mean alone
# uncertain by 10% / sqrt(8) = 3.5% (one standard error): a 5% difference is inside two of them. On this project's
# loaded 2-core test box AR's spread was 28% on the default run (2026-12-07, `specbench`).
NOISE_LIMIT = 0.10
# Why 12: the percentile bootstrap (remote.stats) over n prompts covers the true speedup less often than it says:
# 49% of the time with 2 prompts, 75% with 3, 84% with 5, 89% with 8, 91% with 12, 92% with 24 (400 trials each,
# +-1.5 points; `python bench/interval_coverage.py`, 2026-12-07). 12 is the first count at which it misses at most
# twice as often as a 95% interval may (10%).
MIN_PROMPTS = 12
# Why 1.0: from one waiting process per CPU core on, the runner's own host work (Python and kernel launches, which
# bound a small pair's steps: remote.decoding.graph) waits for a core at random moments; the 1-minute load average
# counts the runner itself, one process.
HOST_LOAD_LIMIT = 1.0
# nvidia-smi's clock event reasons that mean the GPU slowed down on its own: HW slowdown 0x8, SW thermal 0x20,
# HW thermal 0x40, HW power brake 0x80 (idle, application clocks and the power cap are normal operation).
SLOWDOWN = 0x8 | 0x20 | 0x40 | 0x80
NOISE_METRICS = ("timing_noise", "timing_noise_prompts", "timing_noise_repeats", "host_load_before",
                 "host_load_after", "gpu_other_processes_before", "gpu_other_processes_after",
                 "gpu_sm_clock_mhz_before", "gpu_sm_clock_mhz_after", "gpu_slowdown_before", "gpu_slowdown_after")


def host_load() -> float | None:
    """The 1-minute load average per CPU core (1.0: every core busy), None where the OS has none."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return None


def _smi(query: str, what: str) -> list[list[str]]:
    text = subprocess.run(["nvidia-smi", f"--query-{what}={query}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=20, check=True).stdout
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def gpu_state() -> dict[str, float]:
    """The run's GPUs (CUDA_VISIBLE_DEVICES, indices in PCI order as launch.sh sets them) as nvidia-smi sees them:
    others' compute processes on them, their lowest SM clock, whether any slowed down; {} without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return {}
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):   # newer drivers, older
        try:
            gpus = _smi(f"index,uuid,clocks.sm,{reasons}", "gpu")
            break
        except (OSError, subprocess.SubprocessError):
            gpus = []
    mine = [g for g in gpus if not visible or g[0] in visible or g[1] in visible]
    if not mine:
        return {}
    try:
        apps = _smi("gpu_uuid,pid", "compute-apps")
    except (OSError, subprocess.SubprocessError):
        apps = []
    uuids = {g[1] for g in mine}
    others = [a for a in apps if len(a) >= 2 and a[0] in uuids and a[1] != str(os.getpid())]
    clocks = [int(g[2]) for g in mine if g[2].isdigit()]
    slowed = any(int(g[3], 16) & SLOWDOWN for g in mine if g[3].startswith("0x"))
    return {"gpu_other_processes": float(len(others)), **({"gpu_sm_clock_mhz": float(min(clocks))} if clocks else {}),
            "gpu_slowdown": float(slowed)}


def conditions(cuda: bool) -> dict[str, float]:
    load = host_load()
    return {**({"host_load": load} if load is not None else {}), **(gpu_state() if cuda else {})}


def spread(values: list[float]) -> float | None:
    """Coefficient of variation (sample standard deviation / mean); None for fewer than two values."""
    values = [v for v in values if v is not None]
    if len(values) < 2 or mean(values) <= 0:
        return None
    return stdev(values) / mean(values)


def noise_metrics(tpots: list[float | None], repeats: int, before: Mapping[str, float],
                  after: Mapping[str, float], across_prompts: bool = True) -> dict[str, float]:
    """`tpots`: the reference's time per token per generation, repeat by repeat, each in prompt order (None for a
    generation of one token); `across_prompts`: whether its prompts are the same work (AR's are; a speculative
    method's differ in what they accept), so that their spread is noise."""
    n = len(tpots) // max(repeats, 1)
    per_prompt = [[tpots[r * n + i] for r in range(repeats) if tpots[r * n + i] is not None] for i in range(n)]
    out = {f"{k}_before": v for k, v in before.items()} | {f"{k}_after": v for k, v in after.items()}
    across = spread([mean(p) for p in per_prompt if p]) if across_prompts else None
    if across is not None:
        out["timing_noise_prompts"] = across
    within = [s for p in per_prompt if (s := spread(p)) is not None]
    if within:     # root mean square over prompts of each prompt's spread over its repeats
        out["timing_noise_repeats"] = mean(s * s for s in within) ** 0.5
    figures = [out[k] for k in ("timing_noise_prompts", "timing_noise_repeats") if k in out]
    if figures:
        out["timing_noise"] = max(figures)
    return out


def noisy(metrics: Mapping[str, float]) -> str | None:
    """Why the run's timings cannot be trusted, in one line; None when nothing says so."""
    reasons = []
    noise = metrics.get("timing_noise")
    if noise is not None and noise > NOISE_LIMIT:
        where = "across repeats" if metrics.get("timing_noise_repeats", 0) >= metrics.get("timing_noise_prompts", 0) \
            else "across prompts"
        reasons.append(f"AR's time per token varied {noise:.0%} {where} (limit {NOISE_LIMIT:.0%})")
    loads = [metrics[k] for k in ("host_load_before", "host_load_after") if k in metrics]
    if loads and max(loads) > HOST_LOAD_LIMIT:
        reasons.append(f"the host's CPUs were oversubscribed (load {max(loads):.1f} per core, limit "
                       f"{HOST_LOAD_LIMIT:.0f})")
    if any(metrics.get(f"gpu_other_processes_{w}", 0) > 0 for w in ("before", "after")):
        count = max(metrics.get(f"gpu_other_processes_{w}", 0) for w in ("before", "after"))
        reasons.append(f"{count:.0f} other process(es) on the run's GPUs")
    if any(metrics.get(f"gpu_slowdown_{w}", 0) > 0 for w in ("before", "after")):
        reasons.append("the GPU slowed its clocks (thermal or hardware slowdown)")
    if not reasons:
        return None
    load = f"; host load {max(loads):.1f} per core" if loads and max(loads) <= HOST_LOAD_LIMIT else ""
    return "; ".join(reasons) + load


def noise_tag(metrics: Mapping[str, float]) -> str | None:
    """The `timing_noise` tag: `noisy: <why>` or `low (3.1%)`; None where nothing was measured."""
    if (why := noisy(metrics)) is not None:
        return f"noisy: {why}"
    noise = metrics.get("timing_noise")
    return None if noise is None else f"low ({noise:.1%}, limit {NOISE_LIMIT:.0%})"


def too_few(prompts: float | None) -> bool:
    """Whether an interval over `prompts` prompts is too small a sample to be read as a 95% interval."""
    return prompts is not None and prompts < MIN_PROMPTS
