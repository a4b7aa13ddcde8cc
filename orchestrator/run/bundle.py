"""The runner bundle: the `remote/` package, content-addressed and synced to a host.

Contract: `sync_bundle(host)` returns the directory on the host that holds `remote/` exactly as it is here. Bundles live
in `<workdir>/bundles/<sha>/`, are immutable once complete, and are reused: an unchanged bundle costs one round trip and
no upload (`BundleSync` lets that be the round trip preflight makes anyway). A new bundle starts as a copy of the host's
latest one and receives only the files whose content changed; the host checks every file's sha256 before the bundle is
marked complete. The probe checks them again: a complete bundle whose files no longer match its manifest (truncated,
edited on the host) gets those files back, each by an atomic rename, and a damaged copy source's files travel with the
new bundle; `BundleSync.note` says so. Where the host's own transport delivered `remote/` (Host.bundle_source, a Ray
runtime environment), it is copied from there and checked, only the manifest sent. The files travel as one tar on
the installing command's stdin, unpacked as they arrive (an install needs the bundle's size on the host, not twice
that); a failed install removes its staging dir, and a full disk is one HostError line naming the path, the room
needed and what is free (orchestrator.hosts.room). A link lost mid-install sends it once more. A new bundle's install
also removes old ones (`_prune`: all but the KEEP_BUNDLES newest and those unfinished runs were launched from).
"""
from __future__ import annotations

import hashlib
import logging
import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..hosts.base import CommandFailed, Host, HostError, LinkLost
from ..hosts.room import NO_SPACE, no_room
from ..paths import REMOTE_PACKAGE
from .job import pack

MANIFEST = "MANIFEST.sha256"   # `sha256sum -c` format, paths relative to the bundle root
COMPLETE = ".complete"
PROBE_MARKER = "SPECBENCH_BUNDLE "
KEEP_BUNDLES = 5          # the newest bundles kept on a host at each new one's install (_prune)
STALE_STAGING_MIN = 60    # a staging dir this old belongs to no install still going
# In a bundle's directory: exit 0 when every file matches MANIFEST, else print `sha256sum -c`'s FAILED lines.
# openssl (SHA-NI) hashes the 38 MB bundle in ~0.03 s where coreutils' sha256sum takes ~0.25 s; it answers only
# "all match", and where it says otherwise (or is missing) sha256sum decides and names the files.
_VERIFY = ("_specbench_verify() { cut -c67- " + MANIFEST + " | tr '\\n' '\\0' | xargs -0r openssl dgst -sha256 -r "
           "2>/dev/null | sed 's/ \\*/  /' | cmp -s - " + MANIFEST + " || sha256sum --quiet -c " + MANIFEST +
           " 2>/dev/null; }")


@dataclass(frozen=True)
class Bundle:
    digest: str
    files: dict[str, str]   # relative path ("remote/x.py") -> sha256
    # The bytes that were hashed: what travels is exactly what the manifest describes, even if a file
    # changes on disk meanwhile.
    data: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def manifest_text(self) -> str:
        return "".join(f"{sha}  {path}\n" for path, sha in sorted(self.files.items()))

    @property
    def size_mb(self) -> float:
        return sum(map(len, self.data.values())) / 1e6


def local_bundle(package: Path = REMOTE_PACKAGE) -> Bundle:
    files, data = {}, {}
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
            rel = f"{package.name}/{path.relative_to(package).as_posix()}"
            data[rel] = path.read_bytes()
            files[rel] = hashlib.sha256(data[rel]).hexdigest()
    digest = hashlib.sha256("".join(f"{p}\0{s}\n" for p, s in files.items()).encode()).hexdigest()[:16]
    return Bundle(digest, files, data)


def _parse_manifest(text: str) -> dict[str, str]:
    entries = (line.split("  ", 1) for line in text.splitlines() if "  " in line)
    return {path: sha for sha, path in entries}


