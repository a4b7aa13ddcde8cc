"""The host interface: the I/O primitives a job lifecycle needs, and nothing else.

Contract: a Host runs shell commands (one string, already quoted by the caller), moves files both ways and
reads a file from a byte offset. Everything above that (bundle sync, launch, tail, collect, cancel) lives in
`orchestrator.run.job` and is written once for every host. Non-goal: any knowledge of runs or runners.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass
class Result:
    """What a command did: the command, its exit status and its output."""

    command: str
    exited: int
    stdout: str = ""
    stderr: str = ""
    host: str = ""

    @property
    def ok(self) -> bool:
        return self.exited == 0

    def tail(self, lines: int = 10) -> str:
        text = (self.stderr or self.stdout).rstrip("\n")
        return "\n".join(text.splitlines()[-lines:])

    def gist(self, lines: int = 3) -> str:
        """The last `lines` of its output on one line, or its exit status where it printed nothing."""
        return " ".join((self.tail(lines) or f"exit {self.exited}, no output").split())


class CommandFailed(RuntimeError):
    """A command exited non-zero: carries the result so callers and messages can show its evidence."""

    def __init__(self, result: Result):
        self.result = result
        super().__init__(
            f"command failed on {result.host or 'host'} (exit {result.exited}): {result.command}\n{result.tail()}"
        )


class HostError(RuntimeError):
    """The host cannot be used (unreachable, refused key, bad configuration). The message says how to fix it."""


class HostMismatch(HostError):
    """The run asks for GPUs or a device the host does not have: the run's input is wrong, not the host."""


class LinkLost(HostError):
    """The connection broke while a command ran: it may or may not have run. A caller whose command is safe to
    repeat may send it again (the next command reconnects first)."""


class HostGone(HostError):
    """The host is gone for good, by its own scheduler's word (a Ray node the cluster declared dead): nothing of the
    run goes on there, and following it again cannot help."""


class Host(abc.ABC):
    """One machine that runs jobs. `workdir` is an absolute POSIX path on that machine. `gpu_leases`: whether the
    lifecycle takes its own GPU leases there (false where a scheduler placed the job, as Ray does); `bundle_source`:
    a directory on the host holding `remote/` as the host's own transport delivered it (a Ray runtime environment),
    which the bundle sync copies instead of sending the files; `tied_to`: a process on the host whose end must stop
    the runner (the Ray actor holding its GPUs)."""

    name: str
    workdir: str
    python: str
    gpu_leases: bool = True
    bundle_source: str | None = None
    tied_to: int | None = None

    @abc.abstractmethod
    def run(self, command: str, *, check: bool = True, timeout: float | None = None,
            stdin: bytes | None = None) -> Result:
        """Run `command` with bash on the host; raise CommandFailed if `check` and it exits non-zero.
        `stdin` is fed to the command, then closed: how secrets travel without appearing in a command line
        (which `ps` shows to every user of the host)."""

    @abc.abstractmethod
    def put(self, local_path: str, remote_path: str) -> None:
        """Copy one local file to `remote_path` (its directory exists)."""

    @abc.abstractmethod
    def get(self, remote_path: str, local_path: str) -> None:
        """Copy one file from the host to `local_path`; FileNotFoundError if it does not exist there."""

    @abc.abstractmethod
    def read_from(self, path: str, offset: int, limit: int | None = None) -> bytes:
        """Bytes of `path` from `offset` to its current end, at most `limit` of them; b"" if it does not exist
        yet."""

    def workdir_as_typed(self) -> str:
        """`workdir` as configured, for messages: known without asking the host (a `~` in it left unexpanded)."""
        return self.workdir

    def close(self) -> None:
        """Release connections; the host may be used again afterwards (it reconnects)."""

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
