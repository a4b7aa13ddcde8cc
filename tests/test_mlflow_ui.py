"""The MLflow UI shows a sweep's children with their metrics: a real `mlflow server` on loopback, a real
sweep logged to it over HTTP, and Debian's headless Chromium rendering the experiment page: the runs list with the
headline metrics as columns (MLflow 3.17 opened on an empty GenAI overview, its runs list without metric columns)."""
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


def _shot(name: str, url: str, size: str = "1600,2400") -> str:
    """Screenshot `url` into ARTIFACTS/name; returns the page's DOM, dumped by the same Chromium run (one browser
    start per page, not two)."""
    shot = ARTIFACTS / name
    shot.unlink(missing_ok=True)     # the check below must see this run's screenshot, not an earlier one
    dom = chromium("--dump-dom", f"--screenshot={shot}", f"--window-size={size}", url).stdout
    assert shot.exists() and shot.stat().st_size > 10_000
    return dom


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_ui_shows_sweep_children_with_metrics(mlflow_server, tmp_path):
    sweep = subprocess.run(
        # The random pair's block-8 drafter: 7 per-depth metrics. dflash does not read tree_budget: it runs once,
        # its copy under the other budget is a skipped child.
        [sys.executable, "-m", "orchestrator", "-m", "method=dflash,ddtree", "tree_budget=2,8", "model=tiny-qwen3",
         "num_prompts=2", "max_new_tokens=4", f"tracking.uri={mlflow_server}", "tracking.experiment=ui-check"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.run_note import HEADLINE, headline_name

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("ui-check")
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    ran = [r for r in children if r.data.tags.get("skipped") != "true"]
    assert len(children) == 4 and len(ran) == 3

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    parent = client.get_run(children[0].data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "sweep-tiny-qwen3 method=dflash,ddtree tree_budget=2,8"
    runs_page = f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs"
    assert parent.info.run_name in chromium("--dump-dom", runs_page).stdout   # the sweep, children nested in it
    # The parent carries an absolute link to the UI's comparison of the children that ran, printed at the end too.
    page = parent.data.tags["sweep.compare_url"]
    assert page.startswith(mlflow_server) and page in sweep.stdout
    dom = _shot("mlflow_ui_sweep.png", page)
    for child in ran:
        assert child.info.run_name in dom, f"{child.info.run_name} not shown"
    first = headline_name(HEADLINE[0])
    for metric in (first, headline_name("tau"), "tau", "tpot_ms", "tokens_per_s"):
        assert metric in dom
    assert dom.index(first) < dom.index("accept_rate_depth_1")   # headline rows first

    # A child's page: its description (headline table, definitions), then metrics with the headline ones first.
    child = next(r for r in ran if r.data.params["method.name"] == "ddtree")
    child_page = f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs/{child.info.run_id}"
    dom = _shot("mlflow_ui_child_run.png", child_page)
    assert "95% interval" in dom and "definitions.md" in dom and "pooled mean acceptance length" in dom
    table = dom[dom.index("Metrics ("):]   # the run's metrics table, below the description
    assert table.index(first) < table.index("accept_rate_depth_1") and table.index(first) < table.index("ar_tpot_ms")
    assert child.data.tags["gpu"] in dom and child.data.tags["host"] in dom

    # The parent's page opens on the sweep's table (its description) and holds the Pareto plot.
    parent_page = f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}"
    dom = _shot("mlflow_ui_sweep_parent.png", parent_page, "1400,1600")
    assert "Compare them side by side in MLflow" in dom and "skipped (same effective config)" in dom
    assert "best speedup: " in dom
    for child in ran:
        assert child.info.run_name.replace("-tiny-qwen3", "") in dom
    _shot("mlflow_ui_pareto.png", f"{parent_page}/artifacts/pareto.png", "1400,1000")

    # The experiment's runs list, as the sweep's last lines link it: the model-training runs list (not the GenAI
    # overview), the headline metrics as its columns.
    from orchestrator.tracking.ui_links import runs_list_url

    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert headline_name("tau") in parent.data.metrics and parent.data.tags["sweep.best"] in {c.info.run_name
                                                                                              for c in ran}
    listed = runs_list_url(mlflow_server, exp.experiment_id)
    assert listed in sweep.stdout
    dom = _shot("mlflow_ui_runs_list.png", listed, "1800,1000")
    assert parent.info.run_name in dom and "matching runs" in dom and "Tool calls" not in dom
    for metric in ("speedup_vs_ar", "tau", "tokens_per_s", "exact_match_vs_ar"):
        assert headline_name(metric) in dom, metric
