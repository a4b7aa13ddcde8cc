"""What a reader sees of a run in MLflow: a name that says method, budget or block size and model; headline
metrics rounded and listed first; the definitions as the run's description and a table artifact; host and GPU
tags; an absolute UI link in the closing line. One real run through `python -m orchestrator` into sqlite."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.tracking import names as naming
from orchestrator.tracking import run_note, ui_links

TINY = ["model=tiny-qwen3", "num_prompts=2", "max_new_tokens=4", "host=local"]


def compose(*overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from orchestrator.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def plan(*overrides):
    """The plan of a config composed with `overrides` (validated, as a job's)."""
    from orchestrator.config.plan import make_plan

    return make_plan(compose(*overrides), run_id="r")


def test_names_say_method_budget_or_block_size_and_model():
    from remote import assets

    cfg = plan("method=ddtree", "tree_budget=63")
    assert naming.run_name(cfg) == f"ddtree-b63-{cfg.model}"
    dflash = plan("method=dflash")
    with open(f"{assets.resolve(dflash.spec.drafter.path)}/config.json") as file:   # the shipped checkpoint's
        block = json.load(file)["block_size"]
    assert naming.run_name(dflash) == f"dflash-bs{block}-{dflash.model}"
    assert naming.run_name(plan("method=dflash", "drafter.block_size=4")) == f"dflash-bs4-{dflash.model}"
    hub = plan("method=dflash", "model=qwen3-8b")   # only a download would tell its block size
    assert naming.run_name(hub) == "dflash-qwen3-8b"
    assert naming.run_name(plan("method=ar", "model=tiny-qwen3")) == "ar-tiny-qwen3"


def test_a_user_script_is_named_after_itself_without_method_budget_or_model(tmp_path):
    from orchestrator.config.arms import arm_of

    script = tmp_path / "run_ddtree.py"
    script.write_text("print('ok')\n")
    cfg = plan("runner=script", f"runner.path={script}", "method=ddtree", "tree_budget=63")
    assert naming.run_name(cfg) == cfg.arm.label() == "script-run_ddtree"
    swept = naming.run_name(cfg, ["runner.args=[--seed,1]", "tree_budget=8"], {"runner.args", "tree_budget"})
    assert swept == "script-run_ddtree runner.args=[--seed,1]"   # its own swept values; never our budget
    assert arm_of(compose("runner=script")).label() == "script"     # named before validation asks for the path
    assert arm_of(compose("method=dflash")).label() == "dflash"


def test_names_within_a_sweep_stay_distinct():
    overrides = ["method=ar,ddtree", "tree_budget=8,32", "seed=0,1", "model=tiny-qwen3"]
    swept = set(naming.swept_keys(overrides))
    assert swept == {"method", "tree_budget", "seed"}
    names = {}
    for method in ("ar", "ddtree"):
        for budget in (8, 32):
            for seed in (0, 1):
                job = [f"method={method}", f"tree_budget={budget}", f"seed={seed}", "model=tiny-qwen3"]
                names.setdefault(naming.run_name(plan(*job), job, swept), []).append(job)
    # ddtree: 4 jobs, 4 names; ar ignores the budget: its 2 budgets per seed share a name (one of them is skipped
    # as a duplicate, and skipped runs are named apart, see below)
    assert sorted(len(jobs) for jobs in names.values()) == [1, 1, 1, 1, 2, 2]
    assert "ddtree-b32-tiny-qwen3 seed=1" in names and "ar-tiny-qwen3 seed=0" in names
    job = ["method=ar", "tree_budget=32", "seed=0", "model=tiny-qwen3"]
    skipped = naming.skipped_name(plan(*job), job, swept)
    assert skipped == "ar-tiny-qwen3 (skipped: tree_budget=32 seed=0)" and skipped not in names
    # the parent: the model and what the sweep varies (all its overrides are its `sweep.overrides` param)
    assert naming.sweep_name("tiny-qwen3", [*overrides, "tracking.uri=http://h:1"]) == \
        "sweep-tiny-qwen3 method=ar,ddtree tree_budget=8,32 seed=0,1"
    assert naming.sweep_name("demo-qwen3", ["model=a,b", "seed=1"]) == "sweep model=a,b"


def test_gpu_label_from_preflight_tags():
    from orchestrator.hosts.preflight import GPU, Preflight

    def facts(*names):
        gpus = [GPU(index=i, name=n, memory_used_mib=3, memory_total_mib=143771) for i, n in enumerate(names)]
        return Preflight(host="h", python="3.11", torch="2.5", cuda="12.4", driver="550", transformers="4.50",
                         fla=False, causal_conv1d=False, disk_free_gb=100.0, disk_path="/", gpus=gpus or None,
                         errors={}, seconds=0.1).tags()

    assert naming.gpu_label(facts("NVIDIA H200", "NVIDIA H200"), [1], local=False) == "NVIDIA H200"
    assert naming.gpu_label(facts("NVIDIA H200", "NVIDIA H200"), [0, 1], local=False) == "2x NVIDIA H200"
    assert naming.gpu_label(facts("NVIDIA H200", "NVIDIA A100"), [0, 1], local=False) == \
        "NVIDIA H200 + NVIDIA A100"
    assert naming.gpu_label(facts(), [0], local=False) == "cpu"        # no nvidia-smi on the host


def test_headline_names_sort_first_and_keep_four_digits():
    metrics = {"accept_rate_depth_1": 0.5, "ar_tpot_ms": 4.0, "tau": 3.14159265, "speedup_vs_ar": 1.0123456,
               "tokens_per_s": 12345.678, "tpot_ms": 0.000123456}
    logged = dict(run_note.headline(metrics))
    assert set(logged) == {run_note.headline_name(k) for k in ("tau", "speedup_vs_ar", "tokens_per_s", "tpot_ms")}
    # the compare page sorts metric names by code point; the run page keeps the logging order (headline first)
    assert sorted([*logged, *metrics])[:len(logged)] == sorted(logged)
    for key in ("tau", "speedup_vs_ar", "tokens_per_s", "tpot_ms"):
        value = logged[run_note.headline_name(key)]
        assert value == float(f"{metrics[key]:.4g}") and abs(value - metrics[key]) <= abs(metrics[key]) * 1e-3


def test_description_fits_mlflow_and_marks_a_speedup_that_may_be_noise():
    definitions = {f"metric_{i}": "a long definition " * 20 for i in range(100)}
    definitions["speedup_vs_ar"] = "ar_tpot_ms / tpot_ms"
    metrics = {"speedup_vs_ar": 1.04, "speedup_vs_ar_ci_low": 0.97, "speedup_vs_ar_ci_high": 1.11, "tau": 2.5}
    text = run_note.description("ddtree-b8-x", {"host": "gpu1", "gpu": "NVIDIA H200"}, metrics, definitions)
    assert len(text) <= run_note.NOTE_LIMIT and "definitions.md" in text
    assert "includes 1.0" in text and "`gpu1`" in text and "NVIDIA H200" in text
    assert text.index("speedup_vs_ar | ar_tpot_ms") < text.index("metric_0 |")   # headline definitions first


def test_links_are_absolute():
    url = ui_links.compare_url("http://mlflow.example:5000/", "3", ["a1", "b2"])
    assert url.startswith("http://mlflow.example:5000/#/compare-runs?runs=") and '"' not in url
    local = "sqlite:////tmp/x y/mlflow.db"
    assert ui_links.run_url(local, "1", "r").startswith(ui_links.DEFAULT_UI + "/#/experiments/1/runs/r")
    assert ui_links.serve_command(local) == "mlflow ui --backend-store-uri 'sqlite:////tmp/x y/mlflow.db'"
    assert ui_links.serve_command("https://h") is None


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("names")
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp / "runs"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "method=ddtree", "tree_budget=4", *TINY],
                          capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    db = tmp / "runs" / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    return proc, client, run, db


