"""Installed as a user installs it: a wheel (not editable) in a fresh venv, the default job run from another
directory. Outputs land in ./runs of that directory, never in site-packages; the config tree travels inside
the orchestrator package (no top-level `conf` to collide with another project's)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator.paths import PROJECT_ROOT


def sh(*argv, cwd=None, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _copy_of_the_tree(dest: Path) -> Path:
    """The project's files as a fresh clone has them (building in the checkout would leave build/ behind)."""
    listed = subprocess.run(["git", "-C", str(PROJECT_ROOT), "ls-files", "-co", "--exclude-standard"],
                            capture_output=True, text=True)
    files = listed.stdout.split() if listed.returncode == 0 else None
    if files is None:
        shutil.copytree(PROJECT_ROOT, dest, ignore=shutil.ignore_patterns("runs", ".git", "__pycache__", "*.egg-info"))
        return dest
    for name in files:
        if (PROJECT_ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, dest / name)
    return dest


def _venv_beside_this_one(root: Path) -> Path:
    """A fresh venv (its bin/) that sees the packages of the environment running the tests: torch, transformers,
    mlflow... come from there; specbench only from the wheel, installed into the venv's own site-packages, which
    come first. `--system-site-packages` would show the base interpreter's packages instead, which inside a venv
    (how most users run the tests) are not the ones installed: the wheel's `specbench` died on a missing omegaconf.
    A .pth line may run `site.addsitedir`, which also reads the .pth files of those dirs (editable installs)."""
    sh(sys.executable, "-m", "venv", root)
    own = sh(root / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout
    dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)
    (Path(own.strip()) / "zz_test_environment.pth").write_text(lines)
    return root / "bin"


def test_the_wheel_runs_the_default_job_from_any_directory(tmp_path):
    source = _copy_of_the_tree(tmp_path / "src")
    # (with build isolation: pip brings the setuptools pyproject asks for, whatever this environment has)
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "dist", source)
    (wheel,) = (tmp_path / "dist").glob("specbench-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist() if not name.startswith("specbench-")}
    assert tops == {"orchestrator", "remote"}
    venv = _venv_beside_this_one(tmp_path / "venv")
    sh(venv / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall", wheel)
    work = tmp_path / "work"
    work.mkdir()
    # as a user's shell has it: no PYTHONPATH of a checkout (it would import the checkout, not the wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("SPECBENCH_RUNS_DIR", "PYTHONPATH")}
    env["PATH"] = f"{venv}:{env['PATH']}"
    where = sh(venv / "python", "-c", "import orchestrator; print(orchestrator.__file__)", cwd=work, env=env)
    site = Path(where.stdout.strip()).parent.parent
    assert site.is_relative_to(tmp_path / "venv")
    sh(venv / "specbench", "num_prompts=1", "max_new_tokens=8", cwd=work, env=env)
    client = MlflowClient(f"sqlite:///{work / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("specbench").experiment_id])
    assert run.info.status == "FINISHED" and Path(run.data.tags["run_dir"]).is_relative_to(work / "runs")
    assert run.data.tags["project_commit"] == "specbench-0.1.0"
    assert not (site / "runs").exists()
