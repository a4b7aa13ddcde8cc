"""One job end to end, from its plan: `run_job(plan, start)`, where `start` is the job's MLflow run to be
(orchestrator.tracking.run_start) and knows the run dir.

Steps, each a function: write the config -> place it (a pool's lease of GPUs, run.place) -> preflight (the host's
survey and the bundle probe, one command) -> launch (files staged, bundle synced, runner started: run.steps) ->
record the MLflow run and open it in the background -> follow (tail, live failures, stall watch) -> report
(collect, log, close). Everything lands in the run dir first; MLflow mirrors it. `attach` re-enters the flow at
"follow" for a run still going. A job that cannot start (no host of the pool reachable, a signal while it waits)
returns its Outcome without a runner; the host lost after launch says how to follow the runner again.
"""
from __future__ import annotations

import contextlib
import errno
from pathlib import Path

from omegaconf import OmegaConf
from rich.console import Console
from rich.markup import escape

from remote.events import write_text_atomic

from ..config.plan import Plan
from ..hosts import HostError, HostGone, HostMismatch
from ..signals import describe
from ..tracking.run_start import RunStart
from .attach import follow_again
from .job import Stage, records_full, set_room_aside
from .monitor import Outcome, follow, report, stop
from .place import NoHostReachable, placement
from .progress import StageLine
from .steps import BadInput, announce, launch, open_job, preflight, title

__all__ = ["BadInput", "run_job", "write_config"]


def run_job(plan: Plan, start: RunStart, console: Console | None = None) -> Outcome:
    """Run the planned job and report it."""
    console = console or Console()
    try:
        write_config(start.run_dir, plan)
    except OSError as exc:   # this machine's disk filled since the command's start (its room was checked then)
        if exc.errno != errno.ENOSPC:
            raise
        console.print(f"[red]error: {escape(records_full(start.run_dir))}; nothing was started[/]", soft_wrap=True)
        return Outcome.not_started(error=f"{exc.strerror} in {start.run_dir}")
    with contextlib.ExitStack() as lease:
        try:
            plan = lease.enter_context(placement(plan, console))
        except KeyboardInterrupt as exc:   # while it waited for GPUs of the pool: nothing was started
            console.print(f"[yellow]{describe(exc)}: stopped while waiting for GPUs; nothing was started[/]")
            return Outcome.not_started(interrupted=exc)
        except NoHostReachable as exc:   # each host's reason was shown as it was skipped; a sweep's record keeps them
            console.print(f"[red]error: {escape(str(exc))}; nothing was started[/]", soft_wrap=True)
            return Outcome.not_started(error=exc.detail())
        write_config(start.run_dir, plan)   # where the pool or Ray placed it: the run's config and params say so
        outcome = _on_host(plan, start, console)
    report(outcome, start.tracker, start.run_dir, console, title=title(plan))
    return outcome


def write_config(run_dir: Path, plan: Plan) -> None:
    """The run's config.yaml, after the room set aside for its closing writes (job.set_room_aside)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    set_room_aside(run_dir)
    write_text_atomic(str(run_dir / "config.yaml"), OmegaConf.to_yaml(OmegaConf.create(dict(plan.config))))


def _on_host(plan: Plan, start: RunStart, console: Console) -> Outcome:
    """The job on its host, from preflight to the end of the follow; every exception becomes the outcome's."""
    job = open_job(plan, start.run_dir)
    host = job.host
    outcome = Outcome(job)
    stages = StageLine(console)   # one line naming the stage, until the runner speaks
    try:
        facts, sync, answer = preflight(job, plan, stages, console)
        start.surveyed(plan, host.name, facts)
        launch(job, plan, sync, answer, stages)
        start.record()
        announce(plan, host.name, start.run_dir, console, start.tracker.uri)
        follow(job, outcome, console, fail_fast=plan.fail_fast, needs_results=plan.arm.ours, stall=plan.stall)
    except HostMismatch as exc:   # the run's gpus or device, which the host does not have: bad input, nothing ran
        raise BadInput(str(exc)) from None
    except KeyboardInterrupt as exc:   # before the tail started (follow handles it from there on)
        console.print(f"[yellow]{describe(exc)}: interrupted[/]")
        launched = job.stage in (Stage.RUNNING, Stage.LAUNCH)
        outcome.interrupted(exc, stopped=not launched or stop(job, console))
    except HostError as exc:
        outcome.error(str(exc))
        console.print(f"[red]error: {exc}[/]")
        if job.stage in (Stage.RUNNING, Stage.COLLECT) and not isinstance(exc, HostGone):   # the link went away, not
            # the runner, which runs on (a host gone for good, a dead Ray node, took its runner with it)
            console.print(f"[yellow]{follow_again(host.name, start.run_dir)}[/]", soft_wrap=True)
    except Exception as exc:  # a bug of ours must still close the MLflow run (and a sweep's parent) as FAILED
        if getattr(exc, "errno", None) != errno.ENOSPC:
            outcome.error("orchestrator error")
            console.print_exception()
        else:   # a record of the run's (job.json, spec.json) on this machine's full disk
            outcome.error(records_full(start.run_dir))
            console.print(f"[red]error: {escape(outcome.errors[-1])}[/]", soft_wrap=True)
            if job.stage is Stage.RUNNING:
                console.print(f"[yellow]{escape(follow_again(host.name, start.run_dir))}[/]", soft_wrap=True)
    finally:
        stages.close()
        start.open_late()
        host.close()
    return outcome
