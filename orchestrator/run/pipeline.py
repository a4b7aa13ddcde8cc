"""`python -m orchestrator`: compose the config with Hydra, then run one job end to end.

Order matters: validate (exit 2, nothing started) -> lease GPUs (pool) -> connect the host, preflight and probe
the bundle (one command) -> upload what changed -> place the run's files and launch (one command) -> open the
MLflow run -> tail -> collect -> log. Everything lands in the Hydra run dir first; MLflow mirrors it. `attach`
re-enters the same flow at "tail" for a run still going.
"""
from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import threading
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.markup import escape

from remote.events import write_json_atomic
from remote.spec import RunSpec

from ..hosts import HostError, make_host
from ..hosts.leases import GpuPool, NoHostReachable, Unreachable, pool_entries
from ..paths import PROJECT_ROOT, SOURCE_CHECKOUT
from ..program import program
from ..signals import describe
from ..tracking.find import JOB_FILE
from ..tracking.names import is_script, label, what_ran
from ..tracking.tracker import Tracker, flatten
from .bundle import BundleSync
from .job import Job, Stage, held_gpus
from .monitor import Outcome, follow, report, stop
from .progress import StageLine
from .stall import StallLimits


class BadInput(Exception):
    """A job's input refused before anything started (its one line names the key): a single run exits
    EXIT_BAD_INPUT with it; a sweep records the job FAILED and goes on (orchestrator.sweep.job)."""


def project_commit() -> str:
    if not SOURCE_CHECKOUT:   # installed from a wheel: its version is what was run
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"specbench-{version('specbench')}"
        except PackageNotFoundError:
            return "unknown"
    try:
        sha = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return f"{sha}-dirty" if sha and dirty else (sha or "unknown")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _secrets(host_cfg) -> dict[str, str]:
    """Values of `host.forward_env` names, read from this environment; never logged or written locally."""
    names = host_cfg.get("forward_env") or []
    return {name: os.environ[name] for name in names if name in os.environ}


@contextlib.contextmanager
def _placement(cfg: DictConfig, console: Console):
    """(host config, gpus) for this job: the configured ones, or a lease from the pool."""
    entries = [OmegaConf.to_container(entry, resolve=True) for entry in pool_entries(cfg)]
    if not entries:
        yield cfg.host, list(cfg.gpus)
        return
    pool = GpuPool(entries, cfg.pool.lock_dir)
    with pool.acquire(len(cfg.gpus), held=_held_on_host, tell=lambda why: console.print(f"[yellow]{escape(why)}[/]",
                                                                                          soft_wrap=True)) as lease:
        yield OmegaConf.create(lease.host), lease.gpus


def _held_on_host(host_cfg: dict, gpus: list[int]) -> set[int]:
    """GPUs of the pool host that a runner of ours holds (one that outlived its sweep). A host that cannot be asked
    is Unreachable: placed there, the job would only fail to connect, while another host may be free."""
    try:
        with make_host(host_cfg) as host:
            return held_gpus(host, gpus)
    except (HostError, ValueError, OSError) as exc:
        raise Unreachable(str(exc).removeprefix(f"{host_cfg.get('name')}: ")) from None


