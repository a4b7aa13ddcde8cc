"""Failure detection: the catalog in failures.yaml matched against a runner's output, live or offline.

Contract
- `load_catalog(path=None)` reads and validates the catalog once per path (cached): unique ids, known severities,
  one-line explanation and fix, regexes that compile and contain a literal the prefilter can search for.
- `Detector` is fed output as it arrives: `feed(chunk)` takes str or bytes split anywhere (a UTF-8 character or
  a line may straddle two chunks), `feed_lines(lines)` takes complete lines without their newline. A line is
  examined once its newline arrives; `close()` flushes an unterminated last line. `feed` returns what is worth
  showing now: the first finding of each fatal entry and the first of each distinct warning. Every match is
  counted; `report(exit_code)` gives fatal findings in log order (details merged over all matches of the
  entry), warnings with counts, the primary failure and its MLflow tags (`failure.id`, `failure.category`,
  `failure.hint`).
- `extract_traceback(text)` returns the last Python traceback (trimmed) for crashes no signature knows.
- `classify_exit_code(code)` maps an exit code to its catalog entry (137 / -9 -> process_killed).
- `scan_file(path)` / `scan_text(text)` run the same detector offline.

Live use, in a tail loop:

    detector = Detector()
    for finding in detector.feed_lines(new_lines):   # or detector.feed(raw_bytes)
        show(finding)                                # finding.severity, .id, .message, .hint, .line_no
    report = detector.report(exit_code)              # once the exit code is known (None if it is not)
    tags = report.tags()                             # {} or failure.id / failure.category / failure.hint

How it stays fast (bench/bench_diagnose.py: ~100 MB/s on one core): the raw bytes are searched chunk-wise with one
prefilter regex built from a literal that every pattern must contain (an alternation arranged as a trie, each
literal starting with a rare character so the regex engine skips most positions); only the lines it hits are
decoded and matched against the entries, in catalog order. Line numbers are counted with bytes.count between
hits, never line by line in Python.

Non-goals: numbers for metrics (they come from events.jsonl, never from the log), regexes spanning lines (a
pattern sees one line; `near` looks back a few lines), per-failure code (every failure is a catalog entry).
"""
from __future__ import annotations

import collections
import enum
import functools
import re
import signal
import string
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable, Mapping

import yaml

try:  # the regex parser moved in Python 3.11; it is how we find each pattern's required literal
    from re import _constants as _sre_c
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c
    import sre_parse as _sre_parse

