"""Prometheus text exposition (an engine's /metrics) read into numbers, and deltas between two reads.

Contract: `parse(text)` -> {(name, labels): value} where labels is a sorted tuple of (key, value) pairs; `delta(after,
before)` subtracts sample by sample (a sample absent before counts from 0: counters an engine creates on first use);
`total(samples, name, **labels)` sums the samples of `name` whose labels include `labels`; `by_label(samples, name,
label)` maps that label's values to sums. Non-goal: metadata (HELP, TYPE), exemplars, timestamps.
"""
from __future__ import annotations

import re

Sample = tuple[str, tuple[tuple[str, str], ...]]
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[Sample, float]:
    out: dict[Sample, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        out[(name, tuple(sorted(_LABEL.findall(labels or ""))))] = number
    return out


def delta(after: dict[Sample, float], before: dict[Sample, float]) -> dict[Sample, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def total(samples: dict[Sample, float], name: str, **labels: str) -> float | None:
    """The sum of `name`'s samples carrying `labels`; None when the engine exposes none."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    return sum(found) if found else None


def by_label(samples: dict[Sample, float], name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), value in samples.items():
        if n == name:
            for key, v in labels:
                if key == label:
                    out[v] = out.get(v, 0.0) + value
    return out
