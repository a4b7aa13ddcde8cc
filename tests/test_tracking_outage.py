"""The tracking server away: a black hole must not hold the tail, a server stopped mid-run must not hold the end,
and what did not reach MLflow is logged later by `sync`. Real `mlflow server` processes, stopped for real; every
wait is on an event (a stdout line, a file), with a bound that is the requirement itself."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.tracking.tracker import RECORD, Status, Tracker, mlflow_client

SMALL = ["method=ddtree", "device=cpu", "num_prompts=2", "max_new_tokens=8"]
TAIL_WITHIN_S = 10   # from the runner's launch to the run line (the tail starts right after it)
END_WITHIN_S = 30    # from the runner's exit to the CLI's exit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` on loopback with a sqlite backend under `root`, in its own process group; with `password`,
    MLflow's basic-auth app, whose user `admin` has that password."""

    def __init__(self, root: Path, port: int | None = None, password: str | None = None):
        root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        auth = []
        if password is not None:
            (root / "auth.ini").write_text(
                f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{root / 'auth.db'}\n"
                f"admin_username = admin\n"
                f"authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
            env.update(MLFLOW_AUTH_CONFIG_PATH=str(root / "auth.ini"), MLFLOW_AUTH_ADMIN_PASSWORD=password,
                       MLFLOW_FLASK_SERVER_SECRET_KEY=os.urandom(16).hex())
            auth = ["--app-name", "basic-auth"]
        with open(root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", *auth, "--backend-store-uri",
                 f"sqlite:///{root / 'server.db'}", "--artifacts-destination", str(root / "artifacts"), "--host",
                 "127.0.0.1", "--port", str(self.port), "--workers", "1"],
                env=env, start_new_session=True, stdout=log, stderr=log)
        deadline = time.monotonic() + 180
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mlflow server did not start; see {root / 'server.log'}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            return urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200
        except OSError:
            return False

    def stop(self) -> None:
        """TERM the server's process group, KILL it if it lingers; returns once the port refuses connections."""
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
                break
        assert not self._healthy()

    def runs(self, run_id_local: str) -> list:
        client = MlflowClient(self.url)
        exp = client.get_experiment_by_name("specbench")
        return client.search_runs([exp.experiment_id], f"tags.run_id_local = '{run_id_local}'") if exp else []


