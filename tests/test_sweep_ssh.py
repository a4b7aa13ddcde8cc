"""Sweeps over a pool of two SSH test hosts (real OpenSSH on loopback), jobs in parallel with GPU leases."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.sshd import SSHD, SSHD_BIN, _hydra_value
from tests.test_faults import LONG

pytestmark = pytest.mark.skipif(not os.path.exists(SSHD_BIN), reason="sshd not installed (.ci/run installs it)")


@pytest.fixture
def two_hosts(sshd, tmp_path):
    second = SSHD(tmp_path / "sshd-b")
    facts_b = second.start()
    try:
        yield [sshd.host_config(name="ssh-a", workdir=str(tmp_path / "work-a")),
               facts_b.host_config(name="ssh-b", workdir=str(tmp_path / "work-b"))]
    finally:
        second.stop()
        shutil.rmtree(tmp_path / "sshd-b", ignore_errors=True)


def pool_override(hosts: list[dict]) -> str:
    def mapping(d: dict) -> str:
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in d.items()) + "}"
    return "pool.hosts=[" + ",".join(f"{{host:{mapping(h)},gpus:[0]}}" for h in hosts) + "]"


def sweep(tmp_path, hosts, *overrides):
    args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", pool_override(hosts),
            f"pool.lock_dir={tmp_path / 'locks'}", "model=tiny-qwen3", "device=cpu", "num_prompts=1",
            "max_new_tokens=4", *overrides]
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=os.environ.copy(), timeout=900)


def drafter_override(run) -> str:
    """The job's own drafter.path override (AR reads no drafter, and records none in its params)."""
    overrides = yaml.safe_load((Path(run.data.tags["run_dir"]) / ".hydra" / "overrides.yaml").read_text())
    return next(o for o in overrides if o.startswith("drafter.path=")).split("=", 1)[1]


def runs(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    found = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    parent = next(r for r in found if r.data.tags.get("sweep") == "parent")
    return client, parent, [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]


def test_2x2_sweep_over_two_ssh_hosts(two_hosts, tmp_path):
    proc = sweep(tmp_path, two_hosts, "method=dflash,ddtree", "tree_budget=2,8")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client, parent, children = runs(tmp_path)
    assert parent.info.status == "FINISHED"
    assert len(children) == 4 and all(c.info.status == "FINISHED" for c in children)
    assert {c.data.tags["host"] for c in children} <= {"ssh-a", "ssh-b"}
    # the host and GPU the pool chose, also in the params and config.yaml (they said host.name=local, gpus.0=0);
    # dflash's second budget is a skipped duplicate, placed nowhere
    ran = [c for c in children if c.data.tags.get("skipped") != "true"]
    assert len(ran) == 3 and all(c.data.params["host.name"] == c.data.tags["host"] and
                                 c.data.params["gpus.0"] == c.data.tags["gpus"] for c in ran), \
        [(c.data.params.get("host.name"), c.data.tags["host"]) for c in ran]
    assert [yaml.safe_load((Path(c.data.tags["run_dir"]) / "config.yaml").read_text())["host"]["name"]
            for c in ran] == [c.data.tags["host"] for c in ran]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"summary.csv", "speedup_vs_budget.png", "tau_vs_budget.png", "accept_by_depth.png"} <= artifacts


def test_one_failing_job_fails_the_parent_only(two_hosts, tmp_path):
    # A drafter path that does not exist on the hosts: only dflash needs the drafter, so 1 job of 4 fails.
    proc = sweep(tmp_path, two_hosts, "method=ar,dflash", "drafter.path=null,/no/such/drafter")
    assert proc.returncode != 0
    _, parent, children = runs(tmp_path)
    assert parent.info.status == "FAILED"
    status = {(c.data.params["method.name"], drafter_override(c)): c.info.status for c in children}
    assert status == {("ar", "null"): "FINISHED", ("ar", "/no/such/drafter"): "FINISHED",
                      ("dflash", "null"): "FINISHED", ("dflash", "/no/such/drafter"): "FAILED"}


def test_a_dead_pool_host_fails_no_job_while_a_live_one_can_take_them(two_hosts, tmp_path):
    """ssh-a's sshd is stopped: both jobs go to ssh-b, one after the other, each saying once that ssh-a is skipped
    (the dead host was first in the pool, so every job used to be placed there and fail)."""
    dead = SSHD(tmp_path / "sshd-dead")
    down = dead.start().host_config(name="ssh-a", workdir=str(tmp_path / "work-a"))
    dead.stop()
    # a runner that sends our start event and ends: where a job is placed does not depend on what it computes
    proc = sweep(tmp_path, [down, two_hosts[1]], *LONG, "runner.args=[--steps,1],[--steps,2]")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("skipping pool host ssh-a: cannot connect") == 2, out[-3000:]
    _, parent, children = runs(tmp_path)
    assert parent.info.status == "FINISHED"
    assert sorted((c.data.tags["host"], c.info.status) for c in children) == [("ssh-b", "FINISHED")] * 2