class BundleSync:
    """One sync of the local bundle to a host, in two steps so that its probe can share a round trip with
    other read-only probes (preflight's): `probe_command()` asks what the host has, `complete(answer)` uploads
    what is missing (nothing when the bundle is there and whole) and returns the bundle's directory on the host.
    `note` is then one line saying that a damaged bundle was mended (None otherwise), also logged as a warning."""

    def __init__(self, host: Host, package: Path = REMOTE_PACKAGE):
        self.host = host
        self.bundle = local_bundle(package)
        self.root = f"{host.workdir}/bundles"
        self.target = f"{self.root}/{self.bundle.digest}"
        self.note: str | None = None

    def probe_command(self) -> str:
        """Is the bundle there, with every file matching its manifest and the manifest ours? If not, what does
        the host's latest bundle hold, and which of its files no longer match? Read-only; the answer starts at a
        marker line, so output printed before it (rc files, another probe) does not matter."""
        q = shlex.quote
        ours = hashlib.sha256(self.bundle.manifest_text().encode()).hexdigest()
        return (f"{_VERIFY}; if [ -f {q(self.target)}/{COMPLETE} ]; then "
                f"if bad=$(cd {q(self.target)} && echo '{ours}  {MANIFEST}' | sha256sum --quiet -c - 2>/dev/null "
                f"&& _specbench_verify); then echo '{PROBE_MARKER}PRESENT'; "
                f"else echo '{PROBE_MARKER}DAMAGED'; printf '%s\\n' \"$bad\"; fi; "
                f"else latest=$(cat {q(self.root)}/LATEST 2>/dev/null); echo \"{PROBE_MARKER}LATEST $latest\"; "
                f"[ -n \"$latest\" ] && (cd {q(self.root)}/\"$latest\" 2>/dev/null && cat {MANIFEST} 2>/dev/null "
                f"&& echo '{PROBE_MARKER}FAILED' && _specbench_verify); true; fi")

    def complete(self, answer: str) -> str:
        _, found, rest = answer.partition(PROBE_MARKER)
        if not found:
            raise HostError(f"{self.host.name}: the bundle probe printed no answer: {answer[-300:]!r}")
        first, _, body = rest.partition("\n")
        if first.strip() == "PRESENT":
            return self.target
        if first.strip() == "DAMAGED":   # mended in place: the files it names, or all of them
            damaged = self._damaged(self.bundle.digest, body, set(self.bundle.files), "replaced {}")
            self._install(_repair, damaged, self.target)
            return self.target
        if self.host.bundle_source:   # the host's own transport delivered remote/ (a Ray runtime env): copied, checked
            self._install(_upload, [], self.target, self.host.bundle_source)
            return self.target
        latest = first.removeprefix("LATEST").strip()
        manifest, seen, failed = body.partition(f"{PROBE_MARKER}FAILED\n")
        have = _parse_manifest(manifest) if latest and seen else {}
        if failed.strip():   # the copy source is damaged: what no longer matches travels too
            damaged = set(self._damaged(latest, failed, set(have), f"sent {{}} again for bundle {self.bundle.digest}"))
            have = {path: sha for path, sha in have.items() if path not in damaged}
        changed = [path for path, sha in self.bundle.files.items() if have.get(path) != sha]
        self._install(_upload, changed, self.target, f"{self.root}/{latest}" if latest and seen else "")
        return self.target

    def _damaged(self, digest: str, failed: str, files: set[str], done: str) -> list[str]:
        """The files `sha256sum --quiet -c` printed as FAILED, or all of ours where the manifest itself failed
        or a line names no file of the bundle. Sets `note` (`done`, its {} naming what was sent) and logs it."""
        named = sorted({line.rpartition(": FAILED")[0] for line in failed.splitlines() if ": FAILED" in line})
        if named and set(named) <= files:
            many = len(named) > 1
            why = f"{len(named)} file{'s differ' if many else ' differs'} from its manifest"
            what = "them" if many else "it"
        else:
            named, why, what = sorted(self.bundle.files), "it no longer matches its manifest", "every file"
        self.note = f"bundle {digest} on {self.host.name} was damaged ({why}): {done.format(what)}"
        logging.getLogger(__name__).warning(self.note)
        return named

    def _install(self, step, files: list[str], *args: str) -> None:
        try:
            try:
                step(self.host, self.bundle, files, *args)
            except LinkLost as exc:   # the files travel with the command: sent once more, over a new connection
                logging.getLogger(__name__).warning("%s; sending the bundle again", exc)
                # Both steps are safe to repeat: a new staging dir each time, and an install that did complete
                # leaves the target complete, which the repeat keeps.
                step(self.host, self.bundle, files, *args)
        except CommandFailed as exc:   # the step removed its staging dir
            output = f"{exc.result.stderr}\n{exc.result.stdout}"
            if NO_SPACE in output:
                need = sum(len(self.bundle.data[rel]) for rel in files) if step is _repair else self._bytes
                raise HostError(no_room(self.host, self.root, need, f"the runner bundle {self.bundle.digest}")) \
                    from None
            why = exc.result.gist()
            hint = ("the files arrived damaged (their sha256 differs): run again; if it persists, check the host's "
                    "disk" if ": FAILED" in why else f"host.workdir ({self.host.workdir}) must be a directory this "
                    f"user can create and write, with room for the bundle ({self.bundle.size_mb:.0f} MB)")
            raise HostError(f"{self.host.name}: the runner bundle could not be installed in {self.target}: {why}; "
                            f"{hint}") from None

    @property
    def _bytes(self) -> int:
        """What the whole bundle takes on disk: its files, each rounded up to a 4 KiB block, and its manifest."""
        sizes = [*map(len, self.bundle.data.values()), len(self.bundle.manifest_text())]
        return sum(-(-size // 4096) * 4096 for size in sizes)


def sync_bundle(host: Host, package: Path = REMOTE_PACKAGE) -> str:
    """Make the bundle present on `host`; return its directory there. One round trip when it is unchanged."""
    sync = BundleSync(host, package)
    return sync.complete(host.run(sync.probe_command()).stdout)


def _tar(bundle: Bundle, files: list[str]) -> bytes:
    """`files` and the manifest, as one tar: it travels on a command's stdin and is unpacked as it arrives, so the
    host never holds it beside its unpacked files (an install needs the bundle's size, not twice that)."""
    return pack({**{rel: bundle.data[rel] for rel in files}, MANIFEST: bundle.manifest_text().encode()}, mode=0o644)


def _in_staging(staging: str, steps: str) -> str:
    """`steps` run in `staging` (created), the tar on stdin. On failure `staging` goes (a full disk keeps no
    half-unpacked copy), and what is left of stdin is read: a sender blocked on a command that stopped reading it
    would take the failure for a lost link."""
    q = shlex.quote(staging)
    return (f"mkdir -p {q} && cd {q} && {{ {steps}; }}; rc=$?; cat > /dev/null; "
            f"[ $rc = 0 ] || {{ cd / && rm -rf {q}; }}; exit $rc")


def _place(dest: str) -> str:
    """Move every file under the current directory to the same path under `dest`, each by rename(2): a reader
    of `dest` sees the old file or the whole new one."""
    return (f"find . -type f -exec sh -c 'for f; do f=${{f#./}}; mkdir -p \"$0/$(dirname \"$f\")\" && "
            f"mv -f \"$f\" \"$0/$f\" || exit 1; done' {shlex.quote(dest)} {{}} +")


def _upload(host: Host, bundle: Bundle, changed: list[str], target: str, previous: str) -> None:
    q = shlex.quote
    staging = f"{target}.tmp-{uuid.uuid4().hex[:8]}"   # concurrent syncs (parallel jobs) never share it
    unpack = "tar -xf -"
    if previous:   # stdin is read first (into .new), so a slow copy of the previous bundle never stalls the sender
        unpack = (f"mkdir .new && tar -xf - -C .new && cp -a {q(previous)}/. . && rm -f {COMPLETE} && "
                  f"(cd .new && {_place('..')}) && rm -rf .new")
    host.run(_in_staging(staging, (
        f"{unpack} && "
        # files the new bundle no longer has must not linger from the copied one
        f"find remote -type f | sort > .have && cut -c67- {MANIFEST} | sort > .want && "
        f"comm -23 .have .want | xargs -r rm -f && rm -f .have .want && "
        f"sha256sum --quiet -c {MANIFEST} && touch {COMPLETE} && cd .. && "
        # rename(2) is atomic and refuses a target that exists: a bundle another job installed meanwhile is
        # complete and maybe in use, so it stays and ours is dropped
        f"{{ mv -T {q(staging)} {q(target)} 2>/dev/null || rm -rf {q(staging)}; }} && "
        # LATEST only names the copy source of the next new bundle: a full disk that refuses it is no failure
        f"if [ -f {q(target)}/{COMPLETE} ]; then echo {q(bundle.digest)} > LATEST 2>/dev/null; true; "
        f"else echo {q(f'no complete bundle at {target} after the rename (seen from {staging}/..)')} >&2; exit 1; "
        f"fi && "
        f"{_prune(host.workdir, bundle.digest)}"
    )), stdin=_tar(bundle, changed))


def _prune(workdir: str, keep: str) -> str:
    """Shell, run in the bundles dir after a new bundle's install: each code version's bundle (38 MB) used to stay
    for good. Bundles beyond the KEEP_BUNDLES newest go, except `keep` and those an unfinished run of `workdir` was
    launched from (its launch.sh names its bundle; a run without exit_code may still import from it), and so do
    staging dirs an install killed midway left (older than STALE_STAGING_MIN; an install takes seconds). A bundle
    gone is sent again when asked for. (A job between its probe and its launch is not seen here: its bundle would
    go only if five newer ones were installed in those seconds.) A `{ }` group whose status is 0: it never fails the
    install, and after `&&` it runs only when the install succeeded."""
    q = shlex.quote
    hex16 = "[0-9a-f]\\{16\\}"
    return (f"{{ ( used=$(for f in {q(workdir)}/runs/*/launch.sh; do [ -f \"${{f%/launch.sh}}/exit_code\" ] || "
            f"grep -o 'bundles/{hex16}' \"$f\"; done | sed 's|^bundles/||'); "
            f"ls -dt -- */ | sed 's|/$||' | grep -x '{hex16}' | tail -n +{KEEP_BUNDLES + 1} | "
            f"grep -vxF -e {q(keep)} -e \"$used\" | xargs -r rm -rf --; "
            f"find . -maxdepth 1 -name '*.tmp-*' -mmin +{STALE_STAGING_MIN} -exec rm -rf {{}} +; ) 2>/dev/null; "
            f"true; }}")


def _repair(host: Host, bundle: Bundle, damaged: list[str], target: str) -> None:
    """Put `damaged` files (and the manifest) back into the complete bundle `target`, each by rename(2): a job
    running from it, or another sync mending it at the same time, sees the old file or the whole new one."""
    q = shlex.quote
    staging = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    host.run(_in_staging(staging, (
        f"tar -xf - && {_place(target)} && cd {q(target)} && rm -rf {q(staging)} && sha256sum --quiet -c {MANIFEST}"
    )), stdin=_tar(bundle, damaged))