@contextlib.contextmanager
def black_hole(accepted: threading.Event | None = None):
    """A loopback URL whose port accepts connections (setting `accepted`) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(sock.accept()[0])
                if accepted is not None:
                    accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        for conn in held:
            conn.close()


class Cli:
    """`python -m orchestrator ARGS` with each line of its output timestamped as it arrives."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=cwd, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.lines: list[tuple[float, str]] = []
        self._arrived = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._arrived:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._arrived.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_line(self, prefix: str, until: float) -> float:
        """When the first line starting with `prefix` arrived; fails if none did by `until` (monotonic)."""
        with self._arrived:
            while True:
                for at, line in self.lines:
                    if line.startswith(prefix):
                        return at
                left = until - time.monotonic()
                assert left > 0 and self.proc.poll() is None, f"no line {prefix!r} in time:\n{self.output[-3000:]}"
                self._arrived.wait(min(left, 1.0))

    def wait_exit(self, until: float) -> tuple[int, float]:
        """(exit code, when it exited); fails if it still runs at `until` (monotonic)."""
        try:
            code = self.proc.wait(timeout=max(until - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the CLI still runs:\n{self.output[-3000:]}") from None
        return code, time.monotonic()

    def closing_line(self) -> str:
        return next(line for _, line in self.lines if " run dir: " in line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_file(root: Path, pattern: str, within: float) -> tuple[Path, float]:
    """The first file under `root` matching `pattern` and when it was seen (polled every 20 ms)."""
    deadline = time.monotonic() + within
    while not (found := sorted(root.glob(pattern))):
        assert time.monotonic() < deadline, f"no {pattern} under {root} within {within} s"
        time.sleep(0.02)
    return found[0], time.monotonic()


def wait_opened(root: Path, within: float) -> Path:
    """The first job.json under `root` that names its MLflow run (it is written at launch, again once MLflow has
    the run)."""
    deadline = time.monotonic() + within
    while True:
        for job_file in sorted(root.glob("*/*/job.json")):   # written atomically: never half of one
            if json.loads(job_file.read_text()).get("mlflow_run_id"):
                return job_file
        assert time.monotonic() < deadline, f"no job.json naming an MLflow run under {root} within {within} s"
        time.sleep(0.05)


def stop_group(pid_file: Path) -> None:
    """What a failed test leaves running: the runner's process group (it runs detached, in its own session)."""
    with contextlib.suppress(OSError, ValueError):
        group = int(pid_file.read_text())
        os.killpg(group, signal.SIGCONT)
        os.killpg(group, signal.SIGKILL)


def kept_results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())["metrics"]


def sync(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", "sync", *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


def test_a_black_hole_tracking_server_does_not_hold_the_tail(tmp_path):
    host_runs = tmp_path / "runs" / ".host" / "runs"
    pid_file = None
    with black_hole() as url:
        cli = Cli([*SMALL, f"tracking.uri={url}"], cwd=tmp_path)
        try:
            pid_file, launched = wait_file(host_runs, "*/pid", within=300)
            shown = cli.wait_line("run ", until=launched + TAIL_WITHIN_S)
            _, ended = wait_file(pid_file.parent, "exit_code", within=300)
            code, exited = cli.wait_exit(until=ended + END_WITHIN_S)
        finally:
            cli.close()
            if pid_file:
                stop_group(pid_file)
    print(f"black hole: run line {shown - launched:+.1f} s after the launch; exit {exited - ended:.1f} s after "
          f"the runner's")
    assert code == 0, cli.output[-3000:]
    closing = cli.closing_line()
    assert closing.startswith("FINISHED run dir: ") and "mlflow run:" not in closing, closing
    assert "not in MLflow" in closing and "python -m orchestrator sync" in closing, closing
    assert "Retrying (" not in cli.output, cli.output[-3000:]   # urllib3's retries: said once as ours, above
    run_dir = Path(closing.removeprefix("FINISHED run dir: ").split("  ")[0])
    assert "tau" in kept_results(run_dir)


def test_a_server_stopped_mid_run_ends_the_run_and_sync_completes_it(tmp_path):
    server = MlflowServer(tmp_path / "server")
    host_runs = tmp_path / "runs" / ".host" / "runs"
    pid_file = None
    cli = Cli([*SMALL, f"tracking.uri={server.url}"], cwd=tmp_path)
    try:
        pid_file, launched = wait_file(host_runs, "*/pid", within=300)
        group = int(pid_file.read_text())
        os.killpg(group, signal.SIGSTOP)   # the runner goes on only once the server is gone: the stop is mid-run
        try:
            cli.wait_line("run ", until=launched + 120)
            job_file = wait_opened(tmp_path / "runs", within=120)   # the server is up: the run opens
            server.stop()
        finally:
            os.killpg(group, signal.SIGCONT)
        _, ended = wait_file(pid_file.parent, "exit_code", within=300)
        code, exited = cli.wait_exit(until=ended + END_WITHIN_S)
    finally:
        cli.close()
        server.stop()
        if pid_file:
            stop_group(pid_file)
    print(f"server stopped mid-run: exit {exited - ended:.1f} s after the runner's")
    assert code == 0, cli.output[-3000:]
    closing = cli.closing_line()
    assert "mlflow run:" not in closing and "in MLflow" in closing, closing
    assert f"python -m orchestrator sync {job_file.parent}" in closing, closing
    assert "Retrying (" not in cli.output, cli.output[-3000:]

    run_id_local = pid_file.parent.name
    server = MlflowServer(tmp_path / "server", port=server.port)   # the same backend, back again
    try:
        synced = sync(str(job_file.parent))
        assert synced.returncode == 0, synced.stdout + synced.stderr
        (run,) = server.runs(run_id_local)
        assert run.info.status == "FINISHED"
        assert run.data.metrics["tau"] == kept_results(job_file.parent)["tau"]
        again = sync(str(job_file.parent))
        assert again.returncode == 0, again.stdout + again.stderr
        assert [r.info.run_id for r in server.runs(run_id_local)] == [run.info.run_id]
    finally:
        server.stop()


def test_a_refused_final_upload_keeps_the_run_for_sync_without_a_second_try(tmp_path, monkeypatch):
    """The server went away during the run, which it had opened: `finish` meets a refused port and keeps the final
    payload for `sync` (the test above syncs such a run), without trying again to close the run FAILED there: that
    try cost MLflow's retries once more (~2.5 s at each run's end of an outage) and was refused as surely."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")   # each refused request the same backoff (~2 s)
    refused = f"http://127.0.0.1:{free_port()}"
    tracker = Tracker(refused, "specbench", run_dir=tmp_path)
    tracker.resume("0123456789abcdef0123456789abcdef")   # its MLflow run, opened while the server was there
    tracker.record_start(run_name="ar", params={"method.name": "ar"}, tags={"run_id_local": "ar-abcdef"})
    client = mlflow_client(refused)   # (its import is not the request's time)
    started = time.monotonic()
    with pytest.raises(Exception, match="Connection refused"):
        client.get_run(tracker.run_id)
    one_request = time.monotonic() - started
    started = time.monotonic()
    tracker.finish(Status.FINISHED, {"tau": 1.5}, {"status": "FINISHED"}, [])
    took = time.monotonic() - started
    print(f"refused: one request {one_request:.2f} s, finish {took:.2f} s")
    assert took < one_request + 1.0, f"finish took {took:.2f} s; one refused request {one_request:.2f} s"
    record = json.loads((tmp_path / RECORD).read_text())
    assert record["mlflow_run_id"] == tracker.run_id and record["final"]["status"] == "FINISHED"
    assert ["tau", 1.5] in [m[:2] for m in record["final"]["metrics"]] and record["logged"] == []
    assert "Connection refused" in record["error"] and "sync" in tracker.closing_note()


def test_an_orchestrator_killed_before_mlflow_had_its_run_is_reaped_and_synced(tmp_path):
    """kill -9 while the MLflow run is still opening (in the background; here it never can, the server a black
    hole): the run dir already names the run (job.json) and what its MLflow run is to show (tracking.json), so
    `reap` finds it once its runner ended, collects it, and `sync` logs it whole to a server that answers."""
    host_runs = tmp_path / "runs" / ".host" / "runs"
    pid_file = None
    try:
        with black_hole() as url:
            cli = Cli([*SMALL, f"tracking.uri={url}"], cwd=tmp_path)
            pid_file, launched = wait_file(host_runs, "*/pid", within=300)
            group = int(pid_file.read_text())
            os.killpg(group, signal.SIGSTOP)      # the runner cannot end before its orchestrator is killed
            try:
                cli.wait_line("run ", until=launched + 120)
                cli.proc.kill()
                cli.proc.wait()
            finally:
                os.killpg(group, signal.SIGCONT)
        # the black hole is gone too: reap meets a refused port, as after a server that went away
        (job_file,) = (tmp_path / "runs").glob("*/*/job.json")
        run_dir = job_file.parent
        assert json.loads(job_file.read_text())["mlflow_run_id"] is None
        assert json.loads((run_dir / "tracking.json").read_text())["start"]["tags"]["run_id_local"] == \
            pid_file.parent.name
        wait_file(pid_file.parent, "exit_code", within=300)
        reaped = subprocess.run([sys.executable, "-m", "orchestrator", "reap"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=300, env={**os.environ, "COLUMNS": "1000"})   # lines unwrapped
    finally:
        if pid_file:
            stop_group(pid_file)
    out = reaped.stdout + reaped.stderr
    assert reaped.returncode == 0 and "its runner ended: closing it" in out, out[-3000:]
    assert f"python -m orchestrator sync {run_dir}" in out, out[-3000:]
    assert "tau" in kept_results(run_dir)

    server = MlflowServer(tmp_path / "server")
    try:
        synced = sync(str(run_dir), "--tracking-uri", server.url)
        assert synced.returncode == 0, synced.stdout + synced.stderr
        (run,) = server.runs(pid_file.parent.name)
        assert run.info.status == "FINISHED" and run.data.metrics["tau"] == kept_results(run_dir)["tau"]
        assert run.data.params["method.name"] == "ddtree"
    finally:
        server.stop()


def test_a_run_that_never_launched_says_it_never_reached_mlflow(tmp_path):
    """Nothing listens on the port: the connection fails before the launch, so MLflow never had the run and
    `sync` has nothing to log; the closing line says so instead of leaving the reader to look for it."""
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *SMALL, "host=ssh", "host.hostname=127.0.0.1",
                           f"host.port={free_port()}"], cwd=tmp_path, capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    closing = next(line for line in proc.stdout.splitlines() if " run dir: " in line)
    assert closing.startswith("FAILED run dir: ") and "never reached MLflow" in closing, closing
    assert "nothing to sync" in closing and not (tmp_path / "runs" / "mlflow.db").exists()


def test_ctrl_c_during_a_sync_that_waits_on_the_server_says_so_in_one_line(tmp_path):
    """`sync` to a server that accepted the connection and says nothing waits on its answer (MLflow's own request
    timeout); Ctrl-C then ends it with one line and exit 130, not a traceback, and the record it syncs is kept."""
    run_dir = tmp_path / "runs" / "2026-12-05" / "10-00-00-ar-abcdef"
    run_dir.mkdir(parents=True)
    kept = Tracker(f"http://127.0.0.1:{free_port()}", "specbench", run_dir=run_dir)   # refused: kept locally
    kept.start(run_name="ar", params={"method.name": "ar"}, tags={"run_id_local": run_dir.name})
    kept.finish(Status.FINISHED, {"tau": 1.0}, {"status": "FINISHED"}, [])
    record = (run_dir / RECORD).read_text()
    accepted = threading.Event()
    with black_hole(accepted) as url:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sync", str(run_dir), "--tracking-uri", url],
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert accepted.wait(120), "sync never connected"
            proc.send_signal(signal.SIGINT)
            out = proc.communicate(timeout=60)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    assert out.strip().splitlines()[-1] == "Ctrl-C: interrupted", out[-3000:]
    assert (run_dir / RECORD).read_text() == record


def test_a_signal_during_the_final_upload_waits_for_it_and_a_second_leaves_at_once(tmp_path):
    """SIGTERM while the run's final upload waits on a slow server (stopped with SIGSTOP, resumed once the CLI says
    it waits): the CLI finishes the upload, says so in one line, and exits as signalled (143); MLflow holds the run
    FINISHED. Cut off, the upload used to leave the run RUNNING. A second signal there leaves at once."""
    from tests.test_faults import SCRIPT, wait_for

    server = MlflowServer(tmp_path / "server")
    codes, statuses = [], []
    try:
        for signals in (1, 2):
            until = tmp_path / f"end{signals}"
            runs = tmp_path / f"runs{signals}"
            cli = Cli(["host=local", f"host.workdir={tmp_path / 'work'}", "runner=script", f"runner.path={SCRIPT}",
                       f"runner.args=[--until,{until}]", f"tracking.uri={server.url}"], cwd=tmp_path,
                      env={"SPECBENCH_RUNS_DIR": str(runs)})
            slow = False
            try:
                job_file = wait_opened(runs, within=300)     # the run is open on the server
                os.killpg(server.proc.pid, signal.SIGSTOP)   # which is slow from here on
                slow = True
                until.touch()                                # the runner ends: the final upload waits
                wait_for(lambda: json.loads((job_file.parent / RECORD).read_text()).get("final"),
                         "the final payload recorded (as the upload begins)", timeout=120)
                cli.proc.send_signal(signal.SIGTERM)
                cli.wait_line("SIGTERM: the run has ended; logging it to MLflow first", time.monotonic() + 60)
                if signals == 2:
                    cli.proc.send_signal(signal.SIGTERM)
                    second = time.monotonic()
                    code, exited = cli.wait_exit(time.monotonic() + 30)
                    print(f"a second signal: exit {exited - second:.2f} s after it")
                os.killpg(server.proc.pid, signal.SIGCONT)
                resumed, slow = time.monotonic(), False
                if signals == 1:
                    code, exited = cli.wait_exit(time.monotonic() + 120)
                    print(f"one signal: exit {exited - resumed:.2f} s after the server resumed")
                codes.append(code)
                if signals == 2:   # the note said how to log it later
                    assert f"`python -m orchestrator sync {job_file.parent}` logs it later" in cli.output
                    assert "FINISHED run dir" not in cli.output, cli.output[-3000:]
                    synced = sync(str(job_file.parent))
                    assert synced.returncode == 0, synced.stdout + synced.stderr
                else:   # and only ours names the run: MLflow's own "View run ... at" lines are off
                    assert "FINISHED run dir" in cli.output and "View run" not in cli.output, cli.output[-3000:]
                run_id = json.loads(job_file.read_text())["mlflow_run_id"]
                statuses.append(MlflowClient(server.url).get_run(run_id).info.status)
            finally:
                if slow:
                    os.killpg(server.proc.pid, signal.SIGCONT)
                cli.close()
    finally:
        server.stop()
    assert codes == [143, 143] and statuses == ["FINISHED", "FINISHED"], (codes, statuses)
