"""Shell-hostile strings in paths, env values, argv, model ids and secrets travel to the SSH host as data.

Everything goes through the code production uses (Job, sync_bundle, the launch script, SSHHost); the proof
is twofold: the values arrive byte for byte, and no injected `touch` ever ran (the marker file is absent).
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

from orchestrator.hosts.connect import open_host

from orchestrator.hosts.settings import host_settings
from orchestrator.run.bundle import sync_bundle
from orchestrator.run.job import Job
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec


def hostile(marker: Path) -> str:
    m = str(marker)
    return (f"$(touch {m}) `touch {m}` ; touch {m} & touch {m} | touch {m} ' ; touch {m} ; ' "
            f"\" ; touch {m} ; \" \\' \n touch {m} \n ${{IFS}}*?[]~!#%")


# Prints what the process received, as JSON on stdout (which the launch script sends to runner.log).
REPORT = """
import json, os, sys
spec = json.load(open("spec.json"))
print(json.dumps({"argv": sys.argv[1], "HF_HOME": os.environ["HF_HOME"], "OTHER": os.environ["OTHER"],
                  "model": spec["model"]["path"], "cwd": os.getcwd()}))
"""


def test_hostile_strings_pass_as_data(sshd, tmp_path):
    marker = Path(f"/tmp/sbm-{uuid.uuid4().hex[:8]}")   # short: it appears 9 times in one path component
    evil = hostile(marker)
    workdir = str(tmp_path / f"work {evil}")
    host = open_host(host_settings(sshd.host_config(workdir=workdir)))
    package = tmp_path / "pkg" / "remote"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "odd name ; $(x).py").write_text("X = 1\n")

    spec = RunSpec(run_id="r", model=ModelSpec(path=f"org/{evil}"), drafter=DrafterSpec(),
                   decoding=DecodingSpec(), dataset=DatasetSpec())
    job = Job(host, f"run {evil}".replace("/", "_"), tmp_path / "local")   # a run id is one path component
    job.prepare(spec.to_json())
    bundle = sync_bundle(host, package)
    job.launch(bundle=bundle, gpus=[0], env={"HF_HOME": evil, "OTHER": evil},
               argv=[host.python, "-c", REPORT, evil])
    assert job.wait(lambda log, events: None) == 0, (tmp_path / "local" / "runner.log").read_text()

    got = json.loads((tmp_path / "local" / "runner.log").read_text())
    assert got == {"argv": evil, "HF_HOME": evil, "OTHER": evil, "model": f"org/{evil}", "cwd": job.files.root}
    assert Path(bundle, "remote", "odd name ; $(x).py").read_text() == "X = 1\n"
    try:
        assert not marker.exists(), "an injected command ran"
    finally:
        marker.unlink(missing_ok=True)
