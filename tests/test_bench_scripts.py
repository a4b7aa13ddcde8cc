"""The GPU benchmark scripts at toy scale on the CPU: `bench/bench_verify.py` (hybrid and pure-attention presets)
and `bench/bench_methods.py --profile` run to the end, write the rows and files a GPU run is read from, and end
with a compact JSON line. Timings themselves are not checked beyond being positive (CPU, shared machine).

Most of a script's wall time is importing torch and transformers, so only the hybrid run is a subprocess (the
script as the GPU host runs it); the other two run meanwhile inside the test process through their `main(argv)`.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

from remote.decoding.auto_budget import AutoBudget

REPO = Path(__file__).resolve().parent.parent
TINY_QWEN3 = {"model_type": "qwen3", "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "max_position_embeddings": 2048}
TINY_DRAFTER = {"num_hidden_layers": 1, "block_size": 4}
QUICK = ["--device", "cpu", "--prompt-len", "16", "--ar-tokens", "3", "--repeats", "2", "--min-repeats", "1",
         "--warmup", "0"]


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def _bench(script: str):
    """bench/<script> imported as a module."""
    sys.path.insert(0, str(REPO / "bench"))                  # the scripts import each other as top-level modules
    try:
        return __import__(script)
    finally:
        sys.path.remove(str(REPO / "bench"))


def _in_process(script: str, argv: list[str], stdout_path: Path) -> dict:
    """Run bench/<script>'s main(argv) here; returns its last stdout line as JSON."""
    module = _bench(script)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)               # on a small shared machine, oversubscribed BLAS threads make toys crawl
    try:
        with open(stdout_path, "w") as f, contextlib.redirect_stdout(f):
            module.main(argv)
    finally:
        torch.set_num_threads(threads)
    return _last_json(stdout_path.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (out dir, last stdout line as JSON)} of the three runs."""
    root = tmp_path_factory.mktemp("bench out")                 # a space in the path on purpose
    log, err = root / "hybrid.stdout", root / "hybrid.stderr"
    with open(log, "w") as out, open(err, "w") as errors:    # files, not pipes: nobody reads a pipe meanwhile
        hybrid = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "bench_verify.py"), "--preset", "tiny-hybrid", "--budgets", "4,16",
             *QUICK, "--out", str(root / "hybrid" / "rows.json"), "--profile", str(root / "hybrid" / "prof"),
             "--profile-kinds", "tree-16,ar"],
            cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=out, stderr=errors)
    try:
        results = {
            "attention": (root / "attention", _in_process("bench_verify", [
                "--preset", "tiny-qwen3", "--layers", "2", "--budgets", "8", *QUICK, "--no-hf-generate",
                "--out", str(root / "attention" / "rows.json")], root / "attention.stdout")),
            "methods": (root / "methods", _in_process("bench_methods", [
                "--random", json.dumps(TINY_QWEN3), "--random-drafter", json.dumps(TINY_DRAFTER),
                "--num-prompts", "1", "--max-new-tokens", "6", "--budgets", "4", "--dtype", "float32",
                "--device", "cpu", "--out", str(root / "methods"), "--profile", str(root / "methods" / "prof"),
                "--phase-kernels", "--floor"],      # graphed runs only: nothing to split on the CPU
                root / "methods.stdout")),
        }
        hybrid.wait(timeout=300)
    finally:
        if hybrid.poll() is None:
            hybrid.kill()
    output = log.read_text()
    assert hybrid.returncode == 0, f"bench_verify.py failed:\n{output[-2000:]}\n{err.read_text()[-3000:]}"
    results["hybrid"] = (root / "hybrid", _last_json(output))
    return results


def _rows(out: Path) -> tuple[dict, list[dict]]:
    data = json.loads((out / "rows.json").read_text())
    return data["meta"], data["rows"]


def test_verify_hybrid_rows(runs):
    out, last = runs["hybrid"]
    meta, rows = _rows(out)
    assert [(r["kind"], r["budget"]) for r in rows] == [
        ("prefill", None), ("ar", None), ("hf_generate", None), ("tree", 4), ("chain", 4), ("tree", 16), ("chain", 16)]
    assert all(r["status"] == "ok" and r["step_ms"] > 0 and r["repeats"] >= 1 for r in rows)
    by = {(r["kind"], r["budget"]): r for r in rows}
    for budget in (4, 16):
        tree, chain = by["tree", budget], by["chain", budget]
        assert tree["tokens"] == chain["tokens"] == budget + 1          # root + budget nodes, both ways
        assert tree["accepted"] == chain["accepted"] == 4
        assert tree["verify_ms"] > 0 and tree["commit_ms"] > 0 and tree["build_ms"] > 0
    assert by["tree", 16]["depth"] < by["chain", 16]["depth"] == 16    # a bushy tree, not a disguised chain
    assert (meta["target_class"], meta["kernel_path"], meta["layers"]) == ("HybridTarget", "torch", 4)
    assert last["skipped"] == last["errors"] == 0
    assert last["tree_ms"]["16"] > 0 and last["chain_ms"]["4"] > 0 and last["ar_ms"] > 0


def test_verify_profile_files(runs):
    out, last = runs["hybrid"]
    names = sorted(p.name for p in (out / "prof").iterdir())
    for kind in ("tree-16", "ar"):
        assert f"{kind}.txt" in names and ({f"{kind}.json", f"{kind}.json.gz"} & set(names)), names
    assert len(names) == 4                                          # only the kinds asked for
    meta, _ = _rows(out)
    assert sorted(Path(p).name for p in meta["traces"]) == names


def test_verify_attention_rows(runs):
    out, last = runs["attention"]
    meta, rows = _rows(out)
    assert [(r["kind"], r["budget"]) for r in rows] == [("prefill", None), ("ar", None), ("tree", 8), ("chain", 8)]
    assert all(r["status"] == "ok" and r["step_ms"] > 0 for r in rows)
    assert (meta["target_class"], meta["layers"]) == ("AttentionTarget", 2)
    assert last["hf_generate_ms"] is None


def test_methods_profile_writes_traces(runs):
    out, last = runs["methods"]
    assert (out / "rows.json").exists() and (out / "summary.csv").exists()       # the unprofiled outputs stay
    assert not (out / "phase_kernels.json").exists()            # eager CPU steps: no replayed phases to split
    traces = [Path(p) for p in last["profile"]]
    assert {p.name.split(".")[0] for p in traces} == {"ar", "dflash", "ddtree-4", "hf_generate"}
    assert all(p.exists() and p.stat().st_size > 0 for p in traces)
    trace = next(p for p in traces if p.name.startswith("ddtree") and ".json" in p.name)
    text = trace.read_bytes()
    if trace.suffix == ".gz":
        text = gzip.decompress(text)
    assert b'"verify"' in text and b'"tree_build"' in text          # decode phases appear as named ranges


def test_methods_floor_is_the_weights_over_the_measured_copy(runs):
    out, _ = runs["methods"]
    rows = json.loads((out / "rows.json").read_text())
    weights = sum(p.numel() * p.element_size() for p in _tiny_target().parameters())
    for r in rows:
        assert r["weight_gb"] == pytest.approx(weights / 1e9) and r["copy_gbps"] > 0
        assert r["floor_ms"] == pytest.approx(weights / r["copy_gbps"] / 1e6)
        assert r["step_vs_floor"] == pytest.approx(r["step_ms"] / r["floor_ms"])


def _tiny_target():
    from remote.models.loading import load_target
    from remote.spec import ModelSpec

    return load_target(ModelSpec(random=TINY_QWEN3, dtype="float32"), 0, torch.device("cpu"))


def test_auto_policy_replays_auto_against_a_cost_table(tmp_path):
    """bench_auto_policy makes a trace of the pair at the largest budget, then prices every step from the table: a
    table where 15 costs as much as 7 leaves auto no reason to take 7 once calibrated, so its rate is at least 7's."""
    trace = tmp_path / "trace.json"
    args = ["--pair", "demo-qwen3", "--trace", str(trace), "--costs", '{"7": 1.0, "15": 1.0}', "--max", "15",
            "--num-prompts", "1", "--max-new-tokens", "16"]
    last = _in_process("bench_auto_policy", args, tmp_path / "policy.stdout")
    assert trace.exists() and last["steps"] > 0
    assert set(last["rates"]) == {"7", "15", "auto"}
    assert last["rates"]["auto"] >= last["rates"]["7"] and last["auto_vs_best_fixed"] > 0.9


