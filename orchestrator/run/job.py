"""The job lifecycle, written once against the Host interface: prepare, launch detached, tail, collect, cancel.

Contract: a `Job` owns one run directory on a host (`<workdir>/runs/<run_id>/`, file names from RunFiles) and its local
mirror; it quotes every value that reaches a shell and never knows which host it talks to. `prepare()` stages the run's
files (spec, secrets, a user's script), sending nothing; `launch()` writes them and launch.sh into the run dir and
starts the runner in its own session (setsid): one command. `poll()`: the new complete lines of runner.log and
events.jsonl (each as orchestrator.untrusted shows it, at most LINE_BYTES of it held; READ_AT_MOST bytes a poll),
mirrored byte for byte (a local disk that fills: LocalDiskFull); `attach()` resumes where the mirror ends, its first
poll handing out the mirrored events again. `started_at`: the runner's start in local epoch seconds (for `attach`, the
host's word, or None); `quiet_at_attach`: how long it had then written nothing (orchestrator.run.stall). `finished()`:
launch.sh wrote `exit_code`, or the host says the process group is gone without one (`lost`). `cancel()` records who
asked (`stopped_by`), then stops the group (TERM, then KILL after a grace period). launch.sh holds one `flock` per GPU
(`<workdir>/locks/gpu<N>.lock`: `_gpu_locks`) for the runner's lifetime; a held GPU refuses the launch (GPU_BUSY_EXIT).
A full disk on the host loses no exit code, and runner.log says so (the catalog's disk_full); an unwritable run dir is
one HostError line at launch (orchestrator.hosts.room).
"""
from __future__ import annotations

import enum
import errno
import io
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from remote.events import write_text_atomic
from remote.files import RunFiles

from ..hosts.base import CommandFailed, Host, HostError
from ..hosts.room import NO_SPACE, STATFS, no_room
from ..paths import RESERVE, no_room_here
from ..untrusted import LINE_BYTES, log_line

SECRETS = "secrets.env"   # read and removed by launch.sh before the runner starts
CANCELLED_EXIT = 143   # what a TERM-stopped runner reports, like a shell would
STOPPED_BY = "stopped_by"   # in the local run dir: who asked `stop` (written before the TERM is sent)
GPU_BUSY_EXIT = 75     # EX_TEMPFAIL: a GPU of the run is held by another runner of ours on the host
LIVENESS_EVERY = 5.0   # seconds between asks whether the runner's process group is alive (exit code not yet there)
START_GRACE = 30.0     # seconds launch.sh may take to write its pid before the run counts as never started
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ROOM = 65536          # bytes launch.sh sets aside at the start and frees at the end: the line saying the disk is full
DISK_FULL_BELOW = 1 << 20   # free bytes under which a failed runner's disk counts as full (launch.sh says so)
READ_AT_MOST = 4 << 20      # bytes of a tailed file read per poll: what the follower holds of it at once
ROOM_FILE = ".room"   # in a local run dir: RESERVE bytes set aside as the job starts, freed for its closing writes


class LocalDiskFull(Exception):
    """A write into the run's local dir found no room (orchestrator.paths.no_room_here says where, how much).
    The runner goes on on its host, which keeps everything: `attach` finishes the job once there is room."""


def set_room_aside(run_dir: Path) -> None:
    """RESERVE bytes in `run_dir` (ROOM_FILE) for the closing writes of a run whose disk fills while it goes (the
    report frees them first): its MLflow run closed, its record whole, not left RUNNING."""
    if not (run_dir / ROOM_FILE).exists():
        (run_dir / ROOM_FILE).write_bytes(bytes(RESERVE))


