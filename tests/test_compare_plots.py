"""orchestrator.tracking.compare on runs logged to a real MLflow database: the terminal table fits 80 columns with nothing
cut, summary.csv has host and GPU, every plot title says model, host, GPU and date, the speedup plot has its
speedup = 1 line and the Pareto plot labels each budget and draws the front. The sweep that makes these from real
runs: tests/test_sweep.py."""
from __future__ import annotations

import copy
import csv
import datetime
import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.tracking import compare, compare_plots, compare_rows, compare_table

HOST, GPU, MODEL = "gpu-node-17.cluster.example.org", "NVIDIA H200", "demo-qwen3"


@pytest.fixture(scope="module")
def logged_rows(tmp_path_factory):
    """A sweep's children as the orchestrator logs them: ar, dflash, ddtree at five budgets and auto, two seeds, a
    skip. Logged once per module (17 runs into a fresh database take ~10 s); each test gets its own copy (`rows`)."""
    tmp_path = tmp_path_factory.mktemp("cmp")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("cmp", artifact_location=(tmp_path / "art").as_uri())
    rng = random.Random(0)
    jobs = [("ar", 63), ("dflash", 63), *(("ddtree", b) for b in (8, 16, 32, 63, 128, "auto"))]
    for (method, budget), seed in itertools.product(jobs, (0, 1)):
        name = {"ar": "ar", "dflash": "dflash-bs16", "ddtree": f"ddtree-b{budget}"}[method] + f"-{MODEL} seed={seed}"
        run = client.create_run(exp, run_name=name, tags={"host": HOST, "gpu": GPU, "run_id_local": name})
        for k, v in {"method.name": method, "tree_budget": budget, "model.name": MODEL, "seed": seed}.items():
            client.log_param(run.info.run_id, k, str(v))
        speedup = 1.0 if method == "ar" else rng.uniform(0.9, 3.5)
        metrics = {"tau": 1.0 if method == "ar" else rng.uniform(2, 6), "tpot_ms": 20 / speedup,
                   "speedup_vs_ar": speedup, "speedup_vs_ar_ci_low": speedup - 0.15,
                   "speedup_vs_ar_ci_high": speedup + 0.15, "exact_match_vs_ar": 1.0,
                   "tokens_per_s": 50 * speedup, "ar_tokens_per_s": 50.0, "accept_rate_depth_1": 0.7}
        for k, v in metrics.items():
            client.log_metric(run.info.run_id, k, v)
        client.set_terminated(run.info.run_id)
    holder = client.search_runs([exp], "tags.run_id_local = 'ar-demo-qwen3 seed=0'")[0]
    dup = client.create_run(exp, run_name="ar-demo-qwen3 (skipped: tree_budget=8 seed=0)",
                            tags={"skipped": "true", "duplicate_of": holder.info.run_id, "host": HOST, "gpu": GPU,
                                  "duplicate_of.name": holder.info.run_name})
    client.log_param(dup.info.run_id, "method.name", "ar")
    client.log_param(dup.info.run_id, "model.name", MODEL)
    client.set_terminated(dup.info.run_id)
    return [compare_rows.row_of(r) for r in compare_rows.select_runs(client, experiment="cmp")]


@pytest.fixture
def rows(logged_rows):
    return copy.deepcopy(logged_rows)   # a test that changed its rows cannot change the next test's


def test_the_terminal_table_fits_80_columns_with_nothing_cut(rows):
    console = Console(width=80, record=True)
    console.print(compare_table.render_table(rows, "sweep: 17 jobs"))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    today = datetime.date.today().isoformat()
    head = "".join(text.splitlines()[:3])
    assert MODEL in head and "H200" in head and today in head and HOST[:10] in head
    for header in ("tau", "ms/tok", "vs AR", "tok/s"):     # host and GPU, which every run shares: in the title
        assert header in text
    words = text.split()   # a long name may wrap in its column (folded, never cut)
    assert "ddtree-b128" in words and "skipped" in text and "= ar seed=0" in text
    significant = [r for r in rows if r["status"] == "FINISHED" and not compare_table.not_significant(r)]
    marked = [r for r in rows if r["status"] == "FINISHED" and compare_table.not_significant(r)]
    assert marked and significant   # the seeded draw has both: ar (1.0 inside its interval) and clear speedups
    assert "* 95% interval of the speedup (vs AR) includes 1.0" in text
    best = max(significant, key=lambda r: r["speedup_vs_ar"])   # the answer leads the notes under the table
    assert " ".join(words).count("best speedup:") == 1
    assert " ".join(text.split()).startswith(f"best speedup: {best['run'].replace('-' + MODEL, '')}",
                                              " ".join(text.split()).index("best speedup:"))


