"""Shared fixtures. `host` runs each contract test on every host implementation: Local always, SSH when the
loopback sshd fixture (tests/sshd.py, real OpenSSH) can start."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.sshd"] if (Path(__file__).parent / "sshd.py").exists() else []


@pytest.fixture(autouse=True)
def _isolated_runs_dir(tmp_path, monkeypatch):
    """Every test writes runs (Hydra dirs, mlflow.db) into its own tmp dir, never into the checkout."""
    monkeypatch.setenv("SPECBENCH_RUNS_DIR", str(tmp_path / "runs"))
    # ... and sees no per-user config dir but the one a test makes (a developer's ~/.config/specbench stays out).
    monkeypatch.setenv("SPECBENCH_CONFIG_DIR", str(tmp_path / "user-conf"))
    # ... and MLflow's own variables of the shell the suite was started from (a developer's MLFLOW_TRACKING_URI) do
    # not send its runs elsewhere; the tests that are about them set them.
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_USERNAME",
                 "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # Tiny models run several times faster on one thread than on two contended ones (runners inherit this).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny models are latency-bound: one intra-op thread is faster, and steadier on a shared 2-core box."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(params=["local", "ssh"])
def host(request, tmp_path):
    if request.param == "local":
        from orchestrator.hosts.local import LocalHost

        yield LocalHost(workdir=str(tmp_path / "hostwork"))
        return
    try:
        yield request.getfixturevalue("ssh_host")
    except pytest.FixtureLookupError:
        pytest.skip("no ssh_host fixture (tests/sshd.py starts a loopback OpenSSH server)")