def test_a_run_names_itself_and_leads_with_rounded_headline_metrics(one_run):
    proc, client, run, _ = one_run
    assert run.info.run_name == "ddtree-b4-tiny-qwen3"
    metrics = run.data.metrics
    heads = [k for k in metrics if k[0].isdigit()]
    assert heads and list(metrics)[:len(heads)] == heads   # logged first: the run page keeps this order
    for name in heads:
        plain = name.split(".", 1)[1]
        assert metrics[name] == float(f"{metrics[plain]:.4g}")
    assert run_note.headline_name("speedup_vs_ar") in metrics and run_note.headline_name("tau") in metrics


def test_a_run_carries_its_definitions_host_and_gpu(one_run, tmp_path):
    _, client, run, _ = one_run
    tags = run.data.tags
    assert tags["host"] == "local" and tags["gpu"] == ("cpu" if tags["device"] == "cpu" else tags["gpu_name"])
    results = json.loads((open(os.path.join(tags["run_dir"], "results.json"))).read())
    note = tags[run_note.NOTE_TAG]
    assert note.startswith(f"**{run.info.run_name}** on host `local`, GPU `{tags['gpu']}`")
    assert results["definitions"]["tau"] in note
    table = open(client.download_artifacts(run.info.run_id, "definitions.md", str(tmp_path))).read()
    for key, meaning in results["definitions"].items():
        assert f"| {key} |" in table and meaning.replace("|", "\\|") in table


def test_the_closing_line_links_the_run_and_says_how_to_serve_it(one_run):
    proc, _, run, db = one_run
    closing = [line for line in proc.stdout.splitlines() if line.startswith("FINISHED run dir:")][-1]
    url = ui_links.run_url(f"sqlite:///{db}", run.info.experiment_id, run.info.run_id)
    assert url in closing and f"mlflow ui --backend-store-uri sqlite:///{db}" in closing
    # the run made a fresh database: MLflow's own "Creating initial MLflow database tables..." stays off the terminal
    assert "INFO mlflow" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


# The run dir and sweep dir Hydra would make at a given second, as one process sees them.
_DIRS_AT_NOON = """
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
import orchestrator.tracking.names
from orchestrator.paths import CONF_DIR
OmegaConf.register_new_resolver("runs_dir", lambda: "/runs", replace=True)
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cfg = compose(config_name="config", return_hydra_config=True)
OmegaConf.register_new_resolver("now", lambda fmt: "12-00-00", replace=True)
print(cfg.hydra.run.dir, cfg.hydra.sweep.dir)
"""


def test_runs_started_in_the_same_second_get_their_own_dirs():
    """Two processes (two terminals, a script launching runs) whose runs start in the same second: each gets its
    own run dir and sweep dir, so no record of one lands in the other's."""
    seen = [subprocess.run([sys.executable, "-c", _DIRS_AT_NOON], capture_output=True, text=True, check=True,
                           timeout=120).stdout.split() for _ in range(2)]
    (run_a, sweep_a), (run_b, sweep_b) = seen
    assert run_a != run_b and sweep_a != sweep_b, seen
    assert re.fullmatch(r"/runs/12-00-00/12-00-00-ddtree-[0-9a-f]{6}", run_a), run_a
    assert re.fullmatch(r"/runs/multirun/12-00-00/12-00-00-[0-9a-f]{6}", sweep_a), sweep_a
