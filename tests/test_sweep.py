"""Multirun = one MLflow parent with a child per job; the parent's status is right even when a job fails."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

from mlflow.tracking import MlflowClient

from orchestrator.tracking import compare
from tests.test_faults import LONG

FAST = ["model=tiny-qwen3", "num_prompts=1", "max_new_tokens=4", "baseline=none", "host=local"]   # plumbing: the random pair


def sweep(tmp_path, *overrides):
    return subprocess.run([sys.executable, "-m", "orchestrator", "-m", *overrides, *FAST], capture_output=True,
                          text=True, cwd=tmp_path, env=os.environ.copy(), timeout=900)


def parent_and_children(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specbench")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return client, parents[0], children


def test_sweep_parent_children_summary_and_skipped_duplicates(tmp_path):
    # ar and dflash do not read tree_budget: each runs once, its copy under the other budget is recorded skipped.
    # `method=glob(...)`: every method of our runner (ar, ddtree, dflash; the engine arms' files left out). Our sweep
    # callback counted the plan with Hydra's expansion, which needs Hydra's config loader for a glob: it raised, the
    # parent was never recorded and the sweep's end failed too.
    proc = sweep(tmp_path, "method=glob(*,exclude=[vllm*,sglang*,openai])", "tree_budget=2,8")
    assert proc.returncode == 0 and "Callback" not in proc.stderr, proc.stderr[-3000:]
    client, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED" and "sweep.planned" not in parent.data.tags
    assert len(children) == 6 and all(c.info.status == "FINISHED" for c in children)
    ran = [c for c in children if c.data.tags.get("skipped") != "true"]
    skipped = [c for c in children if c.data.tags.get("skipped") == "true"]
    assert sorted(c.data.params["method.name"] for c in ran) == ["ar", "ddtree", "ddtree", "dflash"]
    assert sorted(c.data.params["method.name"] for c in skipped) == ["ar", "dflash"]
    assert len({c.info.run_name for c in children}) == 6   # every child named apart
    by_id = {c.info.run_id: c for c in ran}
    for dup in skipped:
        holder = by_id[dup.data.tags["duplicate_of"]]        # resolved to the MLflow run that holds the result
        assert holder.data.params["method.name"] == dup.data.params["method.name"]
        # neither reads tree_budget, and neither records it: the duplicate's name says the budget it was swept at
        assert "tree_budget" not in holder.data.params and "tree_budget" not in dup.data.params
        assert "(skipped: " in dup.info.run_name and "tree_budget=" in dup.info.run_name
        assert dup.data.tags["status"] == "skipped" and not dup.data.metrics
        assert dup.data.tags["host"] == holder.data.tags["host"] and dup.data.tags["gpu"] == holder.data.tags["gpu"]
    assert parent.data.tags["sweep.skipped"] == "2" and parent.data.tags["sweep.failed"] == "0"
    url = parent.data.tags["sweep.compare_url"]
    assert url.startswith("http://") and all(r in url for r in by_id) and not any(d.info.run_id in url for d in skipped)
    assert url in proc.stdout and "mlflow ui --backend-store-uri" in proc.stdout
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"summary.csv", "speedup_vs_budget.png", "tau_vs_budget.png", "pareto.png",
            "accept_by_depth.png"} <= artifacts
    with open(client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path))) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and all(r["host"] == "local" and r["gpu"] for r in rows)
    assert sorted(r["status"] for r in rows) == ["FINISHED"] * 4 + ["SKIPPED"] * 2
    # The sweep's table, printed without a terminal (80 columns): no line wider, nothing cut to "…".
    table = proc.stdout[proc.stdout.index("sweep: 6 jobs"):proc.stdout.index("compare the sweep in MLflow")]
    assert "…" not in table and max(len(line) for line in table.splitlines()) <= 80
    words = " ".join(table.split())   # the caption under the table wraps
    assert table.count(" done ") == 4 and "= ar;" in words and "= dflash-bs8" in words   # the skipped ones

    # `show` / `stop` on what no runner ran: one line naming what to give instead, nothing touched.
    (sweep_dir,) = (tmp_path / "runs" / "multirun").glob("*/*")
    skipped_ar = next(d for d in skipped if d.data.params["method.name"] == "ar")
    skipped_dir = skipped_ar.data.tags["run_dir"]
    holder_dir = by_id[skipped_ar.data.tags["duplicate_of"]].data.tags["run_dir"]
    for command, ref, said in (("show", skipped_dir, f"whose run holds the result: {holder_dir}"),
                               ("stop", sweep_dir, f"compare --parent {parent.info.run_id}"),
                               ("show", parent.info.run_id, "is a sweep")):
        proc = subprocess.run([sys.executable, "-m", "orchestrator", command, str(ref)], capture_output=True,
                              text=True, cwd=tmp_path, env=os.environ.copy(), timeout=120)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr

    # The compare CLI picks the same runs by parent and prints the same table.
    out = tmp_path / "cmp"
    assert compare.main(["--tracking-uri", client.tracking_uri, "--parent", parent.info.run_id,
                         "--out", str(out)]) == 0
    assert (out / "summary.csv").read_text().count("\n") == 7


def test_failed_job_fails_the_parent_and_spares_the_others(tmp_path):
    # The second model type does not exist: that job fails inside the runner, the other one finishes.
    proc = sweep(tmp_path, "method=ar", "model.random.model_type=qwen3,no_such_model_type")
    assert proc.returncode != 0
    _, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FAILED"
    statuses = sorted((c.data.params["model.random.model_type"], c.info.status) for c in children)
    assert statuses == [("no_such_model_type", "FAILED"), ("qwen3", "FINISHED")]


def test_submitit_local_launcher_runs_the_sweep(tmp_path):
    """SLURM clusters go through Hydra's submitit launcher; its local mode runs the same jobs here (a runner that
    sends our start event and ends: the launcher does not depend on what it computes)."""
    proc = sweep(tmp_path, "hydra/launcher=submitit_local", *LONG, "runner.args=[--steps,1],[--steps,2]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED"
    assert sorted(c.data.params["runner.args.1"] for c in children) == ["1", "2"]
    assert all(c.info.status == "FINISHED" for c in children)


def test_jobs_that_fail_at_connect_fail_the_sweep_and_show_in_its_table(tmp_path):
    """The host refuses the connection: no runner, but each job is a FAILED child with its reason, and the parent
    FAILED (a sweep that ended on its own: its jobs failed, none was stopped)."""
    from tests.sshd import free_port

    refused = ["host=ssh", "host.hostname=127.0.0.1", f"host.port={free_port()}", "host.connect_timeout=5"]
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "-m", "method=ar,dflash", *FAST[:-1], *refused],
                          capture_output=True, text=True, cwd=tmp_path, env=os.environ.copy(), timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    _, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FAILED", out[-3000:]
    assert parent.data.tags["sweep.failed"] == "2"
    assert sorted(c.info.status for c in children) == ["FAILED", "FAILED"]
    assert all(c.data.tags["failure.id"] == "not_launched" and c.data.tags["failure.hint"] for c in children)
    assert "sweep: 2 jobs, 2 not finished" in " ".join(proc.stdout.split()) and "host ?" not in proc.stdout, out[-3000:]
    # each job's closing line says where its record went (it said "never reached MLflow", beside its child run)
    closing = [line for line in proc.stdout.splitlines() if line.startswith("FAILED run dir:")]
    assert len(closing) == 2 and all("the sweep records it as a child run" in line for line in closing), out[-3000:]
    assert "never reached MLflow" not in out, out[-3000:]


def test_a_job_whose_input_went_bad_after_the_check_fails_alone(tmp_path):
    """Every job is checked before the sweep begins; here job 0's script deletes the script file itself, so jobs 1
    and 2 meet a missing runner.path. Each is a FAILED child saying so and the sweep goes on to its end (the refusal
    used to end the sweep at job 1 with exit 2: job 2 never ran)."""
    script = tmp_path / "consume.py"
    script.write_text(f"import os, sys\nif sys.argv[1:] == ['rm']:\n    os.remove({str(script)!r})\n"
                      "print('{\"metric\": \"ok\", \"value\": 1}')\n")
    proc = sweep(tmp_path, "runner=script", f"runner.path={script}", "runner.args=[rm],[a],[b]")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "sweep: 3 jobs, 2 not finished" in " ".join(proc.stdout.split()), out[-3000:]
    assert proc.stderr.count("error: runner.path: runner=script needs an existing script file") == 2, out[-3000:]
    _, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FAILED" and parent.data.tags["sweep.failed"] == "2"
    refused = [c for c in children if c.info.status == "FAILED"]
    assert len(children) == 3 and len(refused) == 2, out[-3000:]
    assert all(c.data.tags["failure.stage"] == "validate" and "runner.path" in c.data.tags["failure.hint"]
               for c in refused)