def test_auto_policy_judges_each_budget_by_its_own_tree_of_the_trace():
    """A trace step of the largest tree read as a smaller tree's: predictions past its size unknown, and only its
    accepted nodes inside the smaller tree (node 9 lies outside a tree of 7). The replay shows a policy a step as
    the runner does: after two more are queued (a step's choice knows the steps up to two before it)."""
    bench = _bench("bench_auto_policy")
    step = {"predicted": [1000, 1500], "nodes": [1, 9]}
    assert bench.step_as(step, [7, 15], 7) == ([1000, -1], [1])
    assert bench.step_as(step, [7, 15], 15) == ([1000, 1500], [1, 9])
    trace = {"sizes": [7, 15], "prompts": [[step] * 4]}
    tokens_per_ms = {b: bench.rate(trace, [[b] * 4], {7: 1.0, 15: 2.0}, {})[0] for b in (7, 15)}
    assert tokens_per_ms == {7: pytest.approx(2.0), 15: pytest.approx(1.5)}

    class Log(AutoBudget):
        def __init__(self, sizes, cuda):
            super().__init__(sizes, cuda)
            self.events = []

        def pick(self):
            self.events.append("pick")
            return 15

        def observe(self, *args):
            self.events.append("observe")

    log = Log([7, 15], cuda=False)
    assert bench.replay(trace, log) == [[15] * 4]
    assert log.events == ["pick", "pick", "pick", "observe", "pick", "observe", "observe", "observe"]

    class Small(AutoBudget):      # tree_budget_max 7 on a trace up to 15: it reads its own bucket's prediction only
        def observe(self, budget, predicted, nodes, committed, span=None):
            assert (budget, predicted, nodes) == (7, [1000], [1])

    assert bench.replay(trace, Small([7], cuda=False)) == [[7] * 4]


