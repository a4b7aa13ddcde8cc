"""`show`: per prompt, AR's text beside the method's with the first divergence marked, in the terminal and as
show.html logged on the run in MLflow. Real runs of the tiny model on the Local host: at temperature 0 (float32)
DDTree emits AR's tokens, so nothing may be marked; at temperature 0.8 both sample, and the mark must sit where the
token ids themselves first differ."""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.tracking.show import MARK, printable

SMALL = ["method=ddtree", "model=tiny-qwen3", "dataset=code", "num_prompts=3", "max_new_tokens=8", "host=local"]


# one xdist worker for the module, so its two real runs (`runs`, module-scoped) are made once, not once a worker
pytestmark = pytest.mark.xdist_group("show-runs")


def env_for(runs: Path) -> dict[str, str]:
    return {**os.environ, "SPECBENCH_RUNS_DIR": str(runs), "COLUMNS": "200"}


def show(ref: str, runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", "show", ref, *args], capture_output=True, text=True,
                          env=env_for(runs), timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs in one runs dir: temperature -> (run dir, job.json)."""
    root = tmp_path_factory.mktemp("show")
    found = {}
    for temperature in (0.0, 0.8):
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *SMALL, f"temperature={temperature}"],
                              capture_output=True, text=True, cwd=root, env=env_for(root / "runs"), timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for job in (root / "runs").rglob("job.json"):
        spec = json.loads((job.parent / "spec.json").read_text())
        found[spec["decoding"]["temperature"]] = (job.parent, json.loads(job.read_text()))
    assert set(found) == {0.0, 0.8}
    return root / "runs", found


def outputs(run_dir: Path) -> dict[int, dict[str, dict]]:
    rows = [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]
    by: dict[int, dict[str, dict]] = {}
    for row in rows:
        by.setdefault(row["prompt_index"], {})[row["method"]] = row
    return by


def first_differing(a: list, b: list) -> int | None:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return at if at is not None or len(a) == len(b) else min(len(a), len(b))


def sections(page: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in re.finditer(r'<section data-prompt="(\d+)".*?</section>', page, re.S)}


def artifacts(runs: Path, meta: dict) -> set[str]:
    client = MlflowClient(meta["tracking_uri"])
    return {a.path for a in client.list_artifacts(meta["mlflow_run_id"])}


def test_greedy_float32_texts_are_equal_and_nothing_is_marked(runs):
    root, found = runs
    run_dir, meta = found[0.0]
    by = outputs(run_dir)
    assert all(p["ar"]["token_ids"] == p["ddtree"]["token_ids"] for p in by.values())   # lossless: AR's tokens
    proc = show(meta["run_id"], root)                     # by run id, as attach takes it
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{len(by)}/{len(by)} prompts identical to AR" in proc.stdout
    for index, p in by.items():
        assert f"prompt {index}: identical ({len(p['ar']['token_ids'])} tokens)" in proc.stdout
    assert MARK not in proc.stdout
    page = (run_dir / "show.html").read_text()
    assert "data-divergence" not in page and len(sections(page)) == len(by)
    prompts = [json.loads(line)["prompt"] for line in
               (Path(__file__).parent.parent / "remote" / "assets" / "models" / "heldout_prompts.jsonl")
               .read_text().splitlines()[:len(by)]]
    for index, text in enumerate(prompts):                # the prompt the runner decoded from, as given
        assert html.escape(printable(text)) in sections(page)[index]
    assert "show.html" in artifacts(root, meta)


def test_sampled_texts_are_marked_where_the_token_ids_first_differ(runs):
    root, found = runs
    run_dir, meta = found[0.8]
    by = outputs(run_dir)
    where = {i: first_differing(p["ddtree"]["token_ids"], p["ar"]["token_ids"]) for i, p in by.items()}
    assert any(at is not None for at in where.values()), "sampling gave AR's tokens on every prompt"
    proc = show(meta["mlflow_run_id"], root)              # by MLflow run id
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    page = sections((run_dir / "show.html").read_text())
    differ = ", ".join(f"prompt {i} at token {at}" for i, at in sorted(where.items()) if at is not None)
    assert f"first divergence: {differ}" in " ".join(proc.stdout.split())   # the summary line, prompt by prompt
    for index, at in where.items():
        ar, ddtree = by[index]["ar"], by[index]["ddtree"]
        section = page[index]
        if at is None:
            assert f"prompt {index}: identical" in proc.stdout and "data-divergence-token" not in section
            continue
        token = lambda ids: str(ids[at]) if at < len(ids) else "end"   # noqa: E731
        assert (f"prompt {index}: first divergence at token {at}: AR {token(ar['token_ids'])}, "
                f"ddtree {token(ddtree['token_ids'])}") in proc.stdout
        assert f'data-divergence-token="{at}"' in section
        char = first_differing(ddtree["text"], ar["text"])
        if char is None:   # different ids, one text: nothing to mark in the text
            continue
        assert f'data-divergence-char="{char}"' in section
        same = re.findall(r'<span class="same">(.*?)</span>', section, re.S)
        assert [html.unescape(s) for s in same] == [printable(ar["text"][:char])] * 2   # AR's and the method's
    assert MARK in proc.stdout
    assert "show.html" in artifacts(root, meta)


def test_an_unknown_run_is_one_line_naming_it(runs):
    root, _ = runs
    proc = show("no-such-run", root)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "no-such-run" in proc.stderr
