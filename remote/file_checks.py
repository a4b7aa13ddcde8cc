"""What is wrong with a file the runner reads, said in one line that names it: a checkpoint's config, weights and
tokenizer files, a drafter's, a JSON document. Read before loading (the files are small but for the weights, of which
only the header and the size are read), so that a broken file is one `SpecError` naming it and what is wrong with it,
never a library's traceback (`SafetensorError: header too small`) or a message about something else (a missing
config.json read as "Unrecognized model ... should have a model_type key").

Contract: `problem(path)` is None for a file that reads as what its name says (`.json`: a UTF-8 JSON object;
`.safetensors`: a header that parses and a size that covers its tensors; `.txt`, `.jinja`: UTF-8 text; anything
else: a readable file), else what is wrong, without the path. `checkpoint_problem(dir)` / `tokenizer_problem(dir)`
check what a checkpoint / tokenizer directory must hold and every such file it has: "<path> <what is wrong>", or
None. `json_object(path)` reads one, raising SpecError. `local_dir(name, revision)` is where a model's files are on
this host: the directory itself, or a hub id's snapshot in the hub cache (None when nothing of it is there yet).
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from .errors import SpecError

WEIGHTS = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json", "tokenizer.model")
OPTIONAL = ("generation_config.json",)
_HEADER_LIMIT = 100 << 20   # safetensors refuses headers past 100 MB


def _size(n: int) -> str:
    return f"{n} bytes" if n < 10_000 else f"{n / 1e6:.1f} MB"


def _read(path: Path, limit: int = -1) -> bytes:
    """The file's bytes (its first `limit`); OSError says why not."""
    if not path.exists():
        raise FileNotFoundError("does not exist")
    if not path.is_file():
        raise IsADirectoryError("is a directory, not a file" if path.is_dir() else "is not a regular file")
    with open(path, "rb") as f:
        return f.read(limit)


def _json_problem(path: Path) -> str | None:
    data = _read(path)
    if not data.strip():
        return f"is empty ({_size(len(data))})"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        cut = " (cut short?)" if exc.pos >= len(text.rstrip()) else ""
        return f"is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}){cut}"
    return None if isinstance(value, dict) else f"holds a JSON {type(value).__name__}, not an object"


def _safetensors_problem(path: Path) -> str | None:
    head = _read(path, 8)
    size = path.stat().st_size
    if len(head) < 8:
        return f"is {_size(size)}: too short for a safetensors file"
    (length,) = struct.unpack("<Q", head)
    if length > min(size - 8, _HEADER_LIMIT):
        return f"is not a safetensors file (its first 8 bytes give a header of {length} bytes; the file has {size})"
    try:
        header = json.loads(_read(path, 8 + length)[8:])
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, TypeError, KeyError, IndexError):
        return "is not a safetensors file (its header is not the JSON of a tensor table)"
    if 8 + length + end != size:
        what = "is cut short" if size < 8 + length + end else "is longer than its header says"
        return f"{what}: {_size(size)}, its header describes {_size(8 + length + end)}"
    return None


def _text_problem(path: Path) -> str | None:
    data = _read(path)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    return None


def problem(path: str | os.PathLike) -> str | None:
    """What is wrong with the file at `path` for what its name says it is (a predicate: "is not JSON: ..."), or
    None."""
    path = Path(path)
    try:
        if path.name.endswith(".safetensors"):
            return _safetensors_problem(path)
        if path.name.endswith(".json"):
            return _json_problem(path)
        if path.suffix in (".txt", ".jinja"):
            return _text_problem(path)
        _read(path, 1)
    except (FileNotFoundError, IsADirectoryError) as exc:   # as _read says it
        return str(exc)
    except OSError as exc:   # unreadable: permissions, an I/O error
        return f"cannot be read ({exc.strerror or exc})"
    return None


def _named(path: Path) -> str | None:
    found = problem(path)
    return f"{path} {found}" if found else None


def _shards(index: Path) -> list[Path]:
    weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    return sorted({index.parent / name for name in weight_map.values()}) if isinstance(weight_map, dict) else []


def checkpoint_problem(directory: str | os.PathLike) -> str | None:
    """What is wrong with a checkpoint directory: its config.json, its weights (an index and every shard it names,
    or one file), its generation_config.json if it has one. None when all read as they should."""
    root = Path(directory)
    if (found := _named(root / "config.json")) is not None:
        return found
    present = [root / name for name in WEIGHTS if (root / name).exists() or (root / name).is_symlink()]
    if not present:
        return f"{root} has no weights ({' or '.join(WEIGHTS[1::2])})"
    for weights in present[:1]:
        if (found := _named(weights)) is not None:
            return found
        if weights.name.endswith(".index.json"):
            for shard in _shards(weights):
                if (found := _named(shard)) is not None:
                    return f"{found} (named by {weights.name})"
    return next(filter(None, (_named(root / name) for name in OPTIONAL if (root / name).exists())), None)


def tokenizer_problem(directory: str | os.PathLike) -> str | None:
    """What is wrong with the tokenizer files a directory has (tokenizer.json, its config, vocabularies, a chat
    template), or None."""
    root = Path(directory)
    present = [name for name in TOKENIZER_FILES if (root / name).exists() or (root / name).is_symlink()]
    if not {"tokenizer.json", "vocab.json", "tokenizer.model"} & set(present):
        return f"{root} has no tokenizer (tokenizer.json, vocab.json with merges.txt, or tokenizer.model)"
    return next(filter(None, (_named(root / name) for name in present)), None)


def json_object(path: str | os.PathLike) -> dict:
    """The JSON object in the file at `path`; SpecError naming the file and what is wrong with it."""
    if (found := _named(Path(path))) is not None:
        raise SpecError(found)
    return json.loads(Path(path).read_text(encoding="utf-8"))


def local_dir(name: str | None, revision: str | None = None, probe: str = "config.json") -> Path | None:
    """Where the files of model `name` are on this host: the directory itself, or a hub id's snapshot in the hub
    cache, found by its file `probe` (None when the cache has none of it yet)."""
    if not name:
        return None
    if os.path.isdir(name):
        return Path(name)
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, probe, revision=revision)
    except Exception:   # not a hub id (a path that does not exist), no huggingface_hub: nothing local to check
        return None
    return Path(found).parent if isinstance(found, str) else None
