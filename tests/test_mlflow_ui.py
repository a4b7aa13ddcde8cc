"""The MLflow UI shows a sweep's children with their metrics: a real `mlflow server` on loopback, a real
sweep logged to it over HTTP, and Debian's headless Chromium rendering the experiment page."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("SPECBENCH_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--virtual-time-budget=15000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'srv.db'}",
         "--artifacts-destination", str(tmp_path / "art"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:   # wait for readiness: /health answers once the server is up
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=1).status == 200:
                break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("mlflow server did not start")
            time.sleep(0.2)
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def chromium(*args, timeout=120):
    with tempfile.TemporaryDirectory() as profile:   # a fresh, empty profile each time
        return subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_ui_shows_sweep_children_with_metrics(mlflow_server, tmp_path):
    sweep = subprocess.run(
        # The random pair's block-8 drafter: 7 per-depth metrics. With a block-16 drafter (the demo pair) the 15
        # accept_rate_depth_* rows, sorted first, fill the compare view's rendered rows and push tau out of the DOM.
        [sys.executable, "-m", "orchestrator", "-m", "method=dflash,ddtree", "model=tiny-qwen3", "num_prompts=1",
         "max_new_tokens=4", "baseline=none", f"tracking.uri={mlflow_server}", "tracking.experiment=ui-check"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("ui-check")
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    parent = client.get_run(children[0].data.tags["mlflow.parentRunId"])
    runs_page = f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs"
    assert parent.info.run_name in chromium("--dump-dom", runs_page).stdout   # the sweep, children nested in it
    # The parent carries a link to the UI's comparison of its children: their names and metrics side by side.
    page = f"{mlflow_server}/{parent.data.tags['sweep.compare_url']}"
    dom = chromium("--dump-dom", page).stdout
    for child in children:
        assert child.info.run_name in dom, f"{child.info.run_name} not shown"
    for metric in ("tau", "tpot_ms", "tokens_per_s"):
        assert metric in dom
    shot = ARTIFACTS / "mlflow_ui_sweep.png"
    chromium(f"--screenshot={shot}", "--window-size=1600,2400", page)
    assert shot.exists() and shot.stat().st_size > 10_000
