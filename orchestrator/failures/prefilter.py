"""The prefilter: one bytes regex that finds the few lines worth matching against the catalog.

Contract
- `anchors(regex)` gives literals one of which every match of `regex` contains (one per top-level alternative),
  each of `ANCHOR_MIN` to `_ANCHOR_MAX` characters and starting with a rare character where the regex allows;
  () when it has none (or ignores case), which the catalog rejects.
- `regex_for(literals)` compiles the anchors of all patterns into one bytes regex: literals that contain another
  are dropped (finding the shorter finds the line anyway), the rest is an alternation arranged as a trie. The
  regex engine then skips most positions, since most bytes are not the rare first character of any literal.

Non-goals: matching (a hit only says the line may match; the catalog's entries decide).
"""
from __future__ import annotations

import re
import string
from typing import Iterable

try:  # the regex parser moved in Python 3.11; it is how we find each pattern's required literal
    from re import _constants as _sre_c
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c
    import sre_parse as _sre_parse

ANCHOR_MIN, _ANCHOR_MAX = 4, 20         # prefilter literal length bounds
_RARE_FIRST = frozenset(string.ascii_uppercase + "`'[")  # the prefilter skips fastest to rare first characters


def anchors(regex: str) -> tuple[str, ...]:
    """Literals one of which every match of `regex` contains (one per top-level alternative); () if none."""
    parsed = _sre_parse.parse(regex)
    if parsed.state.flags & _sre_c.SRE_FLAG_IGNORECASE:
        return ()
    return _anchors_of(list(parsed))


def regex_for(literals: Iterable[str]) -> re.Pattern:
    """The bytes regex matching any of `literals` (the anchors of every pattern of a catalog)."""
    return re.compile(_trie_regex(_minimal_anchors(literals)).encode("utf-8"))


def _anchors_of(items: list) -> tuple[str, ...]:
    best = _best_literal(_required_runs(items))
    if best:
        return (best,)
    if len(items) == 1:
        op, av = items[0]
        if op is _sre_c.BRANCH:
            alternatives = [_anchors_of(list(alt)) for alt in av[1]]
            return tuple(a for alt in alternatives for a in alt) if all(alternatives) else ()
        if op is _sre_c.SUBPATTERN and not av[1] & _sre_c.SRE_FLAG_IGNORECASE:
            return _anchors_of(list(av[3]))
    return ()


_REPEATS = tuple(getattr(_sre_c, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre_c, n))


def _required_runs(items: list) -> list[str]:
    """Runs of consecutive literal characters that every match contains (alternatives and optional parts skipped)."""
    runs, run = [], []
    for op, av in items:
        if op is _sre_c.LITERAL:
            run.append(chr(av))
            continue
        runs.append("".join(run))
        run = []
        if op is _sre_c.SUBPATTERN and not av[1] & _sre_c.SRE_FLAG_IGNORECASE:
            runs += _required_runs(list(av[3]))
        elif op in _REPEATS and av[0] >= 1:
            runs += _required_runs(list(av[2]))
        elif op is getattr(_sre_c, "ATOMIC_GROUP", None):
            runs += _required_runs(list(av))
    runs.append("".join(run))
    return [r for r in runs if len(r) >= ANCHOR_MIN]


def _best_literal(runs: list[str]) -> str | None:
    """Prefer a literal starting with a rare character (the prefilter then skips most positions), then length."""
    candidates = [(False, r) for r in runs]
    candidates += [(True, r[i:]) for r in runs for i, ch in enumerate(r) if ch in _RARE_FIRST]
    candidates = [(rare, c[:_ANCHOR_MAX]) for rare, c in candidates if len(c) >= ANCHOR_MIN]
    if not candidates:
        return None
    return max(candidates, key=lambda rc: (rc[0], len(rc[1])))[1]


def _minimal_anchors(literals: Iterable[str]) -> list[str]:
    """Drop literals containing another literal: finding the shorter one finds the line anyway."""
    ordered = sorted(set(literals), key=len)
    kept: list[str] = []
    for a in ordered:
        if not any(k in a for k in kept):
            kept.append(a)
    return sorted(kept)


def _trie_regex(words: list[str]) -> str:
    """An alternation of `words` (none a prefix of another) factored by common prefixes."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})

    def emit(node: dict) -> str:
        alternatives = [re.escape(ch) + emit(child) for ch, child in sorted(node.items())]
        if len(alternatives) <= 1:
            return "".join(alternatives)
        return "(?:" + "|".join(alternatives) + ")"

    # Top level unwrapped: a plain branch of literals lets the regex engine skip to candidate first characters.
    return "|".join(re.escape(ch) + emit(child) for ch, child in sorted(trie.items()))
