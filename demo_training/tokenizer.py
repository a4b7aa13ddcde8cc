"""Byte-level BPE tokenizer for the demo pairs, and corpus tokenization.

Contract: `train_tokenizer(texts, vocab_size)` returns a `tokenizers.Tokenizer` (byte-level BPE, no normalizer, no
prefix space) whose ids 0 and 1 are the special tokens `<|endoftext|>` and `<|MASK|>`; `save_tokenizer(tok, dir)`
writes `tokenizer.json` and a `tokenizer_config.json` (eos = pad = `<|endoftext|>`, mask = `<|MASK|>`) that
`AutoTokenizer.from_pretrained(dir)` loads, the layout of the project's shipped `remote/assets/tokenizer`.
`encode_stream(tok, texts)` is one int32 tensor: every text's ids followed by `<|endoftext|>`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS, MASK = "<|endoftext|>", "<|MASK|>"
SPECIALS = [EOS, MASK]


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    assert tok.token_to_id(EOS) == 0 and tok.token_to_id(MASK) == 1, "special tokens must be ids 0 and 1"
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: Path, model_max_length: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": EOS, "mask_token": MASK,
              "model_max_length": model_max_length, "clean_up_tokenization_spaces": False}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def encode_stream(tok: Tokenizer, texts: list[str], chunk: int = 4096) -> torch.Tensor:
    """All texts as one id stream [N] int32, each text followed by <|endoftext|> (id 0)."""
    eos = tok.token_to_id(EOS)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)     # no offsets: faster where available
    parts = []
    for start in range(0, len(texts), chunk):
        for enc in encode(texts[start:start + chunk]):
            parts.append(np.asarray(enc.ids, dtype=np.int32))
            parts.append(np.asarray([eos], dtype=np.int32))
    return torch.from_numpy(np.concatenate(parts)) if parts else torch.zeros(0, dtype=torch.int32)


def heldout_prompts(tok: Tokenizer, files: list[tuple[str, str]], count: int, length: int,
                    seed: int) -> list[dict]:
    """Up to `count` prompts of exactly `length` tokens, one per held-out file, each starting at a line start
    (chosen with `seed`) and kept only when its text re-tokenizes to the same ids (what the runner will feed)."""
    import random

    rng = random.Random(seed)
    prompts = []
    for key, text in files:
        lines = text.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines[: max(1, len(lines) // 2)]) if line.strip()]
        if not starts:
            continue
        chunk = "".join(lines[rng.choice(starts):])
        ids = tok.encode(chunk).ids[:length]
        if len(ids) < length or tok.token_to_id(EOS) in ids:
            continue
        prompt = tok.decode(ids)
        if tok.encode(prompt).ids != ids:
            continue
        prompts.append({"prompt": prompt, "source": key, "num_tokens": length})
        if len(prompts) == count:
            break
    return prompts
