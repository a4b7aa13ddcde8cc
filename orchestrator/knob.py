"""A knob: one setting users type, described once as a dataclass field: its default, the rule its value must meet
and the sentence `--help` shows, together (`knob(...)`).

Contract: a rule is a function of the value that returns None when the value is allowed, else "must be <what is
allowed>, got <value>" (the error after `key: `). `knobs_of(cls)` lists a settings class's knobs in field order;
`defaults_of(cls)` their defaults. REQUIRED marks a knob a config must set (its `example` says how); NAME, one whose
default is the chosen option's name (model=demo-qwen3: demo-qwen3). Non-goal: checks across keys (the config room).
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

Rule = Callable[[Any], "str | None"]


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED = _Marker("REQUIRED")   # the config must set it
NAME = _Marker("NAME")           # the option's own name (host=mybox: mybox)


@dataclass(frozen=True)
class Knob:
    key: str
    default: Any
    rule: Rule
    help: str
    example: str | None = None     # for a REQUIRED knob: how to set it
    local_file: bool = False       # a path on this machine that must be a file (checked where the job is placed)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def knob(default: Any, rule: Rule, help: str, *, example: str | None = None, local_file: bool = False):
    """A dataclass field that is a knob. Mutable defaults ({} and []) are copied for each instance."""
    meta = {"knob": (rule, help, example, local_file)}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=None if default is REQUIRED else default, metadata={**meta, "required":
                             default is REQUIRED})


def knobs_of(cls) -> dict[str, Knob]:
    out = {}
    for f in dataclasses.fields(cls):
        if "knob" not in f.metadata:
            continue
        rule, text, example, local_file = f.metadata["knob"]
        default = REQUIRED if f.metadata.get("required") else (
            f.default if f.default is not dataclasses.MISSING else f.default_factory())
        out[f.name] = Knob(f.name, default, rule, text, example, local_file)
    return out


def defaults_of(cls) -> dict[str, Any]:
    return {key: k.default for key, k in knobs_of(cls).items() if not k.required}


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rule(allowed: str, ok: Callable[[Any], bool]) -> Rule:
    return lambda value: None if ok(value) else f"must be {allowed}, got {value!r}"


def integer(low: int, high: int | None = None, why: str = "") -> Rule:
    span = f">= {low}" if high is None else f"from {low} to {high}"
    return rule(f"an integer {span}{why}", lambda v: is_int(v) and low <= v and (high is None or v <= high))


def number(low: float, high: float | None = None, *, above: bool = False) -> Rule:
    """A finite int or float >= low (> low with `above`), at most `high`."""
    span = f"{'>' if above else '>='} {low:g}" + ("" if high is None else f" and <= {high:g}")

    def ok(v) -> bool:
        finite = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return finite and (v > low if above else v >= low) and (high is None or v <= high)
    return rule(f"a finite number {span}", ok)


def one_of(options) -> Rule:
    return rule(f"one of {', '.join(options)}", lambda v: isinstance(v, str) and v in options)


def nullable(inner: Rule) -> Rule:
    def check(value) -> str | None:
        problem = None if value is None else inner(value)
        if problem is None:
            return None
        allowed, _, got = problem.partition(", got ")
        return f"{allowed} or null, got {got}"
    return check


def _is_list(value) -> bool:
    return isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig"


def _is_mapping(value) -> bool:
    return isinstance(value, dict) or type(value).__name__ == "DictConfig"


def gpu_list(value) -> str | None:
    if not _is_list(value) or not all(is_int(g) and g >= 0 for g in value):
        return f"must be a list of non-negative integers such as [0,1], got {value!r}"
    twice = sorted({g for g in value if list(value).count(g) > 1})
    if twice:
        return f"lists GPU {', '.join(map(str, twice))} more than once in {list(value)}; name each GPU once"
    return None


def gpus_or_count(value) -> str | None:
    """GPU indices, or a count of GPUs (gpus=2) for a pool or a scheduler to choose."""
    if is_int(value) and value >= 0:
        return None
    problem = gpu_list(value)
    return problem and problem.replace("such as [0,1]", "such as [0,1], or a count such as 2 (host=ray, a pool)")


def names(value) -> bool:
    """Shell identifiers (environment variable names)."""
    return all(isinstance(n, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in value)


ANY = rule("anything", lambda v: True)
FLAG = rule("true or false", lambda v: isinstance(v, bool))
TEXT = rule("a non-empty string", lambda v: isinstance(v, str) and v != "")
MAPPING = rule("a mapping {field: value}", _is_mapping)
LIST = rule("a list", _is_list)
ENV_NAMES = rule("a list of environment variable names such as [HF_TOKEN]", lambda v: _is_list(v) and names(v))
