"""The run spec: the one versioned document that crosses from the orchestrator to the runner.

Contract: `RunSpec.to_json()` / `RunSpec.from_json()` round-trip exactly; an unknown `version` or a missing
field is refused with a message naming it. Non-goal: validation of values (the orchestrator does that before
anything starts; the runner re-checks what only it can see, such as a drafter that does not fit its target).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .errors import SpecError

SPEC_VERSION = 1


class Method(str, Enum):
    """A decoding method. Every decision that depends on the method asks this type; spec.json carries its value
    (`"method": "ddtree"`), and a member equals and hashes as that string."""

    AR = "ar"            # plain KV-cached decoding: one target forward per token
    DFLASH = "dflash"    # the drafter's block, its argmax at every position, verified as a chain
    DDTREE = "ddtree"    # a best-first tree of the drafter's candidates verified in one forward

    __str__ = str.__str__           # "ddtree" in messages and f-strings, on every Python version
    __format__ = str.__format__
    __hash__ = str.__hash__          # a dict keyed by names finds a member, and the other way round

    @classmethod
    def parse(cls, name: "str | Method") -> "Method":
        """The member named `name`; a SpecError naming the valid choices for anything else."""
        try:
            return cls(name)
        except ValueError:
            raise SpecError(f"method must be one of {', '.join(METHODS)}; got {name!r}") from None

    @property
    def uses_drafter(self) -> bool:
        """Speculative: a drafter proposes, the target verifies (a step emits up to a block of tokens)."""
        return self is not Method.AR

    @property
    def builds_tree(self) -> bool:
        """Verifies a tree of a node budget (`tree_budget`, or tree_budget=auto's choice), not a chain."""
        return self is Method.DDTREE


METHODS = tuple(m.value for m in Method)
BASELINES = (Method.AR.value, "none")    # decoding.baseline: also run AR on the same prompts, or not
DEVICE_MAP_PRESETS = ("auto", "balanced", "balanced_low_0", "sequential")   # accelerate's, as in from_pretrained
# The names the runner accepts, here so that the orchestrator checks them without importing torch or transformers:
# dtype name -> torch attribute (remote.models.loading.DTYPES), dataset names (remote.prompts.NAMES), and the
# attention implementations transformers' from_pretrained takes by name (remote.kernels.step's "grouped_sdpa" is
# not one: the captured steps swap it in for sdpa themselves, and transformers refuses it at load time).
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
DATASETS = ("builtin", "humaneval", "jsonl", "hub")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4",
                        "flex_attention")


@dataclass
class ModelSpec:
    """The target model: a hub id or local path, or a random model built from `random` config fields."""

    path: str | None = None            # hub id or local directory; None with `random`
    random: dict[str, Any] | None = None   # transformers config fields incl. `model_type`, seeded by RunSpec.seed
    tokenizer: str | None = None       # hub id / path; None = the target's own, or the shipped one for random models
    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    device_map: Any = None             # None (one device), a DEVICE_MAP_PRESETS name, or {module name: GPU index}
    trust_remote_code: bool = False
    revision: str | None = None


# The text a reduced draft vocabulary is counted on unless the run names one: 1 MB of the host Python's own
# standard-library sources, read at run time (remote.calibration.stdlib_text)
CALIBRATION = "stdlib"


@dataclass
class DrafterSpec:
    """A DFlash drafter in the published (or speculators) format, or a random one whose shape is derived from the
    target."""

    path: str | None = None
    random: dict[str, Any] | None = None   # drafter overrides (num_hidden_layers, block_size, ...)
    block_size: int | None = None          # None = the checkpoint's
    draft_vocab: int | None = None         # N: the head over the N target tokens most frequent in `calibration`
    calibration: str = CALIBRATION         # a text file on the host, assets:<shipped>, or "stdlib"