def records_full(run_dir: Path, need: int | None = None) -> str:
    """The one line for a record of the run's (its config, job.json, spec.json) that found no room here."""
    return no_room_here(run_dir, need, "the run's records")


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

    PREFLIGHT = "preflight"  # host connected, surveyed (versions, GPUs in use, free disk), bundle probed: one command
    PREPARE = "prepare"    # spec, secrets and extra files being staged (they travel with the launch)
    SYNC = "sync"          # runner bundle being synced
    LAUNCH = "launch"      # run dir being written on the host and the detached process started
    RUNNING = "running"    # runner alive, log being tailed
    COLLECT = "collect"    # results being copied back
    DONE = "done"


def render_launch_script(files: RunFiles, *, python: str, bundle: str, gpus: list[int] | None,
                         env: dict[str, str], argv: list[str] | None = None, locks: str | None = None) -> str:
    """The wrapper the host runs detached. Golden-file tested; every value is shell-quoted. `locks`: the host's
    lock directory for the GPU leases (none taken without it)."""
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
        # pid = process group = session (setsid); boot_id tells a reboot from a runner that is still there
        "cat /proc/sys/kernel/random/boot_id > boot_id 2>/dev/null",
        "echo $$ > pid.tmp && mv pid.tmp pid",
        *_room_for_the_end(),
        *exports,
        *_gpu_locks(locks, gpus),
        # Secrets arrive in a 0600 file that is read and removed before the runner starts.
        f"if [ -f {SECRETS} ]; then set -a; . ./{SECRETS}; set +a; rm -f {SECRETS}; fi",
        f"trap 'finish {CANCELLED_EXIT}' TERM",
        f"{command} >> runner.log 2>&1 < /dev/null &",
        "wait $!",
        "code=$?",
        # It ended by itself: a stop from now on (fail_fast on the line below) must not replace its exit code.
        "trap '' TERM",
        f"[ $code = 0 ] || set -- $({STATFS} . 2>/dev/null)",
        f"if [ $# = 3 ] && [ $(( $1 * $2 )) -lt {DISK_FULL_BELOW} ]; then rm -f .room; echo \"[specbench] No space "
        "left on device in $PWD: $(( $1 * $2 )) bytes free of $(( $3 * $2 )); the runner's last output may be "
        "missing here\" >> runner.log; fi",
        "finish $code",
        "",
    ])


def _room_for_the_end() -> list[str]:
    """launch.sh lines that take, while the disk has room, what its end needs on a full one (a runner that filled
    it used to leave no exit code, and read as vanished): exit_code.tmp, written now and overwritten in place at the
    end (`1<>` does not truncate: no new block; readers strip the padding), and .room, freed for the line saying
    the disk is full. `finish CODE` writes the code, publishes it by rename and exits."""
    return [
        f"printf '%-15s\\n' - > exit_code.tmp; head -c {ROOM} /dev/zero > .room 2>/dev/null",
        "finish() { rm -f .room; printf '%-15s\\n' \"$1\" 1<> exit_code.tmp && mv -f exit_code.tmp exit_code; "
        "exit \"$1\"; }",
    ]


# The GPU leases live on the host, held by launch.sh and inherited by the runner: a GPU stays taken while a runner
# of ours holds it, whatever happened to the orchestrator that launched it.
def _gpu_locks(locks: str | None, gpus: list[int] | None) -> list[str]:
    """launch.sh lines taking one lock per GPU on fds the runner inherits: the kernel drops them when the last
    process holding them ends (runner and wrapper alike), so no lock outlives its runner and none is stale.
    SPECBENCH_GPU_LEASES (host.env) = 1 always, 0 never, auto (default): where the host has GPU device nodes and
    no scheduler (SLURM) owns them already."""
    if not locks or not gpus:
        return []
    q = shlex.quote
    takes = " ".join(f'[ -n "$held" ] || {{ exec {fd}>>{q(f"{locks}/gpu{gpu}.lock")}; flock -n {fd} || held={gpu}; }};'
                     for fd, gpu in enumerate(gpus, start=20))
    owners = " ".join(f"basename \"$PWD\" > {q(f'{locks}/gpu{gpu}.run')};" for gpu in gpus)
    return [
        'leases=${SPECBENCH_GPU_LEASES:-auto}',
        'if [ "$leases" = auto ]; then leases=0; if [ -z "$SLURM_JOB_ID" ] && { [ -e /dev/nvidiactl ] || '
        '[ -e /dev/kfd ]; }; then leases=1; fi; fi',
        'if [ "$leases" = 1 ] && ! command -v flock >/dev/null; then leases=0; '
        'echo "[specbench] flock not found on this host: GPU leases are not held here" >> runner.log; fi',
        f'held=; if [ "$leases" = 1 ]; then mkdir -p {q(locks)}; {takes} fi',
        f'if [ -n "$held" ]; then echo "[specbench] GPU $held is held by run '
        f'$(cat {q(locks)}/gpu$held.run 2>/dev/null || echo unknown) on this host: not started" >> runner.log; '
        f"finish {GPU_BUSY_EXIT}; fi",
        f'if [ "$leases" = 1 ]; then {owners} fi',
    ]


