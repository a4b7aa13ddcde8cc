"""Whether AR and a method ran on the same path, so that their ratio (speedup_vs_ar) compares like with like.

Contract: a path is {fact: [values seen]} over FACTS: the device, GPU, dtype and attention implementation, the
decode path (`cuda_graph`: replayed graphs; `static_eager`: the graph decoder's steps run eagerly after a capture
failed; `eager`: remote.decoding.loop), whether the target's steps were torch.compile'd (`compile`: `steps` or
`none`; the drafter's compile is the method's own and not compared) and the target's kernel path. `PathLog` builds
one from the facts of each generation (`add`), keeping every value seen, in order. `mismatches(ar, method, name)`
lists what differs, and any fact that changed during either's generations; `verdict(paths, method, noisy)` is
"ok", "mismatch: <what>" and/or "noisy: <why>" (`noisy`: remote.noise's reason the timings cannot be trusted),
None where there is nothing to compare (no AR, or the method is AR). The runner records one path per method in
results.json (`paths`) and the verdict (`fairness`); the orchestrator warns, tags and marks the results table
from it, and can compare paths taken from two runs' results.json alike.
Non-goal: imports beyond the standard library and remote.spec (the orchestrator imports this).
"""
from __future__ import annotations

from typing import Mapping

from .spec import Method

FACTS = ("device", "gpu_name", "dtype", "attn_implementation", "decode", "compile", "kernel_path")


class PathLog:
    """The facts of one method's generations, each fact's values in the order first seen."""

    def __init__(self):
        self.values: dict[str, list[str]] = {}

    def add(self, facts: Mapping[str, object]) -> None:
        for key, value in facts.items():
            seen = self.values.setdefault(key, [])
            if str(value) not in seen:
                seen.append(str(value))

    def as_dict(self) -> dict[str, list[str]]:
        return {key: list(values) for key, values in self.values.items()}


def _shown(values) -> str:
    values = [values] if isinstance(values, str) else list(values or ["unknown"])
    return "->".join(values)


def mismatches(ar: Mapping, method: Mapping, name: str = "method") -> list[str]:
    """What differs between AR's path and the method's, one phrase per fact, e.g. `decode ar=eager
    ddtree=cuda_graph`; a fact with several values changed during the run (`decode ar=cuda_graph->eager`)."""
    found = []
    for key in FACTS:
        a, m = _values(ar.get(key)), _values(method.get(key))
        if a != m or len(a) > 1:
            found.append(f"{key} ar={_shown(a)} {name}={_shown(m)}")
    return found


def _values(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def verdict(paths: Mapping[str, Mapping], method: str, noisy: str | None = None) -> str | None:
    if method == Method.AR or Method.AR not in paths or method not in paths:
        return None
    found = mismatches(paths[Method.AR], paths[method], method)
    said = ["mismatch: " + "; ".join(found)] if found else []
    said += [f"noisy: {noisy}"] if noisy else []
    return "; ".join(said) or "ok"
