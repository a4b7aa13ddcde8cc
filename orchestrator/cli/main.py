"""Entry point of `specbench` and `python -m orchestrator`: `[overrides...]` (Hydra; `-m` for multirun), a subcommand
of orchestrator.cli.commands (`attach RUN`, `stop RUN`, `show RUN`, `runs`, `compare`, `resume SWEEP`, `diagnose
LOG`, `reap`, `sync RUN_DIR...`), `--help` (orchestrator.cli.help) or Hydra's shell completion
(orchestrator.cli.completion)."""
from __future__ import annotations

import contextlib
import logging
import os
import sys


def _exit_now(code: int) -> None:
    """Leave without Python's own teardown, which spends ~1 s unwinding MLflow's imports. Everything is written
    by now (MLflow calls are synchronous); only logs and the terminal need flushing. Not for multirun, whose
    launcher may still have worker processes to stop at exit."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _interrupted(exc: KeyboardInterrupt) -> int:
    """One line instead of a traceback; the exit code of the signal (130 for Ctrl-C)."""
    from ..signals import describe, exit_code

    print(f"{describe(exc)}: interrupted", file=sys.stderr)
    return exit_code(exc)


def _code(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)   # a message, as SystemExit would have printed it
    return 1


# Flags after which Hydra prints something instead of running a job: our checks would only be in the way.
_HYDRA_INFO = ("--cfg", "-c", "--info", "-i", "--hydra-help", "--version", "--resolve", "--package", "-p")
# Subcommands that write into the runs dir (records, MLflow's local database): refused without room to finish.
_WRITING = ("attach", "reap", "sync")
# Flags whose value is the next argument (`-cd ~/conf`): no override, whatever it looks like.
_VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")


def main() -> None:
    from .. import signals

    logging.raiseExceptions = False   # a log file on a full disk: no "--- Logging error ---" traceback per record

    signals.install()   # SIGTERM / SIGHUP stop the runner and close the run as Ctrl-C does
    from ..paths import foreign_remote

    if (problem := foreign_remote()) is not None:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    argv = sys.argv[1:]
    _command(argv)
    argv = _setup(argv)
    multirun = bool({"-m", "--multirun"} & set(argv))
    sys.argv[1:] = argv = _before_hydra(argv, multirun)
    _hydra(multirun)


def _command(argv: list[str]) -> None:
    """A subcommand runs and exits here; a first word that is neither a command nor an override is refused."""
    from .commands import COMMANDS, dispatch

    if argv[:1] and argv[0] in COMMANDS:
        if argv[0] in _WRITING and {"-h", "--help"}.isdisjoint(argv):
            _refuse_without_room()
        try:
            _exit_now(dispatch(argv[0], argv[1:]))
        except KeyboardInterrupt as exc:   # what each command wrote is whole (atomic records): run it again
            _exit_now(_interrupted(exc))
    if argv[:1] and not argv[0].startswith(("-", "~", "+")) and "=" not in argv[0]:
        # First, a word can only be a command: an override has `=` (or is ~KEY), a flag's value follows its flag.
        from ..config.errors import did_you_mean

        hint = did_you_mean(argv[0], COMMANDS) or f" (commands: {', '.join(COMMANDS)}; overrides are KEY=VALUE)"
        print(f"error: {argv[0]}: unknown command{hint}", file=sys.stderr)
        raise SystemExit(2)


def _setup(argv: list[str]) -> list[str]:
    """The runs dir resolver and the user's config dir in Hydra's search path; `--version`; a config dir that does
    not exist refused."""
    from omegaconf import OmegaConf

    from ..config.sources import missing_dir, with_user_dir
    from ..paths import runs_dir

    # Run dirs are absolute (SPECBENCH_RUNS_DIR, the checkout's runs/ or ./runs) whatever Hydra's working dir.
    OmegaConf.register_new_resolver("runs_dir", lambda: str(runs_dir()), replace=True)
    argv = with_user_dir(argv)        # ~/.config/specbench joins Hydra's search path
    sys.argv[1:] = argv
    if argv == ["--version"]:   # Hydra's flag names Hydra's version alone
        from importlib.metadata import version

        print(f"specbench {version('specbench')} (Hydra {version('hydra-core')})")
        _exit_now(0)
    if (problem := missing_dir(argv)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    return argv


def _before_hydra(argv: list[str], multirun: bool) -> list[str]:
    """Shell completion and `--help` answer and exit; a run's command line is checked (`_check`)."""
    from . import completion

    if completion.requested(argv):
        if completion.answer(argv):   # our zsh script, or a query Hydra's candidates do not apply to
            _exit_now(0)
    elif "--hydra-help" in argv:
        completion.as_console_script()
    elif {"--help", "-h"} & set(argv):
        from .help import render

        argv = _check(argv, multirun, values=False)   # the help shows the values given, good or bad
        with _refusing_bad_yaml():
            print(render(argv), end="")
        _exit_now(0)
    elif not set(_HYDRA_INFO) & set(argv):
        argv = _check(argv, multirun)
        _refuse_without_room()
    return argv


