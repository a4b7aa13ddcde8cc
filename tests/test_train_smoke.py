"""`bench/train_demo_pairs.py` at smoke scale, and the two facts its drafters rest on.

- The script runs end to end (`--smoke`, CPU) and its outputs load with the standard loaders: targets with
  AutoModelForCausalLM, tokenizers with AutoTokenizer, drafters with remote's `load_drafter`; the runner decodes
  with each pair losslessly (DFlash and DDTree tokens == AR tokens, float32).
- The drafter's batched training forward (`demo_training.drafter_train.block_forward`) is the runtime drafter's math:
  each anchor block gives the logits `remote.decoding.loop.draft` gives for that block at decode time.
- The distillation features are what the runner's targets hand the drafter (`Target.prefill(...).features`).
- The simulated taus the script reports equal the runner's on the prompts both decoded (the script's own check).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from demo_training.distill import target_features
from demo_training.drafter_train import block_batch, block_forward, new_drafter
from remote.models.backends import build_target
from remote.decoding.loop import draft
from remote.models.drafter_io import check_pair, load_drafter
from remote.runner import Run
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "train_demo_pairs.py"
SHIPPED_TOKENIZER = REPO / "remote" / "assets" / "tokenizer"
PAIRS = {"qwen3": "qwen3", "qwen3_5": "qwen3_5_text"}     # pair kind -> model_type



@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """(out dir, final JSON report) of one `--smoke` run."""
    out = tmp_path_factory.mktemp("demo models")            # a space in the path on purpose
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    tail = (proc.stdout[-4000:] + "\n" + proc.stderr[-4000:]).strip()
    assert proc.returncode == 0, tail
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"], tail
    return out, report


@pytest.mark.parametrize("kind", PAIRS)
def test_outputs_load_with_standard_loaders(smoke, kind):
    out, report = smoke
    target_dir, drafter_dir = out / f"demo-{kind}", out / f"demo-{kind}-dflash"
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    assert len(tokenizer) == 4096
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.mask_token) == ("<|endoftext|>", "<|endoftext|>",
                                                                                "<|MASK|>")
    assert (tokenizer.eos_token_id, tokenizer.mask_token_id) == (0, 1)
    model = AutoModelForCausalLM.from_pretrained(str(target_dir))
    assert model.config.model_type == PAIRS[kind] and model.config.tie_word_embeddings
    assert json.loads((target_dir / "config.json").read_text())["dtype"] == "bfloat16"
    drafter = load_drafter(str(drafter_dir), torch.float32, "cpu")
    assert (drafter.block_size, drafter.mask_token_id) == (16, 1)
    assert drafter.target_layer_ids == report["pairs"][kind]["target_layer_ids"]
    check_pair(drafter, model, tokenizer)
    assert next(iter(load_drafter(str(drafter_dir), torch.bfloat16, "cpu").parameters())).dtype == torch.bfloat16
    rows = [json.loads(line) for line in (out / "heldout_prompts.jsonl").read_text().splitlines()]
    assert len(rows) >= 2 and all(row["prompt"] for row in rows)
    assert report["sizes_mb"]["ok"]


@pytest.mark.parametrize("kind", PAIRS)
def test_simulated_taus_equal_the_runners(smoke, kind):
    """float32 on CPU: the exact simulation gives the runner's per-prompt taus on the prompts both decoded."""
    runner = smoke[1]["pairs"][kind]["runner"]
    assert runner["num_prompts"] == 2
    for method in ("dflash", "ddtree16"):
        assert runner[method]["exact_match_vs_ar"] == 1.0
        assert runner[method]["tau_prompt_mean"] == pytest.approx(runner[method]["sim_tau_prompt_mean"], abs=1e-3)


@pytest.mark.parametrize("kind", PAIRS)
def test_runner_decodes_losslessly(smoke, kind):
    out, _ = smoke
    spec = RunSpec(run_id="smoke", model=ModelSpec(path=str(out / f"demo-{kind}"), dtype="float32"),
                   drafter=DrafterSpec(path=str(out / f"demo-{kind}-dflash")),
                   decoding=DecodingSpec(method="ddtree", tree_budget=8, max_new_tokens=16),
                   dataset=DatasetSpec(name="jsonl", path=str(out / "heldout_prompts.jsonl"), num_prompts=2),
                   device="cpu")
    run = Run(spec)
    for index in range(2):
        ar = run.generate("ar", index).tokens
        assert len(ar) > 0
        assert run.generate("dflash", index).tokens == ar
        assert run.generate("ddtree", index).tokens == ar


def _tiny_target(kind: str) -> torch.nn.Module:
    fields = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16)
    if kind == "qwen3_5":
        fields.update(linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                      linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"])
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(PAIRS[kind], **fields)).float().eval()


@pytest.mark.parametrize("kind", PAIRS)
def test_distillation_features_are_the_runner_targets_features(kind):
    model = _tiny_target(kind)
    tokens = torch.randint(2, 1024, (2, 24), generator=torch.Generator().manual_seed(1))
    layer_ids = [1, 2]
    features = target_features(model, tokens, layer_ids, batch=2)                      # [2, 24, 128]
    for row in range(2):
        expected = build_target(model, layer_ids).prefill(tokens[row:row + 1]).features   # [24, 128]
        torch.testing.assert_close(features[row], expected, atol=1e-5, rtol=1e-4)


def test_block_forward_is_the_runtime_drafter():
    model = _tiny_target("qwen3")
    tokenizer = AutoTokenizer.from_pretrained(str(SHIPPED_TOKENIZER))
    drafter = new_drafter(model, tokenizer, layers=2, block_size=8, layer_ids=[1, 2], seed=3).eval()
    with torch.no_grad():                       # bigger weights than the 0.02 init, so mistakes move the logits
        for p in drafter.parameters():
            p.add_(0.1 * torch.randn_like(p))
    tokens = torch.randint(2, 1000, (2, 40), generator=torch.Generator().manual_seed(2))
    features = target_features(model, tokens, [1, 2], batch=2)
    anchors = torch.tensor([[5, 17, 38], [9, 30, 1]])
    ids, _, _ = block_batch(tokens, anchors, drafter.block_size, drafter.mask_token_id)
    with torch.no_grad():
        noise = torch.nn.functional.embedding(ids, model.get_input_embeddings().weight) * drafter.embed_scale
        hidden = block_forward(drafter, noise, features, anchors).view(2, 3, drafter.block_size, -1)
        logits = drafter.logits(hidden[:, :, 1:], model.get_output_embeddings())        # [2, 3, B-1, V]
        for row in range(2):
            for j, anchor in enumerate(anchors[row].tolist()):
                expected = draft(drafter, model, drafter.new_cache(), features[row:row + 1, :anchor],
                                 int(tokens[row, anchor]), anchor)                     # [B-1, V]
                torch.testing.assert_close(logits[row, j], expected, atol=1e-4, rtol=1e-4)
