"""bench/step_timeline.py over a trace in kineto's chrome format: replays grouped by their cudaGraphLaunch's
correlation, gaps inside and idle time between them, the host-late count and the largest gap's position."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from step_timeline import render, step_timeline  # noqa: E402


def _trace(replays: list[tuple[float, float, list[tuple[str, float, float]]]]) -> dict:
    """Chrome events for replays (host launch ts, device start, [(name, gap before, duration)])."""
    events = []
    for correlation, (launch, start, kernels) in enumerate(replays, 1):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": launch, "dur": 5,
                       "args": {"correlation": correlation}})
        t = start
        for name, gap, dur in kernels:
            t += gap
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
            events.append({"ph": "X", "cat": cat, "name": name, "ts": t, "dur": dur,
                           "args": {"correlation": correlation}})
            t += dur
    # a lone copy outside any graph (a host read) is not a replay
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 1, "dur": 1,
                   "args": {"correlation": 999}})
    return {"traceEvents": events}


def test_timeline_finds_the_idle_time_and_where_it_is():
    step = [("a", 0, 2.0)] + [("b", 0.5, 1.0)] * 9 + [("slow_after", 4.0, 1.0)]
    # the third launched after the second had ended; the fourth after a long pause (a prefill between generations)
    replays = [(0.0, 10.0, step), (20.0, 45.0, step), (80.0, 75.0, step), (90.0, 5000.0, step)]
    t = step_timeline(_trace(replays))
    busy = sum(d for _, _, d in step)
    gaps = sum(g for _, g, _ in step[1:])
    span = busy + gaps
    assert t["steps"] == 4 and t["events"] == len(step)
    assert abs(t["busy_us"] - busy) < 1e-9 and abs(t["gap_us"] - gaps) < 1e-9
    idles = sorted([45.0 - (10.0 + span), 75.0 - (45.0 + span), 5000.0 - (75.0 + span)])
    assert abs(t["idle_before_us"] - idles[1]) < 1e-9       # the median: the pause does not swamp it
    assert abs(t["host_late"] - 1 / 3) < 1e-9                # of the three replays after the first, one was late
    position, name, previous, gap, duration = t["gaps"][0]
    assert (position, name, previous, gap, duration) == (len(step) - 1, "slow_after", "b", 4.0, 1.0)
    assert t["kernels"][0][0] == "b" and abs(t["kernels"][0][1] - 9.0) < 1e-9 and t["kernels"][0][2] == 9
    assert [k[0] for k in t["kernels"]] == ["b", "a", "slow_after"]
    text = render("x", t).splitlines()
    assert "slow_after" in text[text.index("  largest gaps:") + 1]


def test_timeline_of_a_trace_without_replays():
    assert step_timeline({"traceEvents": []}) == {"steps": 0}
    assert "no graph replays" in render("ar", {"steps": 0})


def test_timeline_splits_the_replays_by_kind_and_what_came_before():
    plain = [("gemv", 0.5, 1.0)] * 10
    tree = [("gemv", 0.5, 3.0)] * 12
    # plain, plain, tree, plain (after a tree: slower), plain
    slow = [("gemv", 0.5, 2.0)] * 10
    replays = [(0.0, 0.0, plain), (1.0, 100.0, plain), (2.0, 200.0, tree), (3.0, 300.0, slow), (4.0, 400.0, plain)]
    t = step_timeline(_trace(replays))
    plain_kind, tree_kind = t["kinds"][0], t["kinds"][1]      # the same names: plain and slow are one kind
    assert (plain_kind["replays"], plain_kind["events"], tree_kind["replays"], tree_kind["events"]) == (4, 10, 1, 12)
    span = lambda k: sum(d for _, _, d in k) + sum(g for _, g, _ in k[1:])     # noqa: E731
    assert abs(plain_kind["after_own_us"] - span(plain)) < 1e-9           # the 2nd and the 5th replay
    assert abs(plain_kind["after_other_us"] - span(slow)) < 1e-9          # the 4th, after the tree
    assert tree_kind["after_own_us"] is None
    total = 3 * span(plain) + span(slow) + span(tree)
    assert abs(tree_kind["share"] - span(tree) / total) < 1e-9
    assert "kind 2: 1 replays of 12 events" in render("auto", t)
