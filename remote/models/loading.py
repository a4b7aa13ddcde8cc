"""Load the target model, its tokenizer and the drafter a run spec names.

Contract: `load_target(spec.model, seed, device)` returns an eval-mode `AutoModelForCausalLM`, either from a hub
id / local path (dtype, attention implementation, `device_map` for several GPUs) or built with random weights
from `model.random` (transformers config fields incl. `model_type`, under `torch.manual_seed(seed)`), on the GPU it
runs on (with a `device_map`: on the map's first GPU, then spread by remote.models.placement).
`load_tokenizer` returns the target's tokenizer, or the one shipped in `remote/assets/tokenizer` for random
models. `load_drafter_for` returns the published-format drafter at `drafter.path` or a random one derived from the
target. Anything that cannot be loaded as asked raises `SpecError`; a broken file (remote.file_checks) is named.
"""
from __future__ import annotations


import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .. import spec
from ..assets import ASSETS
from ..errors import SpecError, first_line
from ..file_checks import checkpoint_problem, local_dir, tokenizer_problem
from ..spec import DrafterSpec, ModelSpec
from .drafter import DFlashDrafter
from .drafter_io import load_drafter, random_drafter
from .placement import build_device, spread

SHIPPED_TOKENIZER = ASSETS / "tokenizer"
DTYPES = {name: getattr(torch, attr) for name, attr in spec.DTYPES.items()}


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise SpecError(f"dtype must be one of {', '.join(DTYPES)}; got {name!r}")
    return DTYPES[name]


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SpecError("device 'cuda' was asked for but torch sees no GPU on this host")
    if name not in ("cpu", "cuda"):
        raise SpecError(f"device must be one of auto, cpu, cuda; got {name!r}")
    return torch.device(name)


def _random_target(ms: ModelSpec, dtype: torch.dtype, seed: int) -> torch.nn.Module:
    fields = dict(ms.random)
    if "model_type" not in fields:
        raise SpecError("model.random needs a model_type (e.g. qwen3)")
    try:
        config = AutoConfig.for_model(**fields)
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"model.random is not a valid transformers config: {first_line(exc)}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=ms.attn_implementation)


def load_target(ms: ModelSpec, seed: int, device: torch.device) -> torch.nn.Module:
    dtype = parse_dtype(ms.dtype)
    device_map = ms.device_map if device.type == "cuda" else None
    if ms.random:
        # built where it will run: billions of CPU initialisations would take minutes
        with torch.device(build_device(device_map, device)):
            model = _random_target(ms, dtype, seed)
        if device_map is not None:
            model = spread(model, device_map)
    elif ms.path:
        _refuse_broken(f"target {ms.path!r}", checkpoint_problem, ms.path, ms.revision)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                ms.path, dtype=dtype, attn_implementation=ms.attn_implementation, device_map=device_map,
                revision=ms.revision, trust_remote_code=ms.trust_remote_code)
        except Exception as exc:   # a hub id's files arrive only now: one of them may be what is broken
            _refuse_broken(f"target {ms.path!r}", checkpoint_problem, ms.path, ms.revision)
            if not isinstance(exc, (OSError, ValueError)):
                raise
            raise SpecError(f"target {ms.path!r} could not be loaded: {first_line(exc)}") from None
        if device_map is None:
            model = model.to(device)
    else:
        raise SpecError("model needs either `path` (hub id or directory) or `random` (config fields)")
    return model.eval()


def load_tokenizer(ms: ModelSpec):
    name = ms.tokenizer or (str(SHIPPED_TOKENIZER) if ms.random else ms.path)
    revision = None if ms.tokenizer or ms.random else ms.revision
    _refuse_broken(f"tokenizer {name!r}", tokenizer_problem, name, revision, probe="tokenizer_config.json")
    try:
        return AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=ms.trust_remote_code)
    except Exception as exc:   # as load_target's
        _refuse_broken(f"tokenizer {name!r}", tokenizer_problem, name, revision, probe="tokenizer_config.json")
        if not isinstance(exc, (OSError, ValueError)):
            raise
        raise SpecError(f"tokenizer {name!r} could not be loaded: {first_line(exc)}") from None


def _refuse_broken(what: str, check, name: str, revision: str | None, probe: str = "config.json") -> None:
    """SpecError naming the broken file, where `check` finds one among the files of `name` on this host (a local
    directory, or what the hub cache has of it)."""
    directory = local_dir(name, revision, probe)
    if directory is not None and (found := check(directory)) is not None:
        raise SpecError(f"{what}: {found}")


def load_drafter_for(ds: DrafterSpec, target: torch.nn.Module, tokenizer, seed: int) -> DFlashDrafter:
    """The drafter for decoding (its projections fused: `DFlashDrafter.fuse_projections`)."""
    if ds.path:
        weight = target.get_output_embeddings().weight
        return load_drafter(ds.path, weight.dtype, weight.device, ds.block_size).fuse_projections()
    if ds.random is not None:
        return random_drafter(target, tokenizer, ds.random, ds.block_size, seed + 1).fuse_projections()
    raise SpecError("this method needs a drafter: set drafter.path (published DFlash checkpoint) or drafter.random")