def test_summary_csv_has_host_gpu_and_the_skipped_duplicate(rows, tmp_path):
    with open(compare_table.write_csv(rows, tmp_path / "summary.csv")) as f:
        written = list(csv.DictReader(f))
    assert len(written) == len(rows) == 17
    assert {r["host"] for r in written} == {HOST} and {r["gpu"] for r in written} == {GPU}
    (dup,) = [r for r in written if r["status"] == "SKIPPED"]
    assert dup["duplicate_of"] in {r["run_id"] for r in written if r["run"] == "ar-demo-qwen3 seed=0"}


def test_runs_launched_apart_that_share_a_name_are_told_apart_by_the_params_that_differ(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("apart", artifact_location=(tmp_path / "art").as_uri())
    for tokens, dtype in (("32", "float32"), ("64", "float32"), ("64", "bfloat16")):
        run = client.create_run(exp, run_name=f"ddtree-b63-{MODEL}", tags={"host": HOST})
        for key, value in {"method.name": "ddtree", "model.name": MODEL, "max_new_tokens": tokens,
                           "model.dtype": dtype}.items():
            client.log_param(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id)
    names = sorted(row["run"] for row in compare_rows.rows_of(compare_rows.select_runs(client, experiment="apart")))
    # the dtype sets groups apart (a table each, titled with it): not a name's business
    assert names == [f"ddtree-b63-{MODEL} max_new_tokens=32", *[f"ddtree-b63-{MODEL} max_new_tokens=64"] * 2]


def test_a_pool_jobs_tag_does_not_count_as_a_host_beside_the_hosts_that_ran():
    ran = [{"host": "gpu1", "model": MODEL}, {"host": "gpu2", "model": MODEL}]
    never_placed = {"host": "pool:gpu1,gpu2", "model": MODEL}
    assert "host gpu1, gpu2 (" in compare_rows.context([*ran, never_placed])
    assert "host pool:gpu1,gpu2 (" in compare_rows.context([never_placed])


def test_plot_titles_speedup_line_and_pareto_labels(rows, tmp_path):
    context = compare_rows.context(rows)
    assert MODEL in context and HOST in context and GPU in context and datetime.date.today().isoformat() in context
    speedup = compare_plots.budget_figure(rows, "speedup_vs_ar", "speedup vs AR")
    (ax,) = speedup.axes
    assert context in ax.get_title()
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.get_lines())   # speedup = 1: AR
    # each budget-free run is a flat line of its own across the budgets, never a mean over runs
    autos = [line for line in ax.get_lines() if line.get_label().startswith("ddtree-bauto")]
    assert sorted(line.get_label() for line in autos) == ["ddtree-bauto seed=0", "ddtree-bauto seed=1"]
    for line, row in zip(sorted(autos, key=lambda line: line.get_label()),
                         sorted((r for r in rows if r["tree_budget"] == "auto"), key=lambda r: r["run"])):
        assert list(line.get_xdata()) == [8, 128] and set(line.get_ydata()) == {row["speedup_vs_ar"]}
    pareto = compare_plots.pareto_figure(rows)
    (ax,) = pareto.axes
    assert context in ax.get_title()
    labels = [t.get_text() for t in ax.texts]
    for budget in (8, 16, 32, 63, 128, "auto"):
        assert labels.count(f"b={budget}") == 2   # each ddtree run labelled with its budget
    done = [(r["tau"], r["tokens_per_s"]) for r in rows if r["status"] == "FINISHED"]
    front = compare_plots.pareto_front(done)
    beaten = [p for p in done if any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in done)]
    assert sorted(front) == sorted(set(done) - set(beaten))
    (drawn,) = [line for line in ax.get_lines() if line.get_label() == "Pareto front"]
    assert list(drawn.get_xdata()) == [p[0] for p in front]
    paths = compare_plots.summarize(rows, tmp_path / "out")
    assert {p.name for p in paths} == {"summary.csv", "speedup_vs_budget.png", "tau_vs_budget.png", "pareto.png",
                                       "accept_by_depth.png"}
    assert all(p.stat().st_size > 10_000 for p in paths if p.suffix == ".png")


def _compare_cli(*args: str, runs_dir) -> subprocess.CompletedProcess:
    """`python -m orchestrator compare ...` as a user runs it, on the runs dir given."""
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(runs_dir)}
    return subprocess.run([sys.executable, "-m", "orchestrator", "compare", *args], capture_output=True, text=True,
                          env=env, cwd=Path(compare.__file__).parents[1], timeout=120)


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == "", (proc.stdout, proc.stderr)
    (line,) = proc.stderr.splitlines()
    return line


