"""Failure detection: the catalog in failures.yaml matched against a runner's output, live or offline.

Modules, each importing only those to its left: prefilter (candidate lines, one regex) → catalog (parses and checks
failures.yaml) → exit_codes (what an exit code means) → findings (what a scan reports) → tracebacks (the last
traceback) → scanner (the `Detector` and the offline scans) → diagnose (`specbench diagnose`).

Live use, in a tail loop:
    detector = Detector()
    for finding in detector.feed_lines(new_lines):   # or detector.feed(raw_bytes)
        show(finding)                                # finding.severity, .id, .message, .hint, .line_no
    report = detector.report(exit_code)              # once the exit code is known (None if it is not)
    tags = report.tags()                             # {} or failure.id / failure.category / failure.hint

Non-goals: numbers for metrics (from events.jsonl, never the log), per-failure code (every failure is a catalog entry).
"""
from .catalog import DEFAULT_WINDOW, UNKNOWN_ID, CatalogError, Severity, default_catalog_path, load_catalog
from .exit_codes import classify_exit_code, exit_signal
from .findings import Finding, Report, WarningSummary
from .scanner import Detector, scan_file, scan_text, shorten
from .tracebacks import extract_traceback

__all__ = ["DEFAULT_WINDOW", "UNKNOWN_ID", "CatalogError", "Detector", "Finding", "Report", "Severity",
           "WarningSummary", "classify_exit_code", "default_catalog_path", "exit_signal", "extract_traceback",
           "load_catalog", "scan_file", "scan_text", "shorten"]
