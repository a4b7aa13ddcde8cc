"""File reads on the machine this code runs on, shared by the Local host and a Ray node's agent
(orchestrator.hosts.ray_node ships it to the nodes by value): the standard library only, nothing of orchestrator."""
from __future__ import annotations


def read_from(path: str, offset: int, limit: int | None = None) -> bytes:
    """Bytes of `path` from `offset` to its current end, at most `limit` of them; b"" if it does not exist yet."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(-1 if limit is None else limit)
    except FileNotFoundError:
        return b""
