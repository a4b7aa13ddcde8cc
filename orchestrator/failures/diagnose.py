"""`specbench diagnose <log> [--json]` (or `python -m orchestrator diagnose`): the failure catalog run over a log
file, offline.

Contract: prints each fatal finding (explanation with parsed details, line, matched text, fix), the warnings with
their counts, and, for a failure no signature knows, the last Python traceback. Exit status: 0 when there is no
fatal finding, 1 when there is one, 2 when the log (or a --catalog) cannot be read (one line on stderr naming
it). `<log>` may also be a run directory (its runner.log is read). The run's `exit_code` file beside
runner.log is taken into account when present (137 means killed even if the log says nothing); `--exit-code N`
overrides it. `--json` prints the report as one JSON document instead (the fields of `Report.to_dict()`).

The command keeps its documented name through orchestrator/diagnose.py, which only calls `main`.

Non-goals: fetching logs from hosts (the job lifecycle, orchestrator.run.job, copies them back), editing the catalog.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from remote.files import RunFiles

from ..untrusted import printable
from .catalog import UNKNOWN_ID, CatalogError, Severity, load_catalog
from .findings import Finding, Report, WarningSummary
from .scanner import scan_file

EXIT_OK, EXIT_FATAL, EXIT_UNREADABLE = 0, 1, 2
_LOG_NAME = Path(RunFiles("/").log).name            # runner.log
_EXIT_CODE_NAME = Path(RunFiles("/").exit_code).name  # exit_code
_STYLE = {Severity.FATAL: "bold red", Severity.PERFORMANCE: "yellow", Severity.CORRECTNESS: "bold yellow",
          Severity.COSMETIC: "dim"}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        catalog = load_catalog(args.catalog)
    except (OSError, CatalogError) as exc:
        print(f"diagnose: cannot load the catalog {args.catalog}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    log = _log_path(Path(args.log))
    try:
        exit_code = args.exit_code if args.exit_code is not None else _recorded_exit_code(log)
        report = scan_file(log, exit_code=exit_code, catalog=catalog)
    except OSError as exc:
        print(f"diagnose: cannot read {log}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps({"log": str(log), **report.to_dict()}, indent=2))
    else:
        _print_report(Console(highlight=False, soft_wrap=True), log, report)
    return EXIT_OK if report.ok else EXIT_FATAL


def _parser() -> argparse.ArgumentParser:
    from ..program import program

    parser = argparse.ArgumentParser(prog=f"{program()} diagnose",
                                     description="Match the failure catalog against a runner log.")
    parser.add_argument("log", help=f"a log file, or a run directory holding {_LOG_NAME}")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--exit-code", type=int, default=None,
                        help=f"the run's exit code (default: the {_EXIT_CODE_NAME} file beside {_LOG_NAME}, if any)")
    parser.add_argument("--catalog", default=None, help="another catalog file (default: the packaged one)")
    return parser


def _log_path(path: Path) -> Path:
    return Path(RunFiles(str(path)).log) if path.is_dir() else path


def _recorded_exit_code(log: Path) -> int | None:
    """The launch wrapper's exit code beside a run directory's runner.log; None when absent or unreadable."""
    if log.name != _LOG_NAME:
        return None
    try:
        return int(Path(RunFiles(str(log.parent)).exit_code).read_text().strip())
    except (OSError, ValueError):
        return None


def _print_report(console: Console, log: Path, report: Report) -> None:
    exit_note = "" if report.exit_code is None else f", exit code {report.exit_code}"
    groups = _by_entry(report.warnings)
    console.print(f"[bold]{escape(str(log))}[/]: {len(report.fatal)} fatal, {len(groups)} warning(s) "
                  f"({report.lines} lines{exit_note})")
    for finding in report.fatal:
        _print_block(console, finding, [finding.message], count=1)
    for group in groups:
        first = group[0].finding
        variants = [d for d in (first.entry.render_detail(w.finding.details) for w in group) if d]
        message = first.entry.explanation + (f" ({'; '.join(variants)})" if variants else "")
        _print_block(console, first, [message], count=sum(w.count for w in group))
    if report.primary is not None and report.primary.id == UNKNOWN_ID and report.traceback is not None:
        console.print("[bold]last traceback:[/]")
        console.print(escape(printable(report.traceback.text)), style="dim")
    if report.ok and not report.warnings:
        console.print("no known failure signature found")


def _print_block(console: Console, finding: Finding, lines: list[str], count: int) -> None:
    """One finding: severity, id, category, where (first line; how many times), message, matched text, fix."""
    where = f" line {finding.line_no}" if finding.line_no is not None else ""
    times = f" (x{count})" if count > 1 else ""
    console.print(f"[{_STYLE[finding.severity]}]{finding.severity.value.upper()}[/] [bold]{finding.id}[/] "
                  f"{escape(f'[{finding.category}]')}{where}{times}")
    for line in lines:
        console.print(f"  {escape(printable(line))}")
    console.print(f"  > {escape(printable(finding.text[:200]))}", style="dim")
    console.print(f"  [bold]fix:[/] {escape(finding.hint)}")


def _by_entry(warnings: tuple[WarningSummary, ...]) -> list[list[WarningSummary]]:
    """Warnings grouped by entry, in order of first appearance (one block per entry, its variants inside)."""
    groups: dict[str, list[WarningSummary]] = {}
    for w in warnings:
        groups.setdefault(w.finding.id, []).append(w)
    return list(groups.values())
