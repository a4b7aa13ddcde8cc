"""`python -m orchestrator ... host=ssh` end to end against a real sshd, logged to a real MLflow database:
a finished run (with a forwarded secret that lands nowhere), an unknown host key, Ctrl-C, a connection cut.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path


from orchestrator.paths import PROJECT_ROOT

SMALL = ["device=cpu", "num_prompts=2", "max_new_tokens=8"]


def cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def run_cli(args, env=None, timeout=600) -> subprocess.CompletedProcess:   # a hang guard, not a budget
    return subprocess.run(cli(args), capture_output=True, text=True, cwd=PROJECT_ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def mlflow_runs(runs_dir: Path) -> list:
    db = runs_dir / "mlflow.db"
    if not db.exists():
        return []
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("specbench")
    return client.search_runs([exp.experiment_id]) if exp else []


def remote_run_dir(workdir: Path, wait_for: str, timeout: float = 300) -> Path:
    """The run dir on the host once its events.jsonl contains `wait_for` (the CLI's start, the preflight, the sync
    and the runner's model build come first: a minute and more on a loaded 2-core box)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for events in workdir.glob("runs/*/events.jsonl"):
            if wait_for in events.read_text():
                return events.parent
        time.sleep(0.1)
    raise AssertionError(f"no run under {workdir} reached {wait_for!r} within {timeout} s")


def alive(pid: int) -> bool:
    """Whether process `pid` runs (not a zombie); it may end while its stat is read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:   # FileNotFoundError, or ProcessLookupError mid-read
        return False


def group_alive(pgid: int) -> list[int]:
    """Processes (not zombies) whose process group is `pgid`: the runner and its launch wrapper."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(entry.name))
    return alive


def files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def release(pgid: int) -> None:
    """Continue a process group held with SIGSTOP and kill what is left of it (a test that failed midway)."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return


def wait_until(condition, timeout: float, what: str, interval: float = 0.1):
    """Poll `condition()` until it is truthy (returned); AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)
    return value


