"""What a run measures (its arm), as a type: our runner's AR, DFlash and DDTree, a serving engine's own decoding
(Engine: vLLM, SGLang, any OpenAI-compatible server, with or without its speculative method), or a user's script.

Contract: `arm_of(cfg)` is the one place a config's `runner.kind` and `method` (its `name`, or its `engine` for an
engine arm) become a type; `method_named(tag, tags)` the same for a run already logged (its `method` tag, and its
`engine` tag for an engine arm; None for a tag that is none of these). Whatever
depends on the kind of arm is asked of the arm: whether it reads a drafter or a tree budget, how its runs are named
(`ddtree-b63-demo-qwen3`, `dflash-bs16-...`, `script-<stem>`), its tags, which config keys its runner does not read
(`unread`: they are neither logged as its params nor part of its effective config) and so which it logs as params.
A new kind of arm is a new class here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

from remote import assets
from remote.spec import ENGINES, DrafterSpec, RunSpec


@dataclass(frozen=True)
class Arm:
    tag: ClassVar[str]                    # the `method` tag and param value
    uses_drafter: ClassVar[bool] = False
    builds_tree: ClassVar[bool] = False   # reads tree_budget (and tree_budget_max under auto)
    ours: ClassVar[bool] = True           # our runner (remote/) produces its results and outputs
    engine: ClassVar[str | None] = None   # the serving engine whose own decoding this arm measures; None: ours
    baseline: ClassVar[bool] = False      # AR: what the others are compared with (tau 1, no drafter, no baseline)
    named_keys: ClassVar[frozenset[str]] = frozenset()   # swept keys its base name already says

    def label(self) -> str:
        """What ran, as the end of the run dir's name."""
        return self.tag

    def name_parts(self, spec: RunSpec) -> list[str]:
        """Its run name's words before the model's."""
        return [self.tag]

    def tags(self) -> dict[str, str]:
        return {"method": self.tag}

    def unread(self, config: Mapping[str, Any]) -> frozenset[str]:
        """Top-level config keys the runner does not read for this arm: a tree's budgets for a method that builds
        none, tree_budget_max unless tree_budget=auto, the drafter of an arm that drafts with none, the baseline of
        a baseline (one AR pass serves as both) and the engine flags of our own runner's arms."""
        unread = set() if self.builds_tree else {"tree_budget", "tree_budget_max"}
        if config.get("tree_budget") != "auto":
            unread.add("tree_budget_max")
        if not self.uses_drafter:
            unread.add("drafter")
        if self.baseline:
            unread.add("baseline")
        if self.engine is None:
            unread.add("engine")
        return frozenset(unread)

    def params(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The resolved config (Hydra's own node left out) as this arm's run logs it: without what it does not
        read (`unread`), which would claim a setting the run never used."""
        unread = self.unread(config)
        return {k: v for k, v in config.items() if k != "hydra" and k not in unread}


@dataclass(frozen=True)
class AR(Arm):
    tag: ClassVar[str] = "ar"
    baseline: ClassVar[bool] = True


@dataclass(frozen=True)
class DFlash(Arm):
    tag: ClassVar[str] = "dflash"
    uses_drafter: ClassVar[bool] = True
    named_keys: ClassVar[frozenset[str]] = frozenset({"drafter.block_size"})

    def name_parts(self, spec: RunSpec) -> list[str]:
        size = block_size(spec.drafter)
        return [self.tag] if size is None else [self.tag, f"bs{size}"]


@dataclass(frozen=True)
class DDTree(Arm):
    tag: ClassVar[str] = "ddtree"
    uses_drafter: ClassVar[bool] = True
    builds_tree: ClassVar[bool] = True

    def name_parts(self, spec: RunSpec) -> list[str]:
        return [self.tag, f"b{spec.decoding.tree_budget}"]


# What a user's script run is made of (its argv, where and on which GPUs it ran, how it was followed); the model,
# method, dataset and decoding knobs are our runner's, and logged for a script they would claim what it did not run.
SCRIPT_PARAMS = ("runner", "host", "gpus", "pool", "tracking", "force", "fail_fast", "stall_warning", "stall_timeout",
                 "objective")


@dataclass(frozen=True)
class Script(Arm):
    """`runner=script`: a user's own runner script, launched instead of ours; it brings its own model and method."""

    tag: ClassVar[str] = "script"
    ours: ClassVar[bool] = False
    path: str | None = None
    args: tuple[str, ...] = ()

    def label(self) -> str:
        """`script-<stem>` (`script` while its path is not given yet: Hydra names the run dir before validation)."""
        return f"script-{Path(self.path).stem}" if self.path else self.tag

    def name_parts(self, spec: RunSpec) -> list[str]:
        return [self.label()]

    def tags(self) -> dict[str, str]:
        return {"method": self.tag, "script": Path(str(self.path)).name}

    def unread(self, config: Mapping[str, Any]) -> frozenset[str]:
        return frozenset(k for k in config if k not in SCRIPT_PARAMS)

    def params(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k in SCRIPT_PARAMS}

    def file(self) -> Path:
        return Path(str(self.path)).expanduser().resolve()


ENGINE_KINDS = ENGINES     # the runner's engine kinds (remote.engines.kinds)


@dataclass(frozen=True)
class Engine(Arm):
    """`method=vllm`, `vllm-dflash`, `vllm-spec`, `sglang-mtp`, `openai`, ...: a serving engine's server started by
    our runner on the host (remote.engines), the run's prompts sent to it; its run's tag is the option's name."""

    name: str = "vllm"
    kind: str = "vllm"                   # ENGINE_KINDS: how the runner starts and reads it
    speculative: bool = False            # it has a speculative config (else it is the engine's own AR)
    drafter_into: str | None = None      # the speculative config's key our drafter's path goes to

    @property
    def tag(self) -> str:                # type: ignore[override]
        return self.name

    @property
    def engine(self) -> str:             # type: ignore[override]
        return self.kind

    @property
    def uses_drafter(self) -> bool:      # type: ignore[override]
        return self.drafter_into is not None

    @property
    def baseline(self) -> bool:          # type: ignore[override]
        return not self.speculative

    @property
    def needs_command(self) -> bool:
        """Any OpenAI-compatible server: the arm brings the command that starts it and the URL it answers at."""
        return self.kind == "openai"   # remote.spec.ENGINES: the kind that starts any command

    def tags(self) -> dict[str, str]:
        return {"method": self.name, "engine": self.kind}


METHODS: dict[str, type[Arm]] = {cls.tag: cls for cls in (AR, DFlash, DDTree)}


def method_named(tag: str | None, tags: Mapping[str, str] | None = None) -> type[Arm] | None:
    """Our method's class for a logged run's `method` tag; Engine for a run tagged with an `engine`."""
    if tags and tags.get("engine") in ENGINE_KINDS:
        return Engine
    return METHODS.get(tag) if isinstance(tag, str) else None


def logged_baseline(tags: Mapping[str, str], params: Mapping[str, str]) -> bool:
    """Whether a logged run measured a baseline, what the others are compared with: our AR, or an engine arm
    without a speculative config (the engine's own AR)."""
    arm = method_named(tags.get("method") or params.get("method.name"), tags)
    if arm is Engine:
        return params.get("method.speculative") in (None, "None")   # logged as a param: `None` when there is none
    return arm is not None and arm.baseline


def arm_of(cfg) -> Arm:
    """The arm a composed config (a DictConfig or a mapping) describes; its values are checked elsewhere
    (orchestrator.config.validate): an unknown method here is AR's class only until validation refuses it."""
    runner = cfg.get("runner") or {}
    if runner.get("kind") == Script.tag:
        path = runner.get("path") if "path" in runner and not _missing(runner, "path") else None
        return Script(path=str(path) if path else None, args=tuple(str(a) for a in runner.get("args") or ()))
    method = cfg.get("method") or {}
    if method.get("engine") is not None:
        speculative = method.get("speculative") if not _missing(method, "speculative") else {"?": "?"}
        return Engine(name=str(method.get("name")), kind=str(method.get("engine")), speculative=bool(speculative),
                      drafter_into=method.get("drafter_into"))
    return METHODS.get(str(method.get("name")), AR)()


def _missing(node, key: str) -> bool:
    """A `???` value (OmegaConf raises on reading it)."""
    from omegaconf import OmegaConf

    return OmegaConf.is_config(node) and OmegaConf.is_missing(node, key)


def block_size(drafter: DrafterSpec) -> int | None:
    """The DFlash block size a drafter gives: its `block_size`, a random drafter's, or a shipped checkpoint's
    config.json; None when only a hub download would tell."""
    size = drafter.block_size or (drafter.random or {}).get("block_size")
    if size is None and assets.is_asset(drafter.path) and assets.problem(drafter.path) is None:
        try:
            with open(f"{assets.resolve(drafter.path)}/config.json", encoding="utf-8") as file:
                size = json.load(file).get("block_size")
        except (OSError, ValueError):
            return None
    return size if isinstance(size, int) else None
