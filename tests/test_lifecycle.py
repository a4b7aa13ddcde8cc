"""The job lifecycle against every host (the same code production uses): bundle sync, launch, tail, cancel."""
from __future__ import annotations

import io
import json
import shlex
import tarfile
import time
from pathlib import Path

import pytest

from orchestrator.hosts.base import HostError, Result
from orchestrator.run.bundle import BundleSync, local_bundle, sync_bundle
from orchestrator.run.job import CANCELLED_EXIT, Job, pack, render_launch_script, unpack_command
from remote.files import RunFiles

GOLDEN = Path(__file__).parent / "golden"


class CountingHost:
    """Wraps a real host and counts its round trips (commands and transfers)."""

    def __init__(self, inner):
        self.inner, self.calls, self.stdins = inner, [], []
        self.name, self.workdir, self.python = inner.name, inner.workdir, inner.python

    def run(self, command, **kw) -> Result:
        self.calls.append(("run", command))
        self.stdins.append(kw.get("stdin"))
        return self.inner.run(command, **kw)

    def put(self, local, remote):
        self.calls.append(("put", remote))
        self.inner.put(local, remote)

    def get(self, remote, local):
        self.calls.append(("get", remote))
        self.inner.get(remote, local)

    def read_from(self, path, offset, limit=None):
        return self.inner.read_from(path, offset, limit)

    def close(self):
        self.inner.close()


def make_package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "remote"
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_bundle_unchanged_costs_one_round_trip_and_changes_travel_alone(host, tmp_path):
    pkg = make_package(tmp_path / "src", {"__init__.py": "", "a.py": "A = 1\n", "sub/b.py": "B = 2\n"})
    counting = CountingHost(host)
    first = sync_bundle(counting, pkg)
    assert host.run(f"cat {shlex.quote(first)}/remote/sub/b.py").stdout == "B = 2\n"

    counting.calls.clear()
    assert sync_bundle(counting, pkg) == first
    assert len(counting.calls) == 1 and counting.calls[0][0] == "run"

    (pkg / "a.py").write_text("A = 3\n")
    (pkg / "sub" / "b.py").unlink()
    counting.calls.clear()
    counting.stdins.clear()
    second = sync_bundle(counting, pkg)
    assert second != first
    # one tar holding only the changed file and the manifest, unpacked as it arrives
    (sent,) = [tarfile.open(fileobj=io.BytesIO(data)).getnames() for data in counting.stdins if data]
    assert sorted(sent) == ["MANIFEST.sha256", "remote/a.py"]
    listing = host.run(f"cd {shlex.quote(second)} && find remote -type f | sort").stdout.split()
    assert listing == ["remote/__init__.py", "remote/a.py"]
    assert host.run(f"cat {shlex.quote(second)}/remote/a.py").stdout == "A = 3\n"


def test_the_bundle_probe_shares_a_command_and_ignores_what_is_printed_before_it(host, tmp_path):
    pkg = make_package(tmp_path / "src", {"__init__.py": "", "a.py": "A = 1\n"})
    first = sync_bundle(host, pkg)
    counting = CountingHost(host)
    sync = BundleSync(counting, pkg)
    # what a chatty rc file or another probe (preflight's) prints ahead of the bundle's answer
    answer = counting.run(f"echo 'PRESENT LATEST welcome'; {sync.probe_command()}").stdout
    assert sync.complete(answer) == first
    assert len(counting.calls) == 1


def test_bundle_digest_follows_content(tmp_path):
    pkg = make_package(tmp_path, {"x.py": "1"})
    before = local_bundle(pkg).digest
    (pkg / "x.py").write_text("2")
    assert local_bundle(pkg).digest != before


SCRIPT = r"""
import json, sys, time
with open("events.jsonl", "a") as ev:
    for i in range(5):
        print(f"line {i} with unicode \u00e9", flush=True)
        ev.write(json.dumps({"event": "progress", "done": i + 1, "total": 5}) + "\n"); ev.flush()
        time.sleep(0.05)
print("partial-no-newline", end="", flush=True)
sys.exit(3)
"""


def test_launch_tail_and_exit_code(host, tmp_path):
    job = Job(host, "run-1", tmp_path / "local")
    job.prepare('{"version": 1}')
    job.launch(bundle="/nonexistent", gpus=[0], env={"MARK": "$(echo pwned)"},
               argv=[host.python, "-c", SCRIPT])
    log_lines, events = [], []
    code = job.wait(lambda l, e: (log_lines.extend(l), events.extend(e)), interval=0.05)
    assert code == 3
    assert [json.loads(e)["done"] for e in events] == [1, 2, 3, 4, 5]
    assert log_lines[:5] == [f"line {i} with unicode \u00e9" for i in range(5)]
    remote_log = host.read_from(job.files.log, 0)
    assert (tmp_path / "local" / "runner.log").read_bytes() == remote_log
    assert job.collect() == ["exit_code"]


