"""The job lifecycle, written once against the Host interface: prepare, launch detached, tail, collect, cancel.

Contract: a `Job` owns one run directory on a host (`<workdir>/runs/<run_id>/`, file names from RunFiles) and
its local mirror. `prepare()` stages the run's files (spec, secrets, a user's script) and sends nothing;
`launch()` writes them and launch.sh into the run dir and starts the runner in its own session (setsid), so a
dropped connection does not stop it: one command, one round trip. `poll()` returns new complete lines of
runner.log and events.jsonl, appending the exact bytes to the local mirror (so the local log equals the remote
one byte for byte); `finished()` is true once the launch wrapper wrote `exit_code`; `cancel()` stops the whole
process group (TERM, then KILL after a grace period).
Every value that reaches a shell is quoted here; nothing in this module knows which host it talks to.
"""
from __future__ import annotations

import enum
import io
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from remote.files import RunFiles

from .hosts.base import Host

SECRETS = "secrets.env"   # read and removed by launch.sh before the runner starts
CANCELLED_EXIT = 143   # what a TERM-stopped runner reports, like a shell would
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(names) -> None:
    """Env names are written unquoted (`export NAME=...`), so they must be plain identifiers."""
    for name in names:
        if not ENV_NAME.fullmatch(str(name)):
            raise ValueError(f"environment variable name {name!r} is not a valid identifier")


def pack(files: dict[str, bytes], mode: int = 0o600) -> bytes:
    """An uncompressed tar of `files` (name -> bytes), built in memory, dated now; owner-only unless `mode` says
    otherwise (run files may hold secrets; the runner bundle is code)."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack_command(root: str) -> str:
    """Create `root` and unpack a `pack()` tar from stdin into it. The files may hold secrets: they must never
    exist readable by others, whatever a host's tar makes of member modes, hence umask 077."""
    q = shlex.quote(root)
    return f"mkdir -p {q} && (umask 077 && tar -xf - --no-same-owner -C {q})"


class Stage(enum.Enum):
    """Where a job is; reported in errors so the user knows what had happened already."""

    PREPARE = "prepare"    # spec, secrets and extra files being staged (they travel with the launch)
    SYNC = "sync"          # runner bundle being synced
    LAUNCH = "launch"      # run dir being written on the host and the detached process started
    RUNNING = "running"    # runner alive, log being tailed
    COLLECT = "collect"    # results being copied back
    DONE = "done"


def render_launch_script(files: RunFiles, *, python: str, bundle: str, gpus: list[int] | None,
                         env: dict[str, str], argv: list[str] | None = None) -> str:
    """The wrapper the host runs detached. Golden-file tested; every value is shell-quoted."""
    q = shlex.quote
    check_env_names(env)
    command = " ".join(q(a) for a in (argv or [python, "-m", "remote", files.root]))
    # No bytecode in the bundle: it stays exactly what its manifest says.
    exports = [f"export PYTHONPATH={q(bundle)}", "export PYTHONUNBUFFERED=1", "export PYTHONDONTWRITEBYTECODE=1"]
    if gpus is not None:
        # PCI order: the numbering nvidia-smi (and preflight's busy check) uses, also on mixed-GPU boxes
        exports += ["export CUDA_DEVICE_ORDER=PCI_BUS_ID",
                    f"export CUDA_VISIBLE_DEVICES={q(','.join(str(g) for g in gpus))}"]
    exports += [f"export {name}={q(str(value))}" for name, value in sorted(env.items())]
    return "\n".join([
        "#!/usr/bin/env bash",
        "# Written by the orchestrator: runs the runner detached and records its pid and exit code.",
        f"cd {q(files.root)} || exit 97",
        "echo $$ > pid",
        *exports,
        # Secrets arrive in a 0600 file that is read and removed before the runner starts.
        f"if [ -f {SECRETS} ]; then set -a; . ./{SECRETS}; set +a; rm -f {SECRETS}; fi",
        f"trap 'echo {CANCELLED_EXIT} > exit_code.tmp; mv exit_code.tmp exit_code; exit {CANCELLED_EXIT}' TERM",
        f"{command} > runner.log 2>&1 < /dev/null &",
        "wait $!",
        "code=$?",
        "echo $code > exit_code.tmp && mv exit_code.tmp exit_code",
        "",
    ])


@dataclass
class _Stream:
    """One tailed file: byte offset consumed so far and the incomplete last line."""

    remote: str
    local: Path
    offset: int = 0
    partial: bytes = b""

    def feed(self, data: bytes) -> list[str]:
        self.offset += len(data)
        with open(self.local, "ab") as f:
            f.write(data)
        chunks = (self.partial + data).split(b"\n")
        self.partial = chunks.pop()
        return [c.decode("utf-8", "replace") for c in chunks]