def test_methods_judges_auto_against_the_fixed_budgets_of_its_temperature():
    """bench_methods' verdict line per auto row: its share of the best fixed budget's speed and whether it beats
    the median fixed budget, among the rows of its own temperature only (diagnostic rows and other methods aside)."""
    verdicts = _bench("bench_methods").auto_verdicts
    budgets = [(15, 0.168), (31, 0.16), (63, 0.161), ("auto63", 0.1625), ("only31@127", 0.1), ("auto127", 0.165)]
    rows = [{"method": "ddtree", "temperature": 0.0, "tree_budget": b, "tpot_ms": ms} for b, ms in budgets]
    rows += [{"method": "dflash", "temperature": 0.0, "tree_budget": None, "tpot_ms": 0.1},
             {"method": "ddtree", "temperature": 1.0, "tree_budget": 7, "tpot_ms": 0.01}]
    lines = verdicts(rows, 0.0)
    assert lines == [
        "auto63-T0: 98.5% of the best fixed budget (31: 0.1600 ms a token), not above the median of 3 (0.1610)",
        "auto127-T0: 97.0% of the best fixed budget (31: 0.1600 ms a token), not above the median of 3 (0.1610)"]
    rows[2]["tpot_ms"] = 0.17          # 63 slower: 15 is the median now, and auto63 beats it
    assert verdicts(rows, 0.0)[0] == \
        "auto63-T0: 98.5% of the best fixed budget (31: 0.1600 ms a token), above the median of 3 (0.1680)"
    assert verdicts(rows, 1.0) == []


def test_an_auto_rows_step_counts_the_ar_steps_it_chose():
    """bench_methods' step_ms: a run's decode time over all its steps, auto's AR steps among them (not over its
    verify steps alone), and AR's own time per token where a run has no verify steps."""
    from remote.decoding.loop import Generation
    row = _bench("bench_methods").row
    gens = [Generation(tokens=list(range(9)), committed=[2, 3], plain_steps=4, times_ms={"decode": 12.0}),
            Generation(tokens=list(range(4)), committed=[3], plain_steps=0, times_ms={"decode": 3.0})]
    metrics = {"tpot_ms": 1.5}
    assert row("ddtree", "auto63", 1.0, metrics, {"tpot_ms": 1.0}, gens, gens)["step_ms"] == 15.0 / 7
    ar = [Generation(tokens=list(range(4)), times_ms={"decode": 3.0})]
    assert row("ar", None, 1.0, {"tpot_ms": 1.0}, {"tpot_ms": 1.0}, ar, ar)["step_ms"] == 1.0