def test_a_sweep_stopped_before_any_job_recorded_is_summarised_without_plots(tmp_path):
    """Ctrl-C as a parallel sweep's workers start can leave its parent with no job records: the summary is the CSV's
    header alone, no plot (it divided by the number of setups, zero)."""
    assert compare_plots.summarize([], tmp_path / "out") == [tmp_path / "out" / "summary.csv"]
    assert (tmp_path / "out" / "summary.csv").read_text().startswith("run,status")


def test_no_runs_yet_is_one_line_and_creates_nothing(tmp_path):
    runs_dir = tmp_path / "empty"
    line = _one_line_error(_compare_cli(runs_dir=runs_dir))
    assert line.startswith("compare: no runs yet") and str(runs_dir / "mlflow.db") in line
    assert not runs_dir.exists()


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """A runs dir whose database holds one plain (non-sweep) run in the default experiment."""
    runs_dir = tmp_path_factory.mktemp("single")
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    exp = client.create_experiment("specbench", artifact_location=(runs_dir / "art").as_uri())
    run = client.create_run(exp, run_name=f"ar-{MODEL}")
    client.log_param(run.info.run_id, "method.name", "ar")
    client.set_terminated(run.info.run_id)
    return runs_dir, run.info.run_id


@pytest.mark.parametrize("args, says", [
    (["--parent", "deadbeef"], "no run with id 'deadbeef'"),
    (["--parent", "{run}"], "has no child runs: it is not a sweep's parent run"),
    (["--filter", "bogus=="], "bad --filter 'bogus==': Invalid clause"),
    (["--filter", "params.method.name = 'dflash'"], "no runs match --filter"),
    (["--experiment", "nope"], "no experiment 'nope'"),
], ids=["unknown-parent", "parent-not-a-sweep", "bad-filter", "nothing-matches", "unknown-experiment"])
def test_compare_mistakes_are_one_line(single_run, args, says):
    runs_dir, run_id = single_run
    line = _one_line_error(_compare_cli(*(a.format(run=run_id) for a in args), runs_dir=runs_dir))
    assert line.startswith("compare: ") and says in line, line
    if "--experiment" in args:
        assert "(there: Default, specbench)" in line   # the valid choices


def test_compare_finds_the_plain_run_and_names_itself_in_usage(single_run):
    runs_dir, _ = single_run
    proc = _compare_cli(runs_dir=runs_dir)
    assert proc.returncode == 0, proc.stderr
    assert "1 runs" in proc.stdout and f"ar-{MODEL}" in proc.stdout.split()
    usage = _compare_cli("--no-such-flag", runs_dir=runs_dir).stderr
    assert usage.startswith("usage: python -m orchestrator compare ")


def test_a_sweep_parent_without_children_and_an_out_that_is_a_file_are_one_line(single_run, tmp_path):
    """A sweep whose jobs never reached MLflow was called "not a sweep's parent run"; --out naming a file was a
    FileExistsError traceback."""
    runs_dir, _ = single_run
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    parent = client.create_run(client.get_experiment_by_name("specbench").experiment_id, run_name="sweep")
    client.log_param(parent.info.run_id, "sweep.overrides", "method=ar seed=0,1")
    client.set_terminated(parent.info.run_id, "FAILED")
    line = _one_line_error(_compare_cli("--parent", parent.info.run_id, runs_dir=runs_dir))
    assert line.startswith(f"compare: sweep {parent.info.run_id} has no child runs") and " sync " in line, line
    (tmp_path / "taken").write_text("")
    proc = _compare_cli("--out", str(tmp_path / "taken"), runs_dir=runs_dir)
    assert _one_line_error(proc).endswith("is a file; give a directory (summary.csv and the plots go in it)")


def test_a_failed_ar_run_has_no_tau(tmp_path):
    """AR's tau is 1 by definition once it ran; a job that failed measured nothing (its row said tau 1)."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("specbench", artifact_location=(tmp_path / "art").as_uri())
    rows = {}
    for status in ("FINISHED", "FAILED"):
        run = client.create_run(exp, run_name=f"ar-{status}")
        client.log_param(run.info.run_id, "method.name", "ar")
        client.set_terminated(run.info.run_id, status)
        rows[status] = compare_rows.row_of(client.get_run(run.info.run_id))
    assert (rows["FINISHED"]["tau"], rows["FAILED"]["tau"]) == (1.0, None)
