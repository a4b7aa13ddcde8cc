"""Following a launched job to its end: live display, live failure detection, cancel, and the final report.

Contract: `follow(job, outcome, ...)` tails the job until it exits, shows progress and the runner's log, and matches
every log line against the failure catalog as it arrives: a fatal finding is shown at once with its fix and, with
`fail_fast`, stops the job. A runner that the host reports gone without an exit code ends the follow as FAILED
(`runner_vanished`). A runner alive but silent for `stall_warning` s gets one warning (orchestrator.run.stall: its state
on the host and what to do), repeated only after a much longer silence, and a line when it resumes; silent
`stall_timeout` s, it is stopped as by Ctrl-C and the run ends FAILED (`runner_stalled`, stopped_by=stall_timeout).
Ctrl-C, SIGTERM and SIGHUP stop the job's process group on the host (KILLED), bounded: if the host does not answer
within STOP_BOUND s (a cut link), the user is told the runner may still be running and how to stop or re-attach to it,
and its MLflow run is left RUNNING with UNSETTLED_TAG saying so (not closed as if it had stopped), for `attach`, `stop`
or `reap` to settle.
`report(outcome, tracker, ...)` turns what happened into the MLflow status, `failure.*` tags, a traceback artifact and
the terminal summary; a run whose AR and method took different paths (remote.fairness) gets a `fairness` tag saying so,
a warning and a mark in the results table (a fair one: `fairness=ok`). Used by a fresh run and by `attach` alike.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from remote.events import ECHO, read_json, write_json_atomic, write_text_atomic
from remote.noise import noise_tag

from ..failures import Detector, Finding, Severity, shorten
from ..program import program
from ..signals import deferred, describe, exit_code
from ..tracking.results_table import fairness_of, results_table, trust_lines
from ..tracking.tracker import Status, Tracker, close_within, sync_command
from ..untrusted import LINE_BYTES, log_line, printable
from .display import LiveDisplay
from .job import ROOM_FILE, Job, LocalDiskFull
from .stall import TIMEOUT_KEY, Say, StallLimits, StallWatch, diagnosis, resumed, runner_state, warning

STOP_BOUND = 8.0     # seconds to stop the runner and collect after Ctrl-C / SIGTERM before saying we could not
UNSETTLED_TAG = "stop_unconfirmed"   # on an MLflow run left RUNNING: the stop asked, that the host did not confirm

ARTIFACTS = ("config.yaml", "spec.json", "runner.log", "events.jsonl", "results.json", "outputs.jsonl",
             "traceback.txt", "failure.json", "engine_command.txt")


class _FailFast(Exception):
    def __init__(self, finding: Finding):
        self.finding = finding


class _Stalled(Exception):
    def __init__(self, silent: float):
        self.silent = silent


@dataclass
class Outcome:
    """How a job ended, filled in as it goes."""

    job: Job | None                  # None: stopped while it waited for GPUs of the pool, before any host
    status: Status = Status.FAILED
    detector: Detector = field(default_factory=Detector)
    errors: list[str] = field(default_factory=list)
    stopped_by: str | None = None    # "user" (Ctrl-C), "SIGTERM", "SIGHUP", "stall_timeout", or the failure id
                                     # fail-fast stopped on
    interrupt: BaseException | None = None   # the Ctrl-C or signal that stopped the run
    unsettled: str | None = None     # why its end is not known: a stop the host did not confirm (the link down)
    later: str | None = None         # the command that finishes the job, where it is not `sync` (a full local disk)
    history: list[tuple[str, float, int]] = field(default_factory=list)   # (metric, value, step) from the log

    @classmethod
    def not_started(cls, interrupted: BaseException | None = None, error: str | None = None) -> "Outcome":
        """A job that ended before any host was used (a signal while it waited for the pool, no host reachable)."""
        outcome = cls(None)
        if interrupted is not None:
            outcome.interrupted(interrupted)
        if error is not None:
            outcome.error(error)
        return outcome

    def scan_metric_lines(self, lines: list[str]) -> None:
        """A user script reports metrics as JSON lines: {"metric": name, "value": v, "step": n}."""
        for line in lines:
            if line.startswith("{") and '"metric"' in line:
                try:
                    obj = json.loads(line)
                    self.history.append((str(obj["metric"]), float(obj["value"]), int(obj.get("step", 0))))
                except (ValueError, KeyError, TypeError):
                    continue

    def error(self, message: str) -> None:
        self.errors.append(message)
        self.status = Status.FAILED
        self.detector.feed_lines([message])   # one the catalog knows (a full disk at install or launch) is named so

    @property
    def ok(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def exit_status(self) -> int:
        if self.status is Status.KILLED:
            return exit_code(self.interrupt) if self.interrupt is not None else 130
        return 0 if self.status is Status.FINISHED else 1

    def interrupted(self, exc: BaseException, stopped: bool = True) -> None:
        """Stopped by `exc`; `stopped`: the host confirmed that the runner stopped (else it may still run)."""
        self.status, self.interrupt = Status.KILLED, exc
        self.stopped_by = "user" if describe(exc) == "Ctrl-C" else describe(exc)
        if not stopped and self.job is not None:
            self.unsettled = (f"{describe(exc)} at {time.strftime('%Y-%m-%d %H:%M:%S')}, but {self.job.host.name} "
                              f"did not confirm the stop: the runner may still be running")


def _show(console: Console, finding: Finding, shown: set[str]) -> None:
    """A finding as it is found; another variant of a warning already shown (the same missing kernel package in
    the next layer type) in one line, without the fix again."""
    colour = "red" if finding.severity is Severity.FATAL else "yellow"
    detail = finding.entry.render_detail(finding.details)
    if finding.id in shown and finding.severity is not Severity.FATAL and detail:
        console.print(f"[{colour}]{finding.severity.value}: {finding.id}: also {escape(printable(detail))}[/]")
        return
    shown.add(finding.id)
    console.print(f"[{colour}]{finding.severity.value}: {finding.id}: {escape(printable(finding.message))}[/]")
    console.print(f"[{colour}]  fix: {escape(printable(finding.hint))}[/]")


def follow(job: Job, outcome: Outcome, console: Console, fail_fast: bool = True,
           needs_results: bool = True, stall: StallLimits | None = None) -> None:
    """Tail `job` to its end. `needs_results`: a run counts as finished only if it wrote results.json (our
    runner does; a user's script need not). `stall`: the run's stall limits (default: conf/config.yaml's)."""
    shown: set[str] = set()
    stall = stall or StallLimits.of(None)
    watch = StallWatch(stall, silent_for=job.quiet_at_attach)

    def on_lines(log_lines: list[str], event_lines: list[str]) -> None:
        display.feed(log_lines, event_lines)
        outcome.scan_metric_lines(log_lines)
        for finding in outcome.detector.feed_lines(log_lines):
            _show(console, finding, shown)
            if finding.severity is Severity.FATAL and fail_fast:
                raise _FailFast(finding)
        said = watch.check(job.received)
        if said is Say.STOP:
            raise _Stalled(watch.silent)
        if said is Say.WARN:
            text = warning(watch.silent, runner_state(job), display.stages, stall, job.local_dir)
            console.print(f"[yellow]{escape(printable(text))}[/]", soft_wrap=True)   # one line, to copy from
        elif said is Say.RESUMED:
            console.print(f"[cyan]{resumed(watch.silent)}[/]")

    try:
        with LiveDisplay(console, started_at=job.started_at) as display:
            code = job.wait(on_lines)
        if job.lost is not None:   # the host says so: not a guess from a quiet log
            for finding in outcome.detector.feed_lines([f"[specbench] The runner vanished: {job.lost}"]):
                _show(console, finding, shown)
        job.collect()
        done = code == 0 and (not needs_results or (job.local_dir / "results.json").exists())
        outcome.status = Status.FINISHED if done else Status.FAILED
        if code != 0 and job.stopped_by:   # `stop` from another terminal: its TERM is why the runner ended
            outcome.status, outcome.stopped_by = Status.KILLED, job.stopped_by
            console.print(f"[yellow]stopped from another terminal (`{program()} stop`, stopped_by="
                          f"{escape(job.stopped_by)}): the runner ended on its SIGTERM[/]")
    except KeyboardInterrupt as exc:
        console.print(f"[yellow]{describe(exc)}: stopping the runner on the host[/]")
        outcome.interrupted(exc, stopped=stop(job, console))
    except _FailFast as fail:
        console.print(f"[red]fail_fast: stopping the run on {fail.finding.id}[/]")
        stop(job, console)
        outcome.status, outcome.stopped_by = Status.FAILED, fail.finding.id
    except LocalDiskFull as full:   # this machine's disk, not the host's: the runner goes on there
        console.print(f"[red]error: {escape(str(full))}[/]", soft_wrap=True)
        outcome.error(str(full))
        outcome.later = f"{program()} attach {job.local_dir}"
        console.print(f"[yellow]the runner goes on on {escape(job.host.name)}, which keeps all it writes: once there "
                      f"is room, `{escape(outcome.later)}` follows it to its end and logs the run[/]", soft_wrap=True)
    except _Stalled as stalled:
        console.print(f"[red]{TIMEOUT_KEY}: no output for {stalled.silent:.0f} s, stopping the runner[/]")
        state = runner_state(job)   # before the stop, which ends it
        stop(job, console)
        outcome.status, outcome.stopped_by = Status.FAILED, TIMEOUT_KEY
        for finding in outcome.detector.feed_lines([diagnosis(stalled.silent, state, stall)]):
            _show(console, finding, shown)


def stop(job: Job, console: Console) -> bool:
    """Stop the runner's process group and collect what it wrote, within STOP_BOUND seconds. False (and the
    user told how to finish the job by hand) if the host did not answer in time, e.g. during a link cut."""
    def stop_and_collect() -> None:
        job.cancel()
        try:
            job.collect()
        except Exception:  # what could be collected was; the local mirror has the log regardless
            pass

    errors: list[BaseException] = []
    worker = threading.Thread(target=lambda: _catching(stop_and_collect, errors), name="stop-runner", daemon=True)
    worker.start()
    worker.join(STOP_BOUND)
    if not worker.is_alive() and not errors:
        return True
    why = f"no answer from {job.host.name} within {STOP_BOUND:g} s" if worker.is_alive() else str(errors[0])
    console.print(f"[red]the runner may still be running on {job.host.name} ({escape(why)}). Stop it with "
                  f"`python -m orchestrator stop {job.local_dir}` (on the host: `{escape(job.describe_stop())}` in "
                  f"{job.files.root}), or follow it again with `python -m orchestrator attach {job.local_dir}`[/]")
    return False


def _catching(fn, errors: list[BaseException]) -> None:
    try:
        fn()
    except Exception as exc:  # reported by the caller, which is not in this thread
        errors.append(exc)


def report(outcome: Outcome, tracker: Tracker, run_dir: Path, console: Console, title: str) -> None:
    (run_dir / ROOM_FILE).unlink(missing_ok=True)   # its closing writes get the room set aside for them
    results = read_json(run_dir / "results.json")
    metrics = results.get("metrics", {})
    tags = {k: str(v) for k, v in results.get("environment", {}).items()}
    detector = outcome.detector
    detector.close()
    failed = outcome.status is Status.FAILED
    found = detector.report(outcome.job.exit_code if failed else None)
    if failed:
        tags.update(found.tags() or {"failure.id": "orchestrator_error", "failure.category": "orchestrator",
                                     "failure.hint": "; ".join(outcome.errors) or "see the run's log"})
        tags.update({"failure.stage": outcome.job.stage.value, "exit_code": str(outcome.job.exit_code)})
        # what the run is tagged with, also where no log line explains it (the host lost: orchestrator_error)
        failure = {**found.to_dict(), "ok": False, "tags": {k: v for k, v in tags.items() if k.startswith("failure.")}}
        with contextlib.suppress(OSError):   # a full disk: whole or not at all; the tags say the same
            write_json_atomic(str(run_dir / "failure.json"), failure)
            if found.traceback:
                write_text_atomic(str(run_dir / "traceback.txt"), str(found.traceback))
    if found.warnings:
        tags["warnings"] = ",".join(sorted({w.finding.id for w in found.warnings}))
    if outcome.stopped_by:
        tags["stopped_by"] = outcome.stopped_by
    fairness = fairness_of(results)
    if fairness:
        tags["fairness"] = fairness
    if (noise := noise_tag(metrics)) is not None:
        tags["timing_noise"] = noise

    def held(how: str) -> None:
        console.print(f"[yellow]{how}: the run has ended; logging it to MLflow first (within "
                      f"{close_within(tracker.uri):g} s; {how} again leaves now, and `{escape(sync_command(run_dir))}` "
                      f"logs it later)[/]", soft_wrap=True)

    if outcome.unsettled is not None:
        return _leave_unsettled(outcome, tracker, run_dir, console)
    with deferred(held):   # cut off, the upload left the MLflow run RUNNING
        tracker.finish(outcome.status, metrics, {**tags, "status": outcome.status.value},
                       [run_dir / name for name in ARTIFACTS], history=outcome.history)
        _summary(outcome, found, metrics, tracker, run_dir, console, title, fairness)


def _leave_unsettled(outcome: Outcome, tracker: Tracker, run_dir: Path, console: Console) -> None:
    """A stop the host did not confirm: the run is not closed as if it had stopped (its runner may still be
    running); its MLflow run stays RUNNING, tagged so, until `attach`, `stop` or `reap` settles it."""
    tracker.leave_open({"stopped_by": outcome.stopped_by, UNSETTLED_TAG: outcome.unsettled})
    console.print(f"[yellow]UNSETTLED[/] run dir: {escape(str(run_dir))}  {escape(tracker.open_note())}; "
                  f"`{program()} attach {escape(str(run_dir))}` follows it again, `{program()} stop` stops it, "
                  f"`{program()} reap` closes it once it has ended", soft_wrap=True)


def _summary(outcome, found, metrics, tracker, run_dir, console, title, fairness=None) -> None:
    if metrics:
        console.print(results_table(metrics, title, fairness))
    for line in trust_lines(metrics, fairness):
        console.print(line, soft_wrap=True)    # one line each
    for id_, variants in _by_id(found.warnings).items():
        details = "; ".join(dict.fromkeys(filter(None, (w.finding.entry.render_detail(w.finding.details)
                                                         for w in variants))))
        console.print(f"[yellow]warning x{sum(w.count for w in variants)}: {id_}"
                      f"{escape(f' ({details})') if details else ''}: {escape(variants[0].finding.hint)}[/]")
    colour = {Status.FINISHED: "green", Status.FAILED: "red", Status.KILLED: "yellow"}[outcome.status]
    note = tracker.closing_note(outcome.later)   # "mlflow run: <id>" if all of it got there, else why not, `sync`
    console.print(f"[{colour}]{outcome.status.value}[/] run dir: {escape(str(run_dir))}"
                  + (f"  {escape(note)}" if note else ""), soft_wrap=True)   # one line, to copy the command from
    # fail_fast stopped on the primary failure: it and the log lines before it were the last things shown
    said = found.primary is not None and outcome.stopped_by == found.primary.id
    if outcome.status is Status.FAILED and not said:
        if found.primary is not None:
            console.print(f"[red]{found.primary.id}: {escape(printable(found.primary.message))}\n  fix: "
                          f"{escape(printable(found.primary.hint))}[/]")
        quoted = found.primary.details.get("last_line") if found.primary is not None else None
        if found.traceback:
            console.print(escape(printable(str(found.traceback))))
        elif (tail := _tail(run_dir / "runner.log")) and [t for t in tail if not t.startswith(ECHO)] != [quoted]:
            text = "\n".join(tail)   # not when its own output is the line just quoted (the rest: events, shown)
            console.print(f"[red]runner log tail:[/]\n{escape(text)}")



def _by_id(warnings) -> dict[str, list]:
    """Warning summaries grouped by catalog entry, in the order first seen."""
    groups: dict[str, list] = {}
    for w in warnings:
        groups.setdefault(w.finding.id, []).append(w)
    return groups


def _tail(path: Path, lines: int = 20) -> list[str]:
    """The log's last `lines` lines (read from its last LINE_BYTES: a log may be gigabytes), each as the tail shows
    it and shortened as a finding's text is; none where there is no log."""
    try:
        with open(path, "rb") as log:
            log.seek(max(log.seek(0, 2) - LINE_BYTES, 0))
            end = log.read()
    except OSError:
        return []
    return [shorten(log_line(line).rstrip()) for line in end.rstrip().split(b"\n")[-lines:]]