def lock_dir(host: Host) -> str:
    """Where the GPU leases live on `host`: beside the runs, so every job of one workdir sees them."""
    return f"{host.workdir}/locks"


def held_gpus(host: Host, gpus: list[int]) -> set[int]:
    """Which of `gpus` a runner of ours holds on `host` right now. Read from /proc/locks (the lock file's inode),
    never by trying the lock: a try holds it for a moment, and a runner starting then would find its GPU busy."""
    locks = lock_dir(host)
    checks = "".join(f"ino=$(stat -c %i {q} 2>/dev/null) && grep -qE \" FLOCK +ADVISORY +WRITE +[0-9]+ "
                     f"+[0-9a-f]+:[0-9a-f]+:$ino \" /proc/locks && echo {gpu}; "
                     for gpu in gpus for q in [shlex.quote(f"{locks}/gpu{gpu}.lock")])
    answer = host.run(f"{checks}true", check=False, timeout=30).stdout
    return {int(word) for word in answer.split() if word.isdigit()}


def age_command(files: RunFiles) -> str:
    """Prints `age SECONDS`: how long ago the runner started, all on the host's clock (its pid file's mtime, written
    by launch.sh as it started); nothing when there is no pid file. Then `quiet SECONDS`: how long ago it last wrote
    to runner.log or events.jsonl (nothing when neither exists)."""
    q = shlex.quote
    return (f"now=$(date +%s); t=$(stat -c %Y {q(files.pid)} 2>/dev/null) && echo age $(( now - t )); "
            f"w=$(stat -c %Y {q(files.log)} {q(files.events)} 2>/dev/null | sort -n | tail -n 1) && [ -n \"$w\" ] && "
            f"echo quiet $(( now - w )); true")


def liveness_command(files: RunFiles) -> str:
    """Prints `alive PGID`, `exited PGID`, `vanished PGID`, `rebooted PGID` or `nopid`."""
    root = shlex.quote(files.root)
    return (f"cd {root} 2>/dev/null && pg=$(cat pid 2>/dev/null) && [ -n \"$pg\" ] || {{ echo nopid; exit 0; }}; "
            "if [ -f boot_id ] && [ \"$(cat boot_id)\" != \"$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\" ]; "
            "then echo rebooted $pg; exit 0; fi; "
            # a zombie counts as gone (nobody may reap it); without ps, kill -0 (which counts it) decides
            "if command -v ps >/dev/null; then ps -o stat= -s \"$pg\" 2>/dev/null | grep -qv '^Z' && live=1; "
            "else kill -0 -- -\"$pg\" 2>/dev/null && live=1; fi; "
            "if [ -n \"$live\" ]; then echo alive $pg; elif [ -f exit_code ]; then echo exited $pg; "
            "else echo vanished $pg; fi")


