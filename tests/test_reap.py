"""`reap` against what it meets in the wild: runs whose MLflow moved (`sync --tracking-uri`) or went away, and a
sweep killed with `kill -9` before all of its jobs ran."""
from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor

from mlflow.tracking import MlflowClient

from tests.sshd import free_port
from tests.test_faults import LONG, cli, runs_of, start_cli, started_runs, wait_for
from tests.test_tracking_outage import MlflowServer

# A runner that sends our start event and ends: what reap settles does not depend on what it computed (test_faults'
# kill -9 sweep test reaps runs of ours, with their results)
TINY = [*LONG, "runner.args=[--steps,1]"]


def test_reap_warns_once_per_run_it_cannot_reach_and_follows_sync(tmp_path):
    """Two runs kept locally (their MLflow refused), then synced: one to a server that is gone by the time `reap`
    runs, one to a database that answers. Reap must say one line about the first, carry on, and look for the
    second where sync put it, not where the run started."""
    refused_port = free_port()
    port = free_port()
    while port == refused_port:   # the server must not come up where the runs find nothing
        port = free_port()
    refused = f"tracking.uri=http://127.0.0.1:{refused_port}"
    # Neither run needs the other, nor the server (started meanwhile): all three at once.
    with ThreadPoolExecutor(3) as pool:
        starting = pool.submit(MlflowServer, tmp_path / "server", port)
        runs = [pool.submit(cli, *TINY, refused) for _ in range(2)]
    server = starting.result()
    try:
        for run in runs:
            ran = run.result()
            assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        gone, kept = sorted(f.parent for f in (tmp_path / "runs").rglob("job.json"))
        database = f"sqlite:///{tmp_path / 'kept.db'}"
        with ThreadPoolExecutor(2) as pool:   # two runs, two stores: the syncs at once too
            syncs = [pool.submit(cli, "sync", str(gone), "--tracking-uri", server.url),
                     pool.submit(cli, "sync", str(kept), "--tracking-uri", database)]
        for sync in syncs:
            synced = sync.result()
            assert synced.returncode == 0, synced.stdout + synced.stderr
    finally:
        server.stop()

    reaped = cli("reap")
    out = reaped.stdout + reaped.stderr
    assert reaped.returncode == 0 and "Traceback" not in out, out[-3000:]
    warnings = [line for line in out.splitlines() if "not reaped" in line]
    assert len(warnings) == 1 and str(gone) in warnings[0], out[-3000:]
    assert "reap: 0 run(s) closed" in out, out[-3000:]
    (run,) = MlflowClient(database).search_runs([MlflowClient(database).get_experiment_by_name("specbench")
                                                 .experiment_id])
    assert run.info.status == "FINISHED"


def test_a_sweep_killed_before_its_last_job_is_reaped_killed_with_the_jobs_that_ran(tmp_path):
    workdir = tmp_path / "work"
    sweep = start_cli(["-m", *LONG, "runner.args=[--steps,5],[--steps,6]", "host=local", f"host.workdir={workdir}"])
    group = None
    try:
        (run_dir,) = wait_for(lambda: started_runs(workdir), "job 0's runner starting")
        group = int((run_dir / "pid").read_text())
        os.killpg(group, signal.SIGSTOP)   # job 0 cannot end (and job 1 start) before the sweep is killed
        wait_for(lambda: [f for f in (tmp_path / "runs").rglob("job.json")
                          if json.loads(f.read_text()).get("mlflow_run_id")], "job 0 in MLflow")
        os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait()
    finally:
        if group is not None:
            os.killpg(group, signal.SIGCONT)
        sweep.stdout.close()
    wait_for(lambda: (run_dir / "exit_code").exists(), "job 0's runner ending", timeout=300)

    reaped = cli("reap")
    out = reaped.stdout + reaped.stderr
    assert reaped.returncode == 0, out[-3000:]
    runs = runs_of(tmp_path / "runs")
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert [r.info.status for r in runs if r is not parent] == ["FINISHED"], out[-3000:]
    assert parent.info.status == "KILLED", out[-3000:]
    assert "sweep: 1 of 2 jobs, 1 not finished" in out, out[-3000:]
    assert parent.data.tags["sweep.planned"] == "2" and parent.data.tags["sweep.failed"] == "1"
