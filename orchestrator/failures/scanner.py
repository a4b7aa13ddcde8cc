"""The scanner: the catalog matched against a runner's output as it arrives (`Detector`), or offline.

Contract
- `Detector` is fed output as it arrives: `feed(chunk)` takes str or bytes split anywhere (a UTF-8 character or
  a line may straddle two chunks), `feed_lines(lines)` takes complete lines without their newline. A line is
  examined once its newline arrives; `close()` flushes an unterminated last line. `feed` returns what is worth
  showing now: the first finding of each fatal entry and the first of each distinct warning. Every match is
  counted; `report(exit_code)` gives fatal findings in log order (details merged over all matches of the
  entry), warnings with counts, the primary failure and its MLflow tags (`failure.id`, `failure.category`,
  `failure.hint`): what the exit code means is added, and a failed run that nothing explains is `unknown_crash`
  with the last traceback.
- `scan_file(path)` / `scan_text(text)` run the same detector offline.

Non-goals: keeping the output (only its last 256 KiB stay, for the traceback excerpt and `near` look-backs).
"""
from __future__ import annotations

import collections
import re
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from remote.events import ECHO

from .catalog import UNKNOWN_ID, Catalog, load_catalog
from .exit_codes import classify_exit_code, exit_signal
from .findings import Finding, Report, TracebackExcerpt, WarningSummary
from .tracebacks import extract_traceback

_CONTEXT_BYTES = 32_768                 # bytes kept from earlier chunks for `near` look-backs
_TAIL_BYTES = 262_144                   # bytes kept for the final traceback excerpt
_MAX_PENDING = 1 << 20                  # an unterminated "line" (a progress bar) is scanned past this size
_MAX_TEXT = 500                         # characters of a matched line kept in a finding
_MAX_WARNING_VARIANTS = 16              # distinct warning details kept per entry; more are counted together
_LIST_KEEP = 5                          # words of a long comma list kept by `shorten`
# (a list starts where a word does: tried at every character of a long word, it took quadratic time on one)
_LIST = re.compile(r"(?<![^\s,])[^\s,]+(?:, [^\s,]+){%d,}" % (_LIST_KEEP + 2))


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
        tail = _decode(self._tail.value())
        traceback = extract_traceback(tail)
        extra = (_exit_finding(exit_code, self.catalog, tail)
                 or _unknown_finding(exit_code, traceback, fatal, self.catalog))
        if extra is not None and extra.id not in {f.id for f in fatal}:
            fatal.append(extra)
        return Report(fatal=tuple(fatal), warnings=tuple(self.warnings), primary=fatal[0] if fatal else None,
                      exit_code=exit_code, traceback=traceback, lines=self.lines)

    # -- scanning

    # How it stays fast (143 MB/s offline over a 100.9 MB log, 2026-11-29, dev machine with 2 cores:
    # `python bench/bench_diagnose.py --size-mb 100 --repeat 3`): the raw bytes are searched chunk-wise with the
    # catalog's prefilter regex (prefilter.py); only the lines it hits are decoded and matched against the entries, in
    # catalog order. Line numbers are counted with bytes.count between hits, never line by line in Python.
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
        if line.startswith(ECHO):   # the runner's copy of an event (remote.events), not output of its own
            return None
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


def _exit_finding(code: int | None, catalog: Catalog, tail: str) -> Finding | None:
    entry = classify_exit_code(code, catalog)
    # the last line: where a process that exits on purpose says why (the runner's `error:` line for exit 2)
    last = _clip(tail.rstrip().rpartition("\n")[2], 0)
    if entry is None or (entry.last_line is not None and not entry.last_line.search(last)):
        return None
    sig = exit_signal(code)
    details = {"exit_code": str(code), **({"signal": sig.name} if sig else {})}
    details.update({"last_line": last} if last else {})
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


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _clip(line: str, offset: int) -> str:
    """The part of `line` that was printed last around the match: progress bars redraw with \\r."""
    start = line.rfind("\r", 0, offset) + 1
    end = line.find("\r", offset)
    return shorten(line[start:end if end >= 0 else len(line)].rstrip())


def shorten(line: str, limit: int = _MAX_TEXT) -> str:
    """`line` to show or keep in a finding: as it is up to `limit` characters, else with each long comma list of
    words cut to its first few and how many more, then clipped. transformers names every model type it knows
    when it refuses one (~10 KB on one line); the log keeps the whole line."""
    if len(line) <= limit:
        return line
    line = _LIST.sub(_cut_list, line)
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _cut_list(match: re.Match) -> str:
    words = match[0].split(", ")
    last = words[-1]
    closing = last[len(last.rstrip(".;:!?)]}'\"")):]   # the list's own end, as "(one of a, b)." has it
    return f"{', '.join(words[:_LIST_KEEP])}, … and {len(words) - _LIST_KEEP} more{closing}"