def test_auto_policy_prices_a_switch_by_its_direction():
    """A step right after another size's costs its extra: from below the first, from above the second; in a row,
    and a generation's first step, nothing."""
    priced = _bench("bench_auto_policy").priced
    extras = {15: (0.5, 0.0), 7: (0.0, 0.3)}
    assert priced([7, 7, 15, 7], {7: 1.0, 15: 2.0}, extras) == pytest.approx(1 + 1 + 2.5 + 1.3)
    assert priced([15, 15], {7: 1.0, 15: 2.0}, extras) == pytest.approx(4.0)


def test_methods_measures_only_the_methods_asked(tmp_path):
    last = _in_process("bench_methods", [
        "--random", json.dumps(TINY_QWEN3), "--random-drafter", json.dumps(TINY_DRAFTER), "--num-prompts", "1",
        "--max-new-tokens", "4", "--methods", "ar", "--dtype", "float32", "--device", "cpu", "--out",
        str(tmp_path), "--timeline", str(tmp_path / "timeline")], tmp_path / "ar.stdout")
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["method"] for r in rows] == ["ar"] and last["rows"] == 1 and last["best_ddtree"] is None
    # the timeline reads CUDA graph replays: on the CPU it says so and writes nothing
    assert "--timeline skipped" in (tmp_path / "ar.stdout").read_text() and not (tmp_path / "timeline").exists()


def test_ar_again_gives_speedups_against_both_ar_rows(tmp_path):
    """With --ar-again every speculative row also carries its speedup against the mean of the AR rows before and
    after it."""
    _in_process("bench_methods", [
        "--random", json.dumps(TINY_QWEN3), "--random-drafter", json.dumps(TINY_DRAFTER), "--num-prompts", "1",
        "--max-new-tokens", "4", "--budgets", "4", "--ar-again", "--dtype", "float32", "--device", "cpu", "--out",
        str(tmp_path)], tmp_path / "again.stdout")
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["run"] for r in rows] == ["ar-T0", "dflash-T0", "ddtree-4-T0", "ar-again-T0"]
    both = (rows[0]["tpot_ms"] + rows[3]["tpot_ms"]) / 2
    for r in rows[1:3]:
        assert r["speedup_vs_ar_both"] == pytest.approx(both / r["tpot_ms"])
        assert r["speedup_vs_ar"] == pytest.approx(rows[0]["tpot_ms"] / r["tpot_ms"])
    assert "speedup_vs_ar_both" not in rows[0] and "speedup_vs_ar_both" not in rows[3]
    assert all(r["warmup_s"] > 0 for r in rows)           # each row's own warm-up, where its compiles fall


def test_interleave_takes_turns_prompt_by_prompt(tmp_path):
    """--interleave: each method warmed up, then the methods take turns on prompt 0, in reverse order on prompt 1,
    each at its own budget; then each decodes once more (the state its phase split replays). Every row says so.
    tree_budget=auto takes turns too, with a policy of its own kept across its turns (calibrated in its warm-up)
    and never handed to a fixed budget's steps."""
    from remote.runner import Run

    calls, generate = [], Run.generate

    def recorded(run, method, index, *args, **kwargs):     # the real generate, its calls written down
        calls.append((method, run.spec.decoding.tree_budget, index, run.auto))
        return generate(run, method, index, *args, **kwargs)

    with mock.patch.object(Run, "generate", recorded):
        _in_process("bench_methods", [
            "--random", json.dumps(TINY_QWEN3), "--random-drafter", json.dumps(TINY_DRAFTER), "--num-prompts", "2",
            "--max-new-tokens", "4", "--budgets", "4,2,auto", "--auto-max", "8", "--interleave", "--dtype", "float32",
            "--device", "cpu", "--out", str(tmp_path)], tmp_path / "interleaved.stdout")
    order = [("ar", 1), ("dflash", 1), ("ddtree", 4), ("ddtree", 2), ("ddtree", "auto")]
    policies = {id(policy) for *_, policy in calls if policy is not None}
    assert len(policies) == 1 and all((policy is not None) == (b == "auto") for _, b, _, policy in calls)
    timed = [(m, b, 0) for m, b in order] + [(m, b, 1) for m, b in order[::-1]] + [(m, b, 1) for m, b in order]
    warm = [c[:3] for c in calls[:-len(timed)]]         # auto's calibration generations follow its warm-up
    assert [c[:3] for c in calls[-len(timed):]] == timed
    assert warm[:len(order)] == [(m, b, 0) for m, b in order] and all(b == "auto" for _, b, _ in warm[len(order):])
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["run"] for r in rows] == ["ar-T0", "dflash-T0", "ddtree-4-T0", "ddtree-2-T0", "ddtree-auto8-T0"]
    assert all(r["interleaved"] is True and r["tpot_ms"] > 0 and r["warmup_s"] > 0 for r in rows)
    assert rows[-1]["auto_cost_ms_7"] > 0            # its policy measured its costs in its warm-up and kept them
    with pytest.raises(SystemExit, match="--interleave: fixed budgets and auto<max> only"):
        _bench("bench_methods").main(["--random", json.dumps(TINY_QWEN3), "--budgets", "4,trace7", "--interleave"])


