"""`Target` for hybrid models that interleave full attention with Gated DeltaNet (GDN) linear attention.

Covers Qwen3.5 / Qwen3.6 (`qwen3_5_text` = `Qwen3_5ForCausalLM`, `qwen3_5` = `Qwen3_5ForConditionalGeneration` whose
text model decodes, and the MoE variants `qwen3_5_moe(_text)`) and `qwen3_next`. Keeps the `remote.models.target.Target`
contract exactly: every node of a verified tree gets the logits and features of a plain forward over its ancestor
path, and `commit(path)` leaves the state a plain forward over prefix + path would leave. On reserved state
(remote.decoding.graph.HybridGraphDecoder): after `reserve(capacity)` every state keeps its storage (prefills and
commits copy into it), and `decode` (one AR token) / `verify_static` + `commit_static` (a DFlash chain or a DDTree
tree) run at a device-side prefix length with no host value, so each step can be captured as a CUDA graph.
Features are the outputs of decoder layers `target_layer_ids` (0-based), i.e. HF `hidden_states[layer_id + 1]`
(for the last layer that is the final-norm output, as in HF). Logits are float32.
Non-goals: batch > 1; prompts with images or video (the multimodal model is driven as a text decoder, so positions
are plain text positions); CPU/disk offload of weights (layers may sit on several GPUs: each layer's state lives on
that layer's device).
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..errors import SpecError
from ..kernels.gdn_paths import select_gdn_kernels
from ..kernels.glue import active, output_gate
from ..kernels.step import attend, step_mask
from ..tree import Ancestry
from .gdn import TreeLayout, gdn_sequence, gdn_step, gdn_tree, keeps_nodes
from .gdn_stack import GdnStack
from .layer_loop import run_layers
from .placement import devices
from .static_cache import move_rows
from .target import Target, Verified

# The range is what tests/test_hybrid_*.py passed on (CPU, torch path; TRANSFORMERS_CHECKED). Below it the modeling
# modules were not tried (5.2-5.4 also build Qwen3.5 caches differently); above it they are unread.
TRANSFORMERS_MIN = "5.16.1"
TRANSFORMERS_BELOW = "5.26.0"
TRANSFORMERS_CHECKED = ("5.16.1", "5.17.0", "5.18.0", "5.20.2", "5.22.2", "5.23.0", "5.24.0", "5.25.0")
SUPPORTED_MODEL_TYPES = ("qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe", "qwen3_next")


def check_transformers_version(version: str | None = None) -> None:
    """Raise a one-line SpecError naming the installed version and the supported range when outside it."""
    from packaging.version import Version

    import transformers

    installed = version or transformers.__version__
    if not Version(TRANSFORMERS_MIN) <= Version(installed) < Version(TRANSFORMERS_BELOW):
        raise SpecError(
            f"HybridTarget supports transformers >={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW} "
            f"(checked: {', '.join(TRANSFORMERS_CHECKED)}); installed is {installed}"
        )


class _KV:
    """One full-attention layer's K/V, written by position. keys/values [1, Hkv, capacity, D]."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    @classmethod
    def for_layer(cls, attn: torch.nn.Module, capacity: int) -> "_KV":
        keys = _zeros(attn, 1, capacity)
        return cls(keys, torch.zeros_like(keys))

    @classmethod
    def reserved(cls, attns: dict[int, torch.nn.Module], capacity: int) -> tuple[dict[int, "_KV"], list[torch.Tensor]]:
        """Every layer of `attns` with K/V of `capacity` rows, those on one device views of one store [2 x layers,
        Hkv, capacity, D] (the j-th layer's keys at 2j, values at 2j + 1); and the stores. At Qwen3.6-27B widths a
        commit moving each layer's rows took 4 kernels a layer, 0.35 ms of a 1.1 ms commit (one H200, 2026-12-03,
        `gpu_suite.sh q27b_kernels`)."""
        on: dict[torch.device, list[int]] = {}
        for i, attn in attns.items():
            on.setdefault(attn.k_proj.weight.device, []).append(i)
        kvs, stores = {}, []
        for ids in on.values():
            store = _zeros(attns[ids[0]], 2 * len(ids), capacity)
            stores.append(store)
            kvs.update({i: cls(store[2 * j, None], store[2 * j + 1, None]) for j, i in enumerate(ids)})
        return kvs, stores

    def write(self, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        end = start + k.shape[2]
        if end > self.keys.shape[2] and self.keys._base is not None:     # a view of a reserved store
            raise RuntimeError(f"reserved K/V of {self.keys.shape[2]} rows cannot take rows up to {end}")
        if end > self.keys.shape[2]:  # grow by doubling: amortised O(1) per token, rare copies
            grow = max(end, 2 * self.keys.shape[2]) - self.keys.shape[2]
            self.keys = F.pad(self.keys, (0, 0, 0, grow))
            self.values = F.pad(self.values, (0, 0, 0, grow))
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v

    def put(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write T tokens' K/V at the device rows `slots` [T] (no host value: graph-capturable)."""
        self.keys.index_copy_(2, slots, k)
        self.values.index_copy_(2, slots, v)


def _zeros(attn: torch.nn.Module, n: int, capacity: int) -> torch.Tensor:
    """[n, Hkv, capacity, D] zeros for the K/V of attention module `attn`."""
    weight = attn.k_proj.weight
    return torch.zeros(n, weight.shape[0] // attn.head_dim, capacity, attn.head_dim, dtype=weight.dtype,
                       device=weight.device)


@dataclass
class Static:
    """T tokens on reserved state (`HybridTarget.reserve`) at cache rows start .. start+T-1 (`start` a [] long on
    the device), `visible` [T, capacity] bool: which cache rows each sees. `layout`: None for one AR token, else
    the verified tree's (or chain's) TreeLayout, whose GDN node states `states` collects for `commit_static`."""

    start: torch.Tensor
    visible: torch.Tensor
    layout: TreeLayout | None = None
    states: dict = field(default_factory=dict)
    mask: torch.Tensor | None = None        # `visible` as every attention layer reads it (`HybridTarget._static`)
    rows: torch.Tensor | None = None        # [T] the cache rows start.. (made once a step, as `mask`, if not given)
    positions: torch.Tensor | None = None   # [T] a verify's start + depth (made by `verify_static` if not given)


# Why not the model's own forward: an attention mask cannot mask a recurrence, so a flattened tree would hand each
# GDN node the state of whatever came before it in list order; `crop()` cannot roll a recurrent state back; and a
# bare `DynamicCache()` crashes on these models. So this class runs its own layer loop over the model's submodules
# (weights shared, nothing copied) and holds the per-layer state itself:
# - full-attention layers: a K/V buffer written by position ([1, Hkv, capacity, D] per layer; once reserved, views of
#   one store per device, so a commit moves every layer's rows in two kernels). Verify writes the tree's K/V after
#   the committed prefix and attends with an ancestor-only mask at positions prefix_len + depth; commit moves the
#   accepted rows to the front of that window (compaction), so rejected rows are simply overwritten next time.
# - GDN layers: conv state [1, C, K] and recurrent state [1, HV, Dk, Dv] float32 (transformers' layouts). Verify
#   runs every node from its parent's state (`remote.models.gdn`), commit installs the accepted node's. Once
#   reserved, the layers of a device are views of one stack (remote.models.gdn_stack), so where the node states are
#   kept a commit installs every layer's in two gathers.
# Cost: the recurrence is one kernel call per GDN layer and verify (on CUDA with Triton remote.kernels.gdn_tree, or
# remote.kernels.gdn_chunked for chains and for trees at wide layers; else every node's root-to-node path as one
# sequence of the tree's height), reading nothing back to the host. Per-node states (HV x Dk x Dv float32: 3 MiB
# per node and layer at Qwen3.6-27B widths) are kept for commit only while they fit remote.models.gdn.KEEP_LIMIT;
# otherwise commit recomputes the accepted node's state from the committed one, in one call per layer (the chunked
# form keeps per-node corrections instead, from which one launch builds it).
class HybridTarget(Target):
    """A hybrid (attention + GDN) transformers model decoding one sequence; see the module docstring and the comment
    above."""

    def __init__(self, model: torch.nn.Module, target_layer_ids: list[int] | None, *, kernels: str = "auto"):
        check_transformers_version()
        model_type = getattr(model.config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise SpecError(
                f"HybridTarget supports model types {', '.join(SUPPORTED_MODEL_TYPES)} (got {model_type!r})"
            )
        inner = model.model
        self.decoder = getattr(inner, "language_model", inner)   # the text model: embed_tokens, layers, norm, rotary
        self.lm_head = model.lm_head
        self.config = self.decoder.config
        self.layer_types = list(self.config.layer_types)[: self.config.num_hidden_layers]
        n_layers = len(self.layer_types)
        target_layer_ids = list(target_layer_ids or [])
        bad = [i for i in target_layer_ids if not 0 <= i < n_layers]
        if bad:
            raise SpecError(f"target_layer_ids {bad} out of range: the model has {n_layers} layers "
                            f"(0..{n_layers - 1})")
        if any(p.device.type == "meta" for p in model.parameters()):
            raise SpecError("HybridTarget needs every weight on a real device (offloaded or meta weights are "
                            "not supported)")
        self.target_layer_ids = target_layer_ids
        self.model = model.eval()
        # Qwen3.5's rotary is multimodal (mrope): it takes [3, B, T] positions; text positions are the same in all 3.
        self._mrope = hasattr(self.decoder.rotary_emb, "mrope_section")
        self._modeling = sys.modules[type(self.decoder).__module__]     # its apply_rotary_pos_emb, looked up per call
        gdn_layers = [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]
        if not gdn_layers:
            raise SpecError("model has no linear_attention layers: use the plain attention target")
        first = self.decoder.layers[gdn_layers[0]]
        self.kernels = select_gdn_kernels(first.linear_attn, first.linear_attn.A_log.device, kernels)
        self.kernel_path = self.kernels.path
        self._split = len(devices(model)) > 1
        self.capacity = 0                               # reserved K/V rows (0: grown on demand)
        self._reset()

    # ---- state -----------------------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._len = 0
        self._pending = None                            # (Ancestry, {layer: NodeStates}) of the last verify
        if self.capacity:                               # reserved: every state keeps its storage (`reserve`)
            return
        self._kv: dict[int, _KV] = {}
        self._stores: list[torch.Tensor] = []           # reserved: every layer's K/V on a device (`_KV.reserved`)
        self._conv: dict[int, torch.Tensor] = {}        # layer -> [1, C, K]
        self._rec: dict[int, torch.Tensor] = {}         # layer -> [1, HV, Dk, Dv] float32
        self._stacks: dict[int, GdnStack] = {}          # reserved: layer -> its device's stacked states

    def reserve(self, capacity: int) -> None:
        """Fix the storage of every state from now on: K/V of `capacity` rows, and GDN states that later prompts
        and commits overwrite in place, so that a captured `decode` step stays valid (remote.decoding.graph)."""
        self.capacity = capacity
        layers = list(enumerate(self.decoder.layers[: len(self.layer_types)]))
        gdns = {i: layer.linear_attn for i, layer in layers if self.layer_types[i] == "linear_attention"}
        self._kv, self._stores = _KV.reserved({i: layer.self_attn for i, layer in layers if i not in gdns}, capacity)
        self._stacks = GdnStack.reserved(gdns)
        self._conv = {i: stack.state(i)[0] for i, stack in self._stacks.items()}
        self._rec = {i: stack.state(i)[1] for i, stack in self._stacks.items()}

    def _install(self, layer: int, conv: torch.Tensor, recurrent: torch.Tensor) -> None:
        """Make (conv, recurrent) the committed state of GDN `layer`: in place once reserved."""
        if self._reserved(layer):
            self._conv[layer].copy_(conv)
            self._rec[layer].copy_(recurrent)
        else:
            self._conv[layer], self._rec[layer] = conv, recurrent

    def _reserved(self, layer: int) -> bool:
        return bool(self.capacity) and layer in self._conv

    def _install_after(self, node_states: dict, path: torch.Tensor, length: torch.Tensor | None = None) -> None:
        """Install every GDN layer's state after `path` (`NodeStates.after`): written in place where reserved, a
        device's whole stack in one launch where its verify kept every layer's node states there
        (`GdnStack.install`), else the last node's conv columns gathered once a device, not once a layer."""
        windows = {}                                     # device -> the last node's conv columns
        tried, done = set(), set()                       # stacks tried; layers they installed
        for layer, states in node_states.items():
            if layer in done:
                continue
            device = states.bank.device
            with self._on(device):
                here = path.to(device)
                stack = self._stacks.get(layer)
                if stack is not None and stack not in tried:     # every layer of its device at once, if it can
                    tried.add(stack)
                    if stack.install(node_states, states.layout, here[-1:]):
                        done.update(stack.layers)
                        continue
                if states.needs_window and device not in windows:
                    windows[device] = states.layout.window(here[-1:])
                into = (self._conv[layer], self._rec[layer]) if self._reserved(layer) else None
                self._conv[layer], self._rec[layer] = states.after(here, length, windows.get(device), into)

    @property
    def length(self) -> int:
        return self._len

    def layer_state(self, layer: int) -> dict[str, torch.Tensor]:
        """The committed state of one layer, in transformers' cache layouts (for tests and debugging):
        {"conv", "recurrent"} for GDN layers, {"keys", "values"} [1, Hkv, length, D] for attention layers."""
        if self.layer_types[layer] == "linear_attention":
            return {"conv": self._conv[layer], "recurrent": self._rec[layer]}
        kv = self._kv[layer]
        return {"keys": kv.keys[:, :, : self._len], "values": kv.values[:, :, : self._len]}

    # ---- Target API ------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor) -> Verified:
        """Reset and run the prompt input_ids [1, P]: causal attention, chunked GDN from zero state."""
        self._reset()
        input_ids = input_ids.to(self.decoder.embed_tokens.weight.device)   # prompts arrive on the CPU
        p = input_ids.shape[-1]
        positions = torch.arange(p, device=input_ids.device)
        hidden, feats = self._forward(input_ids.reshape(1, p), positions, tree=None)
        self._len = p
        return Verified(self._logits(hidden[-1:]), feats)             # logits of the last position only

    @torch.inference_mode()
    def verify(self, tokens: torch.Tensor, tree: Ancestry | list[int]) -> Verified:
        """Run the tree tokens [N] (structure `tree` or its parents list) on the committed prefix; nothing is
        committed until `commit`. Reads nothing back to the host."""
        device = self.decoder.embed_tokens.weight.device
        tree = Ancestry.from_parents([int(p) for p in tree], device) if isinstance(tree, list) else tree.to(device)
        if tokens.numel() != tree.size:
            raise ValueError(f"tokens has {tokens.numel()} nodes but parents has {tree.size}")
        if self._len == 0:
            raise RuntimeError("verify before prefill: the target holds no prefix")
        layout = TreeLayout.build(tree, self.conv_kernel)
        positions = self._len + layout.depth                                         # [N] prefix_len + depth
        node_states: dict = {}
        hidden, feats = self._forward(tokens.reshape(1, -1).to(device), positions, tree=(layout, node_states))
        self._pending = (tree, node_states)
        return Verified(self._logits(hidden), feats)

    @torch.inference_mode()
    def commit(self, path: torch.Tensor | list[int]) -> None:
        """Keep the root-to-node chain `path` of the last verify: compact attention K/V, install the last node's
        GDN conv and recurrent states. A device path is trusted (the walk built it from the tree); a host list is
        checked against the tree."""
        if self._pending is None:
            raise RuntimeError("commit without a verify to commit from")
        tree, node_states = self._pending
        if isinstance(path, list):
            path = [int(i) for i in path]
            parents = tree.parents.tolist()
            for j, node in enumerate(path):
                expected = -1 if j == 0 else path[j - 1]
                if not 0 <= node < len(parents) or parents[node] != expected:
                    raise ValueError(f"path {path} is not a root-to-node chain of the verified tree "
                                     f"(parents {parents})")
            path = torch.tensor(path, dtype=torch.long, device=tree.parents.device)
        self._pending = None
        if path.shape[0] == 0:
            return
        if path.shape[0] > 1:                                # the root alone is already in place
            self._compact(self._len, path)
        self._install_after(node_states, path)
        self._len += path.shape[0]

    @torch.inference_mode()
    def decode(self, token: torch.Tensor, step: Static, featured: bool = False) -> torch.Tensor | Verified:
        """Logits [1, V] of one token ([1], on the device) at `step.start`, advancing the committed state in place
        without a host value (capture-safe); `featured`: a `Verified`, its drafter features too. Needs `reserve`;
        the caller keeps its own length."""
        hidden, taps = self._forward(token.view(1, 1), step.start.view(1), tree=self._static(step, 1))
        return Verified(self._logits(hidden), taps) if featured else self._logits(hidden)

    @torch.inference_mode()
    def verify_static(self, tokens: torch.Tensor, step: Static) -> Verified:
        """`verify` of N tree tokens after a device-side prefix length `step.start` (capture-safe): K/V go to
        rows start.., positions are start + depth, GDN node states go to `step.states`; nothing is committed
        until `commit_static`."""
        step = self._static(step, tokens.numel())
        for stack in set(self._stacks.values()):         # where every GDN layer's bank and node states go
            stack.begin(tokens.numel(), keeps_nodes(self.kernels, step.layout, tokens.numel(), stack.rec[0].numel()))
        positions = step.start + step.layout.depth if step.positions is None else step.positions
        hidden, feats = self._forward(tokens.view(1, -1), positions, tree=step)
        return Verified(self._logits(hidden), feats)

    def _static(self, step: Static, t: int) -> Static:
        """`step` with its attention mask (`remote.kernels.step.step_mask`) and its `t` cache rows made, once for
        every attention layer."""
        config = self.config
        step.mask = step_mask(step.visible, self.lm_head.weight.dtype, config.head_dim,
                              config.num_attention_heads // config.num_key_value_heads)
        if step.rows is None:
            step.rows = step.start + torch.arange(t, device=step.start.device)
        return step

    @torch.inference_mode()
    def commit_static(self, step: Static, path: torch.Tensor, length: torch.Tensor) -> None:
        """Keep the root-to-node `path` [H] of the tree verified with `step`, padded with its last node to the
        static height; `length` ([] on the device) is the real part. Attention K/V rows move to start.., each GDN
        layer's state after the path (kept or recomputed: `NodeStates.after`) is written into place."""
        self._compact(step.start, path)
        self._install_after(step.states, path, length)

    def _compact(self, start: int | torch.Tensor, path: torch.Tensor) -> None:
        """Move the tree rows `path` [L] (offsets from `start`, a host int or a device scalar) of every attention
        layer to start, start+1, ... A path padded past the accepted length writes rows masked later."""
        caches = [(store,) for store in self._stores] or [(kv.keys, kv.values) for kv in self._kv.values()]
        for group in caches:
            move_rows(group, start, path.to(group[0].device))

    # ---- the layer loop --------------------------------------------------------------------------------------
    @property
    def conv_kernel(self) -> int:
        return self.config.linear_conv_kernel_dim

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, tree):
        """Every decoder layer (remote.models.layer_loop). Returns (normed hidden [T, H], the drafter's taps)."""
        def mix(i: int, layer, h: torch.Tensor, rope) -> torch.Tensor:
            if self.layer_types[i] == "linear_attention":
                return self._gdn(i, layer.linear_attn, h, tree)
            return self._attention(i, layer.self_attn, h, rope, tree)

        return run_layers(self.decoder, len(self.layer_types), input_ids, positions, mix, self.target_layer_ids,
                          self.lm_head.weight.device, on=self._on, mrope=self._mrope)

    def _on(self, device: torch.device):
        """On a target split over GPUs, `device` as the current one: Triton kernels launch on the current device."""
        return torch.cuda.device(device) if self._split else contextlib.nullcontext()

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden.to(self.lm_head.weight.device)).float()            # [T, V] float32

    def _gdn(self, i: int, gdn: torch.nn.Module, h: torch.Tensor, tree) -> torch.Tensor:
        if tree is None:
            out, conv, recurrent = gdn_sequence(gdn, h, self.kernels)
            self._install(i, conv, recurrent)
            return out
        if isinstance(tree, Static):
            if tree.layout is None:
                return gdn_step(gdn, h, self._conv[i], self._rec[i], self.kernels)
            stack = self._stacks.get(i)
            out, tree.states[i] = gdn_tree(gdn, h, tree.layout, self._conv[i], self._rec[i], self.kernels,
                                           into=stack.into(i) if stack else None)
            return out
        layout, node_states = tree
        out, node_states[i] = gdn_tree(gdn, h, layout.to(h.device), self._conv[i], self._rec[i], self.kernels)
        return out

    def _attention(self, i: int, attn: torch.nn.Module, h: torch.Tensor, rope, tree) -> torch.Tensor:
        """Gated full attention over the committed K/V plus the new rows. h [1, T, H] -> [1, T, H]."""
        t, d = h.shape[1], attn.head_dim
        q, gate = torch.chunk(attn.q_proj(h).view(1, t, -1, 2 * d), 2, dim=-1)
        q = attn.q_norm(q).transpose(1, 2)                                            # [1, Hq, T, D]
        k = attn.k_norm(attn.k_proj(h).view(1, t, -1, d)).transpose(1, 2)             # [1, Hkv, T, D]
        v = attn.v_proj(h).view(1, t, -1, d).transpose(1, 2)
        q, k = self._modeling.apply_rotary_pos_emb(q, k, *rope)                       # partial rotary handled there
        if i not in self._kv:
            self._kv[i] = _KV.for_layer(attn, capacity=max(2 * (self._len + t), 256))
        kv = self._kv[i]
        if isinstance(tree, Static):        # all reserved rows, masked to the committed ones and these tokens
            kv.put(tree.rows.to(h.device), k, v)
            o = attend(q, kv.keys, kv.values, tree.mask, attn.scaling)                        # [1, T, Hq, D]
            return attn.o_proj(active(output_gate)(o, gate))
        kv.write(self._len, k, v)
        keys, values = kv.keys[:, :, : self._len + t], kv.values[:, :, : self._len + t]
        if tree is None:
            # Prefill (no past after a reset): plain causal attention.
            o = F.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=attn.scaling, enable_gqa=True)
        else:
            layout = tree[0].to(h.device)
            # Past fully visible; inside the tree a node sees its ancestors and itself. mask [1, 1, N, len + N]
            past = torch.ones(t, self._len, dtype=torch.bool, device=h.device)
            mask = torch.cat([past, layout.visible], dim=-1)[None, None]
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling, enable_gqa=True)
        return attn.o_proj(active(output_gate)(o.transpose(1, 2), gate))
