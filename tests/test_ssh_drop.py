"""A real connection cut (veth link down for >= 5 s, packets silently dropped) between SSHHost and sshd.

read_from must resume from its offset after reconnecting (no byte lost or doubled); run must be retried only
when it was never sent; reconnecting must give up after reconnect_timeout with a HostError.
"""
from __future__ import annotations

import shlex
import threading
import time
from pathlib import Path

import pytest

from orchestrator.hosts import HostError
from orchestrator.hosts.ssh import SSHHost

CUT_SECONDS = 5.5

# Writes numbered lines for `seconds`, flushed one by one, then END: a stand-in for a runner's log.
WRITER = """
import sys, time
end = time.time() + float(sys.argv[2])
with open(sys.argv[1], "w") as f:
    i = 0
    while time.time() < end:
        f.write(f"line {i:06d}\\n"); f.flush(); i += 1; time.sleep(0.005)
    f.write("END\\n")
"""


def _host(server, **overrides) -> SSHHost:
    settings = {"io_timeout": 1.5, "connect_timeout": 1.5, "reconnect_timeout": 60, **overrides}
    return SSHHost.from_config(server.facts.host_config(**settings))


def _cut_for(server, seconds: float) -> threading.Thread:
    server.cut()
    timer = threading.Timer(seconds, server.restore)
    timer.start()
    return timer


def test_read_from_resumes_across_a_cut_without_losing_or_doubling_bytes(sshd_netns):
    host = _host(sshd_netns)
    path = f"{host.workdir}/tail.log"
    host.run(f"setsid nohup {shlex.quote(host.python)} -c {shlex.quote(WRITER)} {shlex.quote(path)} 9 "
             f"> /dev/null 2>&1 < /dev/null &")
    got = bytearray()
    started, timer = time.monotonic(), None
    while not got.endswith(b"END\n"):
        if timer is None and time.monotonic() - started > 1.5 and got:
            timer = _cut_for(sshd_netns, CUT_SECONDS)
        got += host.read_from(path, len(got))
        time.sleep(0.05)
    timer.join()
    assert host.reconnects >= 1, "the cut was not noticed: the test proves nothing"
    assert bytes(got) == Path(path).read_bytes()   # same filesystem: the namespace only isolates the network
    lines = got.decode().splitlines()
    assert lines[:-1] == [f"line {i:06d}" for i in range(len(lines) - 1)]


def test_run_during_a_cut_is_sent_once_after_the_link_returns(sshd_netns):
    host = _host(sshd_netns)
    target = f"{host.workdir}/appended"
    host.run("true")   # connected before the cut, so the cut hits a live connection
    timer = _cut_for(sshd_netns, CUT_SECONDS)
    started = time.monotonic()
    host.run(f"echo once >> {shlex.quote(target)}")
    timer.join()
    assert time.monotonic() - started >= CUT_SECONDS - 0.5
    assert host.reconnects >= 1
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
