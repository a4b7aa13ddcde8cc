"""Bad input: one line naming the key, exit 2, nothing started and no MLflow run created."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from orchestrator.validate import group_options

CASES = [
    ("method=foo", "method"),
    ("model=nope", "model"),
    ("host=nowhere", "host"),
    ("tree_budget=0", "tree_budget"),
    ("max_new_tokens=0", "max_new_tokens"),
    ("temperature=-0.5", "temperature"),
    ("gpus=[a]", "gpus"),
    ("gpus=[-1]", "gpus"),
    ("gpus=3", "gpus"),
    ("model.path=./missing-model-dir", "model.path"),
    ("baseline=maybe", "baseline"),
    ("cuda_graphs=maybe", "cuda_graphs"),
    ("compile_drafter=1", "compile_drafter"),
    ("compile_steps=1", "compile_steps"),
    ("drafter.path=assets:models/no-such-drafter", "drafter.path"),             # shipped files: checked for any host
    ("model.path=assets:../../etc", "model.path"),                                # outside the assets
    ("model.device_map=everywhere", "model.device_map"),
    ("gpus=[0,1]", "model.device_map={model.embed_tokens:0,lm_head:2}", "model.device_map"),   # 2 is not a GPU here
]


def run_cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          cwd=cwd, env=env or os.environ.copy(), timeout=120)


@pytest.mark.parametrize("case", CASES, ids=lambda case: " ".join(case[:-1]))
def test_invalid_value_exits_2_naming_the_key(case, tmp_path):
    *overrides, key = case
    proc = run_cli(*overrides, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {key}:")
    runs = tmp_path / "runs"
    assert not (runs / "mlflow.db").exists()


def test_unknown_option_lists_the_valid_ones(tmp_path):
    proc = run_cli("method=foo", cwd=tmp_path)
    for option in group_options("method"):
        assert option in proc.stderr


def test_sweep_checks_every_job_before_the_first_starts(tmp_path):
    """A bad value in the second job of a multirun stops the sweep before the first job runs."""
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "-m", "method=ddtree", "tree_budget=16,0",
                           "model=tiny-qwen3", "num_prompts=1", "max_new_tokens=4", "baseline=none"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: tree_budget:"), proc.stderr
    assert "tree_budget=0" in lines[0]                    # names the job
    assert "Launching" not in proc.stdout + proc.stderr   # Hydra never started a job
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("overrides,noted", [
    (["gpus=[0,1]"], True),                                   # demo model: device_map null
    (["gpus=[0,1]", "model.device_map=auto"], False),
    (["gpus=[0,1]", "model=random-qwen3.6-27b"], False),      # spread by default
    (["gpus=[0]"], False),
])
def test_several_gpus_for_an_unspread_target_are_noted(overrides, noted):
    from hydra import compose, initialize_config_dir

    from orchestrator.app import unused_gpus_note
    from orchestrator.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    note = unused_gpus_note(cfg, list(cfg.gpus))
    assert (note is not None) == noted
    if noted:
        assert "model.device_map" in note and "GPU 0 only" in note


def test_every_model_composes_with_its_default_drafter():
    """`model=<name>` alone must compose: its default drafter is drafter/<name>.yaml (config.yaml's defaults)."""
    from hydra import compose, initialize_config_dir

    from orchestrator.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for option in group_options("model"):
            assert compose(config_name="config", overrides=[f"model={option}"]).model.name == option