CATALOG_FILE = "failures.yaml"          # package data of `orchestrator`
UNKNOWN_ID = "unknown_crash"            # the entry used when nothing matched but the run failed
DEFAULT_WINDOW = 12                     # lines looked back for a pattern's `near` context
_CONTEXT_BYTES = 32_768                 # bytes kept from earlier chunks for `near` look-backs
_TAIL_BYTES = 262_144                   # bytes kept for the final traceback excerpt
_MAX_PENDING = 1 << 20                  # an unterminated "line" (a progress bar) is scanned past this size
_MAX_TEXT = 500                         # characters of a matched line kept in a finding
_MAX_WARNING_VARIANTS = 16              # distinct warning details kept per entry; more are counted together
_ANCHOR_MIN, _ANCHOR_MAX = 4, 20        # prefilter literal length bounds
_RARE_FIRST = frozenset(string.ascii_uppercase + "`'[")  # the prefilter skips fastest to rare first characters


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the entry and the field."""


class Severity(str, enum.Enum):
    """How much a finding matters to the benchmark."""

    FATAL = "fatal"              # the run failed or its result is invalid
    PERFORMANCE = "performance"  # the run completes but its timings are not representative
    COSMETIC = "cosmetic"        # noise: nothing to fix for the benchmark


# --------------------------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class Pattern:
    """One regex of an entry; with `near`, the line only counts if a near-regex matches one of the
    `window` lines just before it (traceback frames come before the exception line)."""

    regex: re.Pattern
    near: tuple[re.Pattern, ...] = ()
    window: int = DEFAULT_WINDOW
    anchors: tuple[str, ...] = ()

    def match(self, line: str, before: Callable[[int], list[str]]) -> tuple[dict[str, str], int] | None:
        m = self.regex.search(line)
        if m is None:
            return None
        details = _groups(m)
        if self.near:
            context = _near_details(self.near, before(self.window))
            if context is None:
                return None
            details = {**context, **details}
        return details, m.start()


@dataclass(frozen=True)
class Entry:
    """One known failure (see the header of failures.yaml for the fields)."""

    id: str
    category: str
    severity: Severity
    explanation: str
    fix: str
    patterns: tuple[Pattern, ...] = ()
    detail: tuple[str, ...] = ()
    exit_codes: frozenset[int] = frozenset()

    @property
    def fatal(self) -> bool:
        return self.severity is Severity.FATAL

    def match(self, line: str, before: Callable[[int], list[str]]) -> tuple[dict[str, str], int] | None:
        """Details and match offset of the first pattern matching `line`, else None."""
        for pattern in self.patterns:
            hit = pattern.match(line, before)
            if hit is not None:
                return hit
        return None

    def render_detail(self, details: Mapping[str, str]) -> str:
        """The `detail` templates whose fields were all captured, joined by '; '."""
        return "; ".join(_render(t, details) for t in self.detail if _fields(t) <= details.keys())


@dataclass(frozen=True)
class Catalog:
    entries: tuple[Entry, ...]
    prefilter: re.Pattern   # bytes regex matching a literal that every pattern of every entry contains

    @functools.cached_property
    def by_id(self) -> dict[str, Entry]:
        return {e.id: e for e in self.entries}

    @functools.cached_property
    def by_exit_code(self) -> dict[int, Entry]:
        return {code: e for e in self.entries for code in e.exit_codes}

    def match(self, line: str, before: Callable[[int], list[str]]) -> tuple[Entry, dict[str, str], int] | None:
        """The first entry (catalog order) matching `line`, with its details and match offset."""
        for entry in self.entries:
            hit = entry.match(line, before)
            if hit is not None:
                return entry, *hit
        return None


def default_catalog_path() -> Path:
    return Path(str(resources.files("orchestrator").joinpath(CATALOG_FILE)))


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The catalog at `path` (default: the packaged failures.yaml), parsed and validated once per path."""
    return _load_catalog(str(Path(path).resolve()) if path else str(default_catalog_path()))


@functools.lru_cache(maxsize=8)
def _load_catalog(path: str) -> Catalog:
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise CatalogError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise CatalogError(f"{path}: expected a mapping with a list under 'entries'")
    try:
        entries = tuple(_parse_entry(raw, i) for i, raw in enumerate(data["entries"]))
    except CatalogError as exc:
        raise CatalogError(f"{path}: {exc}") from None
    _check_catalog(entries, path)
    anchors = {a for e in entries for p in e.patterns for a in p.anchors}
    prefilter = _trie_regex(_minimal_anchors(anchors)).encode("utf-8")
    return Catalog(entries=entries, prefilter=re.compile(prefilter))


_REQUIRED = ("id", "category", "severity", "explanation", "fix", "patterns")
_OPTIONAL = ("detail", "exit_codes")


