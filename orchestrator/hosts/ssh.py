"""The SSH host: the Host primitives over one Fabric/paramiko connection, opened lazily, with host keys checked.

- The host key must be in `known_hosts` (~/.ssh/known_hosts, or an alias's UserKnownHostsFile), never written here: an
  unknown or changed key is a HostError giving the exact `ssh-keyscan` command; `strict_host_key_checking: false` skips
  the check for that host (this connection only, with a warning). `hostname` may be an alias of ~/.ssh/config (HostName,
  User, Port, IdentityFile, UserKnownHostsFile, ProxyCommand; explicit settings win); ProxyJump is refused.
- `run(command)` runs `bash -c <command>` through the login shell, as the caller quoted it; `stdin` (bytes) is fed to
  it, then closed; a `timeout` returns exit 124 (the remote command is not killed). Sent again only if the session could
  not be opened; once sent, a lost connection is a LinkLost (a HostError). A silent link is caught by `io_timeout`: SFTP
  calls time out, and a command quiet that long sends a keepalive probe.
- `put` / `get` / `read_from` (SFTP) are repeated over a re-opened connection (backoff, `reconnect_timeout` s in all);
  `read_from(path, off)` is the bytes [off, size) of one stat, whole or not at all; `put` is atomic (temporary name,
  rename), and one the host refused (a full disk) leaves no temporary and, where it cannot fit, says the room it needs.
Non-goals: password or keyboard-interactive auth, agent forwarding, ControlMaster, thread safety (one per thread).
"""
from __future__ import annotations

import getpass
import io
import logging
import os
import select
import shlex
import tarfile
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import paramiko
from fabric import Config, Connection

from .base import CommandFailed, Host, HostError, LinkLost, Result
from .room import free_space, no_room
from .settings import SSHSettings

log = logging.getLogger(__name__)
# paramiko's transport thread logs a failed handshake with its traceback; with no logging set up, Python's last-resort
# handler prints that to the terminal, beside the one-line HostError that says the same.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
T = TypeVar("T")

TIMEOUT_EXIT = 124   # what `timeout(1)` reports; used when a command outlives its `timeout`
DEFAULT_WORKDIR = "~/specbench"
_STDIN_PIECE = 1 << 18   # bytes of a command's stdin handed to paramiko at a time


