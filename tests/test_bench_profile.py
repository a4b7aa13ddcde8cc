"""`bench/bench_profile.py` on the CPU with the tiny presets (real random-weight models, CPU self time as the time
basis): it writes its two files and a compact JSON last line, attributes each op class to the modules it names
(nested ranges subtracted, classes summing to the total), and counts the bytes of each class's weights as the model
itself holds them. Times are only checked for sign and consistency (CPU, shared machine).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
PROMPT, ROWS = 16, (1, 5)


def _bench_module(name: str):
    sys.path.insert(0, str(REPO / "bench"))                  # the scripts import each other as top-level modules
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


MODELING = {"tiny-qwen3": "transformers.models.qwen3.modeling_qwen3",
            "tiny-hybrid": "transformers.models.qwen3_5.modeling_qwen3_5"}
ROTARY_BEFORE = {}          # preset -> the modeling module's apply_rotary_pos_emb before the run


@pytest.fixture(scope="module", params=["tiny-qwen3", "tiny-hybrid"])
def run(request, tmp_path_factory):
    """(preset, out dir, stdout, the JSON written)."""
    ROTARY_BEFORE[request.param] = importlib.import_module(MODELING[request.param]).apply_rotary_pos_emb
    out = tmp_path_factory.mktemp(request.param)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        _bench_module("bench_profile").main([
            "--preset", request.param, "--rows", ",".join(map(str, ROWS)), "--prompt-len", str(PROMPT),
            "--out", str(out), "--device", "cpu", "--dtype", "float32", "--repeats", "1"])
    return request.param, out, stdout.getvalue(), json.loads((out / f"profile_{request.param}.json").read_text())


def _model(preset: str):
    """The preset's model built again here, for its shapes (the same config and seed as the script's)."""
    from remote.models.loading import load_target
    from remote.spec import ModelSpec

    fields = _bench_module("bench_verify").model_config(preset, None, {})
    return load_target(ModelSpec(random=fields, dtype="float32"), 0, torch.device("cpu"))


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def test_files_and_summary_line(run):
    preset, out, stdout, data = run
    assert sorted(p.name for p in out.iterdir()) == [f"profile_{preset}.json", f"profile_{preset}.md"]
    last = json.loads(stdout.strip().splitlines()[-1])
    assert last["out"] == str(out / f"profile_{preset}.json")
    assert [p["rows"] for p in last["passes"]] == list(ROWS)
    assert [p["rows"] for p in data["passes"]] == list(ROWS)
    assert data["meta"]["time_basis"] == "CPU self time of ops" and data["meta"]["copy_gbps"] > 0
    for p in data["passes"]:
        assert p["context"] == PROMPT + p["rows"] and p["wall_ms"] > 0 and p["floor_ms"] > 0
        heading = f"### {p['rows']} rows"
        assert heading in stdout and heading in (out / f"profile_{preset}.md").read_text()
    # the run-time wrappers are gone afterwards: the transformers module holds what it held before the run (a
    # function, or with transformers 5.25 and `kernels` installed a module wrapping it)
    assert sys.modules[MODELING[preset]].apply_rotary_pos_emb is ROTARY_BEFORE[preset]


def test_classes_match_the_model(run):
    preset, _, _, data = run
    hybrid = preset == "tiny-hybrid"
    for p in data["passes"]:
        classes = p["classes"]
        for name in ("lm_head", "embedding", "gemm_attn", "gemm_mlp", "norm", "rotary", "attention", "mlp_act"):
            assert classes[name]["ms"] > 0, (p["rows"], name)
        for name in ("gemm_gdn", "gdn"):
            if hybrid:
                assert classes[name]["ms"] > 0, (p["rows"], name)
            else:
                assert name not in classes or classes[name]["ms"] == 0
        if hybrid:
            assert 0 < classes["gdn"]["recurrence_ms"] <= classes["gdn"]["ms"]
        # every Linear runs inside its own class range: none is left in the ranges around it
        for name in ("lm_head", "gemm_attn", "gemm_mlp") + (("gemm_gdn",) if hybrid else ()):
            assert list(classes[name]["ops"]) == ["aten::linear"], (name, classes[name]["ops"])
        for name in ("attention", "norm", "rotary", "other") + (("gdn",) if hybrid else ()):
            assert "aten::linear" not in classes[name]["ops"], (name, classes[name]["ops"])
        assert "aten::scaled_dot_product_attention" in classes["attention"]["ops"]
        assert "aten::scaled_dot_product_attention" not in classes["other"]["ops"]
        assert "aten::embedding" in classes["embedding"]["ops"]


def test_class_times_sum_to_the_total(run):
    _, _, _, data = run
    for p in data["passes"]:
        times = [c["ms"] for c in p["classes"].values()]
        assert all(t >= 0 for t in times)
        assert p["kernel_ms"] > 0
        assert sum(times) == pytest.approx(p["kernel_ms"], abs=1e-4 * len(times))
        assert sum(c["share"] for c in p["classes"].values()) == pytest.approx(1.0, abs=1e-4 * len(times))


def test_class_bytes_are_the_modules_weights(run):
    preset, _, _, data = run
    model = _model(preset)
    layers = model.model.layers
    attn = [layer.self_attn for layer in layers if hasattr(layer, "self_attn")]
    gdn = [layer.linear_attn for layer in layers if hasattr(layer, "linear_attn")]
    projections = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "in_proj_qkvz", "in_proj_ba", "out_proj")
    expected = {
        "lm_head": _nbytes([model.lm_head.weight]),
        "gemm_mlp": _nbytes(t for layer in layers for lin in (layer.mlp.gate_proj, layer.mlp.up_proj,
                                                              layer.mlp.down_proj) for t in (lin.weight, lin.bias)),
        "gemm_attn": _nbytes(t for a in attn for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj)
                             for t in (lin.weight, lin.bias)),
        "gemm_gdn": _nbytes(getattr(g, n).weight for g in gdn for n in projections if hasattr(g, n)),
        "norm": _nbytes(p for name, p in model.named_parameters() if "norm" in name),
    }
    assert all(expected[k] > 0 for k in ("lm_head", "gemm_mlp", "gemm_attn", "norm"))
    assert (expected["gemm_gdn"] > 0) == (preset == "tiny-hybrid")
    weights = _nbytes(model.parameters())
    cfg = model.config
    for p in data["passes"]:
        classes = p["classes"]
        for name, nbytes in expected.items():
            assert classes.get(name, {"bytes": 0})["bytes"] == nbytes, name
        assert classes["embedding"]["bytes"] == p["rows"] * cfg.hidden_size * 4          # the rows gathered
        kv = 2 * len(attn) * cfg.num_key_value_heads * cfg.head_dim * (PROMPT + p["rows"]) * 4
        assert classes["attention"]["bytes"] == kv
        assert p["weight_bytes"] == weights
        assert p["floor_ms"] == pytest.approx(weights / (data["meta"]["copy_gbps"] * 1e9) * 1e3, rel=1e-2)
        # every parameter but the embedding table is in exactly one class; state and K/V come on top
        states = kv + classes["embedding"]["bytes"]
        if gdn:
            g = gdn[0]
            states += 2 * len(gdn) * (g.num_v_heads * g.head_k_dim * g.head_v_dim * 4 + _nbytes([g.conv1d.weight]))
        assert p["read_bytes"] == weights - _nbytes([model.get_input_embeddings().weight]) + states