def _parse_entry(raw: object, index: int) -> Entry:
    where = f"entry #{index + 1}" + (f" {raw.get('id')!r}" if isinstance(raw, dict) else "")
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: must be a mapping")
    missing = [k for k in _REQUIRED if k not in raw]
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if missing or unknown:
        raise CatalogError(f"{where}: missing fields {missing}, unknown fields {unknown}; "
                           f"fields are {', '.join(_REQUIRED + _OPTIONAL)}")
    severities = ", ".join(s.value for s in Severity)
    if raw["severity"] not in {s.value for s in Severity}:
        raise CatalogError(f"{where}: severity must be one of {severities} (got {raw['severity']!r})")
    for key in ("id", "category", "explanation", "fix"):
        if not isinstance(raw[key], str) or not raw[key].strip() or "\n" in raw[key]:
            raise CatalogError(f"{where}: {key} must be one non-empty line")
    detail = raw.get("detail") or ()
    entry = Entry(
        id=raw["id"], category=raw["category"], severity=Severity(raw["severity"]),
        explanation=raw["explanation"], fix=raw["fix"],
        patterns=tuple(_parse_pattern(p, where) for p in raw["patterns"] or ()),
        detail=(detail,) if isinstance(detail, str) else tuple(detail),
        exit_codes=frozenset(int(c) for c in raw.get("exit_codes") or ()),
    )
    _check_detail(entry, where)
    return entry


# Details the code adds itself: from the exit code, and the exception line of an unknown crash.
_CODE_DETAILS = frozenset({"exit_code", "signal", "exception"})


def _check_detail(entry: Entry, where: str) -> None:
    """Every field a detail template uses must be a named group of one of the entry's regexes."""
    groups = {g for p in entry.patterns for r in (p.regex, *p.near) for g in r.groupindex} | _CODE_DETAILS
    unknown = sorted({f for t in entry.detail for f in _fields(t)} - groups)
    if unknown:
        raise CatalogError(f"{where}: detail uses {unknown}, which no pattern captures (named groups: "
                           f"{sorted(groups - _CODE_DETAILS)})")


def _parse_pattern(raw: object, where: str) -> Pattern:
    spec = {"regex": raw} if isinstance(raw, str) else raw
    if not isinstance(spec, dict) or not isinstance(spec.get("regex"), str) or set(spec) - {"regex", "near", "window"}:
        raise CatalogError(f"{where}: a pattern is a regex string or a mapping of regex, near, window (got {raw!r})")
    regex = _compile(spec["regex"], where)
    anchors = _anchors(spec["regex"])
    if not anchors:
        raise CatalogError(f"{where}: pattern {spec['regex']!r} has no plain literal of {_ANCHOR_MIN}+ characters "
                           "outside optional parts; the prefilter needs one")
    near = tuple(_compile(n, where) for n in spec.get("near") or ())
    window = spec.get("window", DEFAULT_WINDOW)
    if not isinstance(window, int) or window < 1:
        raise CatalogError(f"{where}: window must be a positive number of lines (got {window!r})")
    return Pattern(regex=regex, near=near, window=window, anchors=anchors)


def _compile(regex: str, where: str) -> re.Pattern:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise CatalogError(f"{where}: pattern {regex!r} does not compile: {exc}") from None


def _check_catalog(entries: tuple[Entry, ...], path: str) -> None:
    ids = [e.id for e in entries]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CatalogError(f"{path}: duplicate ids {duplicates}")
    if UNKNOWN_ID not in ids:
        raise CatalogError(f"{path}: the fallback entry {UNKNOWN_ID!r} is missing")
    codes = [c for e in entries for c in e.exit_codes]
    if len(codes) != len(set(codes)):
        raise CatalogError(f"{path}: an exit code is claimed by two entries")


# ------------------------------------------------------------------------------------ prefilter literals


def _anchors(regex: str) -> tuple[str, ...]:
    """Literals one of which every match of `regex` contains (one per top-level alternative); () if none."""
    parsed = _sre_parse.parse(regex)
    if parsed.state.flags & _sre_c.SRE_FLAG_IGNORECASE:
        return ()
    return _anchors_of(list(parsed))


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
    return [r for r in runs if len(r) >= _ANCHOR_MIN]


