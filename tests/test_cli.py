"""The command line a new user meets: `specbench` (the console script) and `python -m orchestrator` alike: help
built from the YAML comments, subcommands, shell completion in real bash and zsh, unknown keys refused with the
closest known one."""
from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.cli.commands import COMMANDS
from orchestrator.config.knobs import SECTIONS, RunKnobs
from orchestrator.hosts.settings import SSHSettings
from orchestrator.knob import knobs_of

# The console script pip installed: beside this python (venvs, pyenv), else on PATH.
_BESIDE = Path(sys.executable).parent / "specbench"
SPECBENCH = str(_BESIDE) if _BESIDE.exists() else (shutil.which("specbench") or str(_BESIDE))


def run(argv: list[str], env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def user_conf(tmp_path) -> Path:
    """The per-user config dir the conftest points SPECBENCH_CONFIG_DIR at, with a box of the user's."""
    folder = Path(os.environ["SPECBENCH_CONFIG_DIR"])
    (folder / "host").mkdir(parents=True)
    (folder / "host" / "mybox.yaml").write_text("name: mybox\nkind: local\nworkdir: null\npython: null\nenv: {}\n")
    return folder


@pytest.mark.parametrize("entry", [[SPECBENCH], [sys.executable, "-m", "orchestrator"]], ids=["script", "module"])
def test_help_describes_every_knob_from_its_one_description(entry):
    proc = run([*entry, "--help"])
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())     # the help wraps long sentences
    knobs = [(key, k) for key, k in knobs_of(RunKnobs).items()]
    knobs += [(f"{group}.{key}", k) for group, cls in SECTIONS.items() for key, k in knobs_of(cls).items()]
    for key, k in knobs:
        assert f"{key}=" in text and " ".join(k.help.split()) in text, key
    for name, (_, summary) in COMMANDS.items():
        assert f"{name} {summary}" in text, name
    examples = proc.stdout.split("Examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    program = "specbench" if entry == [SPECBENCH] else "python -m orchestrator"
    assert sum(line.strip().startswith(program) for line in examples) == 3


def test_help_shows_the_chosen_groups_knobs():
    proc = run([SPECBENCH, "host=ssh", "--help"])
    docs = knobs_of(SSHSettings)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and f"host.hostname=null {docs['hostname'].help}" in text
    assert f"host.connect_timeout=10.0 {docs['connect_timeout'].help}" in text   # a key ssh.yaml leaves out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_answers_help(name):
    proc = run([SPECBENCH, name, "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:")


@pytest.mark.parametrize("override, suggestion", [("tree_budgt=64", "tree_budget"), ("+tree_budgt=64", "tree_budget"),
                                                   ("+temprature=1", "temperature"), ("host.env=3 cuda_graph=false",
                                                                                      "cuda_graphs")])
def test_an_unknown_key_is_refused_with_the_closest_one(override, suggestion, tmp_path):
    proc = run([SPECBENCH, *override.split()], cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {override.split()[-1].lstrip('+').split('=')[0]}:")
    assert f"did you mean {suggestion}?" in lines[0]
    assert not (tmp_path / "runs").exists() and not Path(os.environ["SPECBENCH_RUNS_DIR"]).exists()


def test_keys_may_be_added_under_a_free_form_section(tmp_path):
    """+host.env.NAME passes the key check; the run then stops on the bad budget, before anything starts."""
    proc = run([SPECBENCH, "+host.env.MY_SETTING=1", "tree_budget=0"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: tree_budget:"), proc.stderr


def test_a_sweep_checks_keys_per_group_choice(tmp_path):
    """host.hostname exists for host=ssh, not for host=local: the local job of the sweep is refused."""
    proc = run([SPECBENCH, "-m", "host=ssh,local", "host.hostname=box"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: host.hostname: unknown key"), proc.stderr


def _bash_complete(line: str) -> list[str]:
    script = (f'eval "$({SPECBENCH} -sc install=bash)"; PATH="{Path(SPECBENCH).parent}:$PATH"; '
              'COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; words=($COMP_LINE); COMP_CWORD=$((${#words[@]} - 1)); '
              '[[ "$COMP_LINE" == *" " ]] && COMP_CWORD=${#words[@]}; '
              'hydra_bash_completion; printf "%s\\n" "${COMPREPLY[@]}"')
    proc = run(["bash", "-c", script, "bash", line])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_bash_completes_options_keys_and_subcommands(user_conf):
    assert {"host=mybox", "host=ssh", "host=local"} <= set(_bash_complete("specbench host="))
    assert "tree_budget=" in _bash_complete("specbench tree_b")
    assert _bash_complete("specbench att") == ["attach"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (.ci/run installs it)")
def test_zsh_completes_in_an_interactive_shell(user_conf, tmp_path):
    """A real interactive zsh on a pseudo-terminal, set up as the help says; Tab after `host=` lists the user's
    box. Waits for the listing (or the shell's end), bounded only against a hang."""
    (tmp_path / ".zshrc").write_text(f'PATH="{Path(SPECBENCH).parent}:$PATH"\nautoload -U compinit && compinit -u\n'
                                     'eval "$(specbench -sc install=zsh)"\nPS1="READY> "\n')
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe("zsh", ["zsh", "-i"], {**os.environ, "ZDOTDIR": str(tmp_path), "TERM": "dumb"})
    seen = b""

    def read_until(marker: bytes) -> bool:
        nonlocal seen
        deadline = time.monotonic() + 120
        while marker not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 1)[0]:
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    return False
        return marker in seen
    try:
        assert read_until(b"READY> "), seen[-500:]
        os.write(fd, b"specbench host=\t\t")
        assert read_until(b"mybox"), seen[-1000:]
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)


def test_a_key_left_unset_in_its_file_is_a_known_key(tmp_path):
    """dataset=jsonl leaves dataset.path ??? : setting it is no typo; the missing file is the error."""
    proc = run([SPECBENCH, "dataset=jsonl", f"dataset.path={tmp_path / 'absent.jsonl'}"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: dataset.path: JSONL file"), proc.stderr


def test_a_mistyped_command_is_named_with_the_closest_one(tmp_path):
    proc = run([SPECBENCH, "comapre"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "error: comapre: unknown command; did you mean compare?\n")


@pytest.mark.parametrize("argv", [["--cfg", "job", "tree_budget=5"], ["~warmup", "--cfg", "job"]],
                         ids=["a flag's value", "a deleted key"])
def test_bare_words_hydra_reads_are_no_command(argv, tmp_path):
    proc = run([SPECBENCH, *argv], cwd=tmp_path)
    assert proc.returncode == 0 and "tree_budget:" in proc.stdout, proc.stderr


def test_help_keeps_names_whole_and_says_where_runs_go():
    proc = run([SPECBENCH, "--help"])
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.endswith("-")] == []   # "tiny-" / "qwen3" was one
    assert f"<runs dir> is {os.environ['SPECBENCH_RUNS_DIR']} ($SPECBENCH_RUNS_DIR)" in proc.stdout
    assert "<project>" not in proc.stdout


@pytest.mark.parametrize("argv, line", [
    (["--help", "host=nosuch"], "error: host: unknown option 'nosuch'"),
    (["--help", "tree_budgt=3"], "error: tree_budgt: unknown key; did you mean tree_budget?"),
    (["--config-dir", "/nonexistent/conf", "method=ar"], "error: --config-dir: /nonexistent/conf is not a directory"),
    (["hydra.searchpath=[file:///nonexistent/conf]", "method=ar"],
     "error: hydra.searchpath: /nonexistent/conf is not a directory"),
    # Hydra's own error advised `+hydra.launcher.n_jobs=2`, which runs the jobs one at a time all the same
    (["-m", "hydra.launcher.n_jobs=2", "method=ar"], "error: hydra.launcher.n_jobs: the basic launcher has no such "
                                                    "setting (it runs a sweep's jobs one at a time); for jobs in "
                                                    "parallel choose hydra/launcher=joblib"),
    (["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "tree_budget=0"], "error: tree_budget: "),
], ids=["help+unknown option", "help+unknown key", "--config-dir", "hydra.searchpath", "n_jobs+basic",
        "n_jobs+joblib"])
def test_a_bad_command_line_is_one_line_also_with_help_or_a_config_dir(argv, line, tmp_path):
    """They printed a traceback (--help composed the bad override), or Hydra's UserWarning and then ran without
    the dir (a typo in the dir made the user's host=mybox an unknown option)."""
    proc = run([SPECBENCH, *argv], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "runs").exists() and not Path(os.environ["SPECBENCH_RUNS_DIR"]).exists()


def test_help_with_a_key_a_users_file_leaves_out(user_conf, tmp_path):
    """host.user for an SSH box whose file does not list it: forced as a run forces it (no traceback)."""
    (user_conf / "host" / "loop.yaml").write_text("name: loop\nkind: ssh\nhostname: 127.0.0.1\n")
    proc = run([SPECBENCH, "--help", "host=loop", "host.user=me"], cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_version_names_specbench():
    from importlib.metadata import version

    proc = run([SPECBENCH, "--version"])
    assert (proc.returncode, proc.stdout) == (0, f"specbench {version('specbench')} (Hydra {version('hydra-core')})\n")
