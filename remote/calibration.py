"""A reduced draft vocabulary from a calibration text (`drafter.draft_vocab`, `drafter.calibration`).

Contract: `reduce_draft_vocab(drafter, spec, model, tokenizer, prompts)` restricts the drafter's head in place to
the `spec.draft_vocab` target tokens most frequent in the text at `spec.calibration` (assets resolved: by default
the shipped remote.spec.CALIBRATION, tools/build_calibration.py), among the drafter's own vocabulary where its
checkpoint already reduced one; with no `draft_vocab` it does nothing. The text must hold none of the run's
`prompts` verbatim (a vocabulary counted on the prompts it is measured on would flatter the drafter): a SpecError
names the prompt, as it does a missing or empty text. `outside_share(drafter, tokens)` is the share of `tokens`
outside the drafter's vocabulary (0.0 without a reduced one), what the run reports for AR's; `draft_vocab_source`
says where the vocabulary came from.
"""
from __future__ import annotations

from pathlib import Path

from .errors import SpecError
from .models.draft_vocab import DraftVocab, count_tokens, most_frequent
from .models.drafter import DFlashDrafter
from .spec import DrafterSpec

CHECKED_CHARS = 32      # prompts at least this long are looked for in the text (shorter ones occur by chance)


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


def reduce_draft_vocab(drafter: DFlashDrafter, spec: DrafterSpec, model, tokenizer, prompts: list[str]) -> None:
    if not spec.draft_vocab:
        return
    path = spec.calibration
    head = model.get_output_embeddings().weight
    counts = count_tokens(tokenizer, read_calibration(path, prompts), head.shape[0])
    source = f"{spec.draft_vocab} most frequent in {Path(path).name}"
    if drafter.vocab is None:
        drafter.vocab = DraftVocab.from_head(most_frequent(counts, spec.draft_vocab), head, source)
    else:
        keep = most_frequent(counts, spec.draft_vocab, drafter.vocab.ids)
        drafter.vocab = drafter.vocab.restricted(keep, f"{source}, of the checkpoint's {drafter.vocab.size}")


def outside_share(drafter: DFlashDrafter | None, tokens: list[int]) -> float:
    if drafter is None or drafter.vocab is None or not tokens:
        return 0.0
    inverse = drafter.vocab.inverse.cpu()
    inside = sum(1 for t in tokens if 0 <= t < inverse.shape[0] and int(inverse[t]) >= 0)
    return 1.0 - inside / len(tokens)


def draft_vocab_source(drafter: DFlashDrafter | None) -> str:
    if drafter is None:
        return "none"
    return "the target's" if drafter.vocab is None else drafter.vocab.source
