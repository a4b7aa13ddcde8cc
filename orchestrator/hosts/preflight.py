"""Preflight: what a host has, in one round trip, before a run is started on it.

Contract: `preflight(host)` sends ONE command (the host's Python running a small probe given as a quoted
argument) and returns a `Preflight`: Python, torch, transformers, torch's CUDA build and the driver version
(read from package metadata, without importing torch: that alone takes seconds); the GPUs nvidia-smi sees
(index, name, memory used/total, compute processes) or none where nvidia-smi is absent (a CPU host is fine);
free disk where the workdir is (or would be); whether the optional kernels `fla` (flash-linear-attention) and
`causal_conv1d` import (really imported when installed, since a wrongly built extension fails only then).
`survey(host, and_then)` is the same with another read-only probe (the bundle's) in that one command.
`tags()` is the `preflight.*` dict for MLflow. `check_devices(gpus, device)` raises HostMismatch (bad input: a
run's `gpus` or `device` that the host does not have) before anything is launched; `busy_gpus(requested)` names
the requested GPUs that are in use, one line each; `check_gpus(requested, force)` raises HostError for them unless
`force`. Works on any Host (it only uses `Host.run`).

Non-goals: installing anything, checking model access (the runner reports that with its own evidence).
"""
from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from .base import Host, HostError, HostMismatch, Result

# A GPU with no visible process but this much memory in use is busy too: processes of other containers or
# users do not show up in nvidia-smi, their memory does.
BUSY_MEMORY_MIB = 1024

# Runs on the host with its own Python: standard library only, every probe guarded, one JSON line out.
PROBE = r'''
import json, os, shutil, subprocess, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "errors": {}}

def guarded(key, fn):
    try:
        return fn()
    except BaseException as exc:  # an import can fail in many ways (ImportError, OSError, RuntimeError)
        out["errors"][key] = f"{type(exc).__name__}: {exc}"[:300]
        return None

import importlib.util, runpy

def torch_info():
    # torch/version.py, read without importing torch (which takes seconds): version and CUDA build.
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return {"torch": None, "cuda": None}
    v = runpy.run_path(os.path.join(spec.submodule_search_locations[0], "version.py"))
    return {"torch": v.get("__version__"), "cuda": v.get("cuda")}

out.update(guarded("torch", torch_info) or {})

def dist_version(name):
    from importlib.metadata import version
    return version(name)

out["transformers"] = guarded("transformers", lambda: dist_version("transformers"))
for mod in ("fla", "causal_conv1d"):
    # Installed ones are really imported: a compiled extension built for another torch fails only then.
    if importlib.util.find_spec(mod) is not None:
        out[mod] = guarded(mod, lambda: __import__(mod) and True) or False
    else:
        out[mod] = False

def free_disk(path):
    path = os.path.expanduser(path)
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return {"disk_free_bytes": shutil.disk_usage(path).free, "disk_path": path}

out.update(guarded("disk", lambda: free_disk(sys.argv[1])) or {})

def smi(query, what):
    cmd = ["nvidia-smi", f"--query-{what}={query}", "--format=csv,noheader,nounits"]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    return [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]

if shutil.which("nvidia-smi"):
    out["gpus"] = guarded("nvidia-smi", lambda: smi("index,uuid,name,memory.used,memory.total,driver_version", "gpu"))
    out["apps"] = guarded("nvidia-smi-apps", lambda: smi("gpu_uuid,pid,process_name,used_memory", "compute-apps"))
print("SPECBENCH_PREFLIGHT " + json.dumps(out))
'''
MARKER = "SPECBENCH_PREFLIGHT "
EXIT_MARKER = "SPECBENCH_PREFLIGHT_EXIT "   # the probe's own exit status, whatever runs after it


@dataclass
class GPUProcess:
    pid: int
    name: str
    memory_mib: int | None


