"""Finding runs again and finishing a stopped sweep, as a user does: a real 2-job sweep of the random pair is
stopped by SIGTERM once its first job has finished; its closing lines name its parent run and the commands that
show and resume it; `specbench runs` lists it (and its jobs with `--sweep`); `specbench resume` runs only the job
that did not finish, under the same MLflow parent, which ends FINISHED with both jobs as children; `compare <sweep
dir>` then shows both; a second `resume` has nothing left to run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.test_faults import wait_for

JOBS = ["-m", "model=tiny-qwen3", "method=dflash,ddtree", "num_prompts=2", "max_new_tokens=4", "tree_budget=7"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=os.environ.copy(), timeout=900)


def finished(job_dir: Path) -> bool:
    try:
        return (json.loads((job_dir / "tracking.json").read_text()).get("final") or {}).get("status") == "FINISHED"
    except (OSError, ValueError):
        return False


def test_a_stopped_sweep_is_listed_resumed_under_its_parent_and_compared(tmp_path):
    runs = Path(os.environ["SPECBENCH_RUNS_DIR"])
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *JOBS], cwd=tmp_path, env=os.environ.copy(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sweep = wait_for(lambda: next((p.parent for p in runs.glob("multirun/*/*/sweep.json")), None), "the sweep's dir")
    wait_for(lambda: finished(sweep / "0"), "job 0 finished", timeout=600)
    proc.send_signal(signal.SIGTERM)
    said = proc.communicate(timeout=300)[0]
    assert proc.returncode == 128 + signal.SIGTERM, said[-3000:]
    parent_id = json.loads((sweep / "sweep.json").read_text())["mlflow_run_id"]
    assert f"parent run {parent_id}; its table again: python -m orchestrator compare {sweep}" in said
    assert f"run them again under the same parent: python -m orchestrator resume {sweep}" in said

    listed = cli("runs", cwd=tmp_path)
    sweep_id = f"{sweep.parent.name}/{sweep.name}"
    words = listed.stdout.split()     # its cells wrap at word boundaries
    assert listed.returncode == 0 and "killed" in words and "sweep," in words, listed.stdout
    assert sweep_id in words and "done," in words, listed.stdout     # an id is never wrapped: it is copied whole
    jobs = cli("runs", "--sweep", sweep_id, cwd=tmp_path)
    assert jobs.returncode == 0 and "done" in jobs.stdout and "dflash" in jobs.stdout, jobs.stdout

    resumed = cli("resume", sweep_id, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "job 0 finished before: kept, not run again" in resumed.stdout
    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    parent = client.get_run(parent_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.failed"] == "0"
    done = [c for c in children if c.info.status == "FINISHED"]
    assert sorted(c.data.params["method.name"] for c in done) == ["ddtree", "dflash"], \
        [(c.info.run_name, c.info.status) for c in children]
    # job 1's stopped attempt (if it reached MLflow) is superseded by its new run, which compare shows instead
    superseded = {c.data.tags["supersedes"] for c in done if c.data.tags.get("supersedes")}
    assert {c.info.run_id for c in children if c.info.status != "FINISHED"} <= superseded

    table = cli("compare", str(sweep), cwd=tmp_path)
    assert table.returncode == 0 and table.stdout.count(" done ") == 2, table.stdout
    again = cli("resume", str(sweep), cwd=tmp_path)
    assert again.returncode == 1 and again.stderr.strip() == f"resume: every job of sweep {sweep} finished; " \
                                                             "nothing to run again"


def test_the_runs_table_keeps_ids_and_numbers_whole_at_80_columns():
    from rich.console import Console

    from orchestrator.tracking.listing import _table
    row = dict(start=1765100000000, status="FINISHED", model="demo-qwen3", host="local", tau=2.143, speedup="0.703x?",
               **{"tok/s": 122.9})
    shown = [{**row, "id": "15-02-18-ddtree-57bbf4", "arm": "ddtree-b63"},
             {**row, "id": "2026-12-07/09-00-11-9be3b9", "arm": "sweep, 6 of 6 done, best ddtree-b8"}]
    console = Console(width=80, record=True)
    console.print(_table(shown, "runs"))
    lines = console.export_text().splitlines()
    assert "runs; model demo-qwen3; host local" in " ".join(lines)     # the same on every row: said once
    assert any(line.startswith("2026-12-07/09-00-11-9be3b9 ") for line in lines), lines
    assert sum(line.endswith("2.143 0.703x? 122.9") for line in lines) == 2, lines
    console = Console(width=120, record=True)
    console.print(_table([{**shown[0], "host": "gpu1"}, shown[1]], "runs"))
    assert "host" in console.export_text().splitlines()[1]      # hosts differ: their column stays
