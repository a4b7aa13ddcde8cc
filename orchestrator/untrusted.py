"""Text a runner wrote is untrusted: how it is shown on a terminal, and how much of one line is held in memory.

Contract: `printable(text)` renders every control character visibly: C0 (ESC, BEL, CR, ...) as its Unicode control
picture, DEL as ␡, C1 (U+0080-U+009F, an 8-bit CSI among them) as U+FFFD, one character each so that positions stay
put; newlines and tabs stay. So no escape sequence of a runner's (a window title, colours, a cursor move, a query the
terminal answers into stdin) reaches the terminal. `log_line(raw, more)` is one line of runner output as shown and
matched: decoded (undecodable bytes replaced), only its last carriage-return redraw (what a terminal would leave of a
progress bar), printable, and, where `more` bytes of it were not kept (LINE_BYTES), saying so first. The log on disk
keeps every byte. Non-goals: colouring, wrapping.
"""
from __future__ import annotations

import re

# The most of one log line held in memory and shown: a 100 MB line took the follower to 615 MB (3.4x the line in
# bytes, str and the display's copies). 64 KiB keeps every real log line whole (tracebacks, transformers' longest
# refusals are ~10 KB) and costs nothing to hold.
LINE_BYTES = 64 * 1024
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _picture(match: re.Match) -> str:
    code = ord(match[0])
    return chr(0x2400 + code) if code < 0x20 else "\u2421" if code == 0x7F else "\ufffd"


def printable(text: str) -> str:
    """`text` with its control characters as visible pictures (see the module docstring)."""
    return _CONTROLS.sub(_picture, text)


def log_line(raw: bytes, more: int = 0) -> str:
    """One line of runner output (without its newline) as shown and matched; `more`: bytes of it not kept."""
    text = raw.decode("utf-8", "replace")
    if "\r" in text:   # a progress bar redrawn in place: a terminal shows the last redraw with something in it
        text = next((part for part in reversed(text.split("\r")) if part), "")
    text = printable(text)
    # said first, so that a display clipping the line to its start still says it
    return f"[a line of {len(raw) + more} bytes, its first {len(raw)} here: runner.log has it all] {text}" if more \
        else text