@dataclass
class DecodingSpec:
    method: str = "ar"                     # a Method's value
    tree_budget: int | str = 63            # ddtree's node budget, or "auto": chosen per step (decoding.auto_budget)
    tree_budget_max: int = 63              # tree_budget=auto: the largest budget it may choose (README says why)
    max_new_tokens: int = 64
    temperature: float = 0.0
    baseline: str = "ar"                   # "ar": also run AR on the same prompts (in turns); "none": skip it
    warmup: int = 1                        # warm-up generations per method before timing
    repeats: int = 1                       # timed passes over every prompt (all methods); spread across them reported
    cuda_graphs: bool = True               # replay each step as a CUDA graph where supported (remote.decoding.graph)
    compile_steps: bool = False            # also torch.compile each graphed step (kernel fusion; compiles per shape)
    compile_drafter: bool = True           # torch.compile the graphed steps' drafter and the target's glue

    @property
    def auto_budget(self) -> bool:
        return self.method == Method.DDTREE and self.tree_budget == "auto"

    @property
    def methods(self) -> list[Method]:
        """What a run decodes, taking turns: AR unless baseline=none (method=ar: one AR pass serves as both), then
        the method. A SpecError for an unknown method."""
        method = Method.parse(self.method)
        ar = [Method.AR] if self.baseline == Method.AR or not method.uses_drafter else []
        return ar + ([method] if method.uses_drafter else [])

    @property
    def widest_budget(self) -> int:
        """The most nodes a step may verify: what caches are sized for."""
        return self.tree_budget_max if self.tree_budget == "auto" else self.tree_budget


@dataclass
class DatasetSpec:
    name: str = "builtin"                  # builtin | humaneval | jsonl | hub
    path: str | None = None                # jsonl file, or hub dataset id
    split: str | None = None
    field: str = "prompt"
    num_prompts: int | None = None
    chat_template: bool = False
    subset: str | None = None


@dataclass
class EngineSpec:
    """A serving engine's own decoding (remote.engines): its server started by the runner, the run's prompts sent
    to its OpenAI-compatible API. Absent (None) for our runner's methods."""

    kind: str = "vllm"                     # an ENGINES name: how its server is started and its counters read
    speculative: dict[str, Any] | None = None   # passed through as the engine's speculative config; None: none
    drafter_into: str | None = None        # the speculative key our drafter's resolved path goes to (vLLM: model)
    command: list[str] | None = None       # kind openai: the server's argv ({port} and {model} filled in)
    url: str | None = None                 # kind openai: its base URL ({port} filled in)
    python: str | None = None              # the engine's interpreter; None: the runner's own
    port: int | None = None                # None: a free port
    tensor_parallel: int = 1
    dtype: str | None = None               # None: the target's dtype
    max_model_len: int | None = None
    enforce_eager: bool = False
    extra_args: list[str] = field(default_factory=list)
    start_timeout: float = 600.0           # seconds for the server to answer before the run fails with its last lines
    concurrency: list[int] = field(default_factory=lambda: [1])   # streams at once, one level after another
    ignore_eos: bool = False
    reference: bool = True                 # where the engine drafts with our DFlash drafter: our runner's DFlash too


ENGINES = ("vllm", "sglang", "openai")


@dataclass
class RunSpec:
    run_id: str
    model: ModelSpec
    drafter: DrafterSpec
    decoding: DecodingSpec
    dataset: DatasetSpec
    seed: int = 0
    device: str = "auto"                   # auto | cpu | cuda
    version: int = SPEC_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    engine: EngineSpec | None = None       # an engine arm; None (and absent from older spec.json files): our runner

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"spec is a JSON {type(data).__name__}, not an object")
        version = data.get("version")
        if version != SPEC_VERSION:
            raise ValueError(f"spec version {version!r} is not supported (this runner reads {SPEC_VERSION})")
        parts = {"model": ModelSpec, "drafter": DrafterSpec, "decoding": DecodingSpec, "dataset": DatasetSpec,
                 "engine": EngineSpec}
        try:
            kwargs = {k: (parts[k](**v) if k in parts and v is not None else v) for k, v in data.items()}
            return cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"spec is malformed: {exc}") from None
