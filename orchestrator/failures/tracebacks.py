"""The last Python traceback of a log, trimmed: what to show for a crash that no catalog signature knows.

Contract: `extract_traceback(text)` finds the last traceback, skipping the ones launchers print after the real one
(torchrun's ChildFailedError, torch.multiprocessing's), strips a per-rank prefix such as "[rank0]: ", keeps the
last frames with their source lines (caret lines dropped) and the first lines of the exception; None if there is
no traceback.

Non-goals: the rest of a chained exception (the excerpt is its last traceback only).
"""
from __future__ import annotations

import re

from .findings import TracebackExcerpt

_TB_HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")
# Launchers print their own traceback after the real one; the excerpt should show the real one.
_WRAPPER_EXCEPTIONS = re.compile(r"\b(?:ChildFailedError|ProcessRaisedException|ProcessExitedException)\b")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def extract_traceback(text: str, max_frames: int = 6, max_message_lines: int = 6) -> TracebackExcerpt | None:
    """The last Python traceback in `text` (skipping launcher wrappers such as torchrun's ChildFailedError),
    with its last `max_frames` frames and up to `max_message_lines` lines of the exception; None if none."""
    end, fallback = len(text), None
    for _ in range(8):  # look back past a few wrapper tracebacks at most
        start = text.rfind(_TB_HEADER, 0, end)
        if start < 0:
            break
        excerpt = _parse_traceback(text, start, max_frames, max_message_lines)
        if not _WRAPPER_EXCEPTIONS.search(excerpt.exception):
            return excerpt
        fallback, end = fallback or excerpt, start
    return fallback


def _parse_traceback(text: str, start: int, max_frames: int, max_message_lines: int) -> TracebackExcerpt:
    line_start = text.rfind("\n", 0, start) + 1
    prefix = text[line_start:start]   # e.g. "[rank0]: " that a launcher puts before every line of a rank
    lines = [ln[len(prefix):] if prefix and ln.startswith(prefix) else ln
             for ln in text[start:start + 200_000].split("\n")[1:]]
    frames, message = _split_traceback(lines, max_message_lines)
    omitted = [f"  ... {len(frames) - max_frames} earlier frames omitted"] if len(frames) > max_frames else []
    body = [_TB_HEADER, *omitted, *(ln for fr in frames[-max_frames:] for ln in fr), *message]
    return TracebackExcerpt(text="\n".join(body).rstrip(), exception=message[0] if message else "")


def _split_traceback(lines: list[str], max_message_lines: int) -> tuple[list[list[str]], list[str]]:
    """Frames (each: its File line and source lines) and the exception lines that follow them."""
    frames: list[list[str]] = []
    i = 0
    while i < len(lines) and lines[i].startswith(" "):
        if lines[i].startswith("  File ") or not frames:
            frames.append([lines[i]])
        elif not _CARETS.match(lines[i]):
            frames[-1].append(lines[i])
        i += 1
    message: list[str] = []
    for line in lines[i:i + max_message_lines]:
        if line.startswith(_TB_HEADER) or line.startswith(_CHAIN_MARKERS):
            break
        message.append(line.rstrip("\r"))
    while message and not message[-1].strip():
        message.pop()
    return frames, message
