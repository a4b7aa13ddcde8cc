"""The engine arms' reference counts tau as an engine does (remote.engines.checks.as_engines_count): a step's
accepted tokens count whole, also those a request's max_new_tokens then trims, where our runner's `tau` counts the
tokens kept. Checked on our runner's own DFlash with the demo pair (its steps accept many tokens): cut at 6 new
tokens, each generation's steps count what the same steps of an uncut run accept. No engine is needed."""
from __future__ import annotations

import dataclasses

from remote.assets import resolve
from remote.engines.checks import as_engines_count
from remote.runner import Run
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, Method, ModelSpec, RunSpec


def _generations(max_new: int) -> list:
    models = resolve("assets:models")
    spec = RunSpec(run_id="t", model=ModelSpec(path=f"{models}/demo-qwen3"),
                   drafter=DrafterSpec(path=f"{models}/demo-qwen3-dflash"),
                   decoding=DecodingSpec(method="dflash", max_new_tokens=max_new, warmup=0),
                   dataset=DatasetSpec(num_prompts=4), device="cpu")
    run = Run(spec)
    return [run.generate(Method.DFLASH, i) for i in range(len(run.inputs))]


def test_tau_as_an_engine_counts_it_includes_what_max_new_tokens_trims():
    trimmed = 0
    for cut, whole in zip(_generations(6), _generations(40)):
        kept, steps = as_engines_count(cut)
        same = dataclasses.replace(whole, accepted=whole.accepted[:steps])     # greedy: the same first steps
        assert cut.tokens == whole.tokens[:len(cut.tokens)] and as_engines_count(same) == (kept, steps)
        trimmed += kept - sum(cut.committed)
    assert trimmed > 0      # some step ran past the 6 tokens: the runner's tau and the engine's count differ there