def run_job(cfg: DictConfig, spec: RunSpec, run_dir: Path, tracker: Tracker, console: Console | None = None) -> Outcome:
    console = console or Console()
    run_id = spec.run_id
    resolved = OmegaConf.to_container(cfg, resolve=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))

    with contextlib.ExitStack() as placed:
        try:
            host_cfg, gpus = placed.enter_context(_placement(cfg, console))
        except KeyboardInterrupt as exc:   # while it waited for GPUs of the pool: nothing was started
            console.print(f"[yellow]{describe(exc)}: stopped while waiting for GPUs; nothing was started[/]")
            outcome = Outcome(None)
            outcome.interrupted(exc)
            return outcome
        except NoHostReachable as exc:   # each host's reason was shown as it was skipped; a sweep's record keeps them
            console.print(f"[red]error: {escape(str(exc))}; nothing was started[/]", soft_wrap=True)
            outcome = Outcome(None)
            outcome.error(exc.detail())
            return outcome
        if pool_entries(cfg):   # the pool chose the host and GPUs: the run's config and params say where it ran
            resolved = {**resolved, "host": OmegaConf.to_container(host_cfg, resolve=True), "gpus": list(gpus)}
            (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))
        try:
            host = make_host(host_cfg)
        except (HostError, ValueError) as exc:
            raise BadInput(str(exc)) from None
        job = Job(host, run_id, run_dir)
        outcome = Outcome(job)
        stages = StageLine(console)   # one line naming the stage, until the runner speaks
        opening: threading.Event | None = None   # set once MLflow opened the run (in the background)
        open_run = None
        try:
            job.stage = Stage.PREFLIGHT
            stages.show(f"connecting to {host.name}, preflight…")
            sync = BundleSync(host)
            pre_tags, answer = _survey(host, host_cfg, sync, gpus, bool(cfg.get("force", False)), is_script(cfg),
                                       console)
            tags = {**what_ran(cfg), "host": host.name, "run_dir": str(run_dir), "run_id_local": run_id,
                    "gpus": ",".join(map(str, gpus)), "host_kind": str(host_cfg.get("kind", "local")), **pre_tags}
            open_run = functools.partial(_record_and_open, tracker, cfg, resolved, tags)
            script = _user_script(cfg)
            job.prepare(spec.to_json(), secrets=_secrets(host_cfg), files=[script] if script else [])
            job.stage = Stage.SYNC
            stages.show(f"syncing runner bundle {sync.bundle.digest}…")
            bundle = sync.complete(answer)
            env = {str(k): str(v) for k, v in (host_cfg.get("env") or {}).items()}
            argv = [host.python, "-u", script.name, *map(str, cfg.runner.args)] if script else None
            stages.show("launching runner…")
            job.launch(bundle=bundle, gpus=gpus, env=env, argv=argv)
            stages.close()
            # A kill from here on must leave the run findable and loggable: job.json (attach, reap) and what its
            # MLflow run is to show (tracking.json: sync) are written now, before MLflow is touched. MLflow opens
            # the run once the runner is started, not while the job is placed (its import holds the GIL, and the
            # placement's round trips took 2-3x longer beside it), and in the background: its import, database
            # work and an unreachable server's timeouts never delay the tail; report() waits for it, bounded.
            # job.json is written again once the MLflow run is open (or failed to), so that it names the run.
            save_job = functools.partial(_save_job, run_dir, host_cfg, run_id, tracker, needs_results=not script)
            record_start(tracker, cfg, resolved, tags)
            save_job()
            opening = tracker.open_async(functools.partial(_open_run, tracker, tags, then=save_job))
            console.print(f"[cyan]run {run_id} on {host.name} (gpus {gpus}): {_title(cfg)}; local dir {run_dir}[/]")
            if (note := unused_gpus_note(cfg, gpus)) is not None:
                console.print(f"[yellow]{note}[/]")
            follow(job, outcome, console, fail_fast=bool(cfg.get("fail_fast", True)), needs_results=not script,
                   stall=StallLimits.of(cfg))
        except KeyboardInterrupt as exc:   # before the tail started (follow handles it from there on)
            console.print(f"[yellow]{describe(exc)}: interrupted[/]")
            if job.stage in (Stage.RUNNING, Stage.LAUNCH):
                stop(job, console)
            outcome.interrupted(exc)
        except HostError as exc:
            outcome.error(str(exc))
            console.print(f"[red]error: {exc}[/]")
            if job.stage in (Stage.RUNNING, Stage.COLLECT):   # the host went away, not the runner, which runs on
                console.print(f"[yellow]the runner may still be running on {host.name}: `{program()} attach "
                              f"{run_dir}` follows it again and logs the run at its end (`{program()} stop "
                              f"{run_dir}` stops it)[/]", soft_wrap=True)
        except Exception:  # a bug of ours must still close the MLflow run (and a sweep's parent) as FAILED
            outcome.error("orchestrator error")
            console.print_exception()
        finally:
            stages.close()
            if opening is None and open_run is not None:
                tracker.open_async(open_run)   # placing the job failed after preflight: logged in MLflow too
            host.close()
    report(outcome, tracker, run_dir, console, title=_title(cfg))
    return outcome


