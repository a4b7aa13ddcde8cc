"""An OpenAI-compatible streaming client that times every token: what a user of the engine sees.

Contract: `complete(url, body, timeout)` POSTs `body` (a /v1/completions request; `stream` is set) and returns a
Reply: the generated token ids where the server sends them (vLLM: `return_token_ids`), the text, the send time, and
one (arrival time, tokens) pair per streamed chunk that carried output (with speculation a chunk often carries
several tokens). Times are time.perf_counter() seconds. A server that answers an error status, or stops mid-stream,
raises EngineRequestError with its message. `run_streams(jobs, streams)` runs callables on `streams` threads at
once and returns their results in order. Non-goals: chat completions, retries.
"""
from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit


class EngineRequestError(RuntimeError):
    pass


@dataclass
class Reply:
    sent: float
    chunks: list[tuple[float, int]] = field(default_factory=list)   # (arrival, tokens it carried)
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    usage_tokens: int | None = None

    @property
    def tokens(self) -> int:
        return len(self.token_ids) or self.usage_tokens or sum(n for _, n in self.chunks)

    @property
    def ttft_s(self) -> float:
        return self.chunks[0][0] - self.sent if self.chunks else 0.0

    @property
    def decode_s(self) -> float:
        """From the first token's arrival to the last's."""
        return self.chunks[-1][0] - self.chunks[0][0] if self.chunks else 0.0


def complete(url: str, body: dict, timeout: float = 600.0) -> Reply:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    payload = json.dumps({**body, "stream": True}).encode()
    try:
        reply = Reply(sent=time.perf_counter())
        conn.request("POST", f"{parts.path.rstrip('/')}/v1/completions", body=payload,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = conn.getresponse()
        if response.status != 200:
            raise EngineRequestError(f"{url} answered {response.status}: "
                                     f"{response.read().decode('utf-8', 'replace')[:500]}")
        _read_events(response, reply)
    except (OSError, http.client.HTTPException) as exc:
        raise EngineRequestError(f"{url}: the stream broke off ({exc})") from None
    finally:
        conn.close()
    return reply


def _read_events(response, reply: Reply) -> None:
    """Server-sent events: `data: {json}` lines until `data: [DONE]`."""
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            raise EngineRequestError(str(event["error"])[:500])
        if event.get("usage"):
            reply.usage_tokens = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            ids = choice.get("token_ids") or []
            text = choice.get("text") or ""
            if ids or text:
                reply.chunks.append((time.perf_counter(), len(ids) or 1))
                reply.token_ids += ids
                reply.text += text
            if choice.get("finish_reason"):
                reply.finish_reason = choice["finish_reason"]
    raise EngineRequestError("the stream ended without [DONE]")


def run_streams(jobs: list, streams: int) -> list:
    """Each of `jobs` (callables) run, `streams` at a time; results in the jobs' order."""
    if streams <= 1:
        return [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=streams) as pool:
        return list(pool.map(lambda job: job(), jobs))
