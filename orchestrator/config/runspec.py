"""From the composed Hydra config to the run spec the runner reads (remote.spec.RunSpec)."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec

from .validate import method_needs_drafter


def _plain(node):
    """Config nodes as plain dicts/lists; scalars (device_map: auto) as they are."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def build_spec(cfg: DictConfig, run_id: str) -> RunSpec:
    m, d, ds = cfg.model, cfg.drafter, cfg.dataset
    model = ModelSpec(
        path=m.path, random=_plain(m.get("random")), tokenizer=m.get("tokenizer"), dtype=m.dtype,
        attn_implementation=m.attn_implementation, device_map=_plain(m.get("device_map")),
        trust_remote_code=bool(m.get("trust_remote_code", False)), revision=m.get("revision"),
    )
    uses_drafter = method_needs_drafter(cfg.method.name)
    drafter = DrafterSpec(
        path=d.path if uses_drafter else None,
        random=_plain(d.get("random")) if uses_drafter else None,
        block_size=d.get("block_size"),
    )
    decoding = DecodingSpec(
        method=cfg.method.name, tree_budget=cfg.tree_budget,
        tree_budget_max=cfg.get("tree_budget_max", DecodingSpec.tree_budget_max), max_new_tokens=cfg.max_new_tokens,
        temperature=float(cfg.temperature), baseline=cfg.baseline, warmup=cfg.warmup,
        repeats=cfg.get("repeats", 1),
        cuda_graphs=bool(cfg.get("cuda_graphs", True)), compile_steps=bool(cfg.get("compile_steps", False)),
        compile_drafter=bool(cfg.get("compile_drafter", True)),
    )
    dataset = DatasetSpec(
        name=ds.name, path=ds.get("path"), split=ds.get("split"), field=ds.get("field", "prompt"),
        num_prompts=cfg.get("num_prompts"), chat_template=bool(ds.get("chat_template", False)),
        subset=ds.get("subset"),
    )
    return RunSpec(run_id=run_id, model=model, drafter=drafter, decoding=decoding, dataset=dataset,
                   seed=cfg.seed, device=cfg.device)
