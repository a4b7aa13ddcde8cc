"""DFlash drafters in the speculators format (vllm-project/speculators, which vLLM loads): a config and state dict
translated to the published DFlash layout this runner's drafter reads, with the reduced draft vocabulary they ship.

Contract: `is_speculators(raw)` says whether a config.json dict is one (`speculators_model_type`).
`dflash_fields(raw)` returns the DFlash config dict (the draft layers' `transformer_layer_config`, `block_size`,
`dflash_config: {target_layer_ids, mask_token_id}`); `aux_hidden_state_layer_ids` count HF hidden states (0 = the
embeddings), so a target layer id is one less (vLLM's reading). `split_state(raw, state)` returns (the drafter's own
weights, the draft vocabulary's target ids [N] or None, its head [N, H] or None): `embed_tokens`, `verifier_*` are
the target's and dropped; with `draft_vocab_size` below the target's, `d2t` (offsets: target id = draft id +
d2t[i]) and `lm_head` [N, H] are required and `t2d` (a [V] bool mask), if shipped, must name the same ids. A full
vocabulary's `lm_head` is the verifier's (the speculators converter copies it): the target's own head serves.
Anything else is a SpecError naming the field. Non-goals: other speculators algorithms (eagle3, dspark), drafting
from the anchor position (`sample_from_anchor`).
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import SpecError
from .draft_vocab import offsets_to_ids

TARGET_OWNED = ("embed_tokens.", "verifier_norm.", "verifier_lm_head.")    # the verifier's, filled at conversion
VOCAB_KEYS = ("lm_head.weight", "d2t", "t2d")


def is_speculators(raw: dict[str, Any]) -> bool:
    return "speculators_model_type" in raw


def _required(raw: dict[str, Any], name: str):
    if raw.get(name) is None:
        raise SpecError(f"speculators drafter config has no {name}")
    return raw[name]


def dflash_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The published DFlash config fields of a speculators DFlash config."""
    kind = raw["speculators_model_type"]
    if kind != "dflash":
        raise SpecError(f"drafter is a speculators {kind!r} model; only dflash drafters are supported")
    if raw.get("sample_from_anchor"):
        raise SpecError("speculators drafter has sample_from_anchor=true (drafts from the anchor position too); "
                        "only DFlash drafters that draft after it are supported")
    layers = dict(_required(raw, "transformer_layer_config"))
    aux = [int(i) for i in _required(raw, "aux_hidden_state_layer_ids")]
    return {**layers, "block_size": int(_required(raw, "block_size")),
            "dflash_config": {"target_layer_ids": [i - 1 for i in aux],
                              "mask_token_id": int(_required(raw, "mask_token_id"))}}


def split_state(raw: dict[str, Any], state: dict[str, torch.Tensor]):
    """(the drafter's weights, draft vocabulary ids [N] or None, its head [N, H] or None)."""
    own = {k: v for k, v in state.items() if not k.startswith(TARGET_OWNED) and k not in VOCAB_KEYS}
    vocab = int(raw["transformer_layer_config"]["vocab_size"])
    size = int(raw.get("draft_vocab_size") or vocab)
    if size == vocab:
        return own, None, None
    if size > vocab or "d2t" not in state or "lm_head.weight" not in state:
        missing = [k for k in ("d2t", "lm_head.weight") if k not in state]
        raise SpecError(f"speculators drafter has draft_vocab_size {size} against the target's {vocab}"
                        + (f" but no {' or '.join(missing)} in its weights" if missing else ""))
    ids, head = offsets_to_ids(state["d2t"]), state["lm_head.weight"]
    if ids.shape[0] != size or head.shape[0] != size:
        raise SpecError(f"speculators drafter: d2t has {ids.shape[0]} entries and lm_head {head.shape[0]} rows, "
                        f"draft_vocab_size is {size}")
    t2d = state.get("t2d")
    if t2d is not None and (t2d.shape[0] != vocab or not torch.equal(t2d.bool().nonzero().flatten().cpu(), ids)):
        raise SpecError("speculators drafter: t2d and d2t name different draft vocabularies")
    return own, ids, head
