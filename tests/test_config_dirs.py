"""A user's own configs (a box, a model) outside the installed tree: the per-user dir, --config-dir and
hydra.searchpath each add options that validation, sweeps and a real run accept."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.paths import CONF_DIR

BOX = "name: mybox\nkind: local\nworkdir: null\npython: null\nenv: {}\n"


def cli(args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env={**os.environ, **(env or {})})


def user_tree(folder: Path) -> Path:
    """A box and a model of the user's own (the tiny shipped model and drafter under another name)."""
    for group, text in (("host", BOX), ("model", (CONF_DIR / "model" / "tiny-qwen3.yaml").read_text()),
                        ("drafter", (CONF_DIR / "drafter" / "tiny-qwen3.yaml").read_text())):
        (folder / group).mkdir(parents=True, exist_ok=True)
        name = "mybox" if group == "host" else "my-model"
        (folder / group / f"{name}.yaml").write_text(text.replace("name: tiny-qwen3", "name: my-model"))
    return folder


def _source(kind: str, tmp_path: Path) -> tuple[list[str], dict]:
    """(extra argv, env) that make the user tree visible through one of the documented sources."""
    if kind == "user dir":
        user_tree(Path(os.environ["SPECBENCH_CONFIG_DIR"]))
        return [], {}
    if kind == "xdg":
        user_tree(tmp_path / "xdg" / "specbench")
        return [], {"SPECBENCH_CONFIG_DIR": "", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    folder = user_tree(tmp_path / "mine")
    if kind == "--config-dir":
        return ["--config-dir", str(folder)], {}
    return [f"hydra.searchpath=[file://{folder}]"], {}


SOURCES = ["user dir", "xdg", "--config-dir", "hydra.searchpath"]


@pytest.mark.parametrize("kind", SOURCES)
def test_a_users_options_pass_validation(kind, tmp_path):
    """host=mybox model=my-model compose; the run stops on the one bad value, before anything starts."""
    extra, env = _source(kind, tmp_path)
    proc = cli([*extra, "host=mybox", "model=my-model", "tree_budget=0"], env=env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: tree_budget:"), proc.stderr


def test_without_a_source_the_option_is_unknown_with_a_hint(tmp_path):
    user_tree(tmp_path / "elsewhere")
    proc = cli(["host=mybx"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: host: unknown option 'mybx'") and os.environ["SPECBENCH_CONFIG_DIR"] in proc.stderr


@pytest.mark.parametrize("kind", ["user dir", "--config-dir"])
def test_every_sweep_job_sees_the_users_options(kind, tmp_path):
    extra, env = _source(kind, tmp_path)
    proc = cli(["-m", *extra, "host=local,mybox", "model=my-model", "tree_budget=8,0"], env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "tree_budget:" in proc.stderr and "sweep job: host=local model=my-model tree_budget=0" in proc.stderr


def test_a_run_on_the_users_box_with_the_users_model(tmp_path):
    _source("user dir", tmp_path)
    proc = cli(["host=mybox", "model=my-model", "method=ar", "baseline=none", "num_prompts=1",
                "max_new_tokens=4"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{Path(os.environ['SPECBENCH_RUNS_DIR']) / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert run.data.tags["host"] == "mybox" and run.data.params["model.name"] == "my-model"


def test_a_user_file_hidden_by_a_shipped_one_is_named(tmp_path):
    folder = Path(os.environ["SPECBENCH_CONFIG_DIR"]) / "host"
    folder.mkdir(parents=True)
    (folder / "gpu1.yaml").write_text(BOX)
    proc = cli(["tree_budget=0"], cwd=tmp_path)
    assert f"warning: {folder / 'gpu1.yaml'} is hidden by the shipped host/gpu1" in proc.stderr


def test_the_host_example_says_where_a_box_goes():
    head = (CONF_DIR / "host" / "gpu1.yaml").read_text().split("\nname:", 1)[0]
    assert "~/.config/specbench/host/" in head and "conf/host/<" not in head


@pytest.mark.parametrize("kind", ["user dir", "--config-dir", "hydra.searchpath"])
@pytest.mark.parametrize("ask", [[], ["--help"]], ids=["run", "help"])
def test_a_file_that_is_not_yaml_is_named_with_its_line(kind, ask, tmp_path):
    extra, env = _source(kind, tmp_path)
    folder = Path(os.environ["SPECBENCH_CONFIG_DIR"]) if kind == "user dir" else tmp_path / "mine"
    (folder / "host" / "bad.yaml").write_text("name: bad\nhostname: [unclosed\n")
    proc = cli([*extra, "host=bad", *ask], env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"error: {folder / 'host' / 'bad.yaml'}:3: expected ',' or ']', but got '<stream end>' "
                           "(while parsing a flow sequence at line 2)\n")
    assert not Path(os.environ["SPECBENCH_RUNS_DIR"]).exists()


def test_a_broken_file_no_one_chose_is_left_alone(tmp_path):
    folder = user_tree(Path(os.environ["SPECBENCH_CONFIG_DIR"]))
    (folder / "model" / "broken.yaml").write_text("path: [unclosed\n")
    proc = cli(["host=mybox", "tree_budget=0"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: tree_budget:"), proc.stderr
