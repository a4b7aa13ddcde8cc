"""Secrets forwarded by name reach the runner's environment on the SSH host and nothing else: no file under
the run dirs (remote or local), no bundle, no log (ours, paramiko's, sshd's)."""
from __future__ import annotations

import hashlib
import logging
import os
import uuid
from pathlib import Path

from orchestrator.hosts.connect import open_host

from orchestrator.hosts.settings import host_settings
from orchestrator.run.job import Job
from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec

# The runner stand-in: proves it has the secret by printing its hash, and says whether the secret file is gone.
REPORT = """
import hashlib, os
print(hashlib.sha256(os.environ["SPECBENCH_TEST_SECRET"].encode()).hexdigest())
print("secrets file present:", os.path.exists("secrets.env"))
"""


def files_containing(root: Path, needle: bytes) -> list[str]:
    hits = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            try:
                if needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                pass
    return hits


def test_forwarded_secret_reaches_the_process_and_nothing_else(sshd, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)   # paramiko's transport debug log included
    secret = f"hf_{uuid.uuid4().hex}'\"$(touch /tmp/sbs)`x`\n;"
    workdir = tmp_path / "work"
    host = open_host(host_settings(sshd.host_config(workdir=str(workdir), forward_env=["SPECBENCH_TEST_SECRET"])))
    spec = RunSpec(run_id="r", model=ModelSpec(path="org/model"), drafter=DrafterSpec(),
                   decoding=DecodingSpec(), dataset=DatasetSpec())
    sent: list[str] = []   # every command line the host receives: `ps` on the host shows them to all users
    run = host.run
    host.run = lambda command, **kw: (sent.append(command), run(command, **kw))[1]
    job = Job(host, "run-secret", tmp_path / "local")
    job.prepare(spec.to_json(), secrets={"SPECBENCH_TEST_SECRET": secret})
    assert sent == [], "prepare only stages: the files travel with the launch"
    # (the secrets file's 0600 mode: tests/test_lifecycle.py, on every host)

    job.launch(bundle=str(tmp_path), gpus=None, env={}, argv=[host.python, "-c", REPORT])
    assert len(sent) == 1, "run dir, spec, secrets and launch.sh placed and started in one command"
    assert job.wait(lambda log, events: None) == 0
    job.collect()
    host.close()

    log = (tmp_path / "local" / "runner.log").read_text().splitlines()
    assert log[0] == hashlib.sha256(secret.encode()).hexdigest(), "the secret did not reach the runner intact"
    assert log[1] == "secrets file present: False", "launch.sh must delete the secrets file before the runner"
    needle = secret.encode()
    assert files_containing(workdir, needle) == []
    assert files_containing(tmp_path / "local", needle) == []
    assert [c for c in sent if secret in c] == [], "a secret must never be part of a command line"
    assert secret not in caplog.text
    assert needle not in (sshd.root / "sshd.log").read_bytes()
    assert not os.path.exists("/tmp/sbs")
