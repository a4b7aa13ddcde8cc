"""`assets:` names: files shipped with the runner bundle, resolved wherever the bundle lives."""
from __future__ import annotations

import pytest

from remote import assets
from remote.errors import SpecError
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec


def test_spec_paths_resolve_into_this_bundle():
    spec = RunSpec(run_id="r", model=ModelSpec(path="assets:models/demo-qwen3"),
                   drafter=DrafterSpec(path="assets:models/demo-qwen3-dflash"), decoding=DecodingSpec(),
                   dataset=DatasetSpec(name="jsonl", path="assets:models/heldout_prompts.jsonl"))
    resolved = assets.with_assets(spec)
    assert resolved.model.path == str(assets.ASSETS / "models" / "demo-qwen3")
    assert (assets.ASSETS / "models" / "demo-qwen3-dflash").samefile(resolved.drafter.path)
    assert resolved.dataset.path.endswith("heldout_prompts.jsonl")
    assert spec.model.path == "assets:models/demo-qwen3"          # the spec itself keeps the portable name
    assert resolved.decoding is spec.decoding


@pytest.mark.parametrize("value", ["assets:models/missing", "assets:../spec.py", "assets:"])
def test_unusable_names_are_refused_with_the_key(value):
    assert assets.problem(value)
    with pytest.raises(SpecError, match="^drafter.path: "):
        assets.resolve(value, "drafter.path")


def test_other_values_pass_through():
    for value in (None, "Qwen/Qwen3-8B", "/abs/dir"):
        assert assets.problem(value) is None and assets.resolve(value) == value