def _best_literal(runs: list[str]) -> str | None:
    """Prefer a literal starting with a rare character (the prefilter then skips most positions), then length."""
    candidates = [(False, r) for r in runs]
    candidates += [(True, r[i:]) for r in runs for i, ch in enumerate(r) if ch in _RARE_FIRST]
    candidates = [(rare, c[:_ANCHOR_MAX]) for rare, c in candidates if len(c) >= _ANCHOR_MIN]
    if not candidates:
        return None
    return max(candidates, key=lambda rc: (rc[0], len(rc[1])))[1]


def _minimal_anchors(anchors: Iterable[str]) -> list[str]:
    """Drop literals containing another literal: finding the shorter one finds the line anyway."""
    ordered = sorted(set(anchors), key=len)
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


# --------------------------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class Finding:
    """One matched failure: the entry, where (1-based line; None when it comes from the exit code), the matched
    line and the details parsed from it (named regex groups: GPU index, sizes, ...)."""

    entry: Entry
    line_no: int | None
    text: str
    details: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def category(self) -> str:
        return self.entry.category

    @property
    def severity(self) -> Severity:
        return self.entry.severity

    @property
    def hint(self) -> str:
        return self.entry.fix

    @property
    def message(self) -> str:
        """The explanation, followed by the parsed details when there are any."""
        detail = self.entry.render_detail(self.details)
        return f"{self.entry.explanation} ({detail})" if detail else self.entry.explanation

    def to_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "severity": self.severity.value, "line": self.line_no,
                "text": self.text, "details": dict(self.details), "message": self.message, "fix": self.hint}


@dataclass(frozen=True)
class WarningSummary:
    finding: Finding   # the first occurrence
    count: int


@dataclass(frozen=True)
class TracebackExcerpt:
    text: str        # header, the last frames (source lines kept, caret lines dropped), the exception
    exception: str   # the exception line, e.g. "KeyError: 'drafter'"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Report:
    """What a log (and exit code) says. `primary` is the failure to tag the run with: the first fatal finding in
    the log, else what the exit code means, else `unknown_crash` when the run failed without a known signature."""

    fatal: tuple[Finding, ...]
    warnings: tuple[WarningSummary, ...]
    primary: Finding | None
    exit_code: int | None
    traceback: TracebackExcerpt | None
    lines: int

    @property
    def ok(self) -> bool:
        return self.primary is None

    def tags(self) -> dict[str, str]:
        """MLflow tags for a failed run; empty when nothing failed."""
        if self.primary is None:
            return {}
        return {"failure.id": self.primary.id, "failure.category": self.primary.category,
                "failure.hint": self.primary.hint}

    def to_dict(self) -> dict:
        return {
            "ok": self.ok, "exit_code": self.exit_code, "lines": self.lines,
            "primary": self.primary.to_dict() if self.primary else None,
            "fatal": [f.to_dict() for f in self.fatal],
            "warnings": [{**w.finding.to_dict(), "count": w.count} for w in self.warnings],
            "traceback": {"text": self.traceback.text, "exception": self.traceback.exception}
            if self.traceback else None,
            "tags": self.tags(),
        }


# --------------------------------------------------------------------------------------------- detector