def test_ab_base_writes_a_commit_beside_the_tree(tmp_path):
    """bench/ab_base.sh REV (gpu_suite.sh's BASE): REV's code under .ab/base, without the model assets, REV recorded,
    and nothing git would commit."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    script = clone / "bench" / "ab_base.sh"
    script.write_text((REPO / "bench" / "ab_base.sh").read_text())      # this tree's script, committed or not
    subprocess.run(["bash", str(script), "HEAD"], check=True, capture_output=True, cwd=tmp_path)
    base = clone / ".ab" / "base"
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    shown = subprocess.run(["git", "-C", str(clone), "show", "HEAD:remote/runner.py"], capture_output=True,
                           text=True).stdout
    assert (base / "REV").read_text() == head and (base / "remote" / "runner.py").read_text() == shown
    assert (base / "bench" / "bench_methods.py").exists() and (base / "conf").is_dir()
    assert not (base / "remote" / "assets").exists()
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True).stdout
    assert ".ab/" not in status


def test_gpu_suite_hands_its_kernel_caches_on(tmp_path):
    """bench/gpu_suite.sh with CACHE unpacks an earlier call's compile caches before any step and, with CACHE_OUT,
    packs them again at the end (here with no step selected: nothing needs a GPU)."""
    given = tmp_path / "given"
    (given / "triton").mkdir(parents=True)
    (given / "triton" / "kernel.json").write_text("{}")
    subprocess.run(["tar", "czf", str(tmp_path / "in.tgz"), "-C", str(given), "."], check=True)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "STEPS": "none", "CACHE": str(tmp_path / "in.tgz"),
           "CACHE_OUT": str(tmp_path / "back.tgz"), "KERNELS": str(tmp_path / "kernels"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_suite.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    listed = subprocess.run(["tar", "tzf", str(tmp_path / "back.tgz")], capture_output=True, text=True).stdout
    assert "./triton/kernel.json" in listed.split()


def test_gpu_suite_keeps_the_old_trees_traces_apart(tmp_path):
    """With BASE, a step's run in the old tree writes what its arguments put under OUT/<step>/ (--timeline's traces)
    under OUT/<step>_base/ instead: it ran second and replaced the new run's traces. bench_methods is a stand-in
    here that records where it ran and with what."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls.txt"
    (fake / "python3").write_text(f"""#!/usr/bin/env bash
if [ "$1" = bench/bench_methods.py ]; then echo "$PWD $*" >> {calls}; exit 0; fi
exec {sys.executable} "$@"
""")
    (fake / "python3").chmod(0o755)
    base = tmp_path / "base"
    (base / "remote").mkdir(parents=True)
    (base / "REV").write_text("old\n")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "STEPS": "q3_auto_timeline", "BASE": str(base),
           "KERNELS": str(tmp_path / "kernels"), "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_suite.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    new, old = calls.read_text().splitlines()
    assert new.startswith(f"{REPO} ") and f"--timeline {out}/q3_auto_timeline/traces" in new
    assert old.startswith("/tmp/suite-base ") and f"--timeline {out}/q3_auto_timeline_base/traces" in old
    assert f"--out {out}/q3_auto_timeline_base " in old