class Output:
    """A child's merged stdout and stderr, read by a thread as it comes: the test waits for a line instead of
    guessing with sleeps, and the child never blocks on a full pipe that nobody reads."""

    LOGGED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")   # orchestrator.log's line: [date time,ms]

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._eof = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)
        self._eof.set()

    def text(self) -> str:
        return "".join(self.lines)

    def close(self, timeout: float = 30) -> str:
        """All of it, once the child closed its end."""
        self._eof.wait(timeout)
        return self.text()

    def wait_for(self, predicate, timeout: float, what: str, start: int = 0) -> str:
        """The first line from line `start` on that satisfies `predicate`; AssertionError (with the output's tail)
        if the child ends or `timeout` s pass first."""
        deadline, seen = time.monotonic() + timeout, start
        while True:
            lines = self.lines[:]   # the reader only appends
            for line in lines[seen:]:
                if predicate(line):
                    return line
            seen = len(lines)
            if self._eof.is_set() and seen == len(self.lines):
                raise AssertionError(f"{what}: the CLI ended without it:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g} s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    @classmethod
    def logged(cls, line: str, needle: str, since: float) -> bool:
        """Is `line` a line of orchestrator.log (Hydra's job_logging format, timestamped) containing `needle`,
        written at `since` or later?"""
        found = cls.LOGGED.match(line)
        return bool(found) and needle in line and cls.logged_at(line) >= since

    @classmethod
    def logged_at(cls, line: str) -> float:
        """When a log line was written (epoch seconds, to the millisecond, truncated), from its timestamp."""
        return datetime.strptime(cls.LOGGED.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_ddtree_over_ssh_finishes_and_the_secret_lands_nowhere(sshd, tmp_path):
    secret = f"hf_{uuid.uuid4().hex}"
    workdir = tmp_path / "work"
    proc = run_cli(["method=ddtree", "tree_budget=64", *sshd.overrides(workdir=str(workdir)),
                    "host.forward_env=[HF_TOKEN]", *SMALL], env={"HF_TOKEN": secret})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "FINISHED"
    assert run.data.tags["host"] == "127.0.0.1" and "tau" in run.data.metrics
    assert run.data.tags["preflight.python"] and run.data.params["host.kind"] == "ssh"
    needle = secret.encode()
    assert files_containing(tmp_path / "runs", needle) == []    # Hydra dirs, mlflow.db, artifacts
    assert files_containing(workdir, needle) == []              # the host's run dir and bundles
    assert secret not in proc.stdout + proc.stderr


def test_unknown_host_key_fails_before_any_mlflow_run(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc = run_cli(["method=ar", *sshd.overrides(known_hosts=str(empty)), *SMALL])
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1" in out.replace("\n", " ")
    assert [r.info.status for r in mlflow_runs(tmp_path / "runs") if r.info.status == "RUNNING"] == []


def test_ctrl_c_stops_the_runner_on_the_host_and_logs_killed(sshd, tmp_path):
    workdir = tmp_path / "work"
    # Long enough to be interrupted mid-decode on any machine; never paid in full.
    # SIGINT back to its default in the child: a suite started in the background inherits it ignored
    proc = subprocess.Popen(cli(["method=ddtree", *sshd.overrides(workdir=str(workdir)), "device=cpu",
                                 "num_prompts=24", "max_new_tokens=256"]),
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        run_dir = remote_run_dir(workdir, '"start"')   # the runner is up: models built, decoding begins
        pgid = int((run_dir / "pid").read_text())
        assert group_alive(pgid), "the runner should be running"
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        while group_alive(pgid) and time.monotonic() - sent < 10:
            time.sleep(0.1)
        assert group_alive(pgid) == [], "runner processes still alive 10 s after Ctrl-C"
        out, _ = proc.communicate(timeout=300)   # MLflow may still be opening the run (a minute under load)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "KILLED", out[-3000:]


def test_a_connection_cut_mid_run_loses_nothing(sshd_netns, tmp_path):
    """The link goes down while the runner decodes and while the CLI tails it; the runner writes events during the
    outage; the link comes back. The CLI must notice, reconnect, and mirror every byte; the run must finish.

    Every step waits on what it needs instead of a guessed sleep, so no timing of a loaded machine can reorder
    them: the runner's process group is held stopped (SIGSTOP) from its "start" event until the link is down, so it
    cannot finish before the cut (MLflow opens the run before the tail starts: seconds, a minute under load); the
    link comes back only once the CLI has logged the loss and the runner has written more events behind it."""
    workdir = Path(sshd_netns.facts.host_config()["workdir"])
    # io/connect timeouts as for the other SSH tests (a tighter io_timeout only makes a loaded machine's slow
    # replies look like losses); reconnect_timeout well above the longest the link is held down here. The gate
    # below, not the workload's length, keeps the run going until the cut: a short one (no warm-up) is enough.
    args = ["method=ddtree", *sshd_netns.facts.overrides(reconnect_timeout=600), "device=cpu",
            "num_prompts=3", "max_new_tokens=16", "warmup=0"]
    proc = subprocess.Popen(cli(args), cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    output = Output(proc)
    group = None
    try:
        run_dir = remote_run_dir(workdir, '"start"')   # the runner is up: models built, decoding begins
        group = int((run_dir / "pid").read_text())     # launch.sh's pid = the process group (setsid)
        os.killpg(group, signal.SIGSTOP)               # held mid-run until the link is down
        events = run_dir / "events.jsonl"
        # The tail starts right after the run line (MLflow opens the run first): a cut before it would go unnoticed.
        output.wait_for(lambda line: line.startswith("run ") and " on " in line, 300, "the CLI's run line")
        assert group_alive(group) and not (run_dir / "exit_code").exists() and '"result"' not in events.read_text()
        written_before = events.stat().st_size
        at_cut = len(output.lines)                     # the terminal's lines from here on came after the cut
        cut_at = time.time()
        sshd_netns.cut()
        os.killpg(group, signal.SIGCONT)               # the runner decodes on while the link is down
        output.wait_for(lambda line: "connection lost" in line, 120, "the CLI logging the lost connection", at_cut)
        wait_until(lambda: events.stat().st_size > written_before, 300, "the runner writing events during the cut")
        restored_at = time.time()
        sshd_netns.restore()
        output.wait_for(lambda line: "reconnected after" in line, 300, "the CLI reconnecting", at_cut)
        try:
            proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the CLI did not end within 600 s:\n{output.text()[-3000:]}") from None
        out = output.close()
    finally:
        sshd_netns.restore()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if group is not None and group_alive(group):   # never left stopped, nor running on after a failure
            release(group)
    assert proc.returncode == 0, out[-3000:]
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "FINISHED"
    local_dir = Path(run.data.tags["run_dir"])
    # The outage the CLI saw spans the cut, by orchestrator.log's timestamps (the terminal shows messages only):
    # lost after the link went down, back only after it came up (no connection can be made while it is down, so a
    # reconnect logged earlier would be a bug of ours).
    log = (local_dir / "orchestrator.log").read_text().splitlines()
    (lost, *_), (back, *_) = ([line for line in log if Output.logged(line, needle, cut_at - 0.001)]
                              for needle in ("connection lost", "reconnected after"))
    assert Output.logged_at(back) >= restored_at - 0.01, (lost, back)
    for name in ("runner.log", "events.jsonl"):
        assert (local_dir / name).read_bytes() == (run_dir / name).read_bytes(), name
    assert json.loads((local_dir / "results.json").read_text())["metrics"]


def test_a_host_without_sftp_is_named_at_once(tmp_path):
    """An sshd with no `Subsystem sftp` line (commands work, file copies cannot): one line that says so, within
    seconds; it was taken for a lost connection and retried for reconnect_timeout (120 s) first."""
    from tests.sshd import SSHD

    server = SSHD(tmp_path / "sshd", sftp=False)
    facts = server.start()
    try:
        started = time.monotonic()
        proc = run_cli(["method=ar", *facts.overrides(), *SMALL],
                       env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})
        took = time.monotonic() - started
    finally:
        server.stop()
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1 and "its sshd refused an SFTP session" in out and "Subsystem sftp" in out, out[-3000:]
    assert "reconnecting" not in out and "Traceback" not in out, out[-3000:]
    assert took < facts.host_config()["connect_timeout"] + 60, took    # the CLI's start and preflight, no retries
    assert [run.info.status for run in mlflow_runs(tmp_path / "runs")] in ([], ["FAILED"])   # never left RUNNING


def test_a_run_whose_host_went_silent_is_logged_whole_by_attach(tmp_path):
    """The host goes silent (its sshd stopped) past reconnect_timeout while the runner decodes: the CLI closes the
    run FAILED and says the runner may still be running, with `attach`; the host comes back, `attach` follows the
    runner to its end, and MLflow then holds the FINISHED run with its metrics and without the failure's tags (it
    kept FAILED for good: attach logged nothing over a run already closed, and sync said "already in MLflow")."""
    from tests.sshd import SSHD

    server = SSHD(tmp_path / "sshd")
    facts = server.start()
    try:
        _silent_then_attached(server, facts, tmp_path)
    finally:
        server.stop()


def _silent_then_attached(server, facts, tmp_path) -> None:
    workdir = tmp_path / "work"
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"}
    proc = subprocess.Popen(cli(["method=ar", "baseline=none", "device=cpu", "num_prompts=2", "max_new_tokens=16",
                                 "warmup=0", *facts.overrides(workdir=str(workdir), reconnect_timeout=3)]),
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, group, silent = Output(proc), None, set()
    try:
        run_dir = remote_run_dir(workdir, '"start"')
        group = int((run_dir / "pid").read_text())
        os.killpg(group, signal.SIGSTOP)            # it cannot finish before the host goes silent
        output.wait_for(lambda line: line.startswith("run ") and " on " in line, 300, "the CLI's run line")
        # sshd and its sessions (not the runner) stop: the host says nothing more on any connection. Again until
        # none is new: a session's command may end, or start a process, between the listing and the stop.
        while fresh := _descendants(server.proc.pid) - _descendants(group) - silent:
            _signal_each(fresh, signal.SIGSTOP)
            silent |= fresh
        proc.wait(timeout=300)
        out = " ".join(output.close().split())
    finally:
        _signal_each(silent, signal.SIGCONT)
        if group is not None:
            os.killpg(group, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "not restored within 3 s" in out, out[-3000:]
    (job,) = (tmp_path / "runs").rglob("job.json")
    assert f"the runner may still be running on {facts.hostname}: `python -m orchestrator attach {job.parent}`" in out
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "FAILED"
    failure = json.loads((job.parent / "failure.json").read_text())   # what the run is tagged with, not "ok"
    assert failure["ok"] is False and failure["tags"]["failure.id"] == run.data.tags["failure.id"], failure
    attached = subprocess.run(cli(["attach", str(job.parent)]), cwd=PROJECT_ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
    assert attached.returncode == 0 and "FINISHED" in attached.stdout, attached.stdout[-3000:] + attached.stderr
    (run,) = mlflow_runs(tmp_path / "runs")
    assert run.info.status == "FINISHED" and run.data.metrics.get("tokens_per_s"), run.data
    assert not [tag for tag in run.data.tags if tag.startswith("failure.")], run.data.tags

def _signal_each(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):   # it ended meanwhile
            os.kill(pid, sig)


def _descendants(pid: int) -> set[int]:
    """`pid` and every process below it, through /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = {pid}, {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