@dataclass(frozen=True)
class Address:
    """Where and as whom to connect, after ~/.ssh/config is applied."""

    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: str
    proxy_command: str | None

    def __str__(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """How the host appears in known_hosts (OpenSSH and paramiko agree on this form)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def keyscan_command(self) -> str:
        return f"ssh-keyscan -p {self.port} {shlex.quote(self.hostname)} >> {shlex.quote(self.known_hosts)}"


def resolve_address(s: SSHSettings) -> Address:
    """Apply ~/.ssh/config (or `s.ssh_config`) to the settings; explicit settings win."""
    path = Path(s.ssh_config or "~/.ssh/config").expanduser()
    entry: dict[str, Any] = {}
    if path.is_file():
        entry = paramiko.SSHConfig.from_path(str(path)).lookup(s.hostname)
    elif s.ssh_config:
        raise HostError(f"host.ssh_config: {path} does not exist")
    if "proxyjump" in entry:
        raise HostError(f"{s.hostname}: ProxyJump in {path} is not supported (its hops would skip host-key "
                        f"checks); use `ProxyCommand ssh -W %h:%p {entry['proxyjump']}` instead")
    identities = [s.identity_file] if s.identity_file else list(entry.get("identityfile", []))
    known = s.known_hosts or (entry.get("userknownhostsfile") or "~/.ssh/known_hosts").split()[0]
    return Address(
        hostname=entry.get("hostname", s.hostname),
        port=int(s.port or entry.get("port", 22)),
        user=s.user or entry.get("user") or getpass.getuser(),
        identity_files=tuple(os.path.expanduser(p) for p in identities),
        known_hosts=os.path.expanduser(known),
        proxy_command=entry.get("proxycommand"),
    )


class _Lost(Exception):
    """The connection broke where repeating the operation is safe (idempotent, or nothing was sent)."""


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, key: paramiko.PKey):
        self.key = key
        super().__init__("unknown host key")


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """paramiko's RejectPolicy, but keeping the offered key so the message can show its fingerprint."""

    def missing_host_key(self, client, hostname, key):
        raise _UnknownHostKey(key)


class _AcceptUnverified(paramiko.MissingHostKeyPolicy):
    """strict_host_key_checking=false: accept for this connection, persist nothing, say so."""

    def missing_host_key(self, client, hostname, key):
        log.warning("host key of %s NOT verified (strict_host_key_checking=false): %s %s",
                    hostname, key.get_name(), key.fingerprint)


# Errors that mean "the network or the SSH transport failed", as opposed to a refused key or auth.
_NETWORK_ERRORS = (OSError, EOFError, paramiko.SSHException)


class SSHHost(Host):
    """A Host reached over SSH. Cheap to construct: nothing connects until the first operation."""

    def __init__(self, settings: SSHSettings):
        self.settings = settings
        self.name = settings.name or settings.hostname
        self.python = settings.python
        self.address = resolve_address(settings)
        self.calls: Counter[str] = Counter()   # operations sent, by kind (for benchmarks and tests)
        self.reconnects = 0
        self._workdir: str | None = None
        self._conn: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._ever_connected = False

    def __repr__(self) -> str:
        return f"SSHHost({self.name!r}, {self.address})"

    # ---- the Host interface -------------------------------------------------------------------------------

    @property
    def workdir(self) -> str:  # type: ignore[override]
        if self._workdir is None:
            self._workdir = self._resolve_workdir(self.workdir_as_typed())
        return self._workdir

    def workdir_as_typed(self) -> str:
        return self._workdir or self.settings.workdir or DEFAULT_WORKDIR

    def run(self, command: str, *, check: bool = True, timeout: float | None = None,
            stdin: bytes | None = None) -> Result:
        self.calls["run"] += 1
        result = self._retrying(f"run {command!r}", lambda: self._exec(command, stdin, timeout))
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def put(self, local_path: str, remote_path: str) -> None:
        self.calls["put"] += 1
        tmp = f"{remote_path}.part-{uuid.uuid4().hex[:8]}"

        def upload(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.put(local_path, tmp)
            except OSError as exc:
                if not self._is_lost(exc):   # the host answered (a full disk: "Failure"): the part must not stay
                    _remove_quietly(sftp, tmp)
                raise
            sftp.posix_rename(tmp, remote_path)   # readers never see a half-written file

        try:
            self._sftp_op(f"put {local_path} -> {remote_path}", upload)
        except HostError as exc:
            if not isinstance(exc.__cause__, OSError):   # not the host's answer (a lost link): nothing to ask it
                raise
            # SFTP reports a full disk as a bare "Failure": say so where the file cannot fit
            size, where = os.path.getsize(local_path), os.path.dirname(remote_path) or "."
            space = free_space(self, where)
            if space is not None and space[0] < size:
                raise HostError(no_room(self, where, size, os.path.basename(local_path))) from None
            raise

    def get(self, remote_path: str, local_path: str) -> None:
        self.calls["get"] += 1
        tmp = f"{local_path}.part-{uuid.uuid4().hex[:8]}"
        try:
            self._sftp_op(f"get {remote_path} -> {local_path}", lambda sftp: sftp.get(remote_path, tmp))
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read_from(self, path: str, offset: int, limit: int | None = None) -> bytes:
        # One stat's bytes, whole or not at all: a tail that advances its offset by what it got loses or doubles
        # nothing across a reconnect.
        self.calls["read_from"] += 1
        return self._sftp_op(f"read {path} from byte {offset}", lambda sftp: _read_tail(sftp, path, offset, limit))

    def close(self) -> None:
        self._drop()

    # ---- helpers beyond the interface ------------------------------------------------------------------------

    def put_dir(self, local_dir: str, remote_dir: str) -> None:
        """Copy a directory's contents into `remote_dir` (created) as one tar stream: one round trip."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(local_dir, arcname=".")
        q = shlex.quote(remote_dir)
        self.run(f"mkdir -p {q} && tar -xzf - -C {q}", stdin=buf.getvalue())

    # ---- connection management -----------------------------------------------------------------------------

    def _connection(self) -> Connection:
        if self._conn is not None and self._conn.is_connected:
            return self._conn
        self._drop()
        conn = self._new_connection()
        try:
            conn.open()
        except _UnknownHostKey as exc:
            conn.close()
            raise HostError(self._unknown_key_message(exc.key)) from None
        except paramiko.BadHostKeyException as exc:
            conn.close()
            raise HostError(self._changed_key_message(exc)) from None
        except paramiko.AuthenticationException as exc:
            conn.close()
            raise HostError(self._auth_message(exc)) from None
        except _NETWORK_ERRORS as exc:
            conn.close()
            raise _Lost(f"connect to {self.address} failed: {type(exc).__name__}: {exc}") from exc
        if self.settings.keepalive:
            conn.transport.set_keepalive(int(max(1, self.settings.keepalive)))
        self._conn = conn
        self._ever_connected = True
        return conn

    def _new_connection(self) -> Connection:
        a = self.address
        connect_kwargs: dict[str, Any] = {
            "look_for_keys": not a.identity_files,   # an explicit identity means only that one (IdentitiesOnly)
            "allow_agent": not a.identity_files,
            "banner_timeout": self.settings.connect_timeout,
            "auth_timeout": self.settings.connect_timeout,
        }
        if a.identity_files:
            connect_kwargs["key_filename"] = list(a.identity_files)
        # An empty SSHConfig: we resolved ~/.ssh/config ourselves, and Fabric must not add hops (ProxyJump)
        # whose host keys it would auto-accept.
        conn = Connection(
            a.hostname, user=a.user, port=a.port, gateway=a.proxy_command or False,
            config=Config(ssh_config=paramiko.SSHConfig(), lazy=True),
            connect_timeout=int(max(1, self.settings.connect_timeout)), connect_kwargs=connect_kwargs,
        )
        # Fabric sets AutoAddPolicy and loads no known_hosts; both replaced here, before open().
        if self.settings.strict_host_key_checking:
            if os.path.isfile(a.known_hosts):
                conn.client.load_system_host_keys(a.known_hosts)   # "system" keys are never written back
            conn.client.set_missing_host_key_policy(_RefuseUnknown())
        else:
            conn.client.set_missing_host_key_policy(_AcceptUnverified())
        return conn

    def _drop(self) -> None:
        """Forget the connection (closing what can be closed); the next operation reconnects."""
        sftp, conn, self._sftp, self._conn = self._sftp, self._conn, None, None
        for closable in (sftp, conn):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # already broken: nothing more to release
                    pass

    def _retrying(self, what: str, op: Callable[[], T]) -> T:
        """Run `op`, re-connecting with backoff while it reports _Lost, for at most reconnect_timeout s."""
        lost_at: float | None = None
        delay = 0.25
        while True:
            try:
                result = op()
                if lost_at is not None:
                    log.warning("%s: reconnected after %.1f s", self.name, time.monotonic() - lost_at)
                return result
            except _Lost as exc:
                self._drop()
                if not self._ever_connected:
                    raise HostError(f"{self.name}: cannot connect to {self.address}: {exc.__cause__ or exc}. "
                                    f"Check that the host is up and `ssh -p {self.address.port} "
                                    f"{self.address.user}@{self.address.hostname}` works.") from None
                now = time.monotonic()
                if lost_at is None:
                    lost_at = now
                    log.warning("%s: connection lost during %s (%s); reconnecting for up to %g s", self.name,
                                what, exc, self.settings.reconnect_timeout)
                else:
                    log.debug("%s: still unreachable: %s", self.name, exc)
                left = lost_at + self.settings.reconnect_timeout - now
                if left <= 0:
                    raise HostError(f"{self.name}: {what}: connection to {self.address} lost and not restored "
                                    f"within {self.settings.reconnect_timeout:g} s ({exc})") from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, 5.0)
                self.reconnects += 1

    # ---- SFTP -----------------------------------------------------------------------------------------------

    def _sftp_client(self) -> paramiko.SFTPClient:
        transport = self._connection().transport
        if self._sftp is None:
            # By hand rather than client.open_sftp(), whose waits have no timeout: a silent link hung it.
            try:
                chan = transport.open_session(timeout=self.settings.io_timeout)
                chan.settimeout(self.settings.io_timeout)   # every later SFTP reply is awaited this long
                with _watchdog(transport, self.settings.io_timeout):
                    chan.invoke_subsystem("sftp")
                self._sftp = paramiko.SFTPClient(chan)
            except _NETWORK_ERRORS as exc:
                if self._answers(transport):   # the host said no (no `Subsystem sftp`): reconnecting cannot help
                    raise HostError(f"{self.name}: its sshd refused an SFTP session ({type(exc).__name__}: {exc}), "
                                    f"which specbench copies files with; its sshd_config needs a `Subsystem sftp` "
                                    f"line (e.g. `Subsystem sftp internal-sftp`), or the sftp-server it names is "
                                    f"missing") from None
                raise _Lost(f"SFTP session failed: {type(exc).__name__}: {exc}") from exc
        return self._sftp

    def _answers(self, transport: paramiko.Transport) -> bool:
        """Whether the host still answers on this connection (a session opens): what tells a refusal from a link
        that broke at that moment."""
        try:
            transport.open_session(timeout=self.settings.io_timeout).close()
            return True
        except _NETWORK_ERRORS:
            return False

    def _sftp_op(self, what: str, op: Callable[[paramiko.SFTPClient], T]) -> T:
        def attempt() -> T:
            sftp = self._sftp_client()
            try:
                return op(sftp)
            except BaseException as exc:
                if self._is_lost(exc):
                    raise _Lost(f"{type(exc).__name__}: {exc}") from exc
                if isinstance(exc, FileNotFoundError):   # the Host contract: a missing file is that, as locally
                    raise FileNotFoundError(exc.errno, f"{self.name}: {what}: no such file") from exc
                if isinstance(exc, OSError):   # an answer from the host: permission denied, ...
                    raise HostError(f"{self.name}: {what} failed: {exc}") from exc
                if not isinstance(exc, Exception):
                    # Interrupted mid-request (Ctrl-C): the SFTP stream may hold a stale reply; start afresh.
                    self._sftp_close()
                raise

        # Safe to repeat over a new connection: put/get write a temporary name and rename, read_from reads one stat.
        return self._retrying(what, attempt)

    def _sftp_close(self) -> None:
        sftp, self._sftp = self._sftp, None
        if sftp is not None:
            try:
                sftp.close()
            except Exception:
                pass

    def _is_lost(self, exc: BaseException) -> bool:
        """Is this a broken connection rather than an answer (no such file, permission denied)?"""
        if isinstance(exc, (TimeoutError, EOFError, ConnectionError, paramiko.SSHException)):
            return True
        transport = self._conn.transport if self._conn is not None else None
        return isinstance(exc, OSError) and not (transport is not None and transport.is_active())

    def _resolve_workdir(self, workdir: str) -> str:
        if not workdir.startswith("~"):
            return workdir
        home = self._sftp_op("find the home directory", lambda sftp: sftp.normalize("."))
        return home.rstrip("/") + workdir[1:]

    # ---- commands -------------------------------------------------------------------------------------------

    def _exec(self, command: str, stdin: bytes | None, timeout: float | None) -> Result:
        transport = self._connection().transport
        try:
            chan = transport.open_session(timeout=self.settings.io_timeout)
        except _NETWORK_ERRORS as exc:
            raise _Lost(f"cannot open a session: {type(exc).__name__}: {exc}") from exc  # nothing sent yet
        try:
            chan.settimeout(self.settings.io_timeout)
            # sshd hands this to the login shell, which (if bash) already sourced ~/.bashrc; --norc spares
            # the second bash doing it again (it is slow on boxes with conda/pyenv init there).
            with _watchdog(transport, self.settings.io_timeout):
                chan.exec_command(f"exec bash --norc --noprofile -c {shlex.quote(command)}")
            # stdin is how a secret reaches the host without being in a command line (which `ps` shows to every
            # user) or in a file. In pieces: sendall re-slices what is left after every packet, quadratic in a
            # bundle's 39 MB (10x slower). Each piece under the watchdog: once the socket's buffers are full,
            # paramiko's write blocks for as long as a cut lasts, whatever the channel's timeout.
            for start in range(0, len(stdin or b""), _STDIN_PIECE):
                with _watchdog(transport, self.settings.io_timeout):
                    chan.sendall(stdin[start:start + _STDIN_PIECE])
            chan.shutdown_write()
            out, err, code = self._wait(chan, transport, command, timeout)
        except (_Lost, *_NETWORK_ERRORS) as exc:   # sent: never retried, whatever happened
            self._drop()   # it may or may not have run: the caller decides whether it is safe to send again
            raise LinkLost(f"{self.name}: connection to {self.address} lost while running a command; it may or "
                            f"may not have run ({type(exc).__name__}: {exc}): {_gist(command)}") from None
        finally:
            chan.close()
        return Result(command, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), host=self.name)

    def _wait(self, chan: paramiko.Channel, transport: paramiko.Transport, command: str,
              timeout: float | None) -> tuple[bytes, bytes, int]:
        """Collect stdout/stderr until EOF, then the exit status; probe the link when it goes quiet."""
        out, err = bytearray(), bytearray()
        # A link that goes silent (down, no RST) shows only as no output: after io_timeout of it, a probe asks.
        deadline = time.monotonic() + timeout if timeout else None
        while not (chan.eof_received or chan.closed):
            wait = self.settings.io_timeout if deadline is None else min(self.settings.io_timeout,
                                                                          deadline - time.monotonic())
            ready, _, _ = select.select([chan], [], [], max(0.0, wait))
            _drain(chan, out, err)
            if ready:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                return bytes(out), bytes(err) + f"\n[timed out after {timeout:g} s]".encode(), TIMEOUT_EXIT
            if not _alive(transport, self.settings.io_timeout):
                raise _Lost("no answer to a keepalive probe")   # converted to HostError by _exec
        _drain(chan, out, err)
        while not chan.exit_status_ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return bytes(out), bytes(err) + f"\n[timed out after {timeout:g} s]".encode(), TIMEOUT_EXIT
            if not chan.status_event.wait(min(left or self.settings.io_timeout, self.settings.io_timeout)) \
                    and not _alive(transport, self.settings.io_timeout):
                raise _Lost("no answer to a keepalive probe")
        return bytes(out), bytes(err), chan.recv_exit_status()

    # ---- messages -------------------------------------------------------------------------------------------

    def _unknown_key_message(self, key: paramiko.PKey) -> str:
        a = self.address
        return (f"{self.name}: host key of {a.known_hosts_name} is not in {a.known_hosts}; refusing to connect. "
                f"The server offered {key.get_name()} {key.fingerprint}. If that is the right machine, add its "
                f"key with:\n  {a.keyscan_command()}\n(or set host.strict_host_key_checking=false for this host "
                f"to skip the check)")

    def _changed_key_message(self, exc: paramiko.BadHostKeyException) -> str:
        a = self.address
        name = shlex.quote(a.known_hosts_name)
        return (f"{self.name}: host key of {a.known_hosts_name} CHANGED: {a.known_hosts} has "
                f"{exc.expected_key.get_name()} {exc.expected_key.fingerprint}, the server offered "
                f"{exc.key.get_name()} {exc.key.fingerprint}; refusing to connect (a reinstalled machine, or "
                f"someone in the middle). If you know the machine was reinstalled, replace the key with:\n"
                f"  ssh-keygen -R {name} -f {shlex.quote(a.known_hosts)} && {a.keyscan_command()}")

    def _auth_message(self, exc: Exception) -> str:
        a = self.address
        keys = ", ".join(a.identity_files) or "~/.ssh/id_* and the agent"
        return (f"{self.name}: authentication as {a.user} at {a.hostname}:{a.port} failed ({exc}); tried {keys}. "
                f"Set host.user / host.identity_file, or add the public key to ~{a.user}/.ssh/authorized_keys")


def _gist(command: str, width: int = 120) -> str:
    """A command's first line, cut to `width`: a probe or launch script is many lines a user need not read."""
    lines = command.strip().splitlines() or [""]
    return lines[0] if len(lines) == 1 and len(lines[0]) <= width else lines[0][:width].rstrip() + " ..."


@contextmanager
def _watchdog(transport: paramiko.Transport, seconds: float) -> Iterator[None]:
    """paramiko awaits some replies (exec, subsystem) with no timeout; closing the transport ends the wait
    with an exception, which is what a dead link deserves."""
    timer = threading.Timer(seconds, transport.close)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _drain(chan: paramiko.Channel, out: bytearray, err: bytearray) -> None:
    while chan.recv_ready():
        out += chan.recv(1 << 16)
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(1 << 16)


def _alive(transport: paramiko.Transport, timeout: float) -> bool:
    """Does the server still answer? paramiko has no ServerAliveCountMax, and a global request waits
    forever, so it runs in a thread that we stop waiting for (it ends when the transport closes)."""
    answered = threading.Event()

    def probe() -> None:
        try:
            transport.global_request("keepalive@openssh.com", wait=True)
        finally:
            answered.set()

    threading.Thread(target=probe, daemon=True, name="ssh-keepalive-probe").start()
    return answered.wait(timeout) and transport.is_active()


def _remove_quietly(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        sftp.remove(path)
    except (OSError, paramiko.SSHException):   # never written, or the link went: nothing more to do here
        pass


def _read_tail(sftp: paramiko.SFTPClient, path: str, offset: int, limit: int | None = None) -> bytes:
    """Bytes [offset, size) of `path` for one stat of it, at most `limit`: never a torn read past what was stat'ed."""
    try:
        f = sftp.open(path, "rb")
    except FileNotFoundError:
        return b""
    with f:
        size = f.stat().st_size
        if limit is not None:
            size = min(size, offset + limit)
        if size <= offset:
            return b""
        f.seek(offset)
        data = f.read(size - offset)
    if len(data) != size - offset:  # the file shrank under us: not a tail any more
        raise HostError(f"read {path}: expected {size - offset} bytes from {offset}, got {len(data)}")
    return data
