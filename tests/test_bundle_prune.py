"""Old bundles leave the host: each code version's bundle (tens of MB) used to stay in `<workdir>/bundles` for good.
At a new bundle's install, those beyond the newest KEEP_BUNDLES go unless an unfinished run was launched from one,
and so do staging dirs an install killed midway left. On every host implementation (local, and SSH to a real
sshd)."""
from __future__ import annotations

import shlex

from orchestrator.run.bundle import KEEP_BUNDLES, STALE_STAGING_MIN
from tests.test_bundle_integrity import FILES, make_package, sync


def bundles_on(host) -> set[str]:
    return set(host.run(f"ls {shlex.quote(host.workdir)}/bundles").stdout.split()) - {"LATEST"}


def test_old_bundles_go_but_one_a_running_run_uses_stays(host, tmp_path):
    q = shlex.quote
    digests = []

    def package(n: int):
        return make_package(tmp_path / f"v{n}", {**FILES, "version.py": f"V = {n}\n"})

    def install(n: int) -> None:
        target, _ = sync(host, package(n))
        digests.append(target.rsplit("/", 1)[1])

    for n in range(KEEP_BUNDLES):
        install(n)
    root, runs = f"{host.workdir}/bundles", f"{host.workdir}/runs"
    # a run still going from the oldest bundle, one that ended from the next; an install killed long ago and
    # one going now left their staging dirs
    host.run(f"mkdir -p {q(runs)}/going {q(runs)}/ended && "
             f"echo \"export PYTHONPATH={q(f'{root}/{digests[0]}')}\" > {q(runs)}/going/launch.sh && "
             f"echo \"export PYTHONPATH={q(f'{root}/{digests[1]}')}\" > {q(runs)}/ended/launch.sh && "
             f"echo 0 > {q(runs)}/ended/exit_code && "
             f"mkdir {q(root)}/{digests[0]}.tmp-dead {q(root)}/{digests[0]}.tmp-live && "
             f"touch -d '-{STALE_STAGING_MIN + 5} minutes' {q(root)}/{digests[0]}.tmp-dead")
    install(KEEP_BUNDLES)
    install(KEEP_BUNDLES + 1)
    assert bundles_on(host) == {digests[0], *digests[2:], f"{digests[0]}.tmp-live"}

    host.run(f"echo 0 > {q(runs)}/going/exit_code")   # the run ended: its bundle is an old one like the others
    install(KEEP_BUNDLES + 2)
    assert bundles_on(host) == {*digests[-KEEP_BUNDLES:], f"{digests[0]}.tmp-live"}
    target, _ = sync(host, package(0))   # a version pruned, asked for again: sent again
    assert target.endswith(digests[0])
    assert host.run(f"cat {q(target)}/remote/version.py").stdout == "V = 0\n"
