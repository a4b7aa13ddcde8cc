"""`python -m orchestrator`: compose the config with Hydra, then run one job end to end.

Order matters: validate (exit 2, nothing started) -> connect the host -> open the MLflow run -> sync,
launch, tail -> collect -> log. Everything lands in the Hydra run dir first; MLflow mirrors it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from .bundle import sync_bundle
from .display import LiveDisplay, results_table
from .hosts import HostError, make_host
from .lifecycle import Job
from .paths import CONF_DIR, PROJECT_ROOT
from .runspec import build_spec
from .sweep import PARENT_ENV
from .tracking import Status, Tracker, flatten
from .validate import ConfigError, validate

EXIT_BAD_INPUT = 2
ARTIFACTS = ("config.yaml", "spec.json", "runner.log", "events.jsonl", "results.json", "outputs.jsonl")


def project_commit() -> str:
    try:
        sha = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return f"{sha}-dirty" if sha and dirty else (sha or "unknown")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def fail_input(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def _secrets(cfg: DictConfig) -> dict[str, str]:
    """Values of `host.forward_env` names, read from this environment; never logged anywhere."""
    names = cfg.host.get("forward_env") or []
    return {name: os.environ[name] for name in names if name in os.environ}


def run_job(cfg: DictConfig, console: Console | None = None) -> Status:
    console = console or Console()
    try:
        validate(cfg)
    except ConfigError as exc:
        fail_input(str(exc))
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_id = f"{run_dir.name}-{uuid.uuid4().hex[:6]}"
    spec = build_spec(cfg, run_id)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))

    try:
        host = make_host(cfg.host)
    except (HostError, ValueError) as exc:
        fail_input(str(exc))
    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment)
    tags = {"method": cfg.method.name, "host": cfg.host.name, "project_commit": project_commit(),
            "run_dir": str(run_dir), "run_id_local": run_id}
    tracker.start(run_name=f"{cfg.method.name}-{cfg.model.name}", params=flatten(_params(resolved)), tags=tags,
                  parent_run_id=os.environ.get(PARENT_ENV))
    if tracker.warning:
        console.print(f"[yellow]{tracker.warning}[/]")

    job = Job(host, run_id, run_dir)
    status = Status.FAILED
    try:
        job.prepare(spec.to_json(), secrets=_secrets(cfg))
        bundle = sync_bundle(host)
        env = {str(k): str(v) for k, v in (cfg.host.get("env") or {}).items()}
        job.launch(bundle=bundle, gpus=list(cfg.gpus), env=env)
        console.print(f"[cyan]run {run_id} on {host.name}: {cfg.method.name}, model {cfg.model.name}; "
                      f"local dir {run_dir}[/]")
        with LiveDisplay(console) as display:
            code = job.wait(display.feed)
        job.collect()
        status = Status.FINISHED if code == 0 and (run_dir / "results.json").exists() else Status.FAILED
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping the runner on the host[/]")
        job.cancel()
        _collect_quietly(job)
        status = Status.KILLED
    except HostError as exc:
        console.print(f"[red]error: {exc}[/]")
    except Exception:  # a bug of ours must still close the MLflow run (and a sweep's parent) as FAILED
        console.print_exception()
    finally:
        host.close()

    results = _read_results(run_dir)
    metrics = results.get("metrics", {})
    env_tags = {k: str(v) for k, v in results.get("environment", {}).items()}
    if status is Status.FAILED:
        env_tags["failure.stage"] = job.stage.value
        env_tags["exit_code"] = str(job.exit_code)
    tracker.finish(status, metrics, {**env_tags, "status": status.value},
                   [run_dir / name for name in ARTIFACTS])
    if metrics:
        console.print(results_table(metrics, f"{cfg.method.name} on {cfg.model.name}"))
    colour = {Status.FINISHED: "green", Status.FAILED: "red", Status.KILLED: "yellow"}[status]
    console.print(f"[{colour}]{status.value}[/] run dir: {run_dir}"
                  + (f"  mlflow run: {tracker.run_id}" if tracker.run_id else ""))
    if status is Status.FAILED:
        console.print(f"[red]runner log tail:[/]\n{_tail(run_dir / 'runner.log')}")
    return status


def _params(resolved: dict) -> dict:
    """What is logged as params: the resolved config without Hydra's own node or secret values."""
    return {k: v for k, v in resolved.items() if k != "hydra"}


def _collect_quietly(job: Job) -> None:
    try:
        job.collect()
    except Exception:
        pass


def _read_results(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "results.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    status = run_job(cfg)
    if status is not Status.FINISHED and not HydraConfig.get().mode.name == "MULTIRUN":
        raise SystemExit(130 if status is Status.KILLED else 1)
