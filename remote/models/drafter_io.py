"""Load, save, build and check DFlash drafters in the published checkpoint format.

Contract: `save_drafter(drafter, dir)` writes `config.json` (Qwen3-style, `model_type: qwen3`, `architectures:
["DFlashDraftModel"]`, `block_size`, `num_target_layers`, `dflash_config: {target_layer_ids, mask_token_id}`) and
`model.safetensors` (published parameter names); `load_drafter(path)` reads that format from a directory or a
hub id, without `trust_remote_code`. `random_drafter(target, tokenizer, ...)` derives every shape from the target
config. `check_pair(drafter, target, tokenizer)` raises `SpecError` (one line, with the evidence) when the
drafter cannot serve the target; it is called before any decoding.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config
from transformers.utils import cached_file

from ..errors import SpecError
from ..file_checks import json_object, problem
from .drafter import DFlashDrafter, dflash_value

MASK_TOKEN = "<|MASK|>"
UNSUPPORTED = ("conv_kernel_size", "selector_rank")   # DFlash2 fields this module does not implement


def _config(raw: dict[str, Any]) -> Qwen3Config:
    raw = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map", "transformers_version")}
    config = Qwen3Config(**raw)
    for name in UNSUPPORTED:
        if dflash_value(config, name) is not None:
            raise SpecError(f"drafter has `{name}` (a DFlash2 drafter); only DFlash drafters are supported")
    if dflash_value(config, "mask_token_id") is None:
        raise SpecError("drafter config has no mask_token_id (expected in dflash_config)")
    return config


def _fetch(path: str, name: str, required: bool = True) -> Path | None:
    """`name` inside the directory or hub repo `path` (downloaded through transformers' hub cache)."""
    if os.path.isdir(path):
        found = Path(path) / name
        if not found.exists() and required:
            raise SpecError(f"drafter {path!r}: {found} does not exist")
        return found if found.exists() else None
    try:
        found = cached_file(path, name, _raise_exceptions_for_missing_entries=required)
    except (OSError, ValueError) as exc:          # no network, no such repo, gated, missing file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise SpecError(f"drafter {path!r}: {name} could not be fetched ({type(exc).__name__}: {first})") from None
    return Path(found) if found else None


def _state_dict(path: str) -> dict[str, torch.Tensor]:
    index = _fetch(path, "model.safetensors.index.json", required=False)
    if index is not None:
        weight_map = json_object(index).get("weight_map")   # (a broken index: SpecError naming it)
        if not isinstance(weight_map, dict):
            raise SpecError(f"drafter {path!r}: {index} has no weight_map")
        return {k: v for shard in sorted(set(weight_map.values())) for k, v in _weights(path, shard).items()}
    return _weights(path, "model.safetensors")


def _weights(path: str, name: str) -> dict[str, torch.Tensor]:
    """The tensors of the drafter's weights file `name`; a broken one is a SpecError that names it."""
    found = _fetch(path, name)
    if (wrong := problem(found)) is not None:
        raise SpecError(f"drafter {path!r}: {found} {wrong}")
    return load_file(str(found))


def load_drafter(path: str, dtype: torch.dtype, device: torch.device | str,
                 block_size: int | None = None) -> DFlashDrafter:
    found = _fetch(path, "config.json")
    if (wrong := problem(found)) is not None:
        raise SpecError(f"drafter {path!r}: {found} {wrong}")
    config = _config(json.loads(found.read_text(encoding="utf-8")))
    drafter = DFlashDrafter(config)
    state = _state_dict(path)
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpecError(f"drafter weights do not fit the DFlash layout: missing {sorted(missing)[:4]}, "
                        f"unexpected {sorted(unexpected)[:4]}")
    if block_size:
        drafter.block_size = int(block_size)
    return drafter.to(device=device, dtype=dtype).eval()


def save_drafter(drafter: DFlashDrafter, out_dir: str | os.PathLike) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = drafter.config.to_dict()
    raw.update(model_type="qwen3", architectures=["DFlashDraftModel"], block_size=drafter.block_size,
               num_target_layers=getattr(drafter.config, "num_target_layers", None))
    raw["dflash_config"] = {**(raw.get("dflash_config") or {}), "target_layer_ids": drafter.target_layer_ids,
                            "mask_token_id": drafter.mask_token_id}
    raw["dtype"] = str(next(drafter.parameters()).dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True, default=str) + "\n")
    state = {k: v.detach().contiguous().cpu() for k, v in drafter.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


def even_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """`count` target layers evenly spread over 0..N-2 (the last layer's output is the normed one)."""
    top = max(num_target_layers - 2, 0)
    if count == 1:
        return [num_target_layers // 2]
    return [round(i * top / (count - 1)) for i in range(count)]


def random_drafter(target: torch.nn.Module, tokenizer, overrides: dict[str, Any] | None, block_size: int | None,
                   seed: int) -> DFlashDrafter:
    """A drafter with random weights whose shape is derived from `target`'s config."""
    t = target.config.get_text_config()
    overrides = dict(overrides or {})
    dflash_overrides = dict(overrides.pop("dflash_config", None) or {})
    mask_id = dflash_overrides.pop("mask_token_id", None)
    mask_id = _mask_id_from_tokenizer(tokenizer) if mask_id is None else int(mask_id)
    layers = int(overrides.pop("num_hidden_layers", 2))
    raw: dict[str, Any] = dict(
        hidden_size=t.hidden_size, num_attention_heads=t.num_attention_heads,
        num_key_value_heads=getattr(t, "num_key_value_heads", None) or t.num_attention_heads,
        head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
        intermediate_size=t.intermediate_size, vocab_size=t.vocab_size, rms_norm_eps=getattr(t, "rms_norm_eps", 1e-6),
        max_position_embeddings=t.max_position_embeddings, hidden_act=getattr(t, "hidden_act", "silu"),
        num_hidden_layers=layers, num_target_layers=t.num_hidden_layers,
        block_size=int(block_size or overrides.pop("block_size", 8)),
        dflash_config={"target_layer_ids": even_layer_ids(t.num_hidden_layers, layers), "mask_token_id": mask_id},
    )
    for name in ("rope_parameters", "rope_theta", "rope_scaling"):
        if getattr(t, name, None) is not None:
            raw[name] = getattr(t, name)
    raw.update(overrides)
    raw["dflash_config"].update(dflash_overrides)
    config = _config(raw)
    weight = target.get_output_embeddings().weight     # the drafter sits with the LM head it feeds
    with torch.random.fork_rng(devices=[]), torch.device(weight.device):    # built there: large ones init fast
        torch.manual_seed(seed)
        drafter = DFlashDrafter(config)
        for name, p in drafter.named_parameters():
            if p.ndim == 2:
                torch.nn.init.normal_(p, std=getattr(config, "initializer_range", 0.02))
    return drafter.to(dtype=weight.dtype).eval()


def _mask_id_from_tokenizer(tokenizer) -> int:
    if tokenizer is None:
        raise SpecError("a random drafter needs a tokenizer with a <|MASK|> token to pick its mask_token_id")
    mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    if mask_id is None or mask_id == tokenizer.unk_token_id:
        raise SpecError(f"tokenizer has no {MASK_TOKEN} token for the random drafter's mask_token_id")
    return int(mask_id)


def check_pair(drafter: DFlashDrafter, target: torch.nn.Module, tokenizer) -> None:
    """Refuse a drafter that does not fit `target` (+ `tokenizer`): vocabulary, hidden size, layers, mask."""
    t, d = target.config.get_text_config(), drafter.config
    rows = target.get_input_embeddings().weight.shape[0]
    if d.vocab_size != t.vocab_size:
        raise SpecError(f"drafter vocab_size {d.vocab_size} != target vocab_size {t.vocab_size}")
    if d.hidden_size != t.hidden_size:
        raise SpecError(f"drafter hidden_size {d.hidden_size} != target hidden_size {t.hidden_size}")
    bad = [i for i in drafter.target_layer_ids if not 0 <= i < t.num_hidden_layers]
    if bad:
        raise SpecError(f"drafter target_layer_ids {drafter.target_layer_ids} has {bad} outside the target's "
                        f"layers 0..{t.num_hidden_layers - 1}")
    if drafter.block_size < 2:
        raise SpecError(f"drafter block_size must be >= 2, got {drafter.block_size}")
    _check_mask(drafter.mask_token_id, rows, tokenizer)


def _check_mask(mask_id: int, rows: int, tokenizer) -> None:
    # The mask token is only ever embedded, never tokenized: it needs an embedding row. Published Qwen3 drafters
    # use the first id past the tokenizer (151669), which upstream adds as `<|MASK|>`; an id inside the
    # tokenizer must be a mask token there, not an ordinary token.
    if not 0 <= mask_id < rows:
        raise SpecError(f"drafter mask_token_id {mask_id} has no row in the target embedding (0..{rows - 1})")
    if tokenizer is None or mask_id >= len(tokenizer):
        return
    token = tokenizer.convert_ids_to_tokens(mask_id)
    if token is None or "mask" not in str(token).lower():
        raise SpecError(f"tokenizer has no mask token at the drafter's mask_token_id {mask_id} "
                        f"(it holds {token!r}); expected {MASK_TOKEN}")
