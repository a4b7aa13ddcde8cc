"""Engine arms against a real vLLM (its CPU build, `--enforce-eager`): in a sweep beside our runner, its greedy
output equal to its own AR's, tau from its counters, concurrency levels; a server that cannot start; a signal
mid-run (Ctrl-C over SSH, SIGTERM here). The engine's interpreter is $SPECBENCH_VLLM_PYTHON (.ci/run installs vLLM's
CPU build in a venv of its own and sets it); without it these tests are skipped. One engine server at a time on this
2-core box (a core and ~3 GB each): the tests take a file lock around every run that starts one.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from orchestrator.tracking.compare_table import ENGINE_NOTE
from orchestrator.tracking.definitions import definition_of, tag_definition_of
from tests.test_faults import finish, runs_of, start_cli, wait_for
from tests.test_ssh_e2e import alive, group_alive
from tests.test_sweep import parent_and_children

PYTHON = os.environ.get("SPECBENCH_VLLM_PYTHON", "")
# one xdist worker runs them all, one after another (tests/ray_cluster.py makes -n's scheduling `loadgroup`): spread
# over workers, one worker idled on ONE_SERVER while the other's server ran (2026-12-07)
pytestmark = [pytest.mark.skipif(not Path(PYTHON).is_file(), reason="SPECBENCH_VLLM_PYTHON (vLLM's CPU build) unset"),
              pytest.mark.xdist_group("vllm-server")]
ONE_SERVER = FileLock(str(Path(os.environ.get("TMPDIR", "/tmp")) / "specbench-engine-tests.lock"))
# demo-qwen3 (float32: exact) through vLLM with no compile; a small KV cache; few prompts and tokens
ENGINE = [f"host.engine_python={PYTHON}", "+host.env.VLLM_CPU_KVCACHE_SPACE=1", "engine.enforce_eager=true",
          "engine.max_model_len=2048", "num_prompts=3", "max_new_tokens=24"]


def specbench(tmp_path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    with ONE_SERVER:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args, *ENGINE, "host=local"],
                              capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "200"},
                              timeout=timeout)


def outputs(run_dir: Path) -> dict[str, list[list[int]]]:
    by_method: dict[str, list[list[int]]] = {}
    for line in (run_dir / "outputs.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_method.setdefault(row["method"], []).append(row["token_ids"])
    return by_method


def test_a_sweep_holds_our_ddtree_and_vllm_dflash_exact_at_fp32_with_tau_from_its_counters(tmp_path):
    proc = specbench(tmp_path, "-m", "method=ddtree,vllm-dflash", "concurrency=[1,2]")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    client, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED" and len(children) == 2
    engine = next(c for c in children if c.data.tags.get("engine") == "vllm")
    m = engine.data.metrics
    # greedy in float32: vLLM's DFlash emits vLLM's own AR tokens, and the check says so
    assert m["exact_match_vs_ar"] == 1.0 and "warnings" not in engine.data.tags
    run_dir = _run_dir(tmp_path, engine)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    by_method = outputs(run_dir)
    assert by_method["vllm-dflash"] == by_method["ar"] and all(len(ids) == 24 for ids in by_method["ar"])
    # tau is the counters' 1 + accepted / drafts over the measured requests, per-request deltas giving its interval
    assert 1.0 < m["tau"] <= 16 and m["tau_ci_low"] <= m["tau"] <= m["tau_ci_high"]
    assert m["accept_rate_depth_1"] >= m["accept_rate_depth_2"] and m["verify_steps"] >= 3 * 24 / 16
    # the same drafter in our runner, on the same prompts: within 10% (engine_low_acceptance would say otherwise)
    assert 0.9 <= m["engine_tau_ratio"] <= 1.1, (m["tau"], m["ours_tau"])
    # concurrency: both levels measured, for the engine and its AR
    assert {"tokens_per_s_c1", "tokens_per_s_c2", "tpot_ms_c2", "ar_tokens_per_s_c2", "speedup_vs_ar_c2"} <= set(m)
    assert {e.get("concurrency") for e in events if e["event"] == "prompt"} == {1, 2, None}   # None: ours
    assert m["ours_exact_match"] == 1.0        # vLLM's tokens are our runner's too, token for token
    # the engine's own TPOT beside the client's, and what it was: version and command
    assert m["engine_tpot_ms"] > 0 and abs(m["client_minus_engine_tpot_ms"]) < m["tpot_ms"]
    assert engine.data.tags["engine_version"] == "0.32.0" and "--speculative-config" in engine.data.tags[
        "engine_command"]
    # one table: our ddtree and the engine row, marked
    table = " ".join(proc.stdout.split())     # the caption wraps at the table's width
    assert "vllm-dflash †" in table and "ddtree-b63" in table and ENGINE_NOTE in table
    assert {a.path for a in client.list_artifacts(engine.info.run_id)} >= {"engine_command.txt", "outputs.jsonl"}
    results = json.loads((run_dir / "results.json").read_text())     # every metric and tag it logs defined
    assert not [k for k in m if not definition_of(k, results["definitions"])]
    assert not [k for k in engine.data.tags if not k.startswith("mlflow.")
                and not tag_definition_of(k, results["tag_definitions"])]
    assert not _ours(tmp_path / "runs" / ".host"), "a server outlived its run"     # both phases' servers stopped


def _run_dir(tmp_path: Path, run) -> Path:
    """A sweep job's local run dir (the `run_id_local` tag names it)."""
    local = run.data.tags["run_id_local"]
    (found,) = [p.parent for p in (tmp_path / "runs" / "multirun").rglob("spec.json")
                if json.loads(p.read_text())["run_id"] == local]
    return found


