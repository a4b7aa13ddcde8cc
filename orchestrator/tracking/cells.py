"""Table cells that wrap at word boundaries at any width: rich breaks a cell only at spaces and folds a word that is
too wide mid-word (`ddtree-b` / `63-demo-` / `qwen3` at 40 columns), where a run's name is made of words joined by
`-`, `_`, `=`, `,` and `.` (a host).

Contract: `Words(text, style)` is a rich renderable whose pieces end after a space or one of BREAKS: it needs the
width of its widest piece and takes its whole length when it can, and wraps between pieces, folding only a piece
that is wider than its column on its own. Non-goal: numbers (they have no breaks; their columns are right-aligned).
"""
from __future__ import annotations

import re

from rich.cells import cell_len
from rich.measure import Measurement
from rich.text import Text

BREAKS = "-_=,/."
_PIECE = re.compile(rf"[^\s{re.escape(BREAKS)}]*[{re.escape(BREAKS)}]+|\S+\s*|\s+")


class Words:
    def __init__(self, text: str, style: str = ""):
        self.text, self.style = str(text), style
        self.pieces = _PIECE.findall(self.text) or [""]

    def __rich_measure__(self, console, options) -> Measurement:
        widest = max(cell_len(piece.rstrip()) for piece in self.pieces)
        return Measurement(min(widest, options.max_width), min(cell_len(self.text), options.max_width))

    def lines(self, width: int) -> list[str]:
        width = max(width, 1)
        lines, line = [], ""
        for piece in self.pieces:
            if line.strip() and cell_len((line + piece).rstrip()) > width:
                lines.append(line.rstrip())
                line = piece.lstrip()
            else:
                line += piece
            while cell_len(line.rstrip()) > width:      # a piece wider than the column on its own
                lines.append(line[:width])
                line = line[width:]
        return [*lines, line.rstrip()]

    def __rich_console__(self, console, options):
        for line in self.lines(options.max_width):
            yield Text(line, style=self.style)

    def __str__(self) -> str:
        return self.text
