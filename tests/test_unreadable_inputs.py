"""Every file the runner reads, broken every way a file breaks (missing, empty, binary garbage, cut in half, a
directory in its place, not JSON, not UTF-8, JSON of the wrong kind), ends in one SpecError line that names the file
and what is wrong with it: the target's config, weights and generation config, its tokenizer's files, the drafter's
config and weights, a JSONL dataset, the run spec. They used to end in `unknown_crash` with a library's traceback
(SafetensorError, JSONDecodeError, IsADirectoryError) or in a message about something else. Real loaders, the
shipped demo pair's real files; the CLI for one of them, as a user meets it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator.paths import PROJECT_ROOT
from remote.__main__ import main as runner_main
from remote.errors import SpecError
from remote.models.loading import load_drafter_for, load_target, load_tokenizer
from remote.prompts import load_prompts
from remote.spec import DatasetSpec, DrafterSpec, ModelSpec

MODELS = PROJECT_ROOT / "remote" / "assets" / "models"
BREAKS = {
    "missing": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
    "garbage": lambda p: p.write_bytes(b"\x00\xffgarbage\x01" * 10),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:p.stat().st_size // 2]),
    "directory": lambda p: (p.unlink(), p.mkdir()),
    "not_json": lambda p: p.write_text("not json {"),
    "not_utf8": lambda p: p.write_bytes(b'{"a": "\xff\xfe"}'),
    "json_list": lambda p: p.write_text("[1, 2]"),
}
BINARY = ("missing", "empty", "garbage", "truncated", "directory")   # what can go wrong with a weights file
CASES = [(kind, name, how) for kind, names in (("target", ["config.json", "model.safetensors",
                                                           "generation_config.json"]),
                                               ("tokenizer", ["tokenizer.json", "tokenizer_config.json"]),
                                               ("drafter", ["config.json", "model.safetensors"]),
                                               ("dataset", ["prompts.jsonl"]))
         for name in names for how in BREAKS
         if not (name.endswith(".safetensors") and how not in BINARY)
         and (kind, name, how) not in {("target", "generation_config.json", "missing"),   # optional files
                                       ("tokenizer", "tokenizer_config.json", "missing")}]


@pytest.fixture(scope="module")
def target():
    return load_target(ModelSpec(path=str(MODELS / "demo-qwen3")), 0, torch.device("cpu"))


def broken_copy(tmp_path: Path, kind: str, name: str, how: str) -> tuple[Path, Path]:
    """A copy of the files `kind` reads (links to the shipped ones) with `name` broken `how`: (its dir, the file)."""
    source = MODELS / ("demo-qwen3-dflash" if kind == "drafter" else "demo-qwen3")
    folder = tmp_path / kind
    folder.mkdir()
    for item in source.iterdir():
        (folder / item.name).symlink_to(item)
    (folder / "prompts.jsonl").symlink_to(MODELS / "heldout_prompts.jsonl")
    broken = folder / name
    broken.unlink()
    shutil.copyfile(source / name if (source / name).exists() else MODELS / "heldout_prompts.jsonl", broken)
    BREAKS[how](broken)
    return folder, broken


def load(kind: str, folder: Path, target) -> None:
    if kind == "target":
        load_target(ModelSpec(path=str(folder)), 0, torch.device("cpu"))
    elif kind == "tokenizer":
        load_tokenizer(ModelSpec(path=str(folder)))
    elif kind == "drafter":
        load_drafter_for(DrafterSpec(path=str(folder)), target, None, 0)
    else:
        load_prompts(DatasetSpec(name="jsonl", path=str(folder / "prompts.jsonl")))


@pytest.mark.parametrize("kind, name, how", CASES, ids=["-".join(case) for case in CASES])
def test_a_broken_input_file_is_one_line_naming_it(kind, name, how, tmp_path, target):
    folder, broken = broken_copy(tmp_path, kind, name, how)
    with pytest.raises(SpecError) as refused:
        load(kind, folder, target)
    said = str(refused.value)
    assert "\n" not in said, said
    named = str(broken) if how != "missing" or kind == "drafter" or name == "config.json" else str(folder)
    assert named in said, said


def test_an_unreadable_run_spec_is_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "spec.json").write_text("[1, 2]")
    assert runner_main([str(tmp_path)]) == 2
    said = capsys.readouterr().err.strip()
    assert said == f"error: cannot read the run spec {tmp_path / 'spec.json'}: spec is a JSON list, not an object"


def test_a_cut_weights_file_ends_the_run_in_one_line_not_an_unknown_crash(tmp_path):
    folder, broken = broken_copy(tmp_path, "target", "model.safetensors", "truncated")
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", f"model.path={folder}", "method=ar", "device=cpu", "num_prompts=1",
         f"host.workdir={tmp_path / 'work'}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "1000"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "unknown_crash" not in out and "Traceback" not in out, out[-3000:]
    assert f"error: target '{folder}': {broken} is cut short: 5.8 MB, its header describes 11.5 MB" in out, out
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert run.data.tags["failure.id"] == "runner_refused_input"
    assert json.loads((Path(run.data.tags["run_dir"]) / "failure.json").read_text())["ok"] is False
