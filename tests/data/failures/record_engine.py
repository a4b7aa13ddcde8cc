"""Record a vLLM server's own start failures as runner.log shows them (the server's output, as the runner copies
it), one file per case: `python record_engine.py <out dir> <engine python> [case ...]`.

Cases (each a real server start on this machine, demo models shipped in remote/assets):
  bad_speculative    an unknown speculative method                     -> engine_unsupported
  unsupported_model  demo-qwen3 with an architecture vLLM does not know -> engine_unsupported
  port_in_use        the port held by another socket                   -> engine_port_in_use
  no_kv_cache        no room for one request's KV cache                -> engine_no_kv_cache
  mamba_align        the hybrid demo pair with DFlash, prefix caching  -> engine_mamba_align
  unknown_flag       a server flag vLLM does not have                  -> engine_start_failed (no row of its own)
"""
from __future__ import annotations

import collections
import json
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
MODELS = ROOT / "remote" / "assets" / "models"


def argv(python: str, model: str, port: int, *more: str) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODELS / model), "--port", str(port),
            "--host", "127.0.0.1", "--enforce-eager", "--max-model-len", "2048", *more]


def dflash(model: str, n: int = 15) -> list[str]:
    return ["--speculative-config", json.dumps({"method": "dflash", "model": str(MODELS / model),
                                                "num_speculative_tokens": n})]


def serve_once(cmd: list[str], request: bool = False) -> str:
    """The server's output until it exits (or, with `request`, until one request has been answered or failed)."""
    from remote.engines.client import EngineRequestError, complete
    from remote.engines.server import Server
    from remote.errors import EngineStartError

    port = int(cmd[cmd.index("--port") + 1])
    lines: list[str] = []
    server = Server(cmd, f"http://127.0.0.1:{port}", "/health", timeout=600)
    server.last = collections.deque(maxlen=2000)    # the whole output, not the runner's last lines
    try:
        with server:
            if request:
                try:
                    complete(f"http://127.0.0.1:{port}", {"model": cmd[cmd.index("--model") + 1],
                                                          "prompt": [1, 2, 3], "max_tokens": 8})
                except EngineRequestError as exc:
                    lines.append(f"request failed: {exc}")
    except EngineStartError as exc:
        lines.append(str(exc))
    return "\n".join([*server.last, *lines])


def unknown_architecture(out: str) -> str:
    """demo-qwen3's files with `architectures` naming a class no engine has (an absolute path: argv takes it)."""
    import shutil

    target = Path(out, "unknown-architecture")
    shutil.copytree(MODELS / "demo-qwen3", target, dirs_exist_ok=True)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "architectures": ["SpecbenchUnknownForCausalLM"]}))
    return str(target)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(out: str, python: str, cases: list[str]) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    recorded = {
        "bad_speculative": lambda: serve_once(argv(python, "demo-qwen3", free_port(), "--speculative-config",
                                                   json.dumps({"method": "bogus", "num_speculative_tokens": 2}))),
        "unsupported_model": lambda: serve_once(argv(python, unknown_architecture(out), free_port())),
        # vLLM's CPU build sizes its KV cache in whole GiB (VLLM_CPU_KVCACHE_SPACE): one block is what it can refuse
        "no_kv_cache": lambda: serve_once(argv(python, "demo-qwen3", free_port(), "--num-gpu-blocks-override", "1")),
        "unknown_flag": lambda: serve_once(argv(python, "demo-qwen3", free_port(), "--no-such-flag")),
        "mamba_align": lambda: serve_once(argv(python, "demo-qwen3_5", free_port(), "--dtype", "bfloat16",
                                               *dflash("demo-qwen3_5-dflash")), request=True),
    }
    names = {"bad_speculative": "engine_unsupported__vllm0.32_bad_method",
             "unsupported_model": "engine_unsupported__vllm0.32_architecture",
             "port_in_use": "engine_port_in_use__vllm0.32", "no_kv_cache": "engine_no_kv_cache__vllm0.32",
             "mamba_align": "engine_mamba_align__vllm0.32_cpu",
             "unknown_flag": "engine_start_failed__vllm0.32_unknown_flag"}
    for case in cases or list(names):
        if case == "port_in_use":
            with socket.socket() as held:
                held.bind(("127.0.0.1", 0))
                held.listen()
                text = serve_once(argv(python, "demo-qwen3", held.getsockname()[1]))
        else:
            text = recorded[case]()
        Path(out, f"{names[case]}.log").write_text(text + "\n")
        print(f"{case}: {len(text.splitlines())} lines", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
