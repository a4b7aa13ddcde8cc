"""`python -m remote <run_dir>` end to end on the tiny random Qwen3 pair: files, events, metrics, exit codes."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from remote.files import RunFiles
from remote.runner import run
from tests.runner_fixtures import tiny_spec

ROOT = Path(__file__).resolve().parent.parent


def _launch(run_dir: Path, spec_text: str) -> subprocess.CompletedProcess:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(spec_text)
    return subprocess.run([sys.executable, "-m", "remote", str(run_dir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _lines(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _defined(name: str, definitions: dict) -> bool:
    """`name` is a definition's key, with numbers for its placeholders (`accepted_depth_hist_<d>`), `ar_` allowed."""
    names = {name, name.removeprefix("ar_")} if "ar_<metric>" in definitions else {name}
    patterns = [re.sub(r"<\w+>", r"\\d+", re.escape(key)) for key in definitions if key != "ar_<metric>"]
    return any(re.fullmatch(pattern, n) for pattern in patterns for n in names)


def test_ddtree_run_writes_everything(tmp_path):
    run_dir = tmp_path / "run 'quoted' $dir"                   # hostile path: the runner must not care
    spec = tiny_spec("ddtree", decoding={"warmup": 1})
    proc = _launch(run_dir, spec.to_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = RunFiles(str(run_dir))
    results = json.loads(Path(files.results).read_text())
    m = results["metrics"]
    assert results["version"] == 1 and results["method"] == "ddtree"
    assert all(isinstance(v, float | int) and math.isfinite(v) for v in m.values())
    assert all(_defined(k, results["definitions"]) for k in m), [k for k in m if not _defined(k, results["definitions"])]
    assert m["exact_match_vs_ar"] == 1.0 and "first_divergence_mean" not in m
    assert m["tau"] >= 1.0 and m["num_prompts"] == 3 and m["ar_num_prompts"] == 3
    assert m["speedup_vs_ar"] == pytest.approx(m["ar_tpot_ms"] / m["tpot_ms"])
    assert {"accept_rate_depth_1", "accept_rate_depth_5", "draft_ms", "verify_ms", "ttft_ms"} <= set(m)
    assert m["speedup_vs_ar_ci_low"] <= m["speedup_vs_ar"] <= m["speedup_vs_ar_ci_high"]
    assert m["tau_ci_low"] <= m["tau"] <= m["tau_ci_high"]
    assert m["tpot_ms_p50"] <= m["tpot_ms_p90"] <= m["tpot_ms_p99"] and "tpot_ms_repeat_std" not in m
    assert 0 < m["warmup_s"] and 0 < m["ar_warmup_s"] and m["warmup_s"] + m["ar_warmup_s"] < m["wall_s"]
    assert {"accept_rate_cond_depth_1", "accepted_depth_hist_0", "accepted_depth_hist_5", "reject_target_rank_1",
            "reject_target_rank_8", "reject_in_tree", "nodes_per_token"} <= set(m)
    assert sum(m[f"accepted_depth_hist_{d}"] for d in range(6)) == pytest.approx(1.0)
    assert results["fairness"].startswith(("ok", "noisy: ")) and set(results["paths"]) == {"ar", "ddtree"}
    assert results["paths"]["ddtree"]["decode"] == ["eager"]
    assert {(p["method"], p["prompt_index"], p["repeat"]) for p in results["per_prompt"]} == {
        (method, i, 0) for method in ("ar", "ddtree") for i in range(3)}
    env = results["environment"]
    assert env["kernel_path"] == "torch" and env["device"] == "cpu" and env["target_class"] == "AttentionTarget"
    assert all(not isinstance(v, dict | list) for v in env.values())
    outputs = _lines(files.outputs)
    # the methods take turns per prompt, in reverse order on odd prompts (neither is always timed first)
    assert [(o["method"], o["prompt_index"]) for o in outputs] == [
        ("ar", 0), ("ddtree", 0), ("ddtree", 1), ("ar", 1), ("ar", 2), ("ddtree", 2)]
    by = {(o["method"], o["prompt_index"]): o for o in outputs}
    for i in range(3):
        ar, dd = by[("ar", i)], by[("ddtree", i)]
        assert ar["token_ids"] == dd["token_ids"] and len(ar["token_ids"]) == 12 and ar["text"]
    events = _lines(files.events)
    kinds = [e["event"] for e in events]
    stages = [e["stage"] for e in events if e["event"] == "stage"]
    assert kinds[0] == "stage" and stages == ["loading", "warmup", "decoding"], stages
    assert kinds[-1] == "result" and kinds.count("prompt") == 6
    start = events[kinds.index("start")]
    assert kinds.index("start") < kinds.index("progress") and start["model_params"] > 0 and start["drafter_params"] > 0
    assert events[-1]["metrics"] == m
    progress = [e for e in events if e["event"] == "progress"]
    assert {(e["method"], e["done"]) for e in progress} == {(m, i) for m in ("ar", "ddtree") for i in (1, 2, 3)}
    assert all(e["total"] == 3 for e in progress)


@pytest.mark.parametrize("method, baseline", [("dflash", "none"), ("ar", "ar")])
def test_other_methods_in_process(tmp_path, method, baseline):
    results = run(tiny_spec(method, decoding={"baseline": baseline, "temperature": 0.7}), str(tmp_path))
    m = results["metrics"]
    assert "exact_match_vs_ar" not in m                      # temperature > 0: no exact-match claim
    if method == "dflash":
        assert not any(k.startswith("ar_") for k in m) and "speedup_vs_ar" not in m and m["tau"] >= 1.0
    else:
        assert m["ar_tpot_ms"] == m["tpot_ms"] and "tau" not in m
    assert len(_lines(RunFiles(str(tmp_path)).outputs)) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="graphed decoding needs a GPU")
def test_a_graphed_run_reports_where_its_steps_go(tmp_path):
    """A replayed step has no phase timers: the runner times its phases afterwards (remote.decoding.phase_split)."""
    results = run(tiny_spec("ddtree", top={"device": "cuda"}), str(tmp_path))
    m, env = results["metrics"], results["environment"]
    assert env["decode_path"] == "cuda_graph+compiled_drafter", env["decode_path"]     # the compile worked
    assert all(m[k] >= 0 for k in ("draft_ms", "tree_build_ms", "verify_ms", "commit_ms")) and m["verify_ms"] > 0
    assert m["ar_forward_ms"] > 0 and all(_defined(k, results["definitions"]) for k in m)
    assert results["fairness"].startswith(("ok", "noisy: ")) and results["paths"]["ar"]["decode"] == ["cuda_graph"]
    assert not [e for e in _lines(RunFiles(str(tmp_path)).events) if e["event"] == "warning"
                and "phase split" in e["message"]]


@pytest.mark.parametrize("case", ["drafter", "spec"])
def test_bad_input_exits_2_with_one_line(tmp_path, case):
    if case == "drafter":
        text = tiny_spec("ddtree", drafter={"random": {"num_hidden_layers": 1, "vocab_size": 999}}).to_json()
    else:
        text = json.dumps({"version": 99})
    proc = _launch(tmp_path / "run", text)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert ("vocab_size 999" in lines[0]) if case == "drafter" else ("version 99" in lines[0])
    assert not (tmp_path / "run" / "results.json").exists()
