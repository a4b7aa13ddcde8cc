"""SGLang: `python -m sglang.launch_server`, built from its documented interface (no CPU build exists, so this
arm has not run here). A speculative config {algorithm: EAGLE|DFLASH|..., num_steps: 3, ...} becomes its
`--speculative-<key>` flags; acceptance is `/get_server_info`'s `avg_spec_accept_length` (cumulative since the
server started, warm-up requests included: SGLang keeps no counters to take deltas of)."""
from __future__ import annotations

import json

from .base import SERVED_NAME, Acceptance, Engine, Launch, mean_ms
from .server import get


class SGLang(Engine):
    name = "sglang"
    ready_path = "/health"
    distributions = ("sglang",)

    def argv(self, launch: Launch) -> list[str]:
        argv = [launch.python, "-m", "sglang.launch_server", "--model-path", launch.model, "--served-model-name",
                SERVED_NAME, "--host", "127.0.0.1", "--port", str(launch.port), "--dtype", launch.dtype,
                "--tp-size", str(launch.tensor_parallel), "--enable-metrics"]
        if launch.max_model_len:
            argv += ["--context-length", str(launch.max_model_len)]
        if launch.enforce_eager:
            argv.append("--disable-cuda-graph")
        for key, value in (launch.speculative or {}).items():
            argv += [f"--speculative-{key.replace('_', '-')}", str(value)]
        return argv + list(launch.extra_args)

    def acceptance(self, delta: dict, url: str) -> Acceptance | None:
        status, body = get(f"{url}/get_server_info")
        try:
            info = json.loads(body) if status == 200 else {}
        except ValueError:
            return None
        length = info.get("avg_spec_accept_length") if isinstance(info, dict) else None
        if not isinstance(length, (int, float)) or length <= 0:
            return None
        return Acceptance(1.0, float(length) - 1.0, {}, "/get_server_info avg_spec_accept_length (since start)")

    def latency(self, delta: dict) -> dict[str, float]:
        out = {"engine_ttft_ms": mean_ms(delta, "sglang:time_to_first_token_seconds"),
               "engine_tpot_ms": mean_ms(delta, "sglang:time_per_output_token_seconds")}
        return {k: v for k, v in out.items() if v is not None}