def test_a_server_that_cannot_start_fails_in_one_line_with_its_cause_and_leaves_no_process(tmp_path):
    proc = specbench(tmp_path, "method=vllm-spec", "method.speculative={method: bogus, num_speculative_tokens: 2}",
                     f"host.workdir={tmp_path / 'work'}", timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "FAILED" and run.data.tags["failure.id"] == "engine_unsupported", run.data.tags
    assert "engine_unsupported: " in proc.stdout and "SpeculativeConfig" in proc.stdout
    assert not _ours(tmp_path / "work"), "an engine process outlived its run"


def _ours(workdir: Path) -> list[int]:
    """Live processes whose command line names this test's host workdir (the server's --model path)."""
    alive = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(workdir) in (entry / "cmdline").read_bytes().decode(errors="replace") \
                    and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(int(entry.name))
        except OSError:
            continue
    return alive


# Ctrl-C while the server loads (not yet answering) on an SSH host, SIGTERM once it answers on this one: both paths
# stop the server and what it spawned
@pytest.mark.parametrize("sig, code, when, kind", [(signal.SIGINT, 130, "engine: starting", "ssh"),
                                                   (signal.SIGTERM, 143, "answered after", "local")])
def test_a_signal_mid_run_leaves_no_engine_process(sig, code, when, kind, tmp_path, request):
    from remote.engines.server import descendants
    from tests.test_faults import host_overrides

    workdir = tmp_path / "work"
    with ONE_SERVER:
        proc = start_cli(["method=vllm", *ENGINE, *host_overrides(kind, workdir, request), "max_new_tokens=256"],
                         cwd=tmp_path)
        try:
            log = wait_for(lambda: next(workdir.glob("runs/*/runner.log"), None), "the runner's log", timeout=120)
            wait_for(lambda: when in log.read_text(), f"{when!r} in runner.log", timeout=600)
            pgid = int((log.parent / "pid").read_text())
            wait_for(lambda: _ours(workdir), "the server's process")     # its --model path names the workdir
            tree = [pgid, *descendants(pgid)]      # the runner, the server and (once it answers) the engine's own
            proc.send_signal(sig)
            out = finish(proc, timeout=90)
        finally:
            finish(proc, timeout=1)
    assert proc.returncode == code, out[-3000:]
    assert not group_alive(pgid) and not _ours(workdir), "an engine process outlived the run"
    assert not [pid for pid in tree if alive(pid)]
    (run,) = runs_of(tmp_path / "runs")
    assert run.info.status == "KILLED"
