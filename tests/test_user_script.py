"""Users' own runner scripts go through the same launch, tail, failure detection and MLflow logging."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator.tracking import compare_rows

SCRIPT = Path(__file__).parent / "scripts" / "user_hybrid_script.py"
STALE_STAGE = re.compile(r"…  \d+:\d\d:\d\d")   # a stage line's spinner frame: "⠋ starting runner…  0:00:00"


def run_script(tmp_path, *args):
    overrides = ["runner=script", f"runner.path={SCRIPT}", f"runner.args=[{','.join(args)}]", "host=local"]
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *overrides], capture_output=True, text=True,
                          cwd=tmp_path, env=os.environ.copy(), timeout=300)
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("specbench").experiment_id],
                              order_by=["attributes.start_time DESC"])
    return proc, client, runs[0]


def test_bare_dynamic_cache_on_hybrid_fails_with_the_fix(tmp_path):
    proc, client, run = run_script(tmp_path, "--bare-cache")
    assert proc.returncode == 1
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.id"] == "hybrid_cache_without_config"
    assert "DynamicCache(config=" in run.data.tags["failure.hint"]
    assert "DynamicCache(config=" in proc.stdout          # shown in the terminal too
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"runner.log", "traceback.txt"} <= artifacts


def test_a_scripts_own_exit_2_is_not_taken_for_our_runners_refusal(tmp_path):
    """argparse exits 2 on an unknown flag: that is the script's failure (its usage line), not runner_refused_input,
    whose fix points at specbench's knobs."""
    proc, _, run = run_script(tmp_path, "--no-such-flag")
    assert proc.returncode == 1 and run.info.status == "FAILED"
    assert (run.data.tags["failure.id"], run.data.tags["exit_code"]) == ("unknown_crash", "2"), run.data.tags
    assert "unrecognized arguments: --no-such-flag" in proc.stdout, proc.stdout[-2000:]


def test_fixed_script_finishes_and_its_json_lines_become_metrics(tmp_path):
    proc, client, run = run_script(tmp_path, "--steps", "3")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "logit_max")
    assert sorted(m.step for m in history) == [0, 1, 2]
    # Named, tagged and filed as the user's script: our method, budget and model do not apply to it.
    assert run.info.run_name == "script-user_hybrid_script"
    assert (run.data.tags["method"], run.data.tags["script"]) == ("script", SCRIPT.name)
    assert re.fullmatch(r"\d\d-\d\d-\d\d-script-user_hybrid_script-[0-9a-f]{6}", Path(run.data.tags["run_dir"]).name)
    row = compare_rows.row_of(run)
    assert (row["method"], row["tree_budget"], row["model"]) == ("script", None, "")
    assert (run.data.params["runner.args.1"], run.data.params["host.kind"]) == ("3", "local")
    assert not any(k.split(".")[0] in ("model", "method", "tree_budget", "temperature") for k in run.data.params)
    assert STALE_STAGE.search(proc.stdout) is None, proc.stdout   # no stage spinner left behind at the end


def test_fail_fast_stops_a_run_at_its_first_fatal_signature(tmp_path):
    script = Path(__file__).parent / "scripts" / "fatal_then_hang.py"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "runner=script", f"runner.path={script}",
                           "host=local"], capture_output=True, text=True, cwd=tmp_path, env=os.environ.copy(),
                          timeout=200)
    assert time.monotonic() - started < 120          # the script alone would hang for 300 s
    assert proc.returncode == 1
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])[0]
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.id"] == run.data.tags["stopped_by"] == "nan_probabilities"
    assert "fix:" in proc.stdout
    pids = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout.split()
    assert pids == []
