"""What a scan found: each matched line (`Finding`), the warnings with their counts, the traceback excerpt, and
the `Report` of a whole log with the run's primary failure and its MLflow tags.

Contract: frozen data, built by the scanner; `Report.to_dict()` is the JSON form (`specbench diagnose
--json`), `Report.tags()` the `failure.id` / `failure.category` / `failure.hint` tags of a failed run.

Non-goals: deciding anything (the scanner decides what a finding is and which failure is primary).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .catalog import Entry, Severity


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
