"""A target split over two GPUs (`model.device_map`): every method decodes on it exactly as on one GPU.

The split and the one-GPU run take the same eager path (graphs are off for split targets, and turned off here for
the one-GPU run), so every kernel sees the same numbers and the tokens must agree exactly; the split itself must
show in the run's environment (tags) and in the per-GPU memory. Needs two CUDA devices: bench/gpu_suite.sh runs it
on a two-GPU host; skipped elsewhere.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conf import random_fields
from remote.runner import run
from tests.runner_fixtures import TINY_QWEN3, tiny_spec

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")

TINY_HYBRID = random_fields("tiny-qwen3_5")


def halves(layers: int) -> dict[str, int]:
    """Embedding and the first half of the layers on GPU 0; the rest, the final norm and the LM head on GPU 1."""
    return {"model.embed_tokens": 0, "model.rotary_emb": 0,
            **{f"model.layers.{i}": int(i >= layers // 2) for i in range(layers)}, "model.norm": 1, "lm_head": 1}


def decode(tmp_path: Path, name: str, fields: dict, method: str, device_map) -> tuple[dict, dict]:
    # graphs asked for on the split run (which must say why it is eager), off on the one-GPU run
    spec = tiny_spec(method, model={"random": fields, "device_map": device_map},
                     decoding={"cuda_graphs": device_map is not None, "max_new_tokens": 16}, top={"device": "cuda"})
    run_dir = tmp_path / name
    run_dir.mkdir()
    results = run(spec, str(run_dir))
    lines = [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]
    return results, {(o["method"], o["prompt_index"]): o["token_ids"] for o in lines}


@pytest.mark.parametrize("fields", [TINY_QWEN3, TINY_HYBRID], ids=["qwen3", "qwen3_5"])
@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_split_target_decodes_as_on_one_gpu(tmp_path, fields, method):
    one, one_tokens = decode(tmp_path, "one", fields, method, None)
    split, split_tokens = decode(tmp_path, "split", fields, method, halves(fields["num_hidden_layers"]))

    assert split_tokens == one_tokens                     # AR and the method, every prompt
    env, metrics = split["environment"], split["metrics"]
    assert env["device_split"].startswith("cuda:0: model.embed_tokens") and "cuda:1:" in env["device_split"]
    assert env["decode_path"] == "eager (target split over devices)"
    assert one["environment"]["device_split"] == ""
    for prefix in ("", "ar_"):
        gpu0, gpu1 = metrics[f"{prefix}peak_mem_gb_gpu0"], metrics[f"{prefix}peak_mem_gb_gpu1"]
        assert gpu0 > 0 and gpu1 > 0
        assert metrics[f"{prefix}peak_mem_gb"] == pytest.approx(gpu0 + gpu1)
    assert metrics["exact_match_vs_ar"] == one["metrics"]["exact_match_vs_ar"]
    assert metrics["tau"] == one["metrics"]["tau"]
