"""Triton kernels run by Triton's interpreter on the CPU, for tests: the interpreter is chosen when a kernel module
is imported, so each check runs in a Python process of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_interpreted(script: str, *args: str, timeout: int = 600, interpret: bool = True):
    """`python -c script *args` under TRITON_INTERPRET=1 (`interpret`; else compiled) from the repository root,
    with tests.fast_interpreter's quicker patching; the JSON of its last stdout line."""
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "PYTHONPATH": str(ROOT)}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    try:
        done = subprocess.run([sys.executable, "-c", f"import tests.fast_interpreter\n{script}", *args], env=env,
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:     # what it printed last names where it hung
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"no answer in {timeout} s; its stderr ends: {said[-1500:]}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