def _refuse_without_room() -> None:
    """A run, or a command that writes runs, on a runs dir without START_ROOM free: one line, exit 1, nothing
    written (Hydra's own files would be the first to find no room)."""
    from ..paths import room_to_start, runs_dir

    if (problem := room_to_start(runs_dir())) is not None:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(1)


def _hydra(multirun: bool) -> None:
    """The Hydra app (one job, or a sweep's), then the exit: a sweep whose workers stopped their runs on a signal
    exits as a signalled run does."""
    from .. import signals
    from ..sweep.callback import close_orphan_sweep
    from .app import hydra_main

    if multirun:
        signals.forward_to_workers()     # a parallel launcher's workers run the jobs
    code = 0
    try:
        hydra_main()
    except SystemExit as exc:
        code = _code(exc)
    except KeyboardInterrupt as exc:   # outside a job's own handling: Hydra's setup, between a sweep's jobs
        code = _interrupted(exc)
    finally:
        close_orphan_sweep()
    if not multirun:
        _exit_now(code)
    if signals.pending:                  # the workers stopped their runs on it: exit as a signalled run does
        raise SystemExit(128 + signals.pending[0])   # Python's own exit: the launcher's workers are stopped
    raise SystemExit(code)


def _check(argv: list[str], multirun: bool, values: bool = True) -> list[str]:
    """Unknown options and keys, and (with `values`) every sweep job's values: one line, exit 2, before anything
    starts. Returns argv with the overrides Hydra must force (`++`: a key a user's file leaves out, see
    validate.check_keys)."""
    from ..config.errors import ConfigError
    from ..config.sources import Configs, shadowed
    from ..config.overrides import check_group_choices, check_keys, check_sweep

    for line in shadowed(argv):
        print(f"warning: {line}", file=sys.stderr)
    overrides = [a for flag, a in zip(["", *argv], argv) if flag not in _VALUE_FLAGS and not a.startswith("-")
                 and ("=" in a or a.startswith("~"))]   # ~KEY deletes a key
    try:
        with _refusing_bad_yaml(), Configs(argv) as configs:
            check_group_choices(overrides, configs)
            forced = check_keys(overrides, configs)
            argv, overrides = ([f"++{a}" if a in forced else a for a in args] for args in (argv, overrides))
            if values:   # the one job too: refused inside Hydra, it would leave a run dir
                check_sweep(overrides, configs, multirun)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    except Exception:
        pass  # a malformed override or an exotic sweep: Hydra's own parser and sweeper report it with context
    return argv


@contextlib.contextmanager
def _refusing_bad_yaml():
    """A config file that is not YAML: `error: FILE:LINE: problem`, exit 2 (Hydra would show a traceback)."""
    import yaml

    try:
        yield
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" ({exc.context} at line {exc.context_mark.line + 1})" if exc.context and exc.context_mark else ""
        print(f"error: {mark.name}:{mark.line + 1}: {exc.problem}{where}", file=sys.stderr)
        raise SystemExit(2)
