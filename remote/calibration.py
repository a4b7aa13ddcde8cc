"""A reduced draft vocabulary from a calibration text (`drafter.draft_vocab`, `drafter.calibration`).

Contract: `reduce_draft_vocab(drafter, spec, model, tokenizer, prompts)` restricts the drafter's head in place to
the `spec.draft_vocab` target tokens most frequent in the text `spec.calibration` names (a file, assets resolved;
by default remote.spec.CALIBRATION, "stdlib": `stdlib_text`, up to 1 MB of the host Python's standard-library
sources, files in an order fixed by their names' hashes, each file holding an evaluated prompt left out), among
the drafter's own vocabulary where its checkpoint already reduced one; with no `draft_vocab` it does nothing. A
named text must hold none of the run's `prompts` verbatim (a vocabulary counted on the prompts it is measured on
would flatter the drafter): a SpecError names the prompt, as it does a missing or empty text. `outside_share(
drafter, tokens)` is the share of `tokens` outside the drafter's vocabulary (0.0 without a reduced one), what the
run reports for AR's; `draft_vocab_source` says where the vocabulary came from.
"""
from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

import torch

from .errors import SpecError
from .models.draft_vocab import DraftVocab, count_tokens, most_frequent
from .models.drafter import DFlashDrafter
from .spec import CALIBRATION, DrafterSpec

CHECKED_CHARS = 32      # prompts at least this long are looked for in the text (shorter ones occur by chance)
STDLIB_BYTES = 1_000_000
STDLIB_FILE_BYTES = 64 * 1024     # many files rather than a few large ones


def read_calibration(path: str, prompts: list[str]) -> str:
    if not Path(path).is_file():
        raise SpecError(f"drafter.calibration {path!r} is not a file")
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise SpecError(f"drafter.calibration {path!r} is empty")
    for index, prompt in enumerate(prompts):
        if len(prompt.strip()) >= CHECKED_CHARS and prompt in text:
            raise SpecError(f"drafter.calibration {path!r} holds the run's prompt {index} verbatim "
                            f"({prompt.strip()[:40]!r}...): count the draft vocabulary on text the run does not "
                            f"evaluate")
    return text


def stdlib_text(prompts: list[str]) -> str:
    """Python sources are code and English (comments, docstrings): the demo pairs' domain, close to HumanEval's; a
    deployment counts on its own traffic instead. Site-packages and test suites are left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("site-packages", "dist-packages", "test", "tests", "idlelib")
                       and not d.startswith((".", "__"))]
        files += [Path(dirpath, n) for n in names if n.endswith(".py")]
    files.sort(key=lambda p: hashlib.sha1(p.relative_to(root).as_posix().encode()).digest())
    parts, total, checked = [], 0, [p for p in prompts if len(p.strip()) >= CHECKED_CHARS]
    for path in files:
        try:
            text = path.read_bytes().decode("utf-8") if path.stat().st_size <= STDLIB_FILE_BYTES else ""
        except (OSError, UnicodeDecodeError):
            continue
        if text.strip() and not any(p in text for p in checked):
            parts.append(text)
            total += len(text.encode())
            if total >= STDLIB_BYTES:
                break
    return "\n\n".join(parts)


def _source(spec: DrafterSpec) -> str:
    if spec.calibration == CALIBRATION:
        return f"the standard library of Python {sys.version_info.major}.{sys.version_info.minor}"
    return Path(spec.calibration).name


def reduce_draft_vocab(drafter: DFlashDrafter, spec: DrafterSpec, model, tokenizer, prompts: list[str]) -> None:
    if not spec.draft_vocab:
        return
    head = model.get_output_embeddings().weight
    text = stdlib_text(prompts) if spec.calibration == CALIBRATION else read_calibration(spec.calibration, prompts)
    counts = count_tokens(tokenizer, text, head.shape[0])
    source = f"{spec.draft_vocab} most frequent in {_source(spec)}"
    if drafter.vocab is None:
        drafter.vocab = DraftVocab.from_head(most_frequent(counts, spec.draft_vocab), head, source)
    else:
        keep = most_frequent(counts, spec.draft_vocab, drafter.vocab.ids)
        drafter.vocab = drafter.vocab.restricted(keep, f"{source}, of the checkpoint's {drafter.vocab.size}")


def outside_share(drafter: DFlashDrafter | None, tokens: list[int]) -> float:
    if drafter is None or drafter.vocab is None or not tokens:
        return 0.0
    vocab = drafter.vocab
    ids = torch.tensor(tokens, dtype=torch.long)
    ids = ids[(ids >= 0) & (ids < vocab.inverse.shape[0])].to(vocab.inverse.device)   # others: outside
    return 1.0 - int((vocab.to_draft(ids) >= 0).sum()) / len(tokens)


def draft_vocab_source(drafter: DFlashDrafter | None) -> str:
    if drafter is None:
        return "none"
    return "the target's" if drafter.vocab is None else drafter.vocab.source
