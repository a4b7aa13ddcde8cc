"""How fast the orchestrator notices two faults on the local host: the runner SIGKILLed with its process group
(seconds from the kill to the CLI's exit, FAILED runner_vanished) and SIGTERM to the orchestrator (seconds to
exit 143, runner group gone, KILLED). The CLI and the kills are real; the last stdout line is compact JSON.

    python bench/bench_faults.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_faults import LONG, finish, runs_of, start_cli, started_runs, wait_for  # noqa: E402
from tests.test_ssh_e2e import group_alive  # noqa: E402


def _started(out: Path, name: str):
    workdir = out / name
    proc = start_cli(["host=local", f"host.workdir={workdir}", *LONG])
    (run_dir,) = wait_for(lambda: started_runs(workdir), f"{name}: the runner starting")
    return proc, int((run_dir / "pid").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="scratch dir (default: a temporary one)")
    out = (parser.parse_args().out or Path(tempfile.mkdtemp())).resolve()
    shutil.rmtree(out, ignore_errors=True)
    os.environ["SPECBENCH_RUNS_DIR"] = str(out / "runs")
    row = {}
    proc, pgid = _started(out, "vanished")
    os.killpg(pgid, signal.SIGKILL)      # what the OOM killer does to the runner and launch.sh
    killed = time.monotonic()
    text = finish(proc, 120)
    row["vanished_s"], row["vanished_exit"] = round(time.monotonic() - killed, 2), proc.returncode
    row["vanished_reported"] = "runner_vanished" in text
    proc, pgid = _started(out, "sigterm")
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    finish(proc, 120)
    row["sigterm_s"], row["sigterm_exit"] = round(time.monotonic() - sent, 2), proc.returncode
    row["sigterm_runner_alive"] = bool(group_alive(pgid))
    row["statuses"] = sorted(f"{r.info.status}:{r.data.tags.get('failure.id') or r.data.tags.get('stopped_by')}"
                             for r in runs_of(out / "runs"))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
