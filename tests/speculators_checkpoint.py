"""A DFlash drafter written in the speculators format (vllm-project/speculators' `DFlashDraftModel.save_pretrained`
layout, which vLLM loads), for tests: config.json with `speculators_model_type: dflash`, the draft layers'
`transformer_layer_config`, `draft_vocab_size`, `aux_hidden_state_layer_ids` (HF hidden-state indices: a target
layer id + 1) and `speculators_config`; model.safetensors with the draft body, `lm_head.weight` [N, H] (the
verifier's rows at the draft vocabulary), `d2t` (offsets: target id = draft id + d2t[i]), `t2d` ([V] bool) and the
verifier's `embed_tokens.weight`, as speculators' converter fills them."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from remote.models.drafter import DFlashDrafter


def save_speculators(drafter: DFlashDrafter, target: torch.nn.Module, ids: torch.Tensor, out_dir: Path) -> Path:
    """`drafter` (the published layout) with the draft vocabulary `ids` (ascending target ids) of `target`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    layer = {k: v for k, v in drafter.config.to_dict().items()
             if k not in ("architectures", "block_size", "dflash_config", "num_target_layers", "auto_map")}
    layer["model_type"] = "qwen3"
    n, vocab = ids.shape[0], target.config.vocab_size
    raw = {
        "speculators_model_type": "dflash", "architectures": ["DFlashSpeculator"], "speculators_version": "0.5.0",
        "transformer_layer_config": layer, "draft_vocab_size": n, "block_size": drafter.block_size,
        "aux_hidden_state_layer_ids": [i + 1 for i in drafter.target_layer_ids],
        "mask_token_id": drafter.mask_token_id, "target_hidden_size": None, "sample_from_anchor": False,
        "sliding_window_non_causal": False,
        "speculators_config": {"algorithm": "dflash", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": drafter.block_size - 1}],
                               "verifier": {"name_or_path": "demo-qwen3", "architectures": ["Qwen3ForCausalLM"]}},
    }
    (out / "config.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
    head = target.get_output_embeddings().weight.detach()
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    state = {k: v.detach().contiguous().cpu() for k, v in drafter.state_dict().items()}
    state.update({"lm_head.weight": head[ids].contiguous().cpu(), "d2t": ids - torch.arange(n), "t2d": t2d,
                  "embed_tokens.weight": target.get_input_embeddings().weight.detach().contiguous().cpu()})
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
