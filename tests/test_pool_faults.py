"""A pool host that is down (its sshd stopped), or a job that waits: the job goes to a host that can run it, says
once which host it skips and why, fails in one line when no host can take it, and does not log in to the hosts
over and over while it waits. Real OpenSSH servers on loopback (tests/sshd.py); logins are counted in their logs."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

from orchestrator.hosts.leases import RECHECK_S, GpuPool, PoolEntry
from orchestrator.run.place import held_on_host
from tests.sshd import SSHD, SSHD_BIN, _hydra_value
from tests.test_faults import LONG
from tests.test_faults import _read_until as read_until
from tests.test_faults import finish, start_cli, wait_for

pytestmark = pytest.mark.skipif(not Path(SSHD_BIN).exists(), reason="sshd not installed (.ci/run installs it)")
# A runner that sends our start event and ends (what a runner computes does not matter where a job is placed)
JOB = [*LONG, "runner.args=[--steps,1]"]


@pytest.fixture
def servers(tmp_path):
    """Start SSHD servers by name; each is stopped at the end. `servers("a", dead=True)`: started, then stopped, so
    its port refuses connections (the host is down)."""
    made: list[SSHD] = []

    def make(name: str, dead: bool = False) -> tuple[SSHD, dict]:
        server = SSHD(tmp_path / f"sshd-{name}")
        facts = server.start()
        made.append(server)
        if dead:
            server.stop()
        return server, facts.host_config(name=name, workdir=str(tmp_path / f"work-{name}"))

    yield make
    for server in made:
        server.stop()


def logins(server: SSHD) -> int:
    return (server.root / "sshd.log").read_text().count("Accepted publickey")


def pool_args(tmp_path: Path, *hosts: dict) -> list[str]:
    entries = ",".join("{host:{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in h.items()) + "},gpus:[0]}"
                       for h in hosts)
    return [f"pool.hosts=[{entries}]", f"pool.lock_dir={tmp_path / 'leases'}"]


def cli(tmp_path: Path, *args: str) -> subprocess.Popen:
    return start_cli([*args, *JOB], cwd=tmp_path, env={"SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"})


def test_a_job_skips_a_dead_pool_host_for_a_free_one(servers, tmp_path):
    _, dead = servers("ssh-dead", dead=True)
    _, live = servers("ssh-live")
    proc = cli(tmp_path, *pool_args(tmp_path, dead, live))
    out = finish(proc, timeout=600)
    assert proc.returncode == 0, out[-3000:]
    skipped = [line for line in out.splitlines() if "skipping pool host" in line]
    assert len(skipped) == 1 and "ssh-dead: cannot connect" in skipped[0], out[-3000:]
    (config,) = (tmp_path / "runs").glob("*/*/config.yaml")   # the run dir's: where the pool placed the job
    assert yaml.safe_load(config.read_text())["host"]["name"] == "ssh-live"


def test_every_pool_host_dead_fails_the_job_at_once_in_one_line(servers, tmp_path):
    _, first = servers("ssh-a", dead=True)
    _, second = servers("ssh-b", dead=True)
    started = time.monotonic()
    proc = cli(tmp_path, *pool_args(tmp_path, first, second))
    out = finish(proc, timeout=120)
    print(f"every pool host dead: exit {proc.returncode} {time.monotonic() - started:.1f} s after the start")
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert errors == ["error: no host of the pool can take this job: ssh-a, ssh-b (every one with 1+ GPU(s)) "
                      "unreachable; nothing was started"], out[-3000:]
    assert "connecting to" not in out and not (tmp_path / "work-a").exists(), out[-3000:]


def test_a_waiting_job_logs_in_to_no_host_while_our_jobs_lease_its_gpus(servers, tmp_path):
    """The GPU is leased by another job of this machine (its local lock): asking the host cannot free it."""
    server, live = servers("ssh-live")
    (tmp_path / "leases").mkdir()
    with FileLock(str(tmp_path / "leases" / "ssh-live.gpu0.lock")):
        proc = cli(tmp_path, *pool_args(tmp_path, live))
        seen: list[str] = []
        try:
            read_until(proc, "waiting for 1 free GPU", seen)
            before, since = logins(server), time.monotonic()
            time.sleep(5)   # the measurement: logins while it waits (it used to log in at every 0.5 s poll)
            made, took = logins(server) - before, time.monotonic() - since
            print(f"waiting on a GPU leased here: {made} logins in {took:.1f} s ({made * 60 / took:.0f} a minute)")
        finally:
            proc.send_signal(signal.SIGINT)
            out = "".join(seen) + finish(proc, timeout=60)
    assert made == 0, out[-3000:]
    assert proc.returncode == 130, out[-3000:]


def test_a_gpu_held_on_the_host_is_asked_about_every_few_seconds_not_every_poll(servers, tmp_path):
    """A runner of ours that outlived its sweep holds the GPU on the host (its lock file, as launch.sh takes it):
    the host is asked again every RECHECK_S s, and the job starts there once the runner ends."""
    server, live = servers("ssh-live")
    locks = tmp_path / "work-ssh-live" / "locks"
    locks.mkdir(parents=True)
    take = (f"import fcntl, time; f = open({str(locks / 'gpu0.lock')!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(600)")   # one process: killing it frees the lock
    holder = subprocess.Popen([sys.executable, "-c", take], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    proc = cli(tmp_path, *pool_args(tmp_path, live))
    seen: list[str] = []
    try:
        read_until(proc, "held on the host by runners of ours: ssh-live GPU 0", seen)
        before, since = logins(server), time.monotonic()
        time.sleep(RECHECK_S + 2)   # the measurement: at most two probes fit in it
        made, took = logins(server) - before, time.monotonic() - since
        print(f"waiting on a GPU held on the host: {made} logins in {took:.1f} s ({made * 60 / took:.0f} a minute)")
    finally:
        holder.kill()   # the runner ends: its lock goes with it, and the job may start
        holder.wait()
        out = "".join(seen) + finish(proc, timeout=600)
    assert made <= 2, out[-3000:]
    assert proc.returncode == 0 and "run " in out and "on ssh-live" in out, out[-3000:]


def _acquire_in_background(pool: GpuPool, told: list[str], held) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(pool.acquire(1, timeout=300, poll=0.05, held=held,
                                                                     tell=told.append)), daemon=True)
    thread.start()
    return thread, got


def _dead_a_live_b(servers):
    """Pool hosts ssh-a (down) and ssh-b, and the real probe (`held_on_host`, over SSH) with a counter of the times
    each was asked."""
    server_a, a = servers("ssh-a", dead=True)
    _, b = servers("ssh-b")
    asked: dict[str, int] = {"ssh-a": 0, "ssh-b": 0}

    def held(host, gpus: list[int]) -> set[int]:
        asked[host.name] += 1
        return held_on_host(host, gpus)

    return server_a, a, b, asked, held


def test_a_dead_host_is_skipped_once_while_a_busy_one_is_waited_for_then_used_when_back(servers, tmp_path):
    """Host a is down, host b's GPU leased by another job here: the job waits (a dead host is no reason to give up
    while a live one will free up), says once that a is skipped, asks a again now and then and takes it once its
    sshd is back. The real probe (`held_on_host`, over SSH) decides; a counter only tells when it was asked."""
    server_a, a, b, asked, held = _dead_a_live_b(servers)
    entries = [PoolEntry.of({"host": host, "gpus": [0]}) for host in (a, b)]
    pool = GpuPool(entries, tmp_path / "leases", recheck=0.3)
    told: list[str] = []
    with FileLock(str(tmp_path / "leases" / "ssh-b.gpu0.lock")):
        thread, got = _acquire_in_background(pool, told, held)
        wait_for(lambda: asked["ssh-a"] >= 3 or got, "host a asked three times", timeout=120)
        assert not got, f"placed on a dead host: {got}"
        assert asked["ssh-b"] == 0   # its GPU is leased here: asking it could not change that
        server_a.restart()
        thread.join(120)
    assert got and got[0].host.name == "ssh-a", told
    got[0].release()
    assert [re.sub(r":.*", "", m) for m in told] == [
        "skipping pool host ssh-a", "waiting for 1 free GPU(s) of the pool", "pool host ssh-a answers again"], told


def test_a_host_one_job_found_dead_is_asked_last_by_the_jobs_after_it(servers, tmp_path):
    """Each job (a new GpuPool on the same lock dir, as the next job of a sweep or another orchestrator here) used
    to ask the dead host first and pay its connect timeout again. Now the jobs after the first take the live host
    without asking the dead one, still ask it when no other host can take them, and go back to the listed order
    once it answers. The real probe (`held_on_host`, over SSH) decides; a counter only tells when it was asked."""
    server_a, a, b, asked, held = _dead_a_live_b(servers)

    def job() -> str:
        pool = GpuPool([PoolEntry.of({"host": host, "gpus": [0]}) for host in (a, b)], tmp_path / "leases")
        lease = pool.acquire(1, timeout=120, poll=0.05, held=held)
        lease.release()
        return lease.host.name

    assert job() == "ssh-b" and asked == {"ssh-a": 1, "ssh-b": 1}
    assert job() == "ssh-b" and asked == {"ssh-a": 1, "ssh-b": 2}      # the dead host not asked again
    server_a.restart()
    with FileLock(str(tmp_path / "leases" / "ssh-b.gpu0.lock")):        # b leased here: only a can take the job
        assert job() == "ssh-a" and asked["ssh-a"] == 2
    assert job() == "ssh-a" and asked == {"ssh-a": 3, "ssh-b": 2}      # it answered: first in the order again
