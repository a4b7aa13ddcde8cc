"""A user's own config files (a box, a pool, a model in the per-user dir) are checked like the command line: a
misspelt key is refused in one line that names the file and the key meant, before anything starts; a key a file
leaves out takes its default, and can still be set from the command line (orchestrator.config.sections)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.paths import CONF_DIR
from tests.test_config_dirs import cli

SMALL = ["method=ar", "baseline=none", "num_prompts=1", "max_new_tokens=4"]
# (group, option, file text, the key refused, what the line says of it)
TYPOS = [
    ("pool", "typo", "hostz:\n  - host: {name: a, kind: local}\n    gpus: [0]\nlock_dir: /tmp/leases\n",
     "pool.hostz", "did you mean hosts?"),
    ("pool", "entry", "hosts:\n  - host: {name: a, kind: local}\n    gpu: [0]\n", "pool.hosts[0].gpu",
     "did you mean gpus?"),
    ("pool", "entryhost", "hosts:\n  - host: {name: a, kind: local, workdr: /tmp/w}\n    gpus: [0]\n",
     "pool.hosts[0].host.workdr", "did you mean workdir?"),
    ("pool", "named", "hosts:\n  - host: box1\n    gpus: [0]\n", "pool.hosts[0].host",
     "must be a host's settings"),    # an AttributeError traceback from validation
    ("host", "mine", "name: mine\nkind: local\nworkdr: /tmp/w\n", "host.workdr", "did you mean workdir?"),
    ("host", "mine", "name: mine\npyhton: /usr/bin/python3\n", "host.pyhton", "did you mean python?"),
    ("host", "mine", "name: mine\nhostname: gpu9\n", "host.hostname", "for a box reached by SSH add `kind: ssh`"),
    ("host", "mine", "name: mine\nkind: ssh\nhostname: gpu9\npyhton: python3\n", "host.pyhton",
     "did you mean python?"),
    ("host", "mine", "name: mine\nkind: ssh\n", "host.hostname", "missing in"),
    ("model", "mine", "name: mine\npath: assets:models/demo-qwen3\nattn_implementaton: sdpa\n",
     "model.attn_implementaton", "did you mean attn_implementation?"),
    ("dataset", "mine", "path: /tmp/prompts.jsonl\n", "dataset.name", "missing in"),
]


def _write(group: str, option: str, text: str) -> Path:
    path = Path(os.environ["SPECBENCH_CONFIG_DIR"]) / group / f"{option}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("group, option, text, key, says", TYPOS, ids=[f"{t[0]}-{t[3]}" for t in TYPOS])
def test_a_bad_key_in_a_users_file_is_refused_with_its_file_before_anything_starts(group, option, text, key, says,
                                                                                    tmp_path):
    path = _write(group, option, text)
    proc = cli([f"{group}={option}", *SMALL], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: {key}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert str(path) in proc.stderr and says in proc.stderr, proc.stderr
    assert not Path(os.environ["SPECBENCH_RUNS_DIR"]).exists()     # no run dir, no MLflow store


def test_a_sweep_over_a_users_bad_file_runs_no_job(tmp_path):
    path = _write("host", "mine", "name: mine\nkind: local\nworkdr: /tmp/w\n")
    proc = cli(["-m", "host=local,mine", *SMALL], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.startswith("error: host.workdr: ") and str(path) in proc.stderr
    assert "(sweep job: host=mine" in proc.stderr
    assert not Path(os.environ["SPECBENCH_RUNS_DIR"]).exists()


def test_a_minimal_model_file_runs_with_the_defaults_and_needs_no_drafter_for_ar(tmp_path):
    """Only a name and the random model's fields: dtype, attn_implementation ... come from the schema, and no
    drafter/<model>.yaml is needed for AR; DDTree then asks for a drafter, naming the file it looked for."""
    random = (CONF_DIR / "model" / "tiny-qwen3.yaml").read_text().split("random:", 1)[1].split("\ntokenizer:")[0]
    _write("model", "mini", f"name: mini\nrandom:{random}\n")
    proc = cli(["model=mini", *SMALL], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{Path(os.environ['SPECBENCH_RUNS_DIR']) / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["model.attn_implementation"] == "sdpa" and run.data.params["model.dtype"] == "float32"

    proc = cli(["model=mini", "method=ddtree"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: drafter: method ddtree needs a drafter (there is no drafter/mini.yaml to go "
                                  "with model=mini)"), proc.stderr


def test_a_minimal_ssh_host_file_takes_the_rest_from_the_command_line(sshd, tmp_path):
    """name, kind and hostname in the file; port, user, keys, python and workdir on the command line (Hydra refuses
    to set a key the composed config lacks: they are forced, as keys the host's schema has): a real run over SSH."""
    _write("host", "loop", f"name: loop\nkind: ssh\nhostname: {sshd.hostname}\n")
    facts = sshd.host_config(workdir=str(tmp_path / "work"))
    given = [f"host.{key}={facts[key]}" for key in ("port", "user", "identity_file", "known_hosts", "ssh_config",
                                                   "python", "workdir", "connect_timeout")]
    proc = cli(["host=loop", *given, "device=cpu", *SMALL], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{Path(os.environ['SPECBENCH_RUNS_DIR']) / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["host"] == "loop"
    assert list((tmp_path / "work" / "runs").iterdir())      # it ran in the workdir given on the command line
