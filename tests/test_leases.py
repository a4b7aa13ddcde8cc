"""GPU leases: jobs of parallel sweeps, also from two orchestrator processes, never share a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.hosts.leases import GpuPool, PoolEntry
from tests.test_faults import LONG

POOL = "pool.hosts=[{host:{name:lh,kind:local},gpus:[0,1]}]"


def test_pool_hands_out_distinct_gpus_and_takes_them_back(tmp_path):
    pool = GpuPool([PoolEntry.of({"host": {"name": "h"}, "gpus": [0, 1]})], tmp_path)
    a, b = pool.try_acquire(1), pool.try_acquire(1)
    assert sorted(a.gpus + b.gpus) == [0, 1]
    assert pool.try_acquire(1) is None
    a.release()
    c = pool.try_acquire(1)
    assert c.gpus == a.gpus


def test_a_killed_holder_frees_its_gpu(tmp_path):
    code = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent.parent)!r}); "
            "from orchestrator.hosts.leases import GpuPool, PoolEntry; "
            f"l = GpuPool([PoolEntry.of({{'host': {{'name': 'h'}}, 'gpus': [0]}})], {str(tmp_path)!r}).acquire(1); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    pool = GpuPool([PoolEntry.of({"host": {"name": "h"}, "gpus": [0]})], tmp_path)
    assert pool.try_acquire(1) is None
    holder.kill()
    holder.wait()
    assert pool.acquire(1, timeout=10).gpus == [0]


def _intervals(runs_dir: Path) -> list[tuple[str, float, float]]:
    """(CUDA_VISIBLE_DEVICES, start, end) of every runner, from its own events."""
    out = []
    for events in (runs_dir / "multirun").rglob("events.jsonl"):
        lines = [json.loads(l) for l in events.read_text().splitlines() if l.strip()]
        start = next(e for e in lines if e["event"] == "start")
        out.append((start["cuda_visible_devices"], start["time"], lines[-1]["time"]))
    return out


def test_two_parallel_sweeps_on_two_gpus_never_share_one(tmp_path):
    # a runner that sends our start and progress events for a second or so (what it computes does not matter)
    common = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", POOL, f"pool.lock_dir={tmp_path / 'locks'}",
              *LONG, "runner.args=[--steps,10],[--steps,11]"]
    procs = [subprocess.Popen([sys.executable, "-m", "orchestrator", *common], cwd=tmp_path,
                              env={**os.environ, "SPECBENCH_RUNS_DIR": str(tmp_path / f"runs{i}")},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]
    spans = _intervals(tmp_path / "runs0") + _intervals(tmp_path / "runs1")
    assert len(spans) == 4
    assert {gpu for gpu, _, _ in spans} <= {"0", "1"}
    for gpu in ("0", "1"):
        mine = sorted((s, e) for g, s, e in spans if g == gpu)
        assert all(prev_end <= start for (_, prev_end), (start, _) in zip(mine, mine[1:])), mine


def test_a_gpu_held_on_this_machine_is_taken_at_the_first_try_after_its_runner_ends(tmp_path):
    """A runner of ours holds GPU 0 on the host (launch.sh's lease, as `held` reports it). Asking this machine costs
    no login: the try after the runner ended takes the GPU. An SSH host's "held" answer stands for RECHECK_S (a login
    a poll would be too many), so a second try there within it does not ask again."""
    holding: set[int] = {0}
    asked: list[str] = []

    def held(host, gpus: list[int]) -> set[int]:
        asked.append(host.name)
        return set(holding)

    here = GpuPool([PoolEntry.of({"host": {"name": "lh", "kind": "local"}, "gpus": [0]})], tmp_path / "here")
    there = GpuPool([PoolEntry.of({"host": {"name": "gpu1", "kind": "ssh", "hostname": "gpu1"}, "gpus": [0]})],
                    tmp_path / "there")
    assert here.try_acquire(1, held) is None and there.try_acquire(1, held) is None
    holding.clear()   # the runner ended: its lease went with it
    assert there.try_acquire(1, held) is None   # the answer of the first try stands, for RECHECK_S
    lease = here.try_acquire(1, held)
    assert lease is not None and lease.gpus == [0]
    assert asked == ["lh", "gpu1", "lh"]
