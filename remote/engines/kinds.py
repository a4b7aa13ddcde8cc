"""The engine kinds the runner knows: `engine_of(kind)` is the one place a kind's name (remote.spec.ENGINES)
becomes its class; a new engine is a module beside vllm.py and a line here."""
from __future__ import annotations

from .base import Engine
from .openai import OpenAICompatible
from .sglang import SGLang
from .vllm import VLLM

KINDS: dict[str, type[Engine]] = {cls.name: cls for cls in (VLLM, SGLang, OpenAICompatible)}


def engine_of(kind: str) -> Engine:
    if kind not in KINDS:
        raise ValueError(f"engine kind must be one of {', '.join(KINDS)}; got {kind!r}")
    return KINDS[kind]()
