"""Where a replayed step's wall time goes beyond its kernels: the device timeline of graph replays, from a
torch.profiler chrome trace.

Why: a captured step's kernel time (remote.decoding.phase_split.split_kernels) sums to less than its wall time,
by 40-54 us a step on the demo hybrid (one H200, 2026-12-04), more for DDTree than for DFlash although DDTree
launches fewer kernels. The difference is idle device time: between the kernels of one replay (each kernel waits
for its predecessor to drain and for its own launch) and between replays (the device waits for the host to queue
the next one, and for the step's read to be copied out). Only timestamps show which. Measured 2026-12-04 on one
H200 with `bench_methods.py $Q35 --temperatures 0 --num-prompts 6 --budgets 15,31 --timeline DIR`
(bench/gpu_suite.sh's q35_timeline step; real generations under the profiler): 0.25-0.45 us before every kernel
alike, no position standing out, and ~15 us between two replays that the host had queued in time; the steps' busy
time (DFlash 419 us, DDTree 15 ~410 with the top-k in two launches) is what differs.

Contract: `step_timeline(trace)` takes a chrome trace's dict (torch.profiler `export_chrome_trace`, CUDA activity;
the CPU's runtime calls come along) and returns, over every graph replay in it (device events grouped by the
correlation id of their `cudaGraphLaunch`; replays of fewer than `min_events` events are left out): steps, events
(mean per step), span_us (first start to last end), busy_us (summed durations), gap_us (span - busy: idle inside the
replay), idle_before_us (the median over replays of the previous one's end to this one's start: a prefill between
two generations is no replay's) and host_late (the fraction of replays launched by the host after the previous one
had ended: then the device waited for the host), and `gaps`: the replays' modal event sequence position by position,
as (position, event, previous event, mean gap before it us, mean duration us), largest gap first, and `kernels`:
[name, us a step, launches a step] over every replay, the slowest first (real generations' means, where
remote.decoding.phase_split profiles one replayed state). `kinds`: the replays grouped by captured step (`_kinds`), where
a run replays several (tree_budget=auto's AR steps, trees and absorbs). `render(name, timeline, top)` is its text.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from statistics import mean, median

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def _replays(trace: dict) -> tuple[dict[int, float], dict[int, list[dict]]]:
    """{correlation: host launch ts} of cudaGraphLaunch calls and {correlation: device events, by start}."""
    launches, device = {}, defaultdict(list)
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X":
            continue
        correlation = (event.get("args") or {}).get("correlation")
        if event.get("cat") == "cuda_runtime" and event.get("name", "").startswith("cudaGraphLaunch"):
            launches[correlation] = float(event["ts"])
        elif event.get("cat") in DEVICE and correlation is not None:
            device[correlation].append(event)
    return launches, {c: sorted(events, key=lambda e: float(e["ts"])) for c, events in device.items()
                      if c in launches}


def step_timeline(trace: dict, min_events: int = 10) -> dict:
    launches, replays = _replays(trace)
    steps = sorted((events for events in replays.values() if len(events) >= min_events),
                   key=lambda events: float(events[0]["ts"]))
    if not steps:
        return {"steps": 0}
    spans, busies, idles, late = [], [], [], 0
    previous_end = None
    for events in steps:
        start = float(events[0]["ts"])
        end = max(float(e["ts"]) + float(e["dur"]) for e in events)
        spans.append(end - start)
        busies.append(sum(float(e["dur"]) for e in events))
        if previous_end is not None:
            idles.append(start - previous_end)
            late += launches[events[0]["args"]["correlation"]] > previous_end
        previous_end = end
    kernels: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])      # name -> [us, launches] over all
    for events in steps:
        for e in events:
            kernels[e["name"]][0] += float(e["dur"]) / len(steps)
            kernels[e["name"]][1] += 1 / len(steps)
    modal = Counter(tuple(e["name"] for e in events) for events in steps).most_common(1)[0][0]
    same = [events for events in steps if tuple(e["name"] for e in events) == modal]
    gaps = []
    for i, name in enumerate(modal):
        if i == 0:
            continue
        before = [float(s[i]["ts"]) - max(float(e["ts"]) + float(e["dur"]) for e in s[:i]) for s in same]
        gaps.append((i, name, modal[i - 1], mean(before), mean(float(s[i]["dur"]) for s in same)))
    return {
        "kinds": _kinds(steps, spans),
        "steps": len(steps), "events": mean(len(s) for s in steps), "span_us": mean(spans), "busy_us": mean(busies),
        "gap_us": mean(spans) - mean(busies), "idle_before_us": median(idles) if idles else 0.0,
        "host_late": late / max(1, len(steps) - 1), "modal_steps": len(same),
        "gaps": sorted(gaps, key=lambda g: -g[3]),
        "kernels": sorted(([name, us, n] for name, (us, n) in kernels.items()), key=lambda k: -k[1]),
    }


def _kinds(steps: list[list[dict]], spans: list[float]) -> list[dict]:
    """The replays grouped by kind (the same kernels at the same grids: one captured step, e.g. tree_budget=auto's
    AR step, a tree of one bucket, the drafter's absorb), most frequent first: replays, events, mean span, its share
    of all replays' spans, and the mean span of those that follow a replay of their own kind and of another (a
    kind's step can cost more right after another's: caches and clocks warm for the other)."""
    keys = [tuple((e["name"], str((e.get("args") or {}).get("grid"))) for e in events) for events in steps]
    total = sum(spans)
    kinds = []
    for key, n in Counter(keys).most_common():
        mine = [i for i, k in enumerate(keys) if k == key]
        after_own = [spans[i] for i in mine if i and keys[i - 1] == key]
        after_other = [spans[i] for i in mine if i and keys[i - 1] != key]
        kinds.append({"replays": n, "events": len(key), "span_us": mean(spans[i] for i in mine),
                      "share": sum(spans[i] for i in mine) / total,
                      "after_own_us": mean(after_own) if after_own else None,
                      "after_other_us": mean(after_other) if after_other else None})
    return kinds


def render(name: str, timeline: dict, top: int = 15) -> str:
    if not timeline.get("steps"):
        return f"{name}: no graph replays in the trace"
    t = timeline
    lines = [f"{name}: {t['steps']} replays, {t['events']:.0f} events each; span {t['span_us']:.1f} us = busy "
             f"{t['busy_us']:.1f} + gaps {t['gap_us']:.1f}; idle before a replay (median) {t['idle_before_us']:.1f} us "
             f"(host late {100 * t['host_late']:.0f}%)"]
    kinds = t.get("kinds", [])
    for i, kind in enumerate(kinds[:top] if len(kinds) > 1 else []):
        own, other = (f"{kind[k]:.1f}" if kind[k] is not None else "-" for k in ("after_own_us", "after_other_us"))
        lines.append(f"  kind {i + 1}: {kind['replays']} replays of {kind['events']} events, span {kind['span_us']:.1f} "
                     f"us ({100 * kind['share']:.1f}% of all); after its own kind {own} us, after another {other}")
    for name, us, launches in t["kernels"][:top]:
        lines.append(f"    {us:7.2f} us {launches:5.1f}x  {name[:100]}")
    lines.append("  largest gaps:")
    for position, event, previous, gap, duration in t["gaps"][:top]:
        lines.append(f"    {gap:6.2f} us before #{position:<4d} {event[:60]:60s} ({duration:5.2f} us) "
                     f"after {previous[:50]}")
    return "\n".join(lines)