class Detector:
    """Matches the catalog against a stream of output; see the module docstring for the contract.

    Works on bytes: output arrives as bytes, the prefilter runs on bytes (no decoding of the 99.9% of lines that
    match nothing), and only hit lines are decoded (UTF-8, undecodable bytes replaced). A newline byte never
    occurs inside a UTF-8 character, so cutting at newlines never splits one."""

    def __init__(self, catalog: Catalog | None = None):
        self.catalog = catalog or load_catalog()
        self._pending = b""            # bytes after the last newline, not yet examined
        self._lines_done = 0           # newlines consumed so far
        self._context = _TailBuffer(_CONTEXT_BYTES)   # the end of the examined output, for `near` look-backs
        self._tail = _TailBuffer(_TAIL_BYTES)         # the end of the examined output, for the traceback excerpt
        self._fatal: dict[str, Finding] = {}          # entry id -> first finding (insertion = log order)
        self._fatal_details: dict[str, dict[str, str]] = {}
        self._warnings: dict[tuple, Finding] = {}     # (entry id, details) -> first finding
        self._counts: dict[tuple | str, int] = {}

    # -- input

    def feed(self, data: str | bytes) -> list[Finding]:
        """Take the next piece of output; return the findings to show now (see module docstring)."""
        if isinstance(data, str):
            data = data.encode("utf-8", "backslashreplace")
        self._pending = self._pending + data if self._pending else bytes(data)
        cut = self._pending.rfind(b"\n") + 1
        if cut == 0 and len(self._pending) > _MAX_PENDING:
            # A progress bar redraws with \r and may never end its line: scan it in pieces.
            cut = (self._pending.rfind(b"\r") + 1) or len(self._pending)
        if cut == 0:
            return []
        region, self._pending = self._pending[:cut], self._pending[cut:]
        return self._scan(region)

    def feed_lines(self, lines: Iterable[str | bytes]) -> list[Finding]:
        """Take complete lines (without their newline), as a line-based tail returns them."""
        pieces = [ln.encode("utf-8", "backslashreplace") if isinstance(ln, str) else ln for ln in lines]
        return self.feed(b"\n".join(pieces) + b"\n") if pieces else []

    def close(self) -> list[Finding]:
        """Examine an unterminated last line, if any."""
        rest, self._pending = self._pending, b""
        return self._scan(rest) if rest else []

    # -- state

    @property
    def fatal(self) -> list[Finding]:
        """The first finding of each fatal entry, in log order, with details merged over all its matches."""
        return [replace(f, details=self._fatal_details[i]) for i, f in self._fatal.items()]

    @property
    def warnings(self) -> list[WarningSummary]:
        return [WarningSummary(f, self._counts[key]) for key, f in self._warnings.items()]

    @property
    def lines(self) -> int:
        return self._lines_done + (1 if self._pending else 0)

    def report(self, exit_code: int | None = None) -> Report:
        """Summarise everything fed so far, with the runner's exit code when known (None: not known)."""
        fatal = self.fatal
        traceback = extract_traceback(_decode(self._tail.value()))
        extra = _exit_finding(exit_code, self.catalog) or _unknown_finding(exit_code, traceback, fatal, self.catalog)
        if extra is not None and extra.id not in {f.id for f in fatal}:
            fatal.append(extra)
        return Report(fatal=tuple(fatal), warnings=tuple(self.warnings), primary=fatal[0] if fatal else None,
                      exit_code=exit_code, traceback=traceback, lines=self.lines)

    # -- scanning

    def _scan(self, region: bytes) -> list[Finding]:
        found: list[Finding] = []
        search, pos, counted_to, line_no = self.catalog.prefilter.search, 0, 0, self._lines_done
        while (m := search(region, pos)) is not None:
            start = region.rfind(b"\n", 0, m.start()) + 1
            end = region.find(b"\n", m.end())
            end = len(region) if end < 0 else end
            line_no += region.count(b"\n", counted_to, start)
            counted_to = start
            finding = self._match_line(region, start, end, line_no + 1)
            if finding is not None:
                found.append(finding)
            pos = end + 1
        self._lines_done = line_no + region.count(b"\n", counted_to)
        self._context.append(region)
        self._tail.append(region)
        return found

    def _match_line(self, region: bytes, start: int, end: int, line_no: int) -> Finding | None:
        line = _decode(region[start:end])
        hit = self.catalog.match(line, lambda n: self._lines_before(region, start, n))
        if hit is None:
            return None
        entry, details, offset = hit
        return self._record(Finding(entry, line_no, _clip(line, offset), details))

    def _lines_before(self, region: bytes, start: int, n: int) -> list[str]:
        text = region[max(0, start - _CONTEXT_BYTES):start]
        if start < _CONTEXT_BYTES:
            text = self._context.value() + text
        return _decode(text).split("\n")[:-1][-n:]

    def _record(self, finding: Finding) -> Finding | None:
        """Count the finding; return it if it is the first of its fatal entry or of its warning variant."""
        if finding.entry.fatal:
            return self._record_fatal(finding)
        key = (finding.id, tuple(sorted(finding.details.items())))
        if key not in self._warnings and sum(k[0] == finding.id for k in self._warnings) >= _MAX_WARNING_VARIANTS:
            key = next(k for k in self._warnings if k[0] == finding.id)   # too many variants: count with the first
        self._counts[key] = self._counts.get(key, 0) + 1
        if key in self._warnings:
            return None
        self._warnings[key] = finding
        return finding

    def _record_fatal(self, finding: Finding) -> Finding | None:
        self._counts[finding.id] = self._counts.get(finding.id, 0) + 1
        merged = self._fatal_details.setdefault(finding.id, {})
        for key, value in finding.details.items():
            merged.setdefault(key, value)   # later lines of the same failure often say more (NCCL's "Last error")
        if finding.id in self._fatal:
            return None
        self._fatal[finding.id] = finding
        return finding


