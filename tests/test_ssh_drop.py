"""A real connection cut (veth link down for >= 5 s, packets silently dropped) between SSHHost and sshd.

read_from must resume from its offset after reconnecting (no byte lost or doubled); run must be retried only
when it was never sent; reconnecting must give up after reconnect_timeout with a HostError.
The link comes back on events, not on a timer alone: only once the host has noticed the loss (and, for the tail,
once bytes were written behind it), so a loaded machine's slowness cannot make a cut that nothing saw.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest

from orchestrator.hosts import HostError
from orchestrator.hosts.connect import open_host
from orchestrator.hosts.settings import host_settings
from orchestrator.hosts.ssh import SSHHost

CUT_SECONDS = 5.5

# Writes numbered lines, flushed one by one, until the file argv[2] exists (or argv[3] s pass), then END: a
# stand-in for a runner's log, that goes on until the test has cut and restored the link.
WRITER = """
import os, sys, time
end = time.time() + float(sys.argv[3])
with open(sys.argv[1], "w") as f:
    i = 0
    while time.time() < end and not os.path.exists(sys.argv[2]):
        f.write(f"line {i:06d}\\n"); f.flush(); i += 1; time.sleep(0.005)
    f.write("END\\n")
"""


def _host(server, **overrides) -> SSHHost:
    settings = {"io_timeout": 1.5, "connect_timeout": 1.5, "reconnect_timeout": 60, **overrides}
    return open_host(host_settings(server.facts.host_config(**settings)))


class _Outage(threading.Thread):
    """The link cut now, and restored once `seconds` have passed and `until()` holds (the host noticed, ...), or
    after `limit` s whatever holds (`met` then says False: the test fails on it instead of hanging)."""

    def __init__(self, server, seconds: float, until, limit: float = 120):
        super().__init__(daemon=True, name="outage")
        self.server, self.seconds, self.until, self.limit = server, seconds, until, limit
        self.met = False
        self.server.cut()
        self.cut_at = time.monotonic()
        self.start()

    def run(self) -> None:
        try:
            while time.monotonic() - self.cut_at < self.limit:
                if time.monotonic() - self.cut_at >= self.seconds and self.until():
                    self.met = True
                    break
                time.sleep(0.05)
        finally:
            self.server.restore()


def _noticed(host: SSHHost):
    """True once `host` has retried a lost connection since now (it counts a retry after each failed attempt)."""
    before = host.reconnects
    return lambda: host.reconnects > before


def test_read_from_resumes_across_a_cut_without_losing_or_doubling_bytes(sshd_netns):
    host = _host(sshd_netns)
    path = f"{host.workdir}/tail.log"
    stop = Path(f"{path}.stop")   # same filesystem: the namespace only isolates the network
    host.run(f"setsid nohup {shlex.quote(host.python)} -c {shlex.quote(WRITER)} {shlex.quote(path)} "
             f"{shlex.quote(str(stop))} 300 > /dev/null 2>&1 < /dev/null &")
    got = bytearray()
    try:
        deadline = time.monotonic() + 60
        while len(got) < 1000:   # the writer is going, and the tail follows it
            assert time.monotonic() < deadline, "the writer wrote nothing within 60 s"
            got += host.read_from(path, len(got))
            time.sleep(0.05)
        size_at_cut = os.path.getsize(path)
        noticed = _noticed(host)
        outage = _Outage(sshd_netns, CUT_SECONDS, lambda: noticed() and os.path.getsize(path) > size_at_cut)
        while outage.is_alive():   # these reads hang in reconnecting while the link is down
            got += host.read_from(path, len(got))
            time.sleep(0.05)
        assert outage.met, "the cut was not noticed (or nothing was written during it): the test proves nothing"
        got += host.read_from(path, len(got))
        stop.touch()   # only now may the writer end
        while not got.endswith(b"END\n"):
            assert time.monotonic() - outage.cut_at < 300, "the writer never ended"
            got += host.read_from(path, len(got))
            time.sleep(0.05)
    finally:
        stop.touch()
    assert bytes(got) == Path(path).read_bytes()
    lines = got.decode().splitlines()
    assert lines[:-1] == [f"line {i:06d}" for i in range(len(lines) - 1)]


def test_run_during_a_cut_is_sent_once_after_the_link_returns(sshd_netns):
    host = _host(sshd_netns)
    target = f"{host.workdir}/appended"
    host.run("true")   # connected before the cut, so the cut hits a live connection
    outage = _Outage(sshd_netns, CUT_SECONDS, _noticed(host))
    host.run(f"echo once >> {shlex.quote(target)}")
    outage.join()
    assert outage.met, "the run did not notice the cut: the test proves nothing"
    assert time.monotonic() - outage.cut_at >= CUT_SECONDS
    assert Path(target).read_text() == "once\n"


def test_reconnecting_gives_up_after_reconnect_timeout(sshd_netns):
    host = _host(sshd_netns, io_timeout=1, connect_timeout=1, reconnect_timeout=2)
    host.run("true")
    sshd_netns.cut()
    try:
        started = time.monotonic()
        with pytest.raises(HostError, match="lost and not restored within 2 s"):
            host.read_from(f"{host.workdir}/anything", 0)
        assert time.monotonic() - started < 10
    finally:
        sshd_netns.restore()


def test_a_command_cut_off_mid_run_is_named_in_one_short_line(sshd_netns):
    host = _host(sshd_netns, io_timeout=1, connect_timeout=1, reconnect_timeout=2)
    started = Path(f"{host.workdir}/started")
    script = f"touch {shlex.quote(str(started))}; sleep 60\n" + "".join(f"echo probe line {i}\n" for i in range(40))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            host.run(script, timeout=90)
        except BaseException as exc:   # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 60
    while not started.exists():   # the command is running on the host: the cut hits it mid-run
        assert time.monotonic() < deadline and worker.is_alive(), "the command never started"
        time.sleep(0.05)
    sshd_netns.cut()
    try:
        worker.join(60)
    finally:
        sshd_netns.restore()
    assert errors and isinstance(errors[0], HostError), errors
    message = str(errors[0])
    assert "may or may not have run" in message and "touch" in message
    assert "\n" not in message and "probe line" not in message, message


def test_a_bundle_upload_cut_mid_way_is_sent_again_once_the_link_returns(sshd_netns):
    """The bundle travels on its install command's input, and a command once sent is never repeated by the host
    layer: the install is safe to repeat, so it is sent again after the reconnect, and the bundle ends complete.
    The link is slowed (tc) so that the cut, made once the host has begun to unpack, lands mid-stream."""
    from orchestrator.run.bundle import BundleSync, sync_bundle

    host = _host(sshd_netns)
    host.run("true")
    subprocess.run([*sshd_netns.prefix, "tc", "qdisc", "add", "dev", sshd_netns.veth_ns, "root", "tbf", "rate",
                    "40mbit", "burst", "64kb", "latency", "200ms"], check=True)
    bundles = Path(BundleSync(host).root)
    cuts: list[_Outage] = []

    def cut_once_unpacking() -> None:
        deadline = time.monotonic() + 120
        while not any(bundles.glob("*.tmp-*/.new/*")) and not any(bundles.glob("*.tmp-*/remote")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        cuts.append(_Outage(sshd_netns, 2, _noticed(host)))

    watcher = threading.Thread(target=cut_once_unpacking, daemon=True)
    watcher.start()
    target = sync_bundle(host)
    watcher.join(5)
    assert cuts, "the upload was never seen unpacking: the test proves nothing"
    cuts[0].join()
    assert cuts[0].met, "the upload did not notice the cut: the test proves nothing"
    assert host.run(f"cd {shlex.quote(target)} && test -f .complete && sha256sum --quiet -c MANIFEST.sha256",
                    check=False).exited == 0
