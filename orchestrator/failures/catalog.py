"""The failure catalog: failures.yaml (beside this file) parsed into entries, each with its patterns, and checked.

Contract
- `load_catalog(path=None)` reads and validates the catalog once per path (cached): unique ids, known severities,
  one-line explanation and fix, regexes that compile and contain a literal the prefilter can search for, detail
  templates that use only captured fields, the fallback entry `unknown_crash`, each exit code claimed once. A
  malformed file raises `CatalogError` naming the entry and the field.
- `Catalog.match(line, before)` gives the first entry (catalog order) matching one line, with the details its
  named groups captured; `before(n)` supplies the n lines before it for a pattern's `near` context.
- `Entry.render_detail(details)` fills the entry's detail templates (`{x:size}` prints bytes in binary units).

Non-goals: scanning a stream (scanner.py), regexes spanning lines (a pattern sees one line; `near` looks back a
few lines), per-failure code (every failure is a catalog entry).
"""
from __future__ import annotations

import enum
import functools
import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping

import yaml

from . import prefilter

CATALOG_FILE = "failures.yaml"          # package data of `orchestrator.failures`
UNKNOWN_ID = "unknown_crash"            # the entry used when nothing matched but the run failed
DEFAULT_WINDOW = 12                     # lines looked back for a pattern's `near` context


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the entry and the field."""


class Severity(str, enum.Enum):
    """How much a finding matters to the benchmark."""

    FATAL = "fatal"              # the run failed or its result is invalid
    PERFORMANCE = "performance"  # the run completes but its timings are not representative
    CORRECTNESS = "correctness"  # the run completes but some of its tokens are not what AR gives: not lossless
    COSMETIC = "cosmetic"        # noise: nothing to fix for the benchmark


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
    last_line: re.Pattern | None = None     # what the log's last line must be for an exit code to mean this

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
    return Path(str(resources.files(__package__).joinpath(CATALOG_FILE)))


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The catalog at `path` (default: the packaged failures.yaml), parsed and validated once per path."""
    return _load_catalog(str(Path(path).resolve()) if path else str(default_catalog_path()))


# ------------------------------------------------------------------------------------------ parse and check


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
    return Catalog(entries=entries, prefilter=prefilter.regex_for(anchors))


_REQUIRED = ("id", "category", "severity", "explanation", "fix", "patterns")
_OPTIONAL = ("detail", "exit_codes", "last_line")


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
        last_line=_compile(raw["last_line"], where) if "last_line" in raw else None,
    )
    _check_detail(entry, where)
    return entry


# Details the code adds itself: from the exit code (with the log's last line), and the exception line of an
# unknown crash.
_CODE_DETAILS = frozenset({"exit_code", "signal", "last_line", "exception"})


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
    anchors = prefilter.anchors(spec["regex"])
    if not anchors:
        raise CatalogError(f"{where}: pattern {spec['regex']!r} has no plain literal of {prefilter.ANCHOR_MIN}+ "
                           "characters outside optional parts; the prefilter needs one")
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


# --------------------------------------------------------------------------------------- matching helpers


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


# ---------------------------------------------------------------------------------------- detail templates


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