@dataclass
class _Stream:
    """One tailed file: byte offset consumed so far and the incomplete last line, of which at most LINE_BYTES are
    held (the rest is counted: a runner's one 100 MB line must not cost the follower its size several times over)."""

    remote: str
    local: Path
    offset: int = 0
    partial: bytes = b""
    dropped: int = 0                                   # bytes of the incomplete line past LINE_BYTES, not held
    replay: list[str] = field(default_factory=list)   # mirrored lines handed out again by the next feed

    def feed(self, data: bytes) -> list[str]:
        """The lines `data` completes, each as shown (orchestrator.untrusted.log_line); the local mirror gets the
        exact bytes: it equals the remote file byte for byte."""
        self.offset += len(data)
        try:   # (on a full disk the mirror keeps a prefix of the file, from which `attach` goes on)
            with open(self.local, "ab") as f:
                f.write(data)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise LocalDiskFull(no_room_here(self.local.parent, len(data), f"the local copy of {self.local.name}"))
        replay, self.replay = self.replay, []
        *complete, rest = data.split(b"\n")
        lines = []
        for piece in complete:
            self._hold(piece)
            lines.append(log_line(self.partial, self.dropped))
            self.partial, self.dropped = b"", 0
        self._hold(rest)
        return replay + lines

    def _hold(self, piece: bytes) -> None:
        room = LINE_BYTES - len(self.partial)
        self.partial += piece[:room]
        self.dropped += max(len(piece) - room, 0)