@dataclass
class Job:
    host: Host
    run_id: str
    local_dir: Path
    stage: Stage = Stage.PREPARE
    exit_code: int | None = None
    _streams: dict[str, _Stream] = field(default_factory=dict)
    _staged: dict[str, bytes] = field(default_factory=dict, repr=False)   # name -> bytes, until launch

    @property
    def files(self) -> RunFiles:
        return RunFiles(f"{self.host.workdir}/runs/{self.run_id}")

    def prepare(self, spec_json: str, secrets: dict[str, str] | None = None, files: list[Path] = ()) -> None:
        """Stage what the run dir gets: the spec, extra `files` (a user's script) and secrets. Nothing is sent
        yet: they travel with `launch()`, in the one command that also starts the runner. The local spec is
        written now; secrets stay in memory only."""
        self.stage = Stage.PREPARE
        self.local_dir.mkdir(parents=True, exist_ok=True)
        (self.local_dir / "spec.json").write_text(spec_json)
        self._staged = {PurePosixPath(self.files.spec).name: spec_json.encode()}
        for path in files:
            self._staged[Path(path).name] = Path(path).read_bytes()
        if secrets:
            check_env_names(secrets)
            self._staged[SECRETS] = "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items())).encode()

    def launch(self, *, bundle: str, gpus: list[int] | None, env: dict[str, str],
               argv: list[str] | None = None) -> None:
        """Create the run dir, place what `prepare` staged and launch.sh in it, and start launch.sh detached:
        one command, whose stdin carries the files as a tar stream."""
        self.stage = Stage.LAUNCH
        script = render_launch_script(self.files, python=self.host.python, bundle=bundle, gpus=gpus,
                                      env=env, argv=argv)
        (self.local_dir / "launch.sh").write_text(script)
        # Secrets travel on stdin: never in a local file, nor in a command line (`ps` shows those to every
        # user of a shared box).
        payload = pack({**self._staged, PurePosixPath(self.files.launch_script).name: script.encode()})
        self._staged = {}
        path = shlex.quote(self.files.launch_script)
        # The start is one simple command backgrounded: `a && b &` would background a subshell that keeps the
        # channel open.
        self.host.run(f"{unpack_command(self.files.root)} || exit 1; "
                      f"setsid nohup bash {path} > /dev/null 2>&1 < /dev/null &", stdin=payload)
        self._open_streams(resume=False)

    def _open_streams(self, resume: bool) -> None:
        """Start tailing: from the beginning, or (resume) from what the local mirror already holds."""
        self.stage = Stage.RUNNING
        self._streams = {
            "log": _Stream(self.files.log, self.local_dir / "runner.log"),
            "events": _Stream(self.files.events, self.local_dir / "events.jsonl"),
        }
        for s in self._streams.values():
            if resume and s.local.exists():
                mirrored = s.local.read_bytes()
                s.offset = len(mirrored)
                s.partial = mirrored[mirrored.rfind(b"\n") + 1:]   # an unfinished line stays pending
            else:
                s.local.write_bytes(b"")

    def attach(self) -> None:
        """Resume tailing a job launched earlier (by another orchestrator process), where the mirror ends."""
        self._open_streams(resume=True)

    def poll(self) -> tuple[list[str], list[str]]:
        """New complete lines of (runner.log, events.jsonl) since the last poll. Checks for the exit code first,
        so the lines read after seeing it are the last ones."""
        if self.exit_code is None:
            raw = self.host.read_from(self.files.exit_code, 0).strip()
            if raw:
                self.exit_code = int(raw)
        log = self._streams["log"]
        events = self._streams["events"]
        return (log.feed(self.host.read_from(log.remote, log.offset)),
                events.feed(self.host.read_from(events.remote, events.offset)))

    def finished(self) -> bool:
        return self.exit_code is not None

    def wait(self, on_lines, interval: float = 0.1) -> int:
        """Poll until the runner exits, handing each batch of lines to `on_lines(log_lines, event_lines)`."""
        while True:
            log_lines, event_lines = self.poll()
            on_lines(log_lines, event_lines)
            if self.finished():   # poll read the streams after the exit code: these were the last lines
                return self.exit_code
            if not (log_lines or event_lines):
                time.sleep(interval)

    def collect(self) -> list[str]:
        """Copy the results the runner wrote into the local dir; returns the names that existed."""
        self.stage = Stage.COLLECT
        present = []
        for name in RunFiles.COLLECTED:
            try:
                self.host.get(f"{self.files.root}/{name}", str(self.local_dir / name))
                present.append(name)
            except FileNotFoundError:   # a run that failed early wrote none
                continue
        if self.exit_code is not None:   # already read by the tail: no need to fetch it again
            (self.local_dir / "exit_code").write_text(f"{self.exit_code}\n")
            present.append("exit_code")
        self.stage = Stage.DONE
        return present

    def cancel(self, grace: float = 5.0) -> None:
        """Stop the runner's process group: TERM, then KILL whatever is left after `grace` seconds."""
        q = shlex.quote
        root = q(self.files.root)
        steps = max(1, int(grace / 0.2))
        self.host.run(
            f"pg=$(cat {root}/pid 2>/dev/null) || exit 0; kill -TERM -- -$pg 2>/dev/null; "
            f"for i in $(seq {steps}); do kill -0 -- -$pg 2>/dev/null || break; sleep 0.2; done; "
            f"kill -KILL -- -$pg 2>/dev/null; "
            f"[ -f {root}/exit_code ] || echo {CANCELLED_EXIT} > {root}/exit_code; true",
            check=False,
        )
        self.exit_code = self.exit_code or CANCELLED_EXIT
