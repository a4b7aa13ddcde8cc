"""The steps that put a planned job on its host: `open_job` (its Host, not yet connected), `preflight` (the host's
survey and the bundle probe, one command) and `launch` (the run's files staged, the bundle synced, the runner
started detached, one command more), then `announce` (the run's first lines: where it runs, and which MLflow store
it logs to). Each sets the job's stage as it begins, for the messages of a failure there.
"""
from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..config.plan import Plan
from ..hosts import HostError
from ..hosts.connect import open_host
from ..hosts.preflight import survey
from ..hosts.settings import HostSettings
from ..tracking.tracker import uri_source
from .bundle import BundleSync
from .job import Job, Stage
from .progress import StageLine


class BadInput(Exception):
    """A job's input refused before anything started (its one line names the key): a single run exits
    EXIT_BAD_INPUT with it; a sweep records the job FAILED and goes on (orchestrator.sweep.job)."""


def open_job(plan: Plan, run_dir: Path) -> Job:
    """The job on its host (nothing connects yet); settings the host cannot use (an ssh_config with ProxyJump) are
    bad input."""
    try:
        return Job(open_host(plan.host), plan.spec.run_id, run_dir)
    except (HostError, ValueError) as exc:
        raise BadInput(str(exc)) from None


def preflight(job: Job, plan: Plan, stages: StageLine,
              console: Console) -> tuple[dict[str, str], BundleSync, str]:
    """One command: the host's preflight (versions, GPUs and their use, free disk) and the bundle probe. For our
    runner, a host Python without torch or transformers refuses the run, and so do `gpus` or `device` the host does
    not have (HostMismatch: bad input); busy GPUs refuse it on a remote host. Returns the preflight's tags (a
    remote host's), the bundle sync and the probe's answer."""
    job.stage = Stage.PREFLIGHT
    stages.show(f"connecting to {job.host.name}, preflight…")
    host, sync = job.host, BundleSync(job.host)
    if plan.host.local and not plan.arm.ours:   # a script of the user's, on this machine: it picks its own devices
        return {}, sync, host.run(sync.probe_command()).stdout
    facts, answer = survey(host, and_then=sync.probe_command())
    if plan.arm.ours:
        facts.check_packages(host.python)
        # GPUs a scheduler gave (Ray's) are its to know: a node may declare GPUs nvidia-smi does not list
        facts.check_devices([] if plan.host.scheduled else list(plan.gpus), plan.spec.device)
    if plan.host.local:
        return {}, sync, answer
    for line in facts.check_gpus(list(plan.gpus), force=plan.force):
        console.print(f"[yellow]warning (force=true): {line}[/]")
    return facts.tags(), sync, answer


def launch(job: Job, plan: Plan, sync: BundleSync, answer: str, stages: StageLine) -> None:
    """Stage the run's files (spec, forwarded secrets, a user's script), upload what the bundle lacks, launch."""
    script = None if plan.arm.ours else plan.arm.file()
    job.prepare(plan.spec.to_json(), secrets=_secrets(plan.host), files=[script] if script else [])
    job.stage = Stage.SYNC
    stages.show(f"syncing runner bundle {sync.bundle.digest}…")
    bundle = sync.complete(answer)
    argv = [job.host.python, "-u", script.name, *plan.arm.args] if script else None
    stages.show("launching runner…")
    job.launch(bundle=bundle, gpus=list(plan.gpus), env=dict(plan.host.env), argv=argv)
    stages.close()


def _secrets(settings: HostSettings) -> dict[str, str]:
    """Values of `host.forward_env` names, read from this environment; never logged or written locally."""
    return {name: os.environ[name] for name in settings.forward_env if name in os.environ}


def announce(plan: Plan, host_name: str, run_dir: Path, console: Console, store: str) -> None:
    """The run's first line (where it runs, what, its local dir), then which MLflow store it logs to and why."""
    console.print(f"[cyan]run {plan.spec.run_id} on {host_name} (gpus {list(plan.gpus)}): {title(plan)}; local dir "
                  f"{run_dir}[/]")
    console.print(f"[cyan]MLflow: {escape(store)} ({uri_source(plan.tracking.uri)})[/]", soft_wrap=True)
    if (note := unused_gpus_note(plan)) is not None:
        console.print(f"[yellow]{note}[/]")


def unused_gpus_note(plan: Plan) -> str | None:
    """Several GPUs for a target that is not spread over them: the runner would use the first one only."""
    if len(plan.gpus) < 2 or not plan.arm.ours or plan.spread:
        return None
    return (f"note: gpus={list(plan.gpus)} but model.device_map is null: the target runs on GPU {plan.gpus[0]} only; "
            f"model.device_map=auto spreads it over all {len(plan.gpus)}")


def title(plan: Plan) -> str:
    return f"{plan.arm.tag} on {plan.model}" if plan.arm.ours else plan.arm.label()
