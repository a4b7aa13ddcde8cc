"""What SSH orchestration costs on top of the runner, on a loopback OpenSSH server.

Measures, against a throwaway sshd on 127.0.0.1 (tests/sshd.py: real OpenSSH, real keys):
1. `python -m orchestrator ... host=ssh` twice: wall time of the whole command minus the runner's own time on
   the host (from launch.sh writing `pid` to writing `exit_code`). The second run finds the bundle unchanged.
   Then the same with `host=local`: the difference between the two overheads is what SSH itself costs (the
   rest is Python/Hydra/MLflow start-up and logging, paid on any host).
2. The bundle sync alone with a fresh SSHHost: host operations and seconds when the bundle is already there
   (goal: one round trip, no upload), when one file changed, and into an empty workdir.
3. Per-operation latency: `run("true")`, and a `read_from` that finds nothing new (a tail poll reads three
   files this way every 0.1 s while the runner is quiet).

The orchestrated runs sync the project's own remote/: if someone edits it during the bench, run 2 uploads a new
bundle and is no "unchanged" run; the table then says so. The sync costs use a snapshot of remote/.

Prints a table, the exact commands, and a last line of compact JSON. Needs /usr/sbin/sshd (openssh-server).
Usage: python bench/bench_ssh_overhead.py [--runs-dir DIR] [extra orchestrator overrides...]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.run.bundle import sync_bundle  # noqa: E402
from orchestrator.hosts.connect import open_host  # noqa: E402
from orchestrator.hosts.settings import host_settings  # noqa: E402
from orchestrator.hosts.ssh import SSHHost  # noqa: E402
from orchestrator.paths import REMOTE_PACKAGE  # noqa: E402
from tests.sshd import SSHD  # noqa: E402

WORKLOAD = ["method=ddtree", "tree_budget=64", "device=cpu", "num_prompts=2", "max_new_tokens=16"]


def orchestrated_run(overrides: list[str], runs_dir: Path, workdir: Path) -> dict:
    command = [sys.executable, "-m", "orchestrator", *WORKLOAD, *overrides]
    before = set(workdir.glob("runs/*"))   # the host's run dirs (loopback: readable here)
    bundles = set(workdir.glob("bundles/*"))
    start = time.time()   # wall clock: compared with file times on the (loopback) host
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "SPECBENCH_RUNS_DIR": str(runs_dir)})
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"orchestrator failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (run_dir,) = set(workdir.glob("runs/*")) - before
    launched, exited = (run_dir / "pid").stat().st_mtime, (run_dir / "exit_code").stat().st_mtime
    return {"wall_s": end - start, "runner_s": exited - launched, "overhead_s": (end - start) - (exited - launched),
            "before_s": launched - start, "after_s": end - exited, "command": shlex.join(command),
            "bundle_uploaded": bool(set(workdir.glob("bundles/*")) - bundles)}


def timed_sync(host: SSHHost, package: Path) -> dict:
    host.calls.clear()
    start = time.perf_counter()
    sync_bundle(host, package)
    return {"seconds": time.perf_counter() - start, "ops": dict(host.calls)}


def sync_costs(facts, workdir: Path, scratch: Path) -> dict:
    host = open_host(host_settings(facts.host_config(workdir=str(workdir))))
    host.run("true")   # connect first: the sync is what is measured, not the handshake
    package = scratch / "snapshot" / "remote"   # what others edit meanwhile must not count as a change
    shutil.copytree(REMOTE_PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    sync_bundle(host, package)
    unchanged = timed_sync(host, package)
    changed_pkg = scratch / "changed" / "remote"
    shutil.copytree(package, changed_pkg)
    with open(changed_pkg / "__init__.py", "a") as f:
        f.write(f"\n# bench edit {time.time()}\n")
    one_changed = timed_sync(host, changed_pkg)
    fresh = open_host(host_settings(facts.host_config(workdir=str(scratch / "empty-workdir"))))
    fresh.run("true")
    first = timed_sync(fresh, package)
    rtt = _median(lambda: host.run("true"))
    log = next(workdir.glob("runs/*/events.jsonl"))
    size = log.stat().st_size
    poll = _median(lambda: host.read_from(str(log), size))   # a poll that finds nothing new
    host.close()
    fresh.close()
    return {"unchanged": unchanged, "one_file_changed": one_changed, "empty_workdir": first,
            "run_true_median_s": rtt, "read_from_median_s": poll}


def _median(op, n: int = 15) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        op()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", help="where MLflow and run dirs go (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra orchestrator overrides")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    runs_dir = Path(args.runs_dir) if args.runs_dir else scratch / "runs"
    server = SSHD(scratch / "sshd")
    facts = server.start()
    workdir = scratch / "sshd" / "work"
    try:
        overrides = [*facts.overrides(workdir=str(workdir)), *args.overrides]
        first = orchestrated_run(overrides, runs_dir, workdir)
        second = orchestrated_run(overrides, runs_dir, workdir)
        local_work = scratch / "local-host"
        orchestrated_run(["host=local", f"host.workdir={local_work}"], runs_dir, local_work)  # bundle upload
        local = orchestrated_run(["host=local", f"host.workdir={local_work}", *args.overrides], runs_dir,
                                 local_work)
        sync = sync_costs(facts, workdir, scratch)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report(first, second, local, sync)


def report(first: dict, second: dict, local: dict, sync: dict) -> None:
    print(f"host: loopback OpenSSH, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"command (ssh runs): {first['command']}")
    print(f"command (local):    {local['command']}")
    print(f"{'':30}{'wall s':>9}{'runner s':>10}{'overhead s':>12}  (= before launch + after exit)")
    for name, r in (("ssh run 1 (bundle uploaded)", first), ("ssh run 2 (bundle unchanged)", second),
                    ("local (bundle unchanged)", local)):
        print(f"{name:30}{r['wall_s']:9.2f}{r['runner_s']:10.2f}{r['overhead_s']:12.2f}"
              f"  (= {r['before_s']:.2f} + {r['after_s']:.2f})"
              + ("  NOT unchanged: remote/ was edited during the bench" if r is second and r["bundle_uploaded"]
                 else ""))
    print(f"{'bundle sync':30}{'seconds':>9}  host operations")
    for name in ("unchanged", "one_file_changed", "empty_workdir"):
        print(f"{name:30}{sync[name]['seconds']:9.3f}  {sync[name]['ops']}")
    print(f"median run('true') {sync['run_true_median_s'] * 1000:.0f} ms; "
          f"median read_from {sync['read_from_median_s'] * 1000:.1f} ms")
    summary = {"run1_overhead_s": round(first["overhead_s"], 2), "run2_overhead_s": round(second["overhead_s"], 2),
               "run1_wall_s": round(first["wall_s"], 2), "run2_wall_s": round(second["wall_s"], 2),
               "local_overhead_s": round(local["overhead_s"], 2),
               "ssh_extra_s": round(second["overhead_s"] - local["overhead_s"], 2),
               "runner_s": round(second["runner_s"], 2), "run2_bundle_uploaded": second["bundle_uploaded"],
               "sync_unchanged_ops": sum(sync["unchanged"]["ops"].values()),
               "sync_unchanged_uploads": sync["unchanged"]["ops"].get("put", 0),
               "sync_unchanged_s": round(sync["unchanged"]["seconds"], 3),
               "run_true_ms": round(sync["run_true_median_s"] * 1000, 1),
               "read_from_ms": round(sync["read_from_median_s"] * 1000, 2)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
