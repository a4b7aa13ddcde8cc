"""A bundle damaged on the host (a file truncated, edited or deleted after it was installed) is noticed by the
probe and mended, on every host: only the damaged files travel, the note says so, and the next sync of the whole
bundle is one command again."""
from __future__ import annotations

import io
import logging
import shlex
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.hosts.base import Result
from orchestrator.run.bundle import BundleSync, sync_bundle

FILES = {"__init__.py": "", "a.py": "A = 1\n" * 50, "sub/b.py": "B = 2\n", "c.py": "C = 3\n"}


class RecordingHost:
    """Wraps a real host: its commands, and the names inside every tar it is sent."""

    def __init__(self, inner):
        self.inner, self.commands, self.sent = inner, [], []
        self.name, self.workdir, self.python = inner.name, inner.workdir, inner.python
        self.bundle_source = inner.bundle_source

    def run(self, command, **kw) -> Result:
        self.commands.append(command)
        if kw.get("stdin"):   # the bundle's files travel as a tar on the installing command's stdin
            with tarfile.open(fileobj=io.BytesIO(kw["stdin"])) as tar:
                self.sent.append(sorted(m.name for m in tar.getmembers() if m.isfile()))
        return self.inner.run(command, **kw)


def make_package(root: Path, files: dict[str, str] = FILES) -> Path:
    pkg = root / "remote"
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def sync(host, pkg) -> tuple[str, BundleSync]:
    bundle = BundleSync(host, pkg)
    return bundle.complete(host.run(bundle.probe_command()).stdout), bundle


def cat(host, path: str) -> str:
    return host.run(f"cat {shlex.quote(path)}").stdout


DAMAGE = {
    "truncated": "printf 'A = ' > remote/a.py",
    "edited, same size": "sed -i 's/A = 1/A = 7/' remote/a.py",
    "deleted, with its directory": "rm -r remote/sub",
}
DAMAGED_FILE = {"truncated": "remote/a.py", "edited, same size": "remote/a.py",
                "deleted, with its directory": "remote/sub/b.py"}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_file_in_the_hosts_bundle_is_replaced(host, tmp_path, damage, caplog):
    pkg = make_package(tmp_path / "src")
    target = sync_bundle(host, pkg)
    host.run(f"cd {shlex.quote(target)} && {DAMAGE[damage]}")
    recording = RecordingHost(host)

    with caplog.at_level(logging.WARNING, logger="orchestrator.run.bundle"):
        again, bundle = sync(recording, pkg)
    assert again == target
    rel = DAMAGED_FILE[damage]
    assert cat(host, f"{target}/{rel}") == FILES[rel.removeprefix("remote/")]
    assert recording.sent == [sorted([rel, "MANIFEST.sha256"])]       # the damaged file alone travels
    digest = Path(target).name
    assert bundle.note == f"bundle {digest} on {host.name} was damaged (1 file differs from its manifest): replaced it"
    assert [r.getMessage() for r in caplog.records] == [bundle.note]
    host.run(f"cd {shlex.quote(target)} && sha256sum --quiet -c MANIFEST.sha256 && ls ..")

    recording = RecordingHost(host)
    assert sync(recording, pkg)[1].note is None
    assert len(recording.commands) == 1 and recording.sent == []       # whole again: one command


def test_a_damaged_manifest_gets_every_file_again(host, tmp_path):
    """Where the manifest itself was altered it cannot say which files are sound: all of them travel."""
    pkg = make_package(tmp_path / "src")
    target = sync_bundle(host, pkg)
    host.run(f"cd {shlex.quote(target)} && sed -i '/c.py/d' MANIFEST.sha256 && printf 'C = ' > remote/c.py")
    recording = RecordingHost(host)
    again, bundle = sync(recording, pkg)
    assert again == target
    assert recording.sent == [sorted(["MANIFEST.sha256", *(f"remote/{name}" for name in FILES)])]
    assert cat(host, f"{target}/remote/c.py") == FILES["c.py"]
    assert bundle.note == (f"bundle {Path(target).name} on {host.name} was damaged (it no longer matches its "
                           f"manifest): replaced every file")
    recording = RecordingHost(host)
    assert sync(recording, pkg)[1].note is None and len(recording.commands) == 1


def test_a_damaged_latest_bundle_does_not_seed_the_next_one(host, tmp_path):
    """A new bundle starts as a copy of the latest one: the files of it that are damaged travel as well."""
    pkg = make_package(tmp_path / "src")
    first = sync_bundle(host, pkg)
    host.run(f"printf 'A = ' > {shlex.quote(first)}/remote/a.py")
    (pkg / "c.py").write_text("C = 4\n")
    recording = RecordingHost(host)
    second, bundle = sync(recording, pkg)
    assert second != first
    assert recording.sent == [["MANIFEST.sha256", "remote/a.py", "remote/c.py"]]
    assert cat(host, f"{second}/remote/a.py") == FILES["a.py"] and cat(host, f"{second}/remote/c.py") == "C = 4\n"
    assert bundle.note == (f"bundle {Path(first).name} on {host.name} was damaged (1 file differs from its manifest): "
                           f"sent it again for bundle {Path(second).name}")


def test_two_syncs_mending_one_bundle_at_once_both_succeed(host, tmp_path):
    """Parallel jobs find the same damaged bundle: both mend it, neither breaks the other."""
    from orchestrator.hosts.local import LocalHost
    from orchestrator.hosts.ssh import SSHHost

    pkg = make_package(tmp_path / "src", {**FILES, **{f"m{i}.py": f"X = {i}\n" * 2000 for i in range(20)}})
    target = sync_bundle(host, pkg)
    host.run(f"cd {shlex.quote(target)} && for f in remote/m*.py; do printf 'X' > $f; done")
    second = SSHHost(host.settings) if isinstance(host, SSHHost) else LocalHost(workdir=host.workdir)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda h: sync(h, pkg), [host, second]))
    assert [path for path, _ in results] == [target, target]
    listing = host.run(f"cd {shlex.quote(target)} && sha256sum --quiet -c MANIFEST.sha256 && ls -a ..").stdout
    assert ".tmp" not in listing
    # the second may find it mended already, or partly
    assert all(bundle.note is None or "from its manifest): replaced" in bundle.note for _, bundle in results)


def test_a_bundle_under_a_shell_hostile_workdir_is_mended_too(tmp_path):
    from orchestrator.hosts.local import LocalHost

    host = LocalHost(workdir=str(tmp_path / "it's a $(touch pwned) `id` dir"))
    pkg = make_package(tmp_path / "src")
    target = sync_bundle(host, pkg)
    Path(target, "remote", "sub", "b.py").write_text("B = ")
    again, bundle = sync(host, pkg)
    assert again == target and Path(target, "remote", "sub", "b.py").read_text() == FILES["sub/b.py"]
    assert bundle.note is not None
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()   # nothing ran from the name


def test_a_workdir_the_host_cannot_write_names_the_key_to_change(tmp_path):
    from orchestrator.hosts.base import HostError
    from orchestrator.hosts.local import LocalHost

    blocker = tmp_path / "a-file"   # a file where the workdir's parent directory should be: no user can mkdir there
    blocker.write_text("")
    host = LocalHost(workdir=str(blocker / "work"))
    with pytest.raises(HostError) as failed:
        sync_bundle(host, make_package(tmp_path / "src"))
    message = str(failed.value)
    assert "\n" not in message and "host.workdir" in message and str(blocker / "work") in message
    assert "Not a directory" in message and "sha256" not in message   # the shell's reason, no aside about checksums