@dataclass
class Job:
    host: Host
    run_id: str
    local_dir: Path
    stage: Stage = Stage.PREPARE
    exit_code: int | None = None
    lost: str | None = None          # why the runner is gone without an exit code (the host said so)
    pgid: int | None = None          # the runner's process group on the host, once read
    started_at: float | None = None  # when the runner started (local epoch seconds), once known
    quiet_at_attach: float = 0.0     # attach: seconds the runner had written nothing, by the host's clock
    more: bool = False               # the last poll left bytes unread (it reads at most READ_AT_MOST a file)
    _streams: dict[str, _Stream] = field(default_factory=dict)
    _asked_at: float = 0.0           # monotonic time of the last liveness ask
    _launched_at: float = field(default_factory=time.monotonic)
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
                                      env=env, argv=argv, locks=lock_dir(self.host))
        (self.local_dir / "launch.sh").write_text(script)
        # Secrets travel on stdin: never in a local file, nor in a command line (`ps` shows those to every
        # user of a shared box).
        payload = pack({**self._staged, PurePosixPath(self.files.launch_script).name: script.encode()})
        self._staged = {}
        path = shlex.quote(self.files.launch_script)
        root = shlex.quote(self.files.root)
        # Its own session (setsid): a dropped connection does not stop the runner. One command, one round trip.
        # The start is one simple command backgrounded: `a && b &` would background a subshell that keeps the
        # channel open. A run dir that could not be written whole goes (on a full disk, its part took room).
        try:
            self.host.run(f"{unpack_command(self.files.root)} || {{ rm -rf {root}; exit 1; }}; "
                          f"setsid nohup bash {path} > /dev/null 2>&1 < /dev/null &", stdin=payload)
        except CommandFailed as exc:
            raise HostError(self._unwritable(exc, len(payload))) from None
        self._launched_at = time.monotonic()
        self.started_at = time.time()
        self._open_streams(resume=False)

    def _unwritable(self, exc: CommandFailed, size: int) -> str:
        """One line for a run dir the host could not write: a full disk says where, what it needs, what is free."""
        if NO_SPACE in exc.result.stderr:
            return no_room(self.host, self.files.root, size + ROOM, "the run dir")
        why = exc.result.gist()
        return f"{self.host.name}: the run dir {self.files.root} could not be written: {why}"

    def _open_streams(self, resume: bool) -> None:
        """Start tailing: from the beginning, or (resume) from what the local mirror already holds, its events
        to be handed out again."""
        self.stage = Stage.RUNNING
        self._streams = {
            "log": _Stream(self.files.log, self.local_dir / "runner.log"),
            "events": _Stream(self.files.events, self.local_dir / "events.jsonl"),
        }
        for s in self._streams.values():
            if not (resume and s.local.exists()):
                s.local.write_bytes(b"")
                continue
            s.offset = s.local.stat().st_size
            with open(s.local, "rb") as mirror:   # its end only: a log may be gigabytes
                mirror.seek(max(s.offset - LINE_BYTES, 0))
                end = mirror.read()
            s.partial = end[end.rfind(b"\n") + 1:]   # an unfinished line stays pending (its last LINE_BYTES)
            # the events again (not the log): whatever follows them (the display) starts from the run's whole story
            if s is self._streams["events"]:
                mirrored = s.local.read_bytes()[:s.offset - len(s.partial)]
                s.replay = [log_line(line) for line in mirrored.split(b"\n")[:-1]]

    def attach(self) -> None:
        """Resume tailing a job launched earlier (by another orchestrator process), where the mirror ends, and
        ask the host when its runner started: HostError at once if it does not answer."""
        self._open_streams(resume=True)
        answer = self.host.run(age_command(self.files), check=False, timeout=30).stdout.split()
        said = {key: int(value) for key, value in zip(answer, answer[1:])
                if key in ("age", "quiet") and value.lstrip("-").isdigit()}
        self.started_at = time.time() - said["age"] if "age" in said else None
        self.quiet_at_attach = max(said.get("quiet", 0), 0)

    def poll(self) -> tuple[list[str], list[str]]:
        """New complete lines of (runner.log, events.jsonl) since the last poll. Checks for the exit code first,
        so the lines read after seeing it are the last ones."""
        if self.exit_code is None:
            raw = self.host.read_from(self.files.exit_code, 0).strip()
            if raw:
                self.exit_code = int(raw)
            elif time.monotonic() - self._asked_at >= LIVENESS_EVERY:
                self._ask_liveness()
        got = [self.host.read_from(s.remote, s.offset, READ_AT_MOST) for s in self._streams.values()]
        self.more = any(len(data) == READ_AT_MOST for data in got)   # a read stopped short of the file's end
        return self._streams["log"].feed(got[0]), self._streams["events"].feed(got[1])

    def finished(self) -> bool:
        return self.exit_code is not None or self.lost is not None

    @property
    def received(self) -> int:
        """Bytes of runner.log and events.jsonl tailed so far: it grows with any output, a partial line too (a
        progress bar redrawn with \\r), which is how a follower tells a silent runner (orchestrator.run.stall)."""
        return sum(s.offset for s in self._streams.values())

    def _ask_liveness(self) -> str:
        """`_liveness()`, or `unknown` when the host did not answer: the link broke while asking; the ask is
        read-only, so it is asked again next time (the tail's own reads reconnect, or give up after
        reconnect_timeout)."""
        try:
            return self._liveness()
        except HostError:
            return "unknown"

    def _liveness(self) -> str:
        """Ask the host whether the runner's process group still has a live (non-zombie) process; returns what it
        said (`alive`, `exited`, `vanished`, `rebooted`, `nopid`); HostError if it did not answer. Group first,
        exit code second: launch.sh writes the code before it ends, so a dead group without one is a runner that
        vanished (SIGKILLed with its wrapper: the OOM killer, `kill -9`), not one that is finishing."""
        self._asked_at = time.monotonic()
        answer = self.host.run(liveness_command(self.files), check=False, timeout=30).stdout.split()
        state, pgid = (answer + ["", ""])[:2]
        self.pgid = int(pgid) if pgid.isdigit() else self.pgid
        if state == "nopid" and time.monotonic() - self._launched_at < START_GRACE:
            return state   # launch.sh has not written its pid yet
        self.lost = {"vanished": "its process group is gone and it wrote no exit code",
                     "rebooted": "the host rebooted since it was launched",
                     "nopid": f"launch.sh wrote no pid within {START_GRACE:g} s of the launch"}.get(state)
        return state

    def running(self) -> bool:
        """Whether the runner is still going, asked of the host now (for a job this process did not launch).
        HostError if the host does not answer: an unreachable host says nothing about its runner."""
        self._launched_at = time.monotonic() - START_GRACE   # long launched: a missing pid means gone
        return self._liveness() == "alive"

    def wait(self, on_lines, interval: float = 0.1) -> int:
        """Poll until the runner exits, handing each batch of lines to `on_lines(log_lines, event_lines)`."""
        while True:
            before = self.received
            log_lines, event_lines = self.poll()
            on_lines(log_lines, event_lines)
            if self.finished() and not self.more:   # poll read the streams after the exit code: these were the last
                return self.exit_code
            if self.received == before:   # (not `no lines`: a read of READ_AT_MOST may end mid-line, more to come)
                time.sleep(interval)

    def describe_stop(self) -> str:
        """The command that stops this runner, to type on the host (for messages when we could not). Built without
        asking the host, which may be the one that does not answer."""
        if self.pgid:
            return f"kill -TERM -- -{self.pgid}"
        pid = f"{self.host.workdir_as_typed()}/runs/{self.run_id}/pid"
        home, rest = ("~/", pid[2:]) if pid.startswith("~/") else ("", pid)   # ~ is left to the host's shell
        return f"kill -TERM -- -$(cat {home}{shlex.quote(rest)})"

    @property
    def stopped_by(self) -> str | None:
        """Who asked `cancel(by=...)` to stop this run, from any process on this machine (its local dir says)."""
        path = self.local_dir / STOPPED_BY
        return (path.read_text().strip() or None) if path.is_file() else None

    def collect(self) -> list[str]:
        """Copy the results the runner wrote into the local dir; returns the names that existed."""
        self.stage = Stage.COLLECT
        present = []
        try:   # each whole or not at all (Host.get): a full disk leaves no part that looks whole
            for name in RunFiles.COLLECTED:
                try:
                    self.host.get(f"{self.files.root}/{name}", str(self.local_dir / name))
                    present.append(name)
                except FileNotFoundError:   # a run that failed early wrote none
                    continue
            if self.exit_code is not None:   # already read by the tail: no need to fetch it again
                write_text_atomic(str(self.local_dir / "exit_code"), f"{self.exit_code}\n")
                present.append("exit_code")
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise LocalDiskFull(no_room_here(self.local_dir, None, "the run's results")) from None
        self.stage = Stage.DONE
        return present

    def cancel(self, grace: float = 5.0, by: str | None = None) -> None:
        """Stop the runner's process group: TERM, then KILL whatever is left after `grace` seconds. `by`: who
        asked (recorded first, so that the process following the run reports it KILLED, not failed). The exit
        code is then the host's: a runner that ended before the TERM keeps its own."""
        if by:
            (self.local_dir / STOPPED_BY).write_text(by)
        q = shlex.quote
        root = q(self.files.root)
        steps = max(1, int(grace / 0.2))
        answer = self.host.run(
            # CONT after TERM (as systemd and Slurm do): a stopped (SIGSTOP) group acts on its TERM at once
            f"pg=$(cat {root}/pid 2>/dev/null) || exit 0; kill -TERM -- -$pg 2>/dev/null; "
            f"kill -CONT -- -$pg 2>/dev/null; "
            f"for i in $(seq {steps}); do kill -0 -- -$pg 2>/dev/null || break; sleep 0.2; done; "
            f"kill -KILL -- -$pg 2>/dev/null; "
            f"[ -f {root}/exit_code ] || echo {CANCELLED_EXIT} > {root}/exit_code; cat {root}/exit_code; true",
            check=False,
        ).stdout.strip()
        if answer.lstrip("-").isdigit():
            self.exit_code = int(answer)
        elif self.exit_code is None:
            self.exit_code = CANCELLED_EXIT
