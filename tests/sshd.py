"""A real OpenSSH server for tests: throwaway keys, loopback (or a network namespace), torn down by pid.

Contract:
- `SSHD(dir).start()` runs `/usr/sbin/sshd -D` on a free port with a fresh ed25519 host key and client key in
  `dir`, and writes `dir/known_hosts` holding that host key. `facts` says how to reach it (`host_config()` for
  SSHHost, `overrides()` for `python -m orchestrator`). `stop()` kills the listener and every per-connection
  sshd it forked, by pid and by the process group it was started in.
- `NetnsSSHD` is the same server inside a network namespace joined to this one by a veth pair, so that
  `cut()` / `restore()` take the link down and up for real (packets dropped, no RST): what a flaky network
  does. Needs root and iproute2; otherwise its fixture skips with the reason.
- Fixtures (registered by tests/conftest.py as the `tests.sshd` plugin): `sshd` (session-scoped loopback
  server, yields SSHDFacts), `ssh_host` (an SSHHost on it with a fresh workdir: what the shared host contract
  suite runs against), `sshd_netns` (function-scoped, for drop tests). The bench imports `SSHD` from here.

Non-goals: password auth, non-root servers that log in as another user, anything but Linux.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD_BIN = "/usr/sbin/sshd"
SKIP_REASON = f"{SSHD_BIN} not found: install openssh-server (apt-get install -y openssh-server)"


@dataclass(frozen=True)
class SSHDFacts:
    """How to reach a test server."""

    hostname: str
    port: int
    user: str
    identity_file: str
    known_hosts: str
    host_key_line: str    # the known_hosts line for this server
    root: Path            # the server's scratch dir (keys, config, log)

    def host_config(self, **overrides) -> dict:
        """A `host` config for SSHHost.from_config (what conf/host/ssh.yaml + overrides would give)."""
        cfg = {"name": "sshd-test", "kind": "ssh", "hostname": self.hostname, "port": self.port,
               "user": self.user, "identity_file": self.identity_file, "known_hosts": self.known_hosts,
               "ssh_config": str(self.root / "ssh_config"), "python": sys.executable,
               "workdir": str(self.root / "work"), "io_timeout": 3.0, "connect_timeout": 3.0}
        cfg.update(overrides)
        return cfg

    def overrides(self, **extra) -> list[str]:
        """Hydra command-line overrides selecting this server (`host=ssh host.hostname=... ...`)."""
        cfg = self.host_config(**extra)
        skip = {"name", "kind"}
        return ["host=ssh"] + [f"host.{k}={_hydra_value(v)}" for k, v in cfg.items() if k not in skip]


def _hydra_value(value) -> str:
    """A Hydra override value: plain when it is safe unquoted (keeps printed commands readable)."""
    # What Hydra would read as a number, bool or null must be quoted to stay a string (127.0.0.1 stays plain).
    looks_typed = re.fullmatch(r"[+-]?[0-9]*\.?[0-9]*(e[+-]?[0-9]+)?|true|false|null|[+-]?nan|[+-]?inf",
                               str(value), re.IGNORECASE)
    if isinstance(value, str) and (looks_typed or not re.fullmatch(r"[A-Za-z0-9_./:+-]+", value)):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specbench-test", "-f", str(path)],
                   check=True)


class SSHD:
    """One sshd process. `prefix` runs it through a wrapper (`ip netns exec NS`)."""

    def __init__(self, root: Path, address: str = "127.0.0.1", prefix: tuple[str, ...] = (), sftp: bool = True):
        self.root = Path(root)
        self.sftp = sftp      # False: no `Subsystem sftp` line, as on boxes whose admin left it out
        self.address = address
        self.prefix = prefix
        self.proc: subprocess.Popen | None = None
        self.facts: SSHDFacts | None = None

    def start(self) -> SSHDFacts:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(exist_ok=True)
        (self.root / "ssh_config").write_text("")   # isolate tests from the user's ~/.ssh/config
        host_key, client_key = self.root / "host_ed25519", self.root / "client_ed25519"
        for key in (host_key, client_key):
            if not key.exists():
                _keygen(key)
        shutil.copy(f"{client_key}.pub", self.root / "authorized_keys")
        port = free_port(self.address) if not self.prefix else 2222
        config = self.root / "sshd_config"
        config.write_text(_sshd_config(self.root, self.address, port, self.sftp))
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)   # privilege separation dir sshd insists on as root
        log = self.root / "sshd.log"
        # Its own process group: the listener and the per-connection processes it forks (monitor and
        # session child) can then be stopped together by one pgid, whatever their parentage has become.
        self.proc = subprocess.Popen([*self.prefix, SSHD_BIN, "-D", "-f", str(config), "-E", str(log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self._wait_listening(port, log)
        kind, blob = Path(f"{host_key}.pub").read_text().split()[:2]
        name = f"[{self.address}]:{port}"
        known = self.root / "known_hosts"
        known.write_text(f"{name} {kind} {blob}\n")
        self.facts = SSHDFacts(self.address, port, _user(), str(client_key), str(known),
                               f"{name} {kind} {blob}", self.root)
        return self.facts

    def restart(self) -> None:
        """Start a stopped server again on the same port and keys: a host that comes back."""
        log, config = self.root / "sshd.log", self.root / "sshd_config"
        self.proc = subprocess.Popen([*self.prefix, SSHD_BIN, "-D", "-f", str(config), "-E", str(log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self._wait_listening(self.facts.port, log)

    def _wait_listening(self, port: int, log: Path, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: "
                                   f"{self.proc.stderr.read().decode()} {log.read_text() if log.exists() else ''}")
            try:
                with socket.create_connection((self.address, port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on {self.address}:{port} within {timeout} s")

    def children(self) -> list[int]:
        """Per-connection sshd processes (children of the listener), found through /proc."""
        if self.proc is None:
            return []
        kids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                if ppid == self.proc.pid:
                    kids.append(int(entry.name))
        return kids

    def stop(self) -> None:
        if self.proc is None:
            return
        for pid in self.children():
            _kill(pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # the group is ours: start_new_session above
        except ProcessLookupError:
            pass
        self.proc.wait(5)
        self.proc.stderr.close()
        self.proc = None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _sshd_config(root: Path, address: str, port: int, sftp: bool = True) -> str:
    return "\n".join([
        f"Port {port}",
        f"ListenAddress {address}",
        f"HostKey {root / 'host_ed25519'}",
        f"PidFile {root / 'sshd.pid'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UsePAM no",
        "MaxSessions 64",
        "MaxStartups 64",
        "LogLevel VERBOSE",
        # sessions start from a fresh environment: runners over SSH get the one torch thread tests/conftest.py gives
        # local ones (two contend on a busy 2-core box: a decode took several times longer)
        "SetEnv OMP_NUM_THREADS=1",
        *(["Subsystem sftp internal-sftp"] if sftp else []),
        "",
    ])


class NetnsSSHD(SSHD):
    """sshd inside its own network namespace, reached over a veth pair whose host end can be cut."""

    def __init__(self, root: Path):
        tag = f"{os.getpid() % 10000}{random.randrange(100):02d}"
        self.ns = f"sbtest{tag}"
        self.veth_host, self.veth_ns = f"sbh{tag}", f"sbn{tag}"
        net = f"10.{random.randrange(200, 250)}.{random.randrange(256)}"
        self.host_ip, self.ns_ip = f"{net}.1", f"{net}.2"
        super().__init__(root, address=self.ns_ip, prefix=("ip", "netns", "exec", self.ns))

    @staticmethod
    def unavailable() -> str | None:
        """Why a namespace cannot be made here (None if it can)."""
        if not os.path.exists(SSHD_BIN):
            return SKIP_REASON
        if os.geteuid() != 0:
            return "network-namespace drop tests need root (CI runs as root)"
        if shutil.which("ip") is None:
            return "network-namespace drop tests need iproute2 (apt-get install -y iproute2)"
        return None

    def start(self) -> SSHDFacts:
        ns = ("ip", "netns", "exec", self.ns)
        steps = [
            ("ip", "netns", "add", self.ns),
            ("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns),
            ("ip", "link", "set", self.veth_ns, "netns", self.ns),
            ("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth_host),
            ("ip", "link", "set", self.veth_host, "up"),
            (*ns, "ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.veth_ns),
            (*ns, "ip", "link", "set", self.veth_ns, "up"),
            (*ns, "ip", "link", "set", "lo", "up"),
        ]
        try:
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"`{' '.join(step)}` failed ({done.stderr.strip()}): the drop tests need "
                                       f"root with CAP_NET_ADMIN (CI runs them as root)")
            return super().start()
        except BaseException:
            self.stop()
            raise

    def cut(self) -> None:
        """Take the link down: packets are dropped both ways, nothing tells either end. The namespace end
        goes down, so this side keeps its route (marked linkdown) and new connections time out instead of
        wandering off through the default route."""
        subprocess.run([*self.prefix, "ip", "link", "set", self.veth_ns, "down"], check=True)

    def restore(self, timeout: float = 30.0) -> None:
        """Bring the link back; return once the server answers over it. `ip link set up` returns before the
        carrier is back, and the host's neighbour entry for the server, failed during the cut, answers a new
        connection with EHOSTUNREACH until it is resolved again: a client's first connect would be refused."""
        subprocess.run([*self.prefix, "ip", "link", "set", self.veth_ns, "up"], check=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.ns_ip, self.facts.port), timeout=1.0) as conn:
                    if conn.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd at {self.ns_ip} not reachable {timeout} s after the link came back")
                time.sleep(0.05)

    def stop(self) -> None:
        super().stop()
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.veth_host], capture_output=True)   # gone with the ns usually


@pytest.fixture(scope="session")
def sshd():
    """A loopback sshd for the whole session: yields SSHDFacts."""
    if not os.path.exists(SSHD_BIN):
        pytest.skip(SKIP_REASON)
    root = Path(tempfile.mkdtemp(prefix="specbench-sshd-"))
    server = SSHD(root)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ssh_host(sshd, tmp_path):
    """An SSHHost on the loopback sshd, with its own workdir."""
    from orchestrator.hosts.connect import open_host
    from orchestrator.hosts.settings import host_settings

    host = open_host(host_settings(sshd.host_config(workdir=str(tmp_path / "sshwork"))))
    try:
        yield host
    finally:
        host.close()


@pytest.fixture
def sshd_netns(tmp_path):
    """An sshd in a network namespace whose link the test can cut: yields the NetnsSSHD (`.facts`, `.cut()`,
    `.restore()`)."""
    reason = NetnsSSHD.unavailable()
    if reason:
        pytest.skip(reason)
    server = NetnsSSHD(tmp_path / "sshd")
    server.start()
    try:
        yield server
    finally:
        server.stop()   # deleting the namespace also removes the veth pair, whatever state it was left in
