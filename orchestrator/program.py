"""How the user started us, for usage lines and hints: the console script or `python -m orchestrator`."""
from __future__ import annotations

import os
import sys


def program() -> str:
    """How the user started us, for usage lines: the console script or `python -m orchestrator`."""
    return "specbench" if os.path.basename(sys.argv[0]) == "specbench" else "python -m orchestrator"