def test_tree_scoring_at_the_plain_surrogate_is_plain_ddtree(tmp_path):
    """bench_tree_scoring's untempered, unpenalised variant builds the runner's own trees (the same tau as a plain
    DDTree run), a tempered one builds others, and the torch top-k is put back afterwards."""
    from remote.kernels import tree_search
    from remote.runner import Run
    from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec

    models = REPO / "remote" / "assets" / "models"
    pair = ["--model", str(models / "demo-qwen3_5"), "--drafter", str(models / "demo-qwen3_5-dflash")]
    plain = tree_search.torch_top_k
    rows = _in_process("bench_tree_scoring", [*pair, "--num-prompts", "1", "--max-new-tokens", "24",
                                              "--temperatures", "1,4"], tmp_path / "scoring.stdout")
    assert tree_search.torch_top_k is plain
    run = Run(RunSpec(run_id="t", seed=0, device="cpu", model=ModelSpec(path=pair[1], dtype="float32"),
                      drafter=DrafterSpec(path=pair[3]),
                      decoding=DecodingSpec(method="ddtree", tree_budget=15, max_new_tokens=24, warmup=0),
                      dataset=DatasetSpec(name="humaneval", num_prompts=1)))
    steps = run.generate("ddtree", 0).committed
    assert [r["temperature"] for r in rows] == [1.0, 4.0]
    assert rows[0]["tau"] == pytest.approx(sum(steps) / len(steps)) and rows[0]["steps"] == len(steps)
    assert rows[1]["steps"] != rows[0]["steps"] or rows[1]["tau"] != rows[0]["tau"]
    with pytest.raises(SystemExit, match="--depth-penalties"):
        _bench("bench_tree_scoring").main([*pair, "--depth-penalties", "0.1"])


def test_methods_measures_each_draft_head_and_sets_a_switch(tmp_path):
    """--draft-vocabs 300,0: DFlash and DDTree once with the 300 tokens most frequent in the calibration text (rows
    `-v300`, marked draft_vocab_cut, here first) and once with the drafter's own head, AR once, each row with its
    head and AR's tokens outside it, the methods taking turns (--interleave); --set turns a module's switch on before
    anything loads (and a name it lacks is refused)."""
    from remote.kernels import gdn_solve

    try:
        _in_process("bench_methods", [
            "--random", json.dumps(TINY_QWEN3), "--random-drafter", json.dumps(TINY_DRAFTER), "--num-prompts", "1",
            "--max-new-tokens", "6", "--budgets", "4", "--draft-vocabs", "300,0", "--interleave", "--dtype", "float32",
            "--device", "cpu", "--out", str(tmp_path), "--set", "remote.kernels.gdn_solve.BLOCK_V=16"],
            tmp_path / "v.stdout")
        assert gdn_solve.BLOCK_V == 16
    finally:
        gdn_solve.BLOCK_V = 32
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["run"] for r in rows] == ["ar-T0", "dflash-v300-T0", "ddtree-4-v300-T0", "dflash-T0", "ddtree-4-T0"]
    assert [(r.get("draft_vocab"), r.get("draft_vocab_cut")) for r in rows[1:]] == \
        [(300, True), (300, True), (1024, None), (1024, None)]
    assert rows[3]["ar_outside_draft_vocab"] == 0 and 0 <= rows[1]["ar_outside_draft_vocab"] <= 1
    assert all(r["exact_match_vs_ar"] == 1.0 and r["interleaved"] is True for r in rows[1:])
    by = {r["run"].removesuffix("-T0"): r for r in rows}
    # bench/cheaper_draft_table.py: these rows as a demo pair's and a deployed width's step, with their goals
    for step in ("q3_vocab", "q8b_vocab"):
        (tmp_path / "out" / step).mkdir(parents=True)
        (tmp_path / "out" / step / "rows.json").write_text(json.dumps(rows))
    with open(tmp_path / "table.md", "w") as f, contextlib.redirect_stdout(f):
        _bench("cheaper_draft_table").main([str(tmp_path / "nothing"), str(tmp_path / "out")])
    table = (tmp_path / "table.md").read_text()
    kept = by["dflash-v300"]["tau"] / by["dflash"]["tau"]     # the cut head's rows come first here
    assert f"| q3_vocab | dflash-v300 | 300 | {by['dflash-v300']['tau']:.3f} ({kept:.1%}: " in table
    assert f"DDTree / AR {by['ddtree-4']['speedup_vs_ar']:.2f}x (>= 2.0: " in table
    assert f"| q8b_vocab | ddtree-4-v300 | 300 | {by['ddtree-4-v300']['step_ms']:.2f} | " in table
    with pytest.raises(SystemExit, match="has no NOPE"):
        _bench("bench_methods").main(["--random", json.dumps(TINY_QWEN3), "--set", "remote.kernels.gdn_solve.NOPE=1"])
