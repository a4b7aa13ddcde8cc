"""SSHHost against a real loopback sshd: host-key policy, the four primitives, ssh config aliases."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.hosts import CommandFailed, HostError
from orchestrator.hosts.connect import open_host
from orchestrator.hosts.settings import host_settings
from orchestrator.hosts.ssh import SSHHost
from tests.sshd import free_port


def _host(facts, **overrides) -> SSHHost:
    return open_host(host_settings(facts.host_config(**overrides)))


# ---- host keys -----------------------------------------------------------------------------------------------

def test_unknown_host_key_is_refused_with_the_keyscan_command(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = _host(sshd, known_hosts=str(known))
    with pytest.raises(HostError) as err:
        host.run("true")
    message = str(err.value)
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {known}" in message
    assert "not in" in message and "SHA256:" in message
    assert known.read_text() == "", "nothing may be added to known_hosts"


def test_the_keyscan_hint_is_a_command_that_fixes_it(sshd, tmp_path):
    known = tmp_path / "known hosts"   # a space: the hint must be quoted to be pasted as is
    known.write_text("")
    host = _host(sshd, known_hosts=str(known))
    with pytest.raises(HostError) as err:
        host.run("true")
    hint = next(line.strip() for line in str(err.value).splitlines() if line.strip().startswith("ssh-keyscan"))
    subprocess.run(["bash", "-c", hint], check=True, capture_output=True, timeout=30)
    assert host.run("echo ok").stdout == "ok\n"


def test_changed_host_key_is_refused(sshd, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, blob = Path(f"{other}.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    with pytest.raises(HostError) as err:
        _host(sshd, known_hosts=str(known)).run("true")
    message = str(err.value)
    assert "CHANGED" in message
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {known}" in message
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {known}" in message


def test_strict_host_key_checking_off_is_explicit_and_persists_nothing(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = _host(sshd, known_hosts=str(known), strict_host_key_checking=False)
    assert host.run("echo ok").stdout == "ok\n"
    assert known.read_text() == ""


def test_ssh_config_alias_is_resolved(sshd, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host testbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.identity_file}\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    settings = host_settings({"kind": "ssh", "hostname": "testbox", "ssh_config": str(config), "workdir": "/tmp"})
    host = open_host(settings)
    assert host.name == "testbox"
    assert host.run("echo ok").stdout == "ok\n"


def test_hashed_known_hosts_entries_are_honoured(sshd, tmp_path):
    # Debian and Ubuntu hash known_hosts by default (HashKnownHosts yes).
    known = tmp_path / "known_hosts"
    scan = subprocess.run(["ssh-keyscan", "-H", "-p", str(sshd.port), "127.0.0.1"], capture_output=True,
                          text=True, timeout=30, check=True).stdout
    known.write_text(scan)
    assert "127.0.0.1" not in scan
    assert _host(sshd, known_hosts=str(known)).run("echo ok").stdout == "ok\n"


def test_proxycommand_from_ssh_config(sshd, tmp_path):
    # The jump goes through the same sshd (`ssh -W`): the host key of the target is still checked by us.
    config = tmp_path / "ssh_config"
    jump = (f"ssh -q -i {sshd.identity_file} -o UserKnownHostsFile={sshd.known_hosts} -o BatchMode=yes "
            f"-p {sshd.port} {sshd.user}@127.0.0.1 -W %h:%p")
    config.write_text(f"Host behind\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyCommand {jump}\n")
    with _host(sshd, hostname="behind", ssh_config=str(config)) as host:   # closed: no keepalive thread left
        assert host.address.proxy_command and host.run("echo ok").stdout == "ok\n"


def test_proxyjump_is_refused(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host inner\n  ProxyJump bastion\n")
    with pytest.raises(HostError, match="ProxyCommand ssh -W %h:%p bastion"):
        open_host(host_settings({"kind": "ssh", "hostname": "inner", "ssh_config": str(config)}))


def test_config_typos_list_the_valid_keys():
    with pytest.raises(HostError, match="unknown key\\(s\\) hostnme.*valid keys: .*hostname"):
        host_settings({"kind": "ssh", "hostnme": "x"})
    with pytest.raises(HostError, match="host.hostname: set it"):
        host_settings({"kind": "ssh", "hostname": None})


def test_unreachable_host_says_what_to_check(sshd):
    host = _host(sshd, port=free_port())
    with pytest.raises(HostError, match="cannot connect to .*Check that the host is up"):
        host.run("true")


# ---- the primitives ------------------------------------------------------------------------------------------

def test_run_returns_output_and_exit_code(sshd):
    host = _host(sshd)
    result = host.run("echo out; echo err >&2; exit 3", check=False)
    assert (result.exited, result.stdout, result.stderr, result.host) == (3, "out\n", "err\n", "sshd-test")
    with pytest.raises(CommandFailed) as err:
        host.run("echo evidence >&2; exit 4")
    assert err.value.result.exited == 4
    assert "exit 4" in str(err.value) and "evidence" in str(err.value) and "sshd-test" in str(err.value)


def test_run_is_bash_and_takes_stdin(sshd):
    host = _host(sshd)
    assert host.run("echo ${BASH_VERSION:+bash}").stdout == "bash\n"
    data = bytes(range(256)) * 4096   # 1 MiB, binary
    assert host.run("sha256sum", stdin=data).stdout.split()[0] == __import__("hashlib").sha256(data).hexdigest()


def test_run_timeout_reports_124(sshd):
    result = _host(sshd).run("sleep 5", check=False, timeout=0.5)
    assert result.exited == 124 and "timed out" in result.stderr


def test_put_get_read_from(sshd, tmp_path):
    host = _host(sshd)
    remote_dir = f"{host.workdir}/prim it'ives $(x)"
    host.run(f"mkdir -p {__import__('shlex').quote(remote_dir)}")
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(300_000))
    remote = f"{remote_dir}/data `x`.bin"
    host.put(str(src), remote)
    back = tmp_path / "back.bin"
    host.get(remote, str(back))
    assert back.read_bytes() == src.read_bytes()
    assert host.read_from(remote, 0) == src.read_bytes()
    assert host.read_from(remote, 299_990) == src.read_bytes()[299_990:]
    assert host.read_from(remote, 300_000) == b""
    assert host.read_from(f"{remote_dir}/missing", 0) == b""
    assert not [n for n in os.listdir(remote_dir) if ".part-" in n], "temporary upload names must not linger"


def test_put_dir_is_one_tar_stream(sshd, tmp_path):
    host = _host(sshd)
    src = tmp_path / "tree"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("deep")
    (src / "top.txt").write_text("top")
    host.put_dir(str(src), f"{host.workdir}/copied tree")
    assert host.calls["run"] == 1
    assert Path(host.workdir, "copied tree", "a", "b", "f.txt").read_text() == "deep"


def test_close_then_use_again(sshd):
    host = _host(sshd)
    assert host.run("echo 1").stdout == "1\n"
    host.close()
    assert host.run("echo 2").stdout == "2\n"


def test_workdir_defaults_to_home_on_the_host(sshd):
    host = _host(sshd, workdir=None)
    assert host.workdir == os.path.expanduser("~") + "/specbench"
