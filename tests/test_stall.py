"""A hung runner, as it happens: its process group SIGSTOPped mid-run (what a deadlock, an NCCL hang or a GPU that
stopped answering look like from outside: alive, silent), on a local host and over a real loopback sshd.
The follower says so once with the state ps gives, says when it resumes, and with `stall_timeout` ends the run
FAILED (runner_stalled), its process group gone and its log kept. It used to follow it in silence for ever.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.run.stall import Say, StallLimits, StallWatch
from tests.test_faults import host_overrides, runs_of, start_cli, started_runs, wait_for
from tests.test_ssh_e2e import group_alive

STEADY = Path(__file__).parent / "scripts" / "steady_worker.py"
# A progress event every prompt (a fraction of a second here), 24 of them: decoding when it is stopped, soon done
# once it goes on.
QUICK = ["device=cpu", "method=ar", "baseline=none", "num_prompts=24", "max_new_tokens=32"]
WARN = 4          # stall_warning for the tests: longer than the gaps between this runner's events on a busy box
SILENT = "has written nothing for"
STOPPED = "stopped (T in ps"


class Output:
    """The CLI's output, read as it comes (a thread), so that a wait for a line has a bound even if none comes."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._new:
                self.lines.append(line)
                self._new.notify_all()
        with self._new:
            self.lines.append(None)   # the end
            self._new.notify_all()

    def until(self, text: str, after: int = 0, timeout: float = 120) -> tuple[int, float]:
        """(index, monotonic time) of the first line from `after` on that holds `text`."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for i in range(after, len(self.lines)):
                    if self.lines[i] is None:
                        raise AssertionError(f"the CLI ended without {text!r}:\n{self.text()[-3000:]}")
                    if text in self.lines[i]:
                        return i, time.monotonic()
                after = len(self.lines)
                if not self._new.wait(max(0.0, deadline - time.monotonic())):
                    raise AssertionError(f"no {text!r} within {timeout} s:\n{self.text()[-3000:]}")

    def end(self, timeout: float) -> str:
        self.proc.wait(timeout)
        self._reader.join(timeout)
        return self.text()

    def text(self) -> str:
        return "".join(line for line in self.lines if line is not None)


def _waiting(proc: subprocess.Popen, found, what: str):
    """`found()` once it is truthy; the CLI ending first fails at once."""
    return wait_for(lambda: found() or (proc.poll() is not None and _ended(what)), what)


def _ended(what: str):
    raise AssertionError(f"the CLI ended before {what}")


def _decoding(workdir: Path, proc) -> Path:
    """The host run dir, once its runner reported its first prompt."""
    return _waiting(proc, lambda: next((d for d in started_runs(workdir)
                                        if '"progress"' in (d / "events.jsonl").read_text()), None), "decoding")


def _reporting(workdir: Path, proc) -> Path:
    """The host run dir, once the steady worker reported a metric."""
    return _waiting(proc, lambda: next((d for d in workdir.glob("runs/*") if (d / "runner.log").exists()
                                        and '"metric"' in (d / "runner.log").read_text()), None), "a metric")


def _cleanup(proc: subprocess.Popen, pgid: int | None) -> None:
    if pgid is not None and group_alive(pgid):
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, signal.SIGKILL)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_stopped_runner_is_reported_silent_once_then_resumed_and_finishes(kind, tmp_path, request):
    workdir = tmp_path / "work"
    proc = start_cli([*host_overrides(kind, workdir, request), *QUICK, f"stall_warning={WARN}"],
                     env={"COLUMNS": "1000"})   # lines unwrapped
    out, pgid = Output(proc), None
    try:
        pgid = int((_decoding(workdir, proc) / "pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)
        stopped = time.monotonic()
        warning, warned = out.until(STOPPED, timeout=WARN + 60)
        # held stopped for twice the warning's time: a warning said at every poll would show here
        wait_for(lambda: time.monotonic() - stopped >= 2 * WARN, "twice the warning's silence")
        os.killpg(pgid, signal.SIGCONT)
        resumed, _ = out.until("the runner resumed after", after=warning)
        text = out.end(timeout=300)
    finally:
        _cleanup(proc, pgid)
    print(f"{kind}: SIGSTOP to the warning: {warned - stopped:.1f} s")
    assert not any(SILENT in line for line in out.lines[warning + 1:resumed]), text[-3000:]   # said once
    line = out.lines[warning]
    assert SILENT in line and "stop" in line and "stall_timeout" in line, line
    assert f"kill -CONT -- -{pgid}" in line, line
    assert proc.returncode == 0 and "FINISHED" in text, text[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FINISHED" and "tokens_per_s" in run.data.metrics


def test_attach_warns_with_the_runs_own_stall_warning(tmp_path):
    """`attach` to a run whose orchestrator died and whose runner is stopped: the limit is the run's config's, and
    the silence is the runner's own, by the host's clock: one silent longer than the limit before the attach is
    said to be at once, with that silence (it was counted from the attach, the log's catch-up counting as output)."""
    workdir = tmp_path / "work"
    proc = start_cli(["host=local", f"host.workdir={workdir}", *QUICK, f"stall_warning={WARN}"])
    attached, pgid = None, None
    try:
        host_dir = _decoding(workdir, proc)
        pgid = int((host_dir / "pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)
        job_file = _waiting(proc, lambda: next((f for f in (tmp_path / "runs").rglob("job.json")
                                                if json.loads(f.read_text()).get("mlflow_run_id")), None), "MLflow")
        os.killpg(proc.pid, signal.SIGKILL)   # the orchestrator, as a closed laptop; the runner lives on, stopped
        proc.wait()
        quiet = WARN + 3
        wait_for(lambda: time.time() - max((host_dir / name).stat().st_mtime for name in ("runner.log", "events.jsonl"))
                 >= quiet, f"the runner silent {quiet} s")
        attaching = time.monotonic()
        attached = start_cli(["attach", str(job_file.parent)], env={"COLUMNS": "1000"})
        out = Output(attached)
        warning, warned = out.until(STOPPED, timeout=WARN + 60)
        silent = int(re.search(r"has written nothing for (\d+) s", out.lines[warning]).group(1))
        assert silent >= quiet, out.lines[warning]
        print(f"attach to a runner silent {silent} s: its warning {warned - attaching:.1f} s after the attach began")
        os.killpg(pgid, signal.SIGCONT)
        out.until("the runner resumed after", after=warning)
        text = out.end(timeout=300)
    finally:
        _cleanup(proc, pgid)
        if attached is not None:
            _cleanup(attached, None)
    assert attached.returncode == 0 and "FINISHED" in text, text[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FINISHED"


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_stall_timeout_stops_a_silent_runner_and_fails_the_run_keeping_its_log(kind, tmp_path, request):
    """A worker that reports every 0.1 s from its start, so that the short bound the test needs cannot fire
    before the stop (our runner's imports alone are silent for seconds, on a busy box for tens)."""
    workdir = tmp_path / "work"
    proc = start_cli([*host_overrides(kind, workdir, request), "runner=script", f"runner.path={STEADY}",
                      "stall_warning=3", "stall_timeout=8"], env={"COLUMNS": "1000"})
    out, pgid = Output(proc), None
    try:
        host_dir = _reporting(workdir, proc)
        pgid = int((host_dir / "pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)
        stopped = time.monotonic()
        _, warned = out.until(STOPPED, timeout=60)
        _, failed = out.until("FAILED run dir", timeout=60)
        text = out.end(timeout=60)
    finally:
        _cleanup(proc, pgid)
    print(f"{kind}: SIGSTOP to the warning {warned - stopped:.1f} s, to FAILED (stall_timeout=8) "
          f"{failed - stopped:.1f} s")
    assert not group_alive(pgid), "the stalled runner was left behind"
    assert proc.returncode == 1, text[-3000:]
    assert "runner_stalled" in text and "(stall_timeout=8)" in text, text[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FAILED", text[-3000:]
    assert run.data.tags["failure.id"] == "runner_stalled" and run.data.tags["stopped_by"] == "stall_timeout"
    local_dir = Path(run.data.tags["run_dir"])
    assert (local_dir / "runner.log").read_bytes() == (host_dir / "runner.log").read_bytes()   # nothing lost
    logged = {a.path for a in MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}").list_artifacts(
        run.info.run_id)}
    assert {"runner.log", "failure.json"} <= logged, logged


class Clock:
    """A clock the test moves: the watch's rules are about durations, which a real test would have to sleep."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_watch_warns_once_per_4x_silence_says_resumed_and_stops_at_the_bound():
    clock = Clock()
    watch = StallWatch(StallLimits(warning=10, timeout=100), clock=clock)
    said = []
    for t, received in [(0, 0), (5, 10), (14, 10), (15, 10), (16, 10), (40, 10), (55, 10), (56, 10), (57, 20),
                        (60, 20), (66, 20), (67, 20), (157, 20)]:
        clock.now = t
        said.append((t, watch.check(received)))
    events = [(t, s) for t, s in said if s is not None]
    assert events == [(15, Say.WARN), (55, Say.WARN), (57, Say.RESUMED), (67, Say.WARN), (157, Say.STOP)], events
    assert watch.silent == 100
