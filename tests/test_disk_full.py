"""A full disk on the host, for real: a small tmpfs as the host's workdir (or its runs/), filled by a real runner, by
the bundle, or before the launch, on the local host and over a real loopback sshd. What the user sees is one line or
the catalog's disk_full with where and how much is free, the exit code the runner really had, nothing left behind.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.hosts.base import HostError
from orchestrator.hosts.local import LocalHost
from orchestrator.hosts.connect import open_host
from orchestrator.hosts.settings import host_settings
from orchestrator.paths import PROJECT_ROOT
from orchestrator.run.bundle import local_bundle, sync_bundle
from tests.test_faults import host_overrides, runs_of

FILL = Path(__file__).parent / "scripts" / "fill_disk.py"
MB = 10**6
BUNDLE_MB = local_bundle().size_mb   # the runner bundle's files, about 39 MB


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int):
    """A real filesystem of `size_mb` MiB at `path`, unmounted afterwards; the test skips where mounting is not
    permitted (not root, no CAP_SYS_ADMIN in a container)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        proc = None
    if proc is None or proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {path} ({proc.stderr.strip() if proc else 'no mount command'}): "
                    f"these tests need a small real filesystem to fill")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)   # something still has it open


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "1000"})   # lines unwrapped
    return proc, time.monotonic() - started


def make_host(kind: str, workdir: Path, request):
    if kind == "local":
        return LocalHost(workdir=str(workdir))
    return open_host(host_settings(request.getfixturevalue("sshd").host_config(workdir=str(workdir))))


def used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_runner_that_fills_the_disk_fails_as_disk_full_with_its_exit_code_and_its_log(kind, tmp_path, request):
    """The runner's traceback finds no room in runner.log, and launch.sh's exit code write used to fail too (the
    run was runner_vanished, as if OOM-killed): now the exit code is the runner's and the log says the disk is full,
    where and how much is free; what the runner logged before is kept and logged to MLflow."""
    workdir = tmp_path / "work"
    with tmpfs(workdir / "runs", 8):
        proc, _ = run_cli(*host_overrides(kind, workdir, request), "runner=script", f"runner.path={FILL}")
        (run_dir,) = (workdir / "runs").iterdir()
        host_log = (run_dir / "runner.log").read_text()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "runner_vanished" not in out and "Traceback" not in out, out[-3000:]
    assert f"disk_full: A write failed because the host's disk is full. (in {run_dir}; " in out, out[-3000:]
    assert "free of 8.00 MiB)" in out, out[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FAILED"
    assert (run.data.tags["failure.id"], run.data.tags["exit_code"]) == ("disk_full", "1"), run.data.tags
    local_log = Path(run.data.tags["run_dir"], "runner.log").read_text()
    assert local_log == host_log and local_log.startswith("step 0: writing outputs\nstep 1"), local_log[-500:]
    assert f"No space left on device in {run_dir}: " in local_log.splitlines()[-1]
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert (artifacts / "runner.log").read_text() == local_log


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_bundle_that_does_not_fit_is_one_line_and_leaves_nothing_behind(kind, tmp_path, request):
    workdir = tmp_path / "work"
    with tmpfs(workdir, 20):
        proc, seconds = run_cli(*host_overrides(kind, workdir, request), "runner=script", f"runner.path={FILL}")
        left = sorted(p.name for p in (workdir / "bundles").iterdir())
        taken = used(workdir)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    (error,) = [line for line in out.splitlines() if line.startswith("error:")]
    name = "local" if kind == "local" else request.getfixturevalue("sshd").hostname   # the CLI names it so
    assert error.startswith(f"error: {name}: No space left on device in {workdir}/bundles: the runner bundle "), error
    need = re.search(r" needs about (\d+\.\d) MB, 21\.0 MB free of 21\.0 MB; ", error)
    assert need and BUNDLE_MB <= float(need[1]) < BUNDLE_MB * 1.05, error   # its files, in whole blocks
    assert left == [] and taken < MB, (left, taken)   # no staging dir, no upload part
    (run,) = runs_of(tmp_path / "runs")
    assert run.data.tags["failure.id"] == "disk_full", run.data.tags
    assert seconds < 90   # no wait on a sender blocked by a command that stopped reading


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_the_bundle_installs_where_it_fits_once(kind, tmp_path, request):
    """The tar used to land whole on the host before it was unpacked beside it: twice the bundle's size."""
    workdir = tmp_path / "work"
    host = make_host(kind, workdir, request)
    with tmpfs(workdir, int(BUNDLE_MB * 1.2 * MB) >> 20):
        with host:
            target = sync_bundle(host)
            host.run(f"cd {shlex.quote(target)} && sha256sum --quiet -c MANIFEST.sha256")
            assert sorted(p.name for p in (workdir / "bundles").iterdir()) == sorted([Path(target).name, "LATEST"])


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_full_disk_at_launch_is_one_line(kind, tmp_path, request):
    workdir = tmp_path / "work"
    with tmpfs(workdir / "runs", 4):
        subprocess.run(["sh", "-c", f"cat /dev/zero > {shlex.quote(str(workdir / 'runs' / 'filler'))}"],
                       capture_output=True)
        proc, _ = run_cli(*host_overrides(kind, workdir, request), "runner=script", f"runner.path={FILL}")
        left = sorted(p.name for p in (workdir / "runs").iterdir())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    (error,) = [line for line in out.splitlines() if line.startswith("error:")]
    assert f": No space left on device in {workdir}/runs/" in error and "the run dir needs about" in error, error
    assert "0.0 MB free of 4.2 MB" in error, error
    assert left == ["filler"]   # the run dir it could not write whole is gone
    (run,) = runs_of(tmp_path / "runs")
    assert run.data.tags["failure.id"] == "disk_full", run.data.tags


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_put_that_does_not_fit_says_how_much_room_it_needs_and_leaves_no_part(kind, tmp_path, request):
    workdir = tmp_path / "work"
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 * MB))
    host = make_host(kind, workdir, request)
    with tmpfs(workdir, 4), host:
        with pytest.raises(HostError) as caught:
            host.put(str(big), f"{workdir}/big.bin")
        left = os.listdir(workdir)
    assert str(caught.value).startswith(f"{host.name}: No space left on device in {workdir}: big.bin needs about "
                                        f"6.0 MB, 4.2 MB free of 4.2 MB"), caught.value
    assert left == []