def test_prepare_sends_nothing_and_launch_places_everything_in_one_command(host, tmp_path):
    script = tmp_path / "user script $(touch pwned).py"
    script.write_text("print('from the user script')\n")
    counting = CountingHost(host)
    job = Job(counting, "run-3", tmp_path / "local")
    job.prepare('{"version": 1}', secrets={"TOKEN": "s3cret $(touch pwned)"}, files=[script])
    assert counting.calls == []
    job.launch(bundle="/x", gpus=None, env={},
               argv=["bash", "-c", f'echo "$TOKEN"; cat spec.json; echo; {host.python} {shlex.quote(script.name)}'])
    assert len(counting.calls) == 1
    assert job.wait(lambda log, events: None) == 0
    assert host.read_from(job.files.log, 0).decode().splitlines() == [
        "s3cret $(touch pwned)", '{"version": 1}', "from the user script"]
    assert not list(Path.cwd().glob("pwned")) and not list(tmp_path.glob("pwned"))


def test_unpacked_files_are_owner_only(host, tmp_path):
    """What launch places (secrets.env among it) is never readable by others on the host, not even briefly."""
    root = f"{host.workdir}/unpacked dir"
    host.run(unpack_command(root), stdin=pack({"secrets.env": b"A=1\n", "spec.json": b"{}"}))
    modes = host.run(f"cd {shlex.quote(root)} && stat -c '%n %a' secrets.env spec.json").stdout.split("\n")
    assert modes[:2] == ["secrets.env 600", "spec.json 600"]


def test_cancel_stops_the_process_group(host, tmp_path):
    job = Job(host, "run-2", tmp_path / "local")
    job.prepare("{}")
    # A child that ignores nothing and a grandchild: both must be gone after cancel.
    job.launch(bundle="/x", gpus=None, env={},
               argv=["bash", "-c", "sleep 300 & echo started; wait"])
    deadline = time.time() + 10
    while time.time() < deadline and b"started" not in host.read_from(job.files.log, 0):
        time.sleep(0.05)
    pgid = host.run(f"cat {shlex.quote(job.files.pid)}").stdout.strip()
    job.cancel(grace=2)
    alive = host.run(f"pgrep -g {pgid} || true").stdout.strip()
    assert alive == ""
    assert job.exit_code == CANCELLED_EXIT
    assert host.run(f"cat {shlex.quote(job.files.exit_code)}").stdout.strip() == str(CANCELLED_EXIT)


def test_launch_script_matches_golden_file():
    script = render_launch_script(
        RunFiles("/work dir/runs/r1"), python="/opt/venv/bin/python3", bundle="/work dir/bundles/abc",
        gpus=[0, 1], env={"HF_HOME": "/data/hf cache", "EVIL": "$(touch /tmp/x); `id`\nrm -rf /"},
        locks="/work dir/locks",
    )
    assert script == (GOLDEN / "launch.sh").read_text()


def test_env_names_must_be_identifiers():
    with pytest.raises(ValueError, match="not a valid identifier"):
        render_launch_script(RunFiles("/r"), python="p", bundle="b", gpus=None, env={"A;rm": "x"})


def test_concurrent_syncs_of_one_bundle_both_succeed(host, tmp_path):
    """Parallel jobs sync the same new bundle at once: both get it whole, neither breaks the other."""
    from concurrent.futures import ThreadPoolExecutor

    pkg = make_package(tmp_path / "src", {"__init__.py": "", **{f"m{i}.py": f"X = {i}\n" * 2000 for i in range(20)}})
    from orchestrator.hosts.local import LocalHost
    from orchestrator.hosts.ssh import SSHHost

    second = SSHHost(host.settings) if isinstance(host, SSHHost) else LocalHost(workdir=host.workdir)
    hosts = [host, second]   # two connections to one host, as two parallel jobs have
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda h: sync_bundle(h, pkg), hosts))
    assert paths[0] == paths[1]
    listing = host.run(f"cd {shlex.quote(paths[0])} && sha256sum --quiet -c MANIFEST.sha256 && ls ..").stdout
    assert ".tmp" not in listing


def test_get_of_a_missing_file_is_file_not_found(host, tmp_path):
    """Every host answers a missing file the same way, and leaves nothing behind locally."""
    local = tmp_path / "got"
    local.mkdir()
    with pytest.raises(FileNotFoundError):
        host.get("/nonexistent/missing", str(local / "x"))
    assert not list(local.iterdir())


def test_a_cancel_after_the_runner_ended_keeps_its_exit_code(host, tmp_path):
    launched = Job(host, "run-4", tmp_path / "local")
    launched.prepare("{}")
    launched.launch(bundle="/x", gpus=None, env={}, argv=["true"])
    assert launched.wait(lambda log, events: None) == 0
    later = Job(host, "run-4", tmp_path / "local")   # as `stop` sees it: another process, nothing read yet
    assert not later.running()
    later.cancel(grace=0.2)
    assert later.exit_code == 0
    assert host.run(f"cat {shlex.quote(later.files.exit_code)}").stdout.strip() == "0"


def test_running_on_a_host_that_does_not_answer_is_an_error_not_a_no(sshd, tmp_path):
    from orchestrator.hosts.connect import open_host
    from orchestrator.hosts.settings import host_settings
    from tests.sshd import free_port

    host = open_host(host_settings(sshd.host_config(port=free_port(), workdir=str(tmp_path / "w"))))
    with pytest.raises(HostError, match="cannot connect"):
        Job(host, "run-5", tmp_path / "local").running()
    assert "kill -TERM" in Job(host, "run-5", tmp_path / "local").describe_stop()
