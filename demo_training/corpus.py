"""The training corpus: the `.py` files of this host's Python (standard library, then site-packages).

Contract: `build_corpus(cap_bytes, heldout_permille, max_file_bytes)` returns a `Corpus` whose files are named by a
host-independent key (`stdlib/<relative path>` or `site/<relative path>`), in a deterministic order (the standard
library first, then site-packages; inside each, by a hash of the key, so a cap takes an even sample rather than the
packages whose names sort first), stopping once `cap_bytes` of text is taken. A file is held out iff a second hash of
its key falls below `heldout_permille` / 1000: held-out files never enter training (tokenizer, target, distillation)
and give the evaluation prompts. Files that are not UTF-8, are empty or larger than `max_file_bytes` (generated
tables) are skipped. Non-goal: de-duplication of vendored copies.
"""
from __future__ import annotations

import hashlib
import os
import site
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", ".git"}


@dataclass
class Corpus:
    train: list[tuple[str, str]] = field(default_factory=list)     # (key, text), training files
    heldout: list[tuple[str, str]] = field(default_factory=list)   # (key, text), held-out files
    roots: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        def mb(items):
            return round(sum(len(t.encode()) for _, t in items) / 1e6, 2)
        return {"train_files": len(self.train), "train_mb": mb(self.train), "heldout_files": len(self.heldout),
                "heldout_mb": mb(self.heldout)}


def _hash(salt: str, key: str) -> int:
    return int.from_bytes(hashlib.sha1(f"{salt}:{key}".encode()).digest()[:8], "big")


def is_heldout(key: str, permille: int) -> bool:
    return _hash("heldout", key) % 1000 < permille


def source_roots() -> list[tuple[str, Path]]:
    """(label, directory) pairs: the standard library, then every site-packages directory of this interpreter."""
    paths = sysconfig.get_paths()
    roots = [("stdlib", Path(paths["stdlib"]))]
    sites = [paths.get("purelib"), paths.get("platlib"), *getattr(site, "getsitepackages", lambda: [])()]
    seen = set()
    for p in sites:
        if p and os.path.isdir(p) and os.path.realpath(p) not in seen:
            seen.add(os.path.realpath(p))
            roots.append(("site", Path(p)))
    return roots


def _walk(root: Path, max_file_bytes: int) -> list[tuple[str, Path]]:
    """(relative path, path) of every .py file under `root`, not descending into SKIP_DIRS."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = Path(dirpath) / name
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if 0 < size <= max_file_bytes:
                found.append((str(path.relative_to(root)), path))
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def build_corpus(cap_bytes: int, heldout_permille: int, max_file_bytes: int) -> Corpus:
    corpus = Corpus()
    seen_real: set[str] = set()
    total = 0
    for label, root in source_roots():
        corpus.roots.append(f"{label}={root}")
        files = [(f"{label}/{rel}", path) for rel, path in _walk(root, max_file_bytes)]
        files.sort(key=lambda kp: (_hash("order", kp[0]), kp[0]))
        for key, path in files:
            if total >= cap_bytes:
                return corpus
            real = os.path.realpath(path)
            if real in seen_real:
                continue
            seen_real.add(real)
            text = _read(path)
            if not text or not text.strip():
                continue
            total += len(text.encode())
            (corpus.heldout if is_heldout(key, heldout_permille) else corpus.train).append((key, text))
    return corpus
