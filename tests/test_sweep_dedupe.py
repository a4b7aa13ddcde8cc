"""A sweep runs each effective config once: the run spec as the runner reads it (less its run id), the host and
the GPUs. Claims are exclusive across processes (joblib and submitit workers). The whole sweep with its skipped
duplicates: tests/test_sweep.py."""
from __future__ import annotations

import multiprocessing
import os

from orchestrator.config.plan import make_plan
from orchestrator.sweep.dedupe import claim, effective_config, key_of
from tests.test_mlflow_names import compose


def key(*overrides: str) -> str:
    cfg = compose("model=tiny-qwen3", *overrides)
    return key_of(effective_config(make_plan(cfg, run_id=f"r-{os.urandom(4).hex()}")))


def test_unread_knobs_do_not_make_a_job_new():
    assert key("method=dflash", "tree_budget=8") == key("method=dflash", "tree_budget=32")
    assert key("method=ar", "tree_budget=8") == key("method=ar", "tree_budget=32")
    assert key("method=ar", "baseline=ar") == key("method=ar", "baseline=none")       # one AR pass serves both
    assert key("method=ar", "drafter.block_size=4") == key("method=ar", "drafter.block_size=8")
    assert key("method=ar", "tracking.experiment=a", "fail_fast=false") == key("method=ar")   # not the runner's


def test_read_knobs_and_placement_make_a_job_new():
    base = key("method=ddtree", "tree_budget=8")
    for other in (["method=ddtree", "tree_budget=32"], ["method=dflash", "tree_budget=8"],
                  ["method=ddtree", "tree_budget=8", "seed=1"], ["method=ddtree", "tree_budget=8", "repeats=2"],
                  ["method=ddtree", "tree_budget=8", "gpus=[1]"],
                  ["method=ddtree", "tree_budget=8", "+host.env.CUDA_LAUNCH_BLOCKING=1"]):
        assert key(*other) != base, other
    assert key("method=dflash", "drafter.block_size=4") != key("method=dflash", "drafter.block_size=8")


def _claim(registry, key_, job, barrier, results):
    barrier.wait()   # all claim at once
    results.put((job, claim(registry, key_, {"job": job})))


def test_one_claim_wins_across_processes(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(4), context.Queue()
    procs = [context.Process(target=_claim, args=(tmp_path / "effective", "k", job, barrier, results))
             for job in range(4)]
    for p in procs:
        p.start()
    answers = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    winners = [job for job, holder in answers.items() if holder is None]
    assert len(winners) == 1
    assert all(holder == {"job": winners[0]} for job, holder in answers.items() if job != winners[0])
    assert [p.name for p in (tmp_path / "effective").iterdir()] == ["k.json"]   # no temp files left
