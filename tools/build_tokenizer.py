"""Build the small byte-level BPE tokenizer that ships with the runner for random-weight models.

Contract: `python tools/build_tokenizer.py [out_dir]` trains a byte-level BPE of `VOCAB_SIZE` entries on this
machine's Python standard-library sources and writes `tokenizer.json` + `tokenizer_config.json` (loadable with
`transformers.AutoTokenizer`) into `out_dir` (default `remote/assets/tokenizer`). Special tokens:
`<|endoftext|>` (eos, pad) and `<|MASK|>` (the DFlash drafter's mask token). The vocabulary fits the tiny
model configs (`vocab_size: 1024`). Run once; the output is committed. Non-goal: a tokenizer good for real text.
"""
from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 1000
SPECIAL = ["<|endoftext|>", "<|MASK|>"]
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "remote" / "assets" / "tokenizer"


def stdlib_texts():
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        yield path.read_text(encoding="utf-8", errors="replace")


def train() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(stdlib_texts(), trainer=trainer)
    return tok


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = train()
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "mask_token": "<|MASK|>",
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(json.dumps({"out": str(out), "vocab_size": tok.get_vocab_size()}))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
