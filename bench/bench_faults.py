"""How fast the orchestrator notices two faults on the local host: the runner SIGKILLed with its process group
(seconds from the kill to the CLI's exit, FAILED runner_vanished) and SIGTERM to the orchestrator (seconds to
exit 143, runner group gone, KILLED). With `--hosts`, two SSH hosts that cannot run a job, on loopback OpenSSH
servers (tests/sshd.py): one whose sshd offers no SFTP, and a host.python without torch (seconds from the CLI's
start to its exit). The CLI, the kills and the servers are real; the last stdout line is compact JSON.

    python bench/bench_faults.py [--out DIR] [--hosts]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
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


def _refused(out: Path, name: str, sftp: bool = True, **host) -> tuple[float, int]:
    """Seconds from the CLI's start to its exit, and its exit code, for an AR run on a fresh loopback sshd."""
    from tests.sshd import SSHD

    server = SSHD(out / name, sftp=sftp)
    facts = server.start()
    try:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "method=ar", "baseline=none", "device=cpu",
                               "num_prompts=1", "max_new_tokens=4", *facts.overrides(**host)], cwd=out,
                              capture_output=True, text=True, timeout=600)
        return round(time.monotonic() - started, 2), proc.returncode
    finally:
        server.stop()


def _hosts(out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(out / "bare")], check=True)
    row = {}
    row["no_sftp_s"], row["no_sftp_exit"] = _refused(out, "no-sftp", sftp=False, workdir=str(out / "w1"))
    row["bare_python_s"], row["bare_python_exit"] = _refused(out, "bare", python=str(out / "bare" / "bin" / "python"),
                                                             workdir=str(out / "w2"))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="scratch dir (default: a temporary one)")
    parser.add_argument("--hosts", action="store_true", help="also time the SSH hosts that cannot run a job")
    args = parser.parse_args()
    out = (args.out or Path(tempfile.mkdtemp())).resolve()
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
    if args.hosts:
        row.update(_hosts(out))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
