"""A prompt past the target's positions is refused before the first decoding step, in one line naming it: such a
run used to decode to its end and finish (a 39,132-token prompt against 4,096 positions: 110 s, FINISHED, exit 0)
with only transformers' own warning. The real CLI, a real tiny model whose config has 64 positions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator.paths import PROJECT_ROOT
from remote.errors import SpecError
from remote.runner import check_context


def test_a_prompt_past_the_targets_positions_is_refused_before_decoding(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in
                               ["def add(a, b):", "x = 1\n" * 100, "print('hi')"]))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "model=tiny-qwen3", "model.random.max_position_embeddings=64",
         "method=ar", "dataset=jsonl", f"dataset.path={prompts}", "max_new_tokens=8", "device=cpu",
         f"host.workdir={tmp_path / 'work'}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "1000"})
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "runner_refused_input" in out and "Traceback" not in out, out[-3000:]
    assert ("error: 1 of 3 prompts do not fit the target's 64 positions (max_position_embeddings) with "
            "max_new_tokens=8: prompt 1 has ") in out, out[-3000:]
    (events,) = (tmp_path / "work" / "runs").glob("*/events.jsonl")
    assert '"progress"' not in events.read_text()   # nothing was decoded, nor measured
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["failure.id"] == "runner_refused_input"
    print(f"refused {took:.1f} s after the command started")


@pytest.mark.parametrize("limits, refused", [({"target": 4096, "drafter": 64}, "the drafter's 64 positions"),
                                             ({"target": None}, None), ({"target": 4096}, None)])
def test_the_smallest_known_positions_bound_every_prompt(limits, refused):
    inputs = [torch.zeros(1, 60, dtype=torch.long), torch.zeros(1, 10, dtype=torch.long)]
    if refused is None:
        check_context(inputs, 8, limits)
        return
    with pytest.raises(SpecError, match=f"1 of 2 prompts do not fit {refused}.*prompt 0 has 60 tokens and needs 68"):
        check_context(inputs, 8, limits)
