"""Bad input: one line naming the key, exit 2, nothing started and no MLflow run created."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.config.validate import group_options
from remote import assets
from tests.test_faults import LONG

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
    # Refused here, before launch: each would otherwise reach the host and end as a FAILED (or killed, or endless) run.
    ("warmup=-1", "warmup"),
    ("warmup=1000", "warmup"),
    ("model.dtype=float99", "model.dtype"),
    ("model.attn_implementation=bogus", "model.attn_implementation"),
    ("model.attn_implementation=grouped_sdpa", "model.attn_implementation"),  # the steps' own: refused at load
    ("temperature=nan", "temperature"),
    ("temperature=inf", "temperature"),
    ("gpus=[0,0]", "gpus"),
    ("+host.env.HF_TOKEN=hf_s3cret", "host.env"),        # logged as a param: forward_env is the way (value unshown)
    ("tree_budget=100000000000000", "tree_budget"),       # an int (1e14 is a float, refused before)
    ("tree_budget=automatic", "tree_budget"),             # an integer or auto
    ("tree_budget=auto", "tree_budget_max=3", "tree_budget_max"),
    ("max_new_tokens=100000000000000", "max_new_tokens"),
    ("max_new_tokens=4097", "max_new_tokens"),             # demo-qwen3 has 4096 positions
    ("seed=99999999999999999999", "seed"),
    ("dataset.name=nope", "dataset.name"),
    ("drafter.block_size=1", "drafter.block_size"),
    ("model.trust_remote_code=yes", "model.trust_remote_code"),
    ("fail_fast=maybe", "fail_fast"),
    ("stall_warning=0", "stall_warning"),                 # a warning at every poll
    ("stall_timeout=-5", "stall_timeout"),
    ("host=ssh", "host.hostname=127.0.0.1", "host.port=abc", "host.port"),
    ("pool=example", "pool.lock_dir=leases", "pool.hosts.0.host.port=abc", "pool.hosts[0].host.port"),
    # Relative, it named another folder once the bundle install cd'ed: a failure with nothing after its colon.
    ("host=ssh", "host.hostname=127.0.0.1", "host.workdir=relwd", "host.workdir"),
    # MLflow refused these once the run was under way (the run went on outside MLflow; `sync` failed alike)
    ("tracking.experiment=2024", "tracking.experiment"),
    ("tracking.experiment=''", "tracking.experiment"),
    ("tracking.uri=./mlruns", "tracking.uri"),             # MLflow 3's file store, in maintenance mode
    # no host of the pool has 5 GPUs: a ValueError traceback from the lease (a sweep ended after its first job)
    ("pool=example", "pool.lock_dir=leases", "gpus=[0,1,2,3,4]", "gpus"),
    # files of this machine: a typo was reported as "Check that the host is up"
    ("host=ssh", "host.hostname=127.0.0.1", "host.identity_file=/nonexistent/id_ed25519", "host.identity_file"),
    ("host=ssh", "host.hostname=127.0.0.1", "host.ssh_config=/nonexistent/ssh_config", "host.ssh_config"),
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
    assert "s3cret" not in proc.stderr
    runs = tmp_path / "runs"
    assert not (runs / "mlflow.db").exists()
    assert not (runs / ".host").exists()     # host=local's workdir: no bundle, no run dir


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
    from orchestrator.run.steps import unused_gpus_note
    from tests.test_mlflow_names import plan

    note = unused_gpus_note(plan(*overrides))
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


@pytest.mark.parametrize("setting,value", [("port", 0), ("port", 65536), ("io_timeout", 0), ("reconnect_timeout", -1),
                                           ("connect_timeout", float("nan")), ("keepalive", float("inf"))])
def test_a_bad_ssh_setting_exits_2_before_the_host_is_contacted(sshd, tmp_path, setting, value):
    """Against a real server that would answer: nothing reaches it (no workdir, no bundle) and no MLflow run."""
    workdir = tmp_path / "hostwork"
    proc = run_cli(*sshd.overrides(workdir=str(workdir), **{setting: value}), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: host.{setting}:"), proc.stderr
    assert not workdir.exists()
    assert not (tmp_path / "runs" / "mlflow.db").exists()


@pytest.mark.parametrize("sweep,key", [("temperature=0,nan", "temperature"), ("gpus=[0],[0,0]", "gpus"),
                                       ("model.dtype=float32,float99", "model.dtype"),
                                       # a glob over a group used to skip every check (Hydra expands it only inside
                                       # its app): job 2's bad budget ran, and failed, on the host
                                       ("method=glob(d*)+tree_budget=0", "tree_budget")])
def test_a_sweep_checks_the_new_rules_in_every_job(sweep, key, tmp_path):
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "-m", *sweep.split("+"), "model=tiny-qwen3",
                           "num_prompts=1", "max_new_tokens=4", "baseline=none"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}:") and "sweep job:" in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("space, got", [("tree_budget=int(interval(8,6000))", "got 6000"),
                                        ("hydra.sweeper.params.tree_budget=int(interval(5000,6000))", "got 5000"),
                                        ("tree_budget=interval(8,64)", "got 8.0")])   # Optuna would sample floats
def test_an_optimisers_interval_is_checked_at_both_ends_before_the_study_starts(space, got, tmp_path):
    """An interval is sampled by the sweeper: a trial past a knob's bound used to fail inside the sweep, after its
    parent run was made."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "-m", "hydra/sweeper=optuna", space,
                           "objective=tokens_per_s", "model=tiny-qwen3", "num_prompts=1", "max_new_tokens=4",
                           "baseline=none"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: tree_budget:") and got in lines[0], proc.stderr
    assert f"(sweep job: {space.removeprefix('hydra.sweeper.params.')} " in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_an_optimisers_search_space_in_its_config_file_is_checked_too(tmp_path):
    """The search space written where users keep it, in a sweeper config of their own; the command line's value for
    the same key wins there, as in the sweeper."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    (tmp_path / "conf" / "hydra" / "sweeper").mkdir(parents=True)
    (tmp_path / "conf" / "hydra" / "sweeper" / "study.yaml").write_text(
        "defaults:\n  - optuna\nparams:\n  tree_budget: int(interval(8, 6000))\n")
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / "runs")}
    args = [sys.executable, "-m", "orchestrator", "-m", "--config-dir", str(tmp_path / "conf"), "hydra/sweeper=study",
            "objective=tokens_per_s", "model=tiny-qwen3", "num_prompts=1", "max_new_tokens=4", "baseline=none"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2 and "error: tree_budget:" in proc.stderr and "got 6000" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()
    narrowed = subprocess.run([*args, "tree_budget=int(interval(8,16))", "hydra.sweeper.n_trials=1"],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert narrowed.returncode == 0, narrowed.stderr[-3000:]


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    from orchestrator.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@pytest.mark.parametrize("overrides,allowed", [
    (["tree_budget=4096"], "an integer from 1 to 4096 or auto"),
    (["max_new_tokens=4096"], "an integer from 1 to 4096 (the target's max_position_embeddings)"),   # demo-qwen3
    (["model=tiny-qwen3", "max_new_tokens=2048"], "an integer from 1 to 2048 (the target's max_position_embeddings)"),
    (["model=qwen3-8b", "max_new_tokens=32768"], "an integer from 1 to 32768"),   # a hub id: the general cap
    (["warmup=100"], "an integer from 0 to 100"),
], ids=["tree_budget", "max_new_tokens demo-qwen3", "max_new_tokens tiny-qwen3", "max_new_tokens hub id", "warmup"])
def test_a_bound_is_allowed_and_named_one_past_it(overrides, allowed):
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.validate import validate

    validate(_compose(overrides))
    key, _, bound = overrides[-1].partition("=")
    with pytest.raises(ConfigError) as err:
        validate(_compose([*overrides[:-1], f"{key}={int(bound) + 1}"]))
    assert str(err.value) == f"{key}: must be {allowed}, got {int(bound) + 1}"


def test_every_knob_the_runner_and_the_ssh_settings_read_has_a_rule():
    """A field added to the run spec or to a host's settings without a knob (default, rule and help, in
    orchestrator.config.knobs or orchestrator.hosts.settings) fails here."""
    from dataclasses import fields

    from orchestrator.config.knobs import SECTIONS, RunKnobs
    from orchestrator.hosts.settings import KINDS
    from orchestrator.knob import knobs_of
    from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, EngineSpec, ModelSpec

    read = {f"{part}.{f.name}" for part, spec in (("model", ModelSpec), ("drafter", DrafterSpec),
                                                   ("dataset", DatasetSpec), ("engine", EngineSpec)) for f in fields(spec)}
    read |= {f.name for f in fields(DecodingSpec)} | {"seed", "device"}
    # an engine arm's spec: the method file's engine and speculative config, the host's interpreter, the run's levels
    elsewhere = {"engine.kind": "method.engine", "engine.python": "host.engine_python",
                 "engine.concurrency": "concurrency", **{f"engine.{k}": f"method.{k}" for k in
                                                          ("speculative", "drafter_into", "command", "url")}}
    read = {{"method": "method.name", "dataset.num_prompts": "num_prompts", **elsewhere}.get(key, key) for key in read}
    read.discard("host.engine_python")     # a host setting (orchestrator.hosts.settings), checked below
    described = {*knobs_of(RunKnobs), *(f"{group}.{key}" for group, cls in SECTIONS.items() for key in knobs_of(cls))}
    assert read - described == set()
    for cls in KINDS.values():
        assert {f.name for f in fields(cls)} - set(knobs_of(cls)) == set(), cls


def test_the_runners_names_are_the_ones_checked():
    """The runner's own tables (remote.prompts, remote.models.loading) and transformers agree with remote.spec's."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from remote import prompts
    from remote.kernels.step import GROUPED
    from remote.models.loading import DTYPES as TORCH_DTYPES
    from remote.spec import ATTN_IMPLEMENTATIONS, DATASETS, DTYPES

    assert prompts.NAMES == DATASETS and list(TORCH_DTYPES) == list(DTYPES)
    config = AutoConfig.for_model(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    # GROUPED is the runner's own name, registered with transformers once some test in this worker has loaded a
    # graphed step: users never pick it, so it is checked only for absence from the knob's choices.
    assert GROUPED not in ATTN_IMPLEMENTATIONS
    for name in (*ATTN_IMPLEMENTATIONS, "bogus"):
        try:
            AutoModelForCausalLM.from_config(config, attn_implementation=name)
            known = True
        except ImportError:     # a known name whose package (flash-attn, ...) is not installed here
            known = True
        except ValueError as exc:
            assert "is not supported" in str(exc)
            known = False
        assert known == (name in ATTN_IMPLEMENTATIONS), name


SECRET = "s3cretPW"


@pytest.mark.parametrize("mode", [[], ["-m"]], ids=["run", "sweep"])
def test_a_password_in_the_tracking_uri_is_refused_before_anything_is_written(mode, tmp_path):
    """It would reach the terminal, job.json, config.yaml, .hydra/ and the run's params: refused, and where the
    credentials go instead is said, with the password itself nowhere."""
    proc = run_cli(*mode, f"tracking.uri=http://alice:{SECRET}@127.0.0.1:1", "model=tiny-qwen3", "method=ar",
                   "baseline=none", "num_prompts=1", "max_new_tokens=4", cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: tracking.uri:"), proc.stderr
    assert "MLFLOW_TRACKING_USERNAME" in lines[0] and "MLFLOW_TRACKING_PASSWORD" in lines[0]
    assert SECRET not in proc.stdout + proc.stderr
    assert not Path(os.environ["SPECBENCH_RUNS_DIR"]).exists() and not (tmp_path / "runs").exists()


def test_mlflows_credentials_in_the_environment_are_not_recorded(tmp_path):
    """Where the refusal sends them: a real run with them set writes them into no file of the run or of MLflow."""
    env = {**os.environ, "MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": SECRET,
           "MLFLOW_TRACKING_TOKEN": SECRET}
    proc = run_cli("model=tiny-qwen3", "method=ar", "baseline=none", "num_prompts=1", "max_new_tokens=4",
                   cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = Path(os.environ["SPECBENCH_RUNS_DIR"])
    files = [path for path in runs.rglob("*") if path.is_file()]
    assert any(path.name == "mlflow.db" for path in files) and any(path.name == "job.json" for path in files)
    assert [path for path in files if SECRET.encode() in path.read_bytes()] == []


def test_a_username_alone_in_the_tracking_uri_is_allowed():
    from orchestrator.config.validate import validate

    validate(_compose(["tracking.uri=http://alice@127.0.0.1:1"]))


def test_relative_local_paths_are_the_callers(tmp_path):
    """dataset.path, model.path and host.workdir relative to where the command was typed: validated there, and
    the runner (which starts in its run dir) is given those same files, made absolute."""
    (tmp_path / "p.jsonl").write_text('{"prompt": "def add(a, b):"}\n')
    (tmp_path / "demo").symlink_to(Path(assets.resolve("assets:models/demo-qwen3")))
    proc = run_cli("dataset=jsonl", "dataset.path=p.jsonl", "model.path=./demo", "host.workdir=relwd", "method=ar",
                   "baseline=none", "num_prompts=1", "max_new_tokens=4", "warmup=0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (config,) = Path(os.environ["SPECBENCH_RUNS_DIR"]).glob("*/*/config.yaml")
    used = yaml.safe_load(config.read_text())
    assert (used["dataset"]["path"], used["model"]["path"], used["host"]["workdir"]) == \
        (str(tmp_path / "p.jsonl"), str(tmp_path / "demo"), str(tmp_path / "relwd"))
    assert (tmp_path / "relwd" / "bundles").is_dir()


def test_a_relative_sqlite_uri_is_the_callers_for_every_later_command(tmp_path):
    """`tracking.uri=sqlite:///my.db` names my.db where the run was started: its records keep that file, so a
    later `sync` from elsewhere finds the run complete there (it made a new, empty my.db wherever it ran)."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    # a runner that sends our start event and ends: where the run is recorded does not depend on what it computes
    proc = run_cli("tracking.uri=sqlite:///my.db", *LONG, "runner.args=[--steps,1]", cwd=tmp_path / "here")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (job,) = Path(os.environ["SPECBENCH_RUNS_DIR"]).glob("*/*/job.json")
    assert json.loads(job.read_text())["tracking_uri"] == f"sqlite:///{tmp_path / 'here' / 'my.db'}"
    proc = run_cli("sync", str(job.parent), cwd=tmp_path / "elsewhere")
    assert proc.returncode == 0 and "already" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "elsewhere" / "my.db").exists()


def test_a_failed_bundle_install_says_why(tmp_path, monkeypatch):
    """Behind the workdir rule: the install's last step used to fail silently, leaving "...installed in DIR: "."""
    from orchestrator.hosts.base import HostError
    from orchestrator.hosts.local import LocalHost
    from orchestrator.run.bundle import sync_bundle

    monkeypatch.chdir(tmp_path)
    with pytest.raises(HostError) as err:
        sync_bundle(LocalHost(workdir="relwd"))
    assert not str(err.value).endswith(": ") and "no complete bundle at relwd/bundles/" in str(err.value)