@dataclass
class GPU:
    index: int
    name: str
    memory_used_mib: int
    memory_total_mib: int
    uuid: str = ""
    processes: list[GPUProcess] = field(default_factory=list)

    def describe(self) -> str:
        return f"GPU {self.index} ({self.name}, {self.memory_used_mib}/{self.memory_total_mib} MiB used)"

    def busy_reason(self) -> str | None:
        if self.processes:
            procs = ", ".join(f"pid {p.pid} {p.name}" + (f" ({p.memory_mib} MiB)" if p.memory_mib else "")
                              for p in self.processes)
            return f"{self.describe()} is in use by {procs}"
        if self.memory_used_mib >= BUSY_MEMORY_MIB:
            return f"{self.describe()} is in use by processes nvidia-smi cannot see (another container or user)"
        return None


@dataclass
class Preflight:
    host: str
    python: str | None
    torch: str | None
    cuda: str | None                # the CUDA version torch was built with (None: a CPU build)
    driver: str | None              # the NVIDIA driver version (None: no nvidia-smi)
    transformers: str | None
    fla: bool
    causal_conv1d: bool
    disk_free_gb: float | None
    disk_path: str | None
    gpus: list[GPU] | None          # None: no nvidia-smi on the host (a CPU host)
    errors: dict[str, str]
    seconds: float

    def tags(self) -> dict[str, str]:
        """`preflight.*` tags for MLflow (strings only; absent facts are "none")."""
        gpus = self.gpus or []
        tags = {
            "python": self.python, "torch": self.torch, "cuda": self.cuda,
            "driver": self.driver, "transformers": self.transformers, "fla": self.fla,
            "causal_conv1d": self.causal_conv1d,
            "disk_free_gb": None if self.disk_free_gb is None else f"{self.disk_free_gb:.1f}",
            "gpu_count": len(gpus),
            "gpus": "; ".join(f"{g.index}: {g.name} {g.memory_used_mib}/{g.memory_total_mib} MiB" for g in gpus),
            "seconds": f"{self.seconds:.2f}",
        }
        return {f"preflight.{k}": "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in tags.items()}

    def busy_gpus(self, requested: list[int]) -> list[str]:
        """One line per requested GPU that is in use (or missing); empty when all are free or there are no
        GPUs to check (no nvidia-smi)."""
        if not self.gpus:
            return []
        by_index = {g.index: g for g in self.gpus}
        lines = []
        for index in requested:
            gpu = by_index.get(index)
            if gpu is None:
                lines.append(f"GPU {index} does not exist on {self.host} (it has {sorted(by_index)})")
            elif (reason := gpu.busy_reason()) is not None:
                lines.append(reason)
        return lines

    def check_devices(self, requested: list[int], device: str) -> None:
        """Raise HostMismatch where `gpus` names a GPU the host lacks or `device=cuda` cannot run there. A host without
        GPUs takes the default gpus=[0] (its CPU runs the job, as device=auto says)."""
        indices = sorted(g.index for g in self.gpus or [])
        if device == "cuda" and self.torch is not None and self.cuda is None:
            raise HostMismatch(f"device=cuda, but the torch {self.torch} of {self.host} is a CPU build (no CUDA); "
                               f"install torch's CUDA build there, or use device=auto")
        if device == "cuda" and not indices:
            raise HostMismatch(f"device=cuda, but {self.host} has no NVIDIA GPU (nvidia-smi "
                               f"{'finds none' if self.gpus is not None else 'is not there'}); use device=auto or cpu")
        absent = [g for g in requested if g not in indices]
        if device != "cpu" and absent and (indices or list(requested) != [0]):
            has = f"its GPUs are {indices}" if indices else "it has no GPU"
            raise HostMismatch(f"gpus={list(requested)}: {self.host} has no GPU {', '.join(map(str, absent))} ({has})")

    def check_packages(self, python: str) -> None:
        """Raise HostError where the host's Python lacks what our runner imports (torch, transformers): found here,
        before the bundle is synced and a run exists, not as the runner's ModuleNotFoundError."""
        missing = [name for name in ("torch", "transformers") if getattr(self, name) is None]
        if missing:
            raise HostError(f"{self.host}: {python} (host.python, Python {self.python}) has no "
                            f"{' and no '.join(missing)}, which the runner needs; install them there "
                            f"(`{python} -m pip install {' '.join(missing)}`, with the torch build for the host's "
                            f"CUDA) or set host.python to an interpreter that has them")

    def check_gpus(self, requested: list[int], force: bool = False) -> list[str]:
        """Raise HostError naming busy GPUs unless `force`; with `force`, return the lines as warnings."""
        lines = self.busy_gpus(requested)
        if lines and not force:
            raise HostError(f"{self.host}: " + "; ".join(lines) + ". Choose other gpus=[...] or pass force=true")
        return lines


def preflight(host: Host, timeout: float = 120.0) -> Preflight:
    """Probe `host` with one command; HostError (with the output's tail) if its Python cannot run the probe."""
    return survey(host, timeout=timeout)[0]


def survey(host: Host, and_then: str = "", timeout: float = 120.0) -> tuple[Preflight, str]:
    """Preflight, with `and_then` (another read-only probe, a complete and quoted command) run in the same
    command: every command costs a round trip and a shell start on the host. Returns the facts and what
    `and_then` printed."""
    command = f'{shlex.join([host.python, "-c", PROBE, host.workdir])}; echo "{EXIT_MARKER}$?"'
    if and_then:
        command += f"; {and_then}"
    start = time.monotonic()
    result = host.run(command, check=False, timeout=timeout)
    seconds = time.monotonic() - start
    own, found, rest = ("\n" + result.stdout).partition(f"\n{EXIT_MARKER}")
    code_text, _, after = rest.partition("\n")
    exited = int(code_text.strip()) if found and code_text.strip().isdigit() else result.exited
    data = _parse(own)
    if data is None:
        hint = (f"is host.python={host.python!r} right? " if exited in (126, 127) else "")
        tail = Result(command, exited, own, result.stderr).tail()
        raise HostError(f"{host.name}: preflight failed (exit {exited}); {hint}command: "
                        f"{host.python} -c <probe> {host.workdir}\n{tail}")
    return _build(host.name, data, seconds), after


def _parse(stdout: str) -> dict[str, Any] | None:
    # The marker skips whatever a login shell's rc files print before it.
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    return None


def _int(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:   # "[N/A]", "[Not Supported]"
        return None


def _gpus(rows: list[list[str]] | None, apps: list[list[str]] | None) -> list[GPU]:
    gpus = [GPU(index=int(r[0]), uuid=r[1], name=r[2], memory_used_mib=_int(r[3]) or 0,
                memory_total_mib=_int(r[4]) or 0) for r in rows or [] if len(r) >= 5]
    by_uuid = {g.uuid: g for g in gpus}
    for app in apps or []:
        if len(app) >= 4 and app[0] in by_uuid:
            # process names may hold commas: everything between pid and the last field is the name
            name = ",".join(app[2:-1])
            by_uuid[app[0]].processes.append(GPUProcess(pid=_int(app[1]) or -1, name=name, memory_mib=_int(app[-1])))
    return gpus


def _build(host: str, d: dict[str, Any], seconds: float) -> Preflight:
    free = d.get("disk_free_bytes")
    return Preflight(
        host=host, python=d.get("python"), torch=d.get("torch"), cuda=d.get("cuda"),
        driver=next((r[5] for r in d.get("gpus") or [] if len(r) > 5), None), transformers=d.get("transformers"),
        fla=bool(d.get("fla")), causal_conv1d=bool(d.get("causal_conv1d")),
        disk_free_gb=None if free is None else free / 2**30, disk_path=d.get("disk_path"),
        gpus=_gpus(d.get("gpus"), d.get("apps")) if "gpus" in d else None,
        errors=d.get("errors", {}), seconds=seconds,
    )
