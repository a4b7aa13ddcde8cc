"""The runner bundle: the `remote/` package, content-addressed and synced to a host.

Contract: `sync_bundle(host)` returns the directory on the host that holds `remote/` exactly as it is here.
Bundles live in `<workdir>/bundles/<sha>/`, are immutable once complete, and are reused: an unchanged bundle
costs one round trip and no upload (`BundleSync` lets that be the round trip preflight makes anyway). A new
bundle starts as a copy of the host's latest one and receives only the files whose content changed; the host
checks every file's sha256 before the bundle is marked complete.
"""
from __future__ import annotations

import hashlib
import shlex
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .hosts.base import CommandFailed, Host, HostError
from .lifecycle import pack
from .paths import REMOTE_PACKAGE

MANIFEST = "MANIFEST.sha256"   # `sha256sum -c` format, paths relative to the bundle root
COMPLETE = ".complete"
PROBE_MARKER = "SPECBENCH_BUNDLE "


@dataclass(frozen=True)
class Bundle:
    digest: str
    files: dict[str, str]   # relative path ("remote/x.py") -> sha256
    # The bytes that were hashed: what travels is exactly what the manifest describes, even if a file
    # changes on disk meanwhile.
    data: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def manifest_text(self) -> str:
        return "".join(f"{sha}  {path}\n" for path, sha in sorted(self.files.items()))


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
    what is missing (nothing when the bundle is there) and returns the bundle's directory on the host."""

    def __init__(self, host: Host, package: Path = REMOTE_PACKAGE):
        self.host = host
        self.bundle = local_bundle(package)
        self.root = f"{host.workdir}/bundles"
        self.target = f"{self.root}/{self.bundle.digest}"

    def probe_command(self) -> str:
        """Is the bundle there? If not, what does the host's latest bundle hold? Read-only; the answer starts
        at a marker line, so output printed before it (rc files, another probe) does not matter."""
        q = shlex.quote
        return (f"if [ -f {q(self.target)}/{COMPLETE} ]; then echo '{PROBE_MARKER}PRESENT'; "
                f"else latest=$(cat {q(self.root)}/LATEST 2>/dev/null); echo \"{PROBE_MARKER}LATEST $latest\"; "
                f"[ -n \"$latest\" ] && cat {q(self.root)}/\"$latest\"/{MANIFEST} 2>/dev/null; true; fi")

    def complete(self, answer: str) -> str:
        _, found, rest = answer.partition(PROBE_MARKER)
        if not found:
            raise HostError(f"{self.host.name}: the bundle probe printed no answer: {answer[-300:]!r}")
        first, _, manifest = rest.partition("\n")
        if first.strip() == "PRESENT":
            return self.target
        latest = first.removeprefix("LATEST").strip()
        have = _parse_manifest(manifest) if latest else {}
        changed = [p for p, sha in self.bundle.files.items() if have.get(p) != sha]
        try:
            _upload(self.host, self.bundle, changed, self.target, f"{self.root}/{latest}" if latest else "")
        except CommandFailed as exc:
            raise HostError(f"{self.host.name}: the runner bundle could not be installed in {self.target} (the "
                            f"host checks every file's sha256): {exc.result.tail(3)}") from None
        return self.target


def sync_bundle(host: Host, package: Path = REMOTE_PACKAGE) -> str:
    """Make the bundle present on `host`; return its directory there. One round trip when it is unchanged."""
    sync = BundleSync(host, package)
    return sync.complete(host.run(sync.probe_command()).stdout)


def _upload(host: Host, bundle: Bundle, changed: list[str], target: str, previous: str) -> None:
    q = shlex.quote
    staging = f"{target}.tmp-{uuid.uuid4().hex[:8]}"   # concurrent syncs (parallel jobs) never share it
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp) / "bundle.tar"
        files = {rel: bundle.data[rel] for rel in changed}
        tar_path.write_bytes(pack({**files, MANIFEST: bundle.manifest_text().encode()}, mode=0o644))
        host.run(f"mkdir -p {q(staging)}")
        host.put(str(tar_path), f"{staging}/.upload.tar")
    seed = f"cp -a {q(previous)}/. {q(staging)}/ && rm -f {q(staging)}/{COMPLETE} && " if previous else ""
    host.run(
        f"cd {q(staging)} && {seed}tar -xf .upload.tar && rm -f .upload.tar && "
        # files the new bundle no longer has must not linger from the copied one
        f"find remote -type f | sort > .have && cut -c67- {MANIFEST} | sort > .want && "
        f"comm -23 .have .want | xargs -r rm -f && rm -f .have .want && "
        f"sha256sum --quiet -c {MANIFEST} && touch {COMPLETE} && cd .. && "
        # rename(2) is atomic and refuses a target that exists: a bundle another job installed meanwhile is
        # complete and maybe in use, so it stays and ours is dropped
        f"{{ mv -T {q(staging)} {q(target)} 2>/dev/null || rm -rf {q(staging)}; }} && "
        f"[ -f {q(target)}/{COMPLETE} ] && echo {q(bundle.digest)} > LATEST"
    )
