"""Any OpenAI-compatible server: the user's command (`{port}` and `{model}` filled in) and base URL. Its /metrics,
if it has vLLM's counters, gives acceptance; otherwise the run reports timings and outputs only."""
from __future__ import annotations

import json

from .base import Engine, Launch
from .server import get
from .vllm import VLLM


class OpenAICompatible(Engine):
    name = "openai"
    ready_path = "/v1/models"

    def argv(self, launch: Launch) -> list[str]:
        return [part.replace("{port}", str(launch.port)).replace("{model}", launch.model) for part in launch.command]

    def url(self, launch: Launch) -> str:
        return (launch.url or "http://127.0.0.1:{port}").replace("{port}", str(launch.port))

    def served(self, url: str) -> str:
        """The first model the server lists (GET /v1/models)."""
        status, body = get(f"{url}/v1/models")
        try:
            return json.loads(body)["data"][0]["id"] if status == 200 else "default"
        except (ValueError, KeyError, IndexError, TypeError):
            return "default"

    def acceptance(self, delta: dict, url: str):
        return VLLM().acceptance(delta, url)

    def latency(self, delta: dict) -> dict[str, float]:
        return VLLM().latency(delta)