def record_start(tracker: Tracker, cfg: DictConfig, resolved: dict, tags: dict[str, str]) -> None:
    """Record the MLflow run to open, locally (no subprocess, no MLflow). The name says method, budget or block
    size, model and, in a sweep, the job's other swept values (orchestrator.tracking.names)."""
    from ..tracking.names import run_name, swept_from_env

    try:
        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:   # called outside a Hydra app (no HydraConfig)
        overrides = []
    tracker.record_start(run_name=run_name(cfg, overrides, swept_from_env()),
                         params=flatten(_params(resolved, is_script(cfg))), tags=tags,
                         parent_run_id=tracker.parent_run_id)


def _open_run(tracker: Tracker, tags: dict[str, str], then=None) -> None:
    """Open the recorded run in MLflow, then call `then`; in the background once the runner is started, so git's two
    calls (and nvidia-smi's, for the `gpu` tag of a local run) do not delay it either."""
    from ..tracking.names import gpu_label

    gpus = [int(g) for g in tags.get("gpus", "").split(",") if g.strip().isdigit()]
    gpu = gpu_label(tags, gpus, local=tags.get("host_kind", "local") == "local")
    tracker.send(tags={"gpu": gpu, "project_commit": project_commit()})
    if then is not None:
        then()


def _record_and_open(tracker: Tracker, cfg: DictConfig, resolved: dict, tags: dict[str, str]) -> None:
    record_start(tracker, cfg, resolved, tags)
    _open_run(tracker, tags)


def unused_gpus_note(cfg: DictConfig, gpus: list[int]) -> str | None:
    """Several GPUs for a target that is not spread over them: the runner would use the first one only."""
    if len(gpus) < 2 or cfg.runner.kind == "script" or cfg.model.get("device_map") is not None:
        return None
    return (f"note: gpus={list(gpus)} but model.device_map is null: the target runs on GPU {gpus[0]} only; "
            f"model.device_map=auto spreads it over all {len(gpus)}")


def _title(cfg: DictConfig) -> str:
    return label(cfg) if is_script(cfg) else f"{cfg.method.name} on {cfg.model.name}"


def _user_script(cfg: DictConfig) -> Path | None:
    """`runner=script`: the user's own script (validated to exist), launched instead of our runner."""
    return Path(cfg.runner.path).expanduser().resolve() if cfg.runner.kind == "script" else None


def _survey(host, host_cfg, sync: BundleSync, gpus: list[int], force: bool, script: bool,
            console: Console) -> tuple[dict[str, str], str]:
    """One command: a remote host's preflight (versions, GPUs in use, free disk) and the bundle probe. Busy GPUs
    refuse the run, and so does a host Python without torch or transformers where our runner runs (a local host:
    only one given its own host.python). Returns the preflight tags and the bundle probe's answer."""
    from ..hosts.preflight import survey

    local = host_cfg.get("kind", "local") == "local"
    if local and (script or not host_cfg.get("python")):   # this interpreter, which runs the orchestrator's torch
        return {}, host.run(sync.probe_command()).stdout
    facts, answer = survey(host, and_then=sync.probe_command())
    if not script:
        facts.check_packages(host.python)
    if local:
        return {}, answer
    for line in facts.check_gpus(gpus, force=force):
        console.print(f"[yellow]warning (force=true): {line}[/]")
    return facts.tags(), answer


# What a user's script run is made of (its argv, where and on which GPUs it ran, how it was followed); the model,
# method, dataset and decoding knobs are our runner's, and logged for a script they would claim what it did not run.
SCRIPT_PARAMS = ("runner", "host", "gpus", "pool", "tracking", "force", "fail_fast", "stall_warning", "stall_timeout",
                 "objective")


def _params(resolved: dict, script: bool) -> dict:
    """What is logged as params: the resolved config without Hydra's own node (secrets are never in it); for a
    user's `script`, SCRIPT_PARAMS."""
    return {k: v for k, v in resolved.items() if k != "hydra" and (not script or k in SCRIPT_PARAMS)}


def _save_job(run_dir: Path, host_cfg, run_id: str, tracker: Tracker, needs_results: bool) -> None:
    """What `attach` needs to find the run again. Host config holds env var names, never secret values."""
    host = OmegaConf.to_container(host_cfg, resolve=True) if not isinstance(host_cfg, dict) else host_cfg
    write_json_atomic(str(run_dir / JOB_FILE), {   # attach may read it at any moment
        "run_id": run_id, "host": host, "mlflow_run_id": tracker.run_id, "tracking_uri": tracker.uri,
        "experiment": tracker.experiment, "needs_results": needs_results,
    })


