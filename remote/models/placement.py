"""A target spread over several GPUs (`model.device_map`): placing a random model, and saying where it went.

Contract: `spread(model, device_map)` places a model built whole on one GPU the way `from_pretrained(device_map=
...)` leaves a loaded one: accelerate's placement ("auto" / "balanced" / "balanced_low_0": balanced over the
visible GPUs; "sequential": filling them in order; or a dict module name -> device), its hooks moving activations
between devices, the map in `model.hf_device_map`. Weights that would land off the GPUs are refused: a target
decoded here needs every weight on a GPU. `describe(model)` is the split in one line for the run's tags; ""
when the model sits on one device. `devices(model)`: the devices its parameters are on.
"""
from __future__ import annotations

import re

import torch

from ..errors import SpecError
from ..spec import DEVICE_MAP_PRESETS


def devices(model: torch.nn.Module) -> set[torch.device]:
    return {p.device for p in model.parameters()}


def build_device(device_map, device: torch.device) -> torch.device:
    """Where to build a random model: `device`, or with a map (that `spread` then applies) the map's first GPU
    (the first visible one for a preset)."""
    if device_map is None:
        return device
    if isinstance(device_map, dict) and device_map:
        first = next(iter(device_map.values()))
        return torch.device(f"cuda:{first}" if isinstance(first, int) else first)
    return torch.device("cuda", 0)


def spread(model: torch.nn.Module, device_map) -> torch.nn.Module:
    try:
        from accelerate import dispatch_model, infer_auto_device_map
        from accelerate.utils import get_balanced_memory
    except ImportError:
        raise SpecError("model.device_map needs accelerate on the host (pip install accelerate)") from None
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAP_PRESETS:
            raise SpecError(f"model.device_map must be one of {', '.join(DEVICE_MAP_PRESETS)} or a mapping; "
                            f"got {device_map!r}")
        no_split = model._no_split_modules
        memory = None if device_map == "sequential" else get_balanced_memory(
            model, no_split_module_classes=no_split, low_zero=device_map == "balanced_low_0")
        device_map = infer_auto_device_map(model, max_memory=memory, no_split_module_classes=no_split)
    off = sorted({str(d) for d in device_map.values() if str(d) in ("cpu", "disk", "meta")})
    if off:
        raise SpecError(f"model.device_map puts weights on {', '.join(off)}: the target does not fit the visible "
                        f"GPUs (CUDA_VISIBLE_DEVICES / gpus)")
    # as from_pretrained does: the hooks leave the cache argument where it is
    return dispatch_model(model, device_map=dict(device_map),
                          skip_keys=getattr(model, "_skip_keys_device_placement", None))


def describe(model: torch.nn.Module) -> str:
    """e.g. 'cuda:0: model.embed_tokens, model.layers.0-30; cuda:1: model.layers.31-63, model.norm, lm_head'."""
    placed = getattr(model, "hf_device_map", None) or {}
    if len({str(d) for d in placed.values()}) < 2:
        return ""
    groups: dict[str, list[str]] = {}
    for name, device in placed.items():
        groups.setdefault(f"cuda:{device}" if isinstance(device, int) else str(device), []).append(name)
    return "; ".join(f"{device}: {', '.join(_ranges(names))}" for device, names in groups.items())


def _ranges(names: list[str]) -> list[str]:
    """Runs of numbered siblings folded: model.layers.0 .. model.layers.30 -> model.layers.0-30."""
    out: list[tuple[str, int, int] | str] = []
    for name in names:
        match = re.fullmatch(r"(.*\.)(\d+)", name)
        if match:
            prefix, index = match.group(1), int(match.group(2))
            last = out[-1] if out else None
            if isinstance(last, tuple) and last[0] == prefix and last[2] == index - 1:
                out[-1] = (prefix, last[1], index)
                continue
            out.append((prefix, index, index))
        else:
            out.append(name)
    return [x if isinstance(x, str) else f"{x[0]}{x[1]}" + (f"-{x[2]}" if x[2] != x[1] else "") for x in out]
