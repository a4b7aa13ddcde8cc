"""`python -m orchestrator.diagnose`: exit status 0 / 1 / 2, text and JSON output, run directories."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.failures.diagnose import main

DATA = Path(__file__).parent / "data" / "failures"
OOM = DATA / "cuda_oom__h200.log"


def test_module_runs_and_reports_a_fatal_finding_with_its_fix():
    proc = subprocess.run([sys.executable, "-m", "orchestrator.diagnose", str(OOM)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "FATAL cuda_oom [memory] line 3" in proc.stdout
    assert "GPU 0: tried to allocate 64.00 GiB with 39.29 GiB free of 139.80 GiB" in proc.stdout
    assert "fix: Lower the load" in proc.stdout


def test_a_clean_log_exits_0(tmp_path, capsys):
    log = tmp_path / "clean.log"
    log.write_text("[runner] ar: 8/8 prompts\n[runner] wrote results.json\n")
    assert main([str(log)]) == 0
    assert "no known failure signature found" in capsys.readouterr().out


def test_warnings_alone_exit_0_and_are_grouped(tmp_path, capsys):
    # The 5.17 hybrid log without its crash: only the kernel fast-path warnings remain.
    text = (DATA / "hybrid_cache_without_config__tf5.17.0.log").read_text().split("Traceback")[0]
    (tmp_path / "w.log").write_text(text)
    assert main([str(tmp_path / "w.log")]) == 0
    out = capsys.readouterr().out
    assert out.count("PERFORMANCE fast_path_unavailable") == 1 and "(x4)" in out
    assert "chunk_gated_delta_rule needs flash-linear-attention" in out


def test_a_missing_file_exits_2_with_one_line_naming_it(tmp_path, capsys):
    missing = tmp_path / "nope" / "runner.log"
    assert main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err


def test_json_output(capsys):
    assert main([str(OOM), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["primary"]["id"] == "cuda_oom" and doc["tags"]["failure.id"] == "cuda_oom"
    assert doc["primary"]["details"]["gpu"] == "0"


def test_a_run_directory_uses_its_runner_log_and_exit_code(tmp_path, capsys):
    run = tmp_path / "run 1 'quoted'"
    run.mkdir()
    (run / "runner.log").write_text("[runner] ddtree: 3/8 prompts\n")
    (run / "exit_code").write_text("137\n")
    assert main([str(run), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 137 and doc["primary"]["id"] == "process_killed"
    assert main([str(run), "--exit-code", "0"]) == 0


def test_an_unknown_crash_prints_the_traceback(tmp_path, capsys):
    shutil.copy(DATA / "hybrid_cache_without_config__tf5.17.0.log", tmp_path / "runner.log")
    text = (tmp_path / "runner.log").read_text().replace("update_conv_state", "update_state")
    (tmp_path / "runner.log").write_text(text)
    assert main([str(tmp_path / "runner.log"), "--exit-code", "1"]) == 1
    out = capsys.readouterr().out
    assert "FATAL unknown_crash" in out and "last traceback:" in out
    assert out.rstrip().endswith("IndexError: list index out of range")


def test_usage_names_the_command_as_it_is_run(capsys):
    with pytest.raises(SystemExit):
        main(["--no-such-flag"])
    assert capsys.readouterr().err.startswith("usage: python -m orchestrator diagnose ")
