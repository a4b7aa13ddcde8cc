"""Preflight on the loopback SSH host and on Local: one round trip, versions, disk, GPUs and the busy check.

GPU facts come from a stand-in `nvidia-smi` on the host's PATH that prints text captured from a real H200
box (GPU 0 with a python3 process holding 2.5 GiB); GPU 1 is the same line with the process gone.
"""
from __future__ import annotations

import os
import platform
import shutil
import signal
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from orchestrator.hosts import HostError
from orchestrator.hosts.local import LocalHost
from orchestrator.hosts.preflight import preflight, survey
from orchestrator.hosts.connect import open_host
from orchestrator.hosts.settings import host_settings
from orchestrator.run.bundle import BundleSync, sync_bundle

FAKE_SMI = """#!/bin/bash
case "$*" in
  *--query-gpu=*) cat <<'EOF'
0, GPU-cf4c2ca9-fc92-a47c-6044-b34ec07cabb3, NVIDIA H200, 2575, 143771, 580.159.04
1, GPU-11111111-fc92-a47c-6044-b34ec07cabb3, NVIDIA H200, 0, 143771, 580.159.04
EOF
  ;;
  *--query-compute-apps=*) echo "GPU-cf4c2ca9-fc92-a47c-6044-b34ec07cabb3, 434, python3, 2566" ;;
  *) exit 2 ;;
esac
"""


def _executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_preflight_over_ssh_is_one_round_trip(sshd, tmp_path):
    host = open_host(host_settings(sshd.host_config(workdir=str(tmp_path / "not yet created"))))
    pf = preflight(host)
    assert dict(host.calls) == {"run": 1}
    assert pf.python == platform.python_version()
    assert pf.torch == version("torch") and pf.transformers == version("transformers")
    assert pf.disk_free_gb > 0 and pf.disk_path == str(tmp_path)
    if shutil.which("nvidia-smi") is None:
        assert pf.gpus is None and pf.busy_gpus([0]) == []   # a CPU host: nothing to refuse
    tags = pf.tags()
    assert all(k.startswith("preflight.") and isinstance(v, str) for k, v in tags.items())
    assert tags["preflight.torch"] == version("torch")


def test_preflight_and_an_unchanged_bundle_cost_one_round_trip(sshd, tmp_path):
    host = open_host(host_settings(sshd.host_config(workdir=str(tmp_path))))
    target = sync_bundle(host)
    host.calls.clear()
    sync = BundleSync(host)
    pf, answer = survey(host, and_then=sync.probe_command())
    assert sync.complete(answer) == target
    assert dict(host.calls) == {"run": 1}
    assert pf.torch == version("torch") and pf.disk_path == str(tmp_path)


def test_preflight_works_on_local_too(tmp_path):
    pf = preflight(LocalHost(workdir=str(tmp_path)))
    assert pf.python == platform.python_version() and pf.host == "local"


def test_gpus_and_busy_check_from_nvidia_smi(sshd, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "nvidia-smi", FAKE_SMI)
    # The host's python, with the stand-in first on PATH (how a venv's wrapper would look).
    python = _executable(tmp_path / "python", f'#!/bin/bash\nPATH={bin_dir}:$PATH exec {sshd.host_config()["python"]} "$@"\n')
    pf = preflight(open_host(host_settings(sshd.host_config(python=python, workdir=str(tmp_path)))))

    assert [(g.index, g.name, g.memory_used_mib, g.memory_total_mib) for g in pf.gpus] == [
        (0, "NVIDIA H200", 2575, 143771), (1, "NVIDIA H200", 0, 143771)]
    assert [(p.pid, p.name, p.memory_mib) for p in pf.gpus[0].processes] == [(434, "python3", 2566)]
    assert pf.driver == "580.159.04"
    assert pf.tags()["preflight.gpu_count"] == "2"

    busy = "GPU 0 (NVIDIA H200, 2575/143771 MiB used) is in use by pid 434 python3 (2566 MiB)"
    assert pf.busy_gpus([0, 1]) == [busy]
    assert pf.check_gpus([1]) == []
    with pytest.raises(HostError) as err:
        pf.check_gpus([0, 1])
    assert busy in str(err.value) and "force=true" in str(err.value) and "\n" not in str(err.value)
    assert pf.check_gpus([0], force=True) == [busy]
    assert pf.busy_gpus([7]) == [f"GPU 7 does not exist on {pf.host} (it has [0, 1])"]


def test_a_wrong_python_is_named(sshd, tmp_path):
    host = open_host(host_settings(sshd.host_config(python="/nonexistent/bin/python", workdir=str(tmp_path))))
    with pytest.raises(HostError, match=r"exit 127.*host.python='/nonexistent/bin/python'"):
        preflight(host)
    # the same when another probe follows in that command (its exit status is not the probe's)
    with pytest.raises(HostError, match=r"exit 127.*host.python='/nonexistent/bin/python'"):
        survey(host, and_then="echo more; true")


def test_a_host_that_never_answers_is_one_line_on_the_terminal(tmp_path):
    """A box that takes the TCP connection and then says nothing (sshd stopped, as a hung host does): the run ends
    with the one-line connection error; paramiko's handshake traceback (logged by its transport thread) never
    reaches the terminal."""
    from tests.sshd import SSHD

    server = SSHD(tmp_path / "sshd")
    facts = server.start()
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *facts.overrides(), "num_prompts=1",
                               "max_new_tokens=4", "method=ar", "baseline=none"], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs")},
                              timeout=300)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "cannot connect to" in shown, shown[-3000:]
    assert "Traceback" not in shown and "SSH protocol banner" not in shown, shown[-3000:]


@pytest.mark.parametrize("where", ["ssh", "local"])
def test_a_host_python_without_torch_is_refused_before_anything_is_synced(where, sshd, tmp_path):
    """A venv without torch and transformers as host.python: one line at preflight naming what is missing and
    the pip command; no bundle on the host, no MLflow run (it used to launch and fail as an unknown crash)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare, workdir = tmp_path / "bare" / "bin" / "python", tmp_path / "work"
    host = (sshd.overrides(python=str(bare), workdir=str(workdir)) if where == "ssh"
            else [f"host.python={bare}", f"host.workdir={workdir}"])
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *host, "num_prompts=1", "max_new_tokens=4",
                           "method=ar", "baseline=none"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "1000"},
                          timeout=300)    # lines unwrapped: a long path is cut anywhere
    shown = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1, shown[-3000:]
    assert f"{bare} (host.python, Python" in shown and "has no torch and no transformers" in shown, shown[-3000:]
    assert f"{bare} -m pip install torch transformers" in shown and "Traceback" not in shown
    assert not (workdir / "bundles").exists() and not (workdir / "runs").exists()
    assert "never reached MLflow" in shown and not (tmp_path / "runs" / "mlflow.db").exists()
