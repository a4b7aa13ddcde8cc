"""A local MLflow database made by two commands at once: each makes its client at the same moment (real processes,
a real sqlite file), and both must find the store whole. MLflow migrates a new database step by step; two doing so
at once raced ("Online migration expected to match one row"), and a run was not logged."""
from __future__ import annotations

import subprocess
import sys
import time

from orchestrator.paths import PROJECT_ROOT

MAKE_CLIENT = """
import os, pathlib, sys, time
from orchestrator.tracking.tracker import mlflow_client
from mlflow.store.tracking import sqlalchemy_store   # imported before the start: the race is in the making
ready, go, uri = sys.argv[1:]
pathlib.Path(ready).touch()
while not os.path.exists(go):
    time.sleep(0.002)
print(mlflow_client(uri).get_experiment_by_name("Default").name)
"""


def test_two_commands_making_one_new_database_both_find_it_whole(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    (tmp_path / "runs").mkdir()
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", MAKE_CLIENT, str(mark), str(go), uri], cwd=PROJECT_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for mark in ready]
    try:
        deadline = time.monotonic() + 120
        while not all(mark.exists() for mark in ready):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a process never got ready"
            time.sleep(0.05)
        go.touch()   # both make their client now
        done = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, done):
        assert p.returncode == 0 and out.strip() == "Default", err[-3000:]
