"""Failure detection: the catalog in failures.yaml matched against a runner's output, live or offline.

Modules, in import order (each imports only modules to its left):

    prefilter → catalog → exit_codes → findings → tracebacks → scanner → diagnose

prefilter.py finds candidate lines with one regex; catalog.py parses and checks failures.yaml; exit_codes.py and
tracebacks.py say what an exit code and the last traceback mean; findings.py holds what a scan reports; scanner.py
has the `Detector` and the offline scans; diagnose.py is `specbench diagnose`.

Live use, in a tail loop:

    detector = Detector()
    for finding in detector.feed_lines(new_lines):   # or detector.feed(raw_bytes)
        show(finding)                                # finding.severity, .id, .message, .hint, .line_no
    report = detector.report(exit_code)              # once the exit code is known (None if it is not)
    tags = report.tags()                             # {} or failure.id / failure.category / failure.hint

Non-goals: numbers for metrics (they come from events.jsonl, never from the log), per-failure code (every failure
is a catalog entry).
"""
from .catalog import DEFAULT_WINDOW, UNKNOWN_ID, CatalogError, Severity, default_catalog_path, load_catalog
from .exit_codes import classify_exit_code, exit_signal
from .findings import Finding, Report, WarningSummary
from .scanner import Detector, scan_file, scan_text, shorten
from .tracebacks import extract_traceback

__all__ = ["DEFAULT_WINDOW", "UNKNOWN_ID", "CatalogError", "Detector", "Finding", "Report", "Severity",
           "WarningSummary", "classify_exit_code", "default_catalog_path", "exit_signal", "extract_traceback",
           "load_catalog", "scan_file", "scan_text", "shorten"]