class _TailBuffer:
    """The last `limit` bytes of a stream. Appending keeps references to the pieces (no copy per append), so
    feeding one line at a time stays cheap; `value()` joins them when a look-back or the report needs them."""

    def __init__(self, limit: int):
        self._limit, self._parts, self._size = limit, collections.deque(), 0

    def append(self, data: bytes) -> None:
        if len(data) >= self._limit:
            self._parts, self._size = collections.deque([data[-self._limit:]]), self._limit
            return
        self._parts.append(data)
        self._size += len(data)
        while self._size - len(self._parts[0]) >= self._limit:
            self._size -= len(self._parts.popleft())

    def value(self) -> bytes:
        return b"".join(self._parts)[-self._limit:]


def scan_text(text: str | bytes, exit_code: int | None = None, catalog: Catalog | None = None) -> Report:
    detector = Detector(catalog)
    detector.feed(text)
    detector.close()
    return detector.report(exit_code)


def scan_file(path: str | Path, exit_code: int | None = None, catalog: Catalog | None = None,
              chunk_size: int = 1 << 20) -> Report:
    """Scan a log file offline in chunks (memory stays bounded by the chunk size)."""
    detector = Detector(catalog)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            detector.feed(chunk)
    detector.close()
    return detector.report(exit_code)


# --------------------------------------------------------------------------------------------- exit codes


def exit_signal(code: int | None) -> signal.Signals | None:
    """The signal behind an exit code: a shell reports signal N as 128+N, Python's subprocess as -N."""
    if code is None or 0 <= code <= 128:
        return None
    try:
        return signal.Signals(-code if code < 0 else code - 128)
    except ValueError:
        return None


def classify_exit_code(code: int | None, catalog: Catalog | None = None) -> Entry | None:
    """The catalog entry an exit code means by itself (137 / -9 -> process_killed), else None."""
    if code is None:
        return None
    return (catalog or load_catalog()).by_exit_code.get(code)


def _exit_finding(code: int | None, catalog: Catalog) -> Finding | None:
    entry = classify_exit_code(code, catalog)
    if entry is None:
        return None
    sig = exit_signal(code)
    details = {"exit_code": str(code), **({"signal": sig.name} if sig else {})}
    return Finding(entry, None, f"exit code {code}", details)


def _unknown_finding(code: int | None, traceback: TracebackExcerpt | None, fatal: list[Finding],
                     catalog: Catalog) -> Finding | None:
    """A failed run that no signature explains: a non-zero exit code, or (exit code unknown) a traceback."""
    failed = code not in (None, 0) or (code is None and traceback is not None)
    if fatal or not failed:
        return None
    details = {k: v for k, v in (("exception", traceback and traceback.exception),
                                  ("exit_code", None if code is None else str(code))) if v}
    text = (traceback and traceback.exception) or ("a traceback" if code is None else f"exit code {code}")
    return Finding(catalog.by_id[UNKNOWN_ID], None, text, details)


