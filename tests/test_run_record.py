"""What a run records and says, through `python -m orchestrator` on this machine: the dataset option by its name,
only the params its arm reads, a definition for every metric and tag it logs, a runner.log that tells its story,
and how far its numbers can be trusted; and the inputs refused before anything starts: an unreachable hub (one line
within seconds), GPUs or a device the host does not have (exit 2, no MLflow run).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator.config.arms import AR, DDTree, DFlash
from orchestrator.tracking.definitions import definition_of, tag_definition_of
from remote.hub import prepare_hub
from remote.noise import HOST_LOAD_LIMIT, NOISE_LIMIT, noisy


def cli(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture(scope="module")
def dflash_run(tmp_path_factory):
    """One small run of the random pair, logged to its own database: (the process, its MLflow run, its results)."""
    tmp = tmp_path_factory.mktemp("record")
    env = {"SPECBENCH_RUNS_DIR": str(tmp / "runs"), "SPECBENCH_CONFIG_DIR": str(tmp / "conf"), "OMP_NUM_THREADS": "1"}
    proc = cli(["model=tiny-qwen3", "method=dflash", "num_prompts=2", "max_new_tokens=6"], tmp, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp / 'runs' / 'mlflow.db'}")
    [logged] = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    results = json.loads(Path(logged.data.tags["run_dir"], "results.json").read_text())
    return proc, logged, results


def test_the_run_says_what_its_numbers_are_worth(dflash_run):
    """A 2-prompt run says its sample is small in one line, and its timings noisy in one line exactly when the noise
    it measured on this machine is over the limits (AR's spread, the host's load: as on the loaded test box)."""
    proc, logged, _ = dflash_run
    m, lines = logged.data.metrics, proc.stdout.splitlines()
    assert sum(line.startswith("sample small: 2 prompts") for line in lines) == 1
    said = sum(line.startswith("timings noisy:") for line in lines)
    loud = m["timing_noise"] > NOISE_LIMIT or max(m["host_load_before"], m["host_load_after"]) > HOST_LOAD_LIMIT
    assert said == (1 if loud else 0) and (noisy(m) is not None) == loud, (m, proc.stdout[-2000:])
    assert m["host_load_before"] >= 0 and m["host_load_after"] >= 0 and "significant" not in proc.stdout


def test_runner_log_tells_the_runs_story_and_the_terminal_shows_it_once(dflash_run):
    proc, logged, _ = dflash_run
    runner_log = Path(logged.data.tags["run_dir"], "runner.log").read_text()
    for said in ("[runner] loading", "[runner] start: ", "[runner] decoding", "[runner] dflash prompt 1 (repeat 0)",
                 "[runner] result: tau="):
        assert said in runner_log, runner_log
    assert "[runner]" not in proc.stdout      # the terminal shows the events themselves


def test_the_dataset_option_is_recorded_by_its_name(dflash_run):
    _, logged, _ = dflash_run
    params = logged.data.params
    assert logged.data.tags["dataset"] == params["dataset.option"] == "code" and params["dataset.name"] == "jsonl"


def test_params_an_arm_does_not_read_are_not_recorded(dflash_run):
    _, logged, _ = dflash_run
    params = logged.data.params
    assert "tree_budget" not in params and "tree_budget_max" not in params
    assert params["drafter.name"] == "random-dflash" and params["baseline"] == "ar"
    config = {"tree_budget": 63, "tree_budget_max": 63, "baseline": "ar", "drafter": {"name": "x"}, "seed": 0,
              "hydra": {}}
    assert set(AR().params(config)) == {"seed"}
    assert set(DFlash().params(config)) == {"baseline", "drafter", "seed"}
    assert set(DDTree().params(config)) == {"tree_budget", "baseline", "drafter", "seed"}
    assert set(DDTree().params({**config, "tree_budget": "auto"})) == {"tree_budget", "tree_budget_max", "baseline",
                                                                        "drafter", "seed"}


def test_every_metric_and_tag_the_run_logs_is_defined(dflash_run):
    _, logged, results = dflash_run
    metrics, tags = logged.data.metrics, logged.data.tags
    undefined = [k for k in metrics if not definition_of(k, results["definitions"])]
    assert not undefined
    assert {"ar_tpot_ms", "1.speedup_vs_ar", "timing_noise", "accept_rate_depth_1"} <= set(metrics)
    named = [k for k in tags if not k.startswith("mlflow.")]
    assert not [k for k in named if not tag_definition_of(k, results["tag_definitions"])]
    assert {"fairness", "timing_noise", "dataset", "decode_path", "gpu"} <= set(named)
    table = Path(tags["run_dir"], "definitions.md").read_text()
    assert "| ar_tpot_ms | " in table and "| fairness | " in table and "| tag | value | definition |" in table


def hub_env(tmp_path: Path, **more: str) -> dict:
    return {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), **more}


@pytest.mark.parametrize("env, says", [
    ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set and Qwen/Qwen3-8B, z-lab/Qwen3-8B-DFlash-b16 are not in"),
    ({"HF_ENDPOINT": "http://hub.invalid"}, "HF hub at http://hub.invalid cannot be reached from this host"),
], ids=["offline", "unresolvable"])
def test_a_hub_that_cannot_serve_the_model_is_one_line_within_seconds(tmp_path, env, says):
    """transformers retried an unreachable hub 5 times a file (19 `Retrying` lines over 52 s), then said why twice."""
    started = time.monotonic()
    proc = cli(["model=qwen3-8b", "num_prompts=1", "max_new_tokens=2"], tmp_path, hub_env(tmp_path, **env))
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Retrying" not in out, out[-3000:]
    assert out.count(says) == 1 and out.count("fix: ") == 1, out[-3000:]     # the runner's line, the catalog's fix
    assert took < 60, took        # launch and all, on a loaded 2-core box (the hub's own retries alone took 52 s)


def test_a_hub_that_cannot_be_reached_serves_what_the_cache_has(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--owner--model"
    (snapshot / "snapshots" / "abc").mkdir(parents=True)
    (snapshot / "snapshots" / "abc" / "config.json").write_text("{}")
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.invalid")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    said = prepare_hub([("owner/model", None), (None, None), ("assets:models/demo-qwen3", None)])
    assert said.startswith("HF hub at http://hub.invalid cannot be reached") and "loading owner/model from" in said
    assert os.environ["HF_HUB_OFFLINE"] == "1"      # transformers, imported after, loads from the cache at once
    assert prepare_hub([(str(tmp_path), None)]) is None      # a local directory is no hub id


@pytest.mark.parametrize("args, says", [
    (["gpus=[3]"], "gpus=[3]: local has no GPU 3"),
    (["device=cuda"], "device=cuda, but "),
], ids=["gpus", "device"])
def test_gpus_and_device_the_host_lacks_are_refused_before_anything_starts(tmp_path, args, says):
    if torch.cuda.is_available():
        pytest.skip("this machine has GPUs: GPU 3 and CUDA may well be there")
    proc = cli([*args, "model=tiny-qwen3", "num_prompts=1", "max_new_tokens=2"], tmp_path)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and errors[0].startswith(f"error: {says}"), proc.stderr
    runs = Path(os.environ["SPECBENCH_RUNS_DIR"])
    assert not (runs / "mlflow.db").exists() and not list(runs.rglob("job.json"))   # no MLflow run, no launch