# --------------------------------------------------------------------------------------------- tracebacks

_TB_HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")
# Launchers print their own traceback after the real one; the excerpt should show the real one.
_WRAPPER_EXCEPTIONS = re.compile(r"\b(?:ChildFailedError|ProcessRaisedException|ProcessExitedException)\b")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def extract_traceback(text: str, max_frames: int = 6, max_message_lines: int = 6) -> TracebackExcerpt | None:
    """The last Python traceback in `text` (skipping launcher wrappers such as torchrun's ChildFailedError),
    with its last `max_frames` frames and up to `max_message_lines` lines of the exception; None if none."""
    end, fallback = len(text), None
    for _ in range(8):  # look back past a few wrapper tracebacks at most
        start = text.rfind(_TB_HEADER, 0, end)
        if start < 0:
            break
        excerpt = _parse_traceback(text, start, max_frames, max_message_lines)
        if not _WRAPPER_EXCEPTIONS.search(excerpt.exception):
            return excerpt
        fallback, end = fallback or excerpt, start
    return fallback


def _parse_traceback(text: str, start: int, max_frames: int, max_message_lines: int) -> TracebackExcerpt:
    line_start = text.rfind("\n", 0, start) + 1
    prefix = text[line_start:start]   # e.g. "[rank0]: " that a launcher puts before every line of a rank
    lines = [ln[len(prefix):] if prefix and ln.startswith(prefix) else ln
             for ln in text[start:start + 200_000].split("\n")[1:]]
    frames, message = _split_traceback(lines, max_message_lines)
    omitted = [f"  ... {len(frames) - max_frames} earlier frames omitted"] if len(frames) > max_frames else []
    body = [_TB_HEADER, *omitted, *(ln for fr in frames[-max_frames:] for ln in fr), *message]
    return TracebackExcerpt(text="\n".join(body).rstrip(), exception=message[0] if message else "")


def _split_traceback(lines: list[str], max_message_lines: int) -> tuple[list[list[str]], list[str]]:
    """Frames (each: its File line and source lines) and the exception lines that follow them."""
    frames: list[list[str]] = []
    i = 0
    while i < len(lines) and lines[i].startswith(" "):
        if lines[i].startswith("  File ") or not frames:
            frames.append([lines[i]])
        elif not _CARETS.match(lines[i]):
            frames[-1].append(lines[i])
        i += 1
    message: list[str] = []
    for line in lines[i:i + max_message_lines]:
        if line.startswith(_TB_HEADER) or line.startswith(_CHAIN_MARKERS):
            break
        message.append(line.rstrip("\r"))
    while message and not message[-1].strip():
        message.pop()
    return frames, message


# --------------------------------------------------------------------------------------------- helpers


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _groups(m: re.Match) -> dict[str, str]:
    return {k: v for k, v in m.groupdict().items() if v is not None}


def _near_details(near: tuple[re.Pattern, ...], lines: list[str]) -> dict[str, str] | None:
    """Details of the nearest earlier line matching one of `near`, None if no line does."""
    for line in reversed(lines):
        for regex in near:
            m = regex.search(line)
            if m is not None:
                return _groups(m)
    return None


def _clip(line: str, offset: int) -> str:
    """The part of `line` that was printed last around the match: progress bars redraw with \\r."""
    start = line.rfind("\r", 0, offset) + 1
    end = line.find("\r", offset)
    text = line[start:end if end >= 0 else len(line)].rstrip()
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT - 3] + "..."


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class _DetailFormatter(string.Formatter):
    """`{x:size}` prints a byte count in binary units; everything else formats as usual."""

    def format_field(self, value, format_spec):
        if format_spec == "size":
            return _human_size(int(value))
        return super().format_field(value, format_spec)


def _render(template: str, details: Mapping[str, str]) -> str:
    return _DetailFormatter().vformat(template, (), details)


def _human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
