"""The subcommands beside the Hydra app (`specbench attach RUN`, ...): one table, read by the dispatch in
orchestrator.cli.main, by `--help` and by shell completion, so a command is described once.

Contract: `COMMANDS[name] = (module, summary)`; the module's `main(argv) -> int` takes the arguments after the
command's name ("attach" and "stop" share a module and get their own name first).
"""
from __future__ import annotations

import importlib

COMMANDS: dict[str, tuple[str, str]] = {
    "attach": ("orchestrator.run.attach", "follow a run still going (after Ctrl-C or a lost link): attach RUN"),
    "stop": ("orchestrator.run.attach", "stop a run's runner on its host and close the run: stop RUN"),
    "show": ("orchestrator.tracking.show", "a run's texts beside AR's, first divergence marked: show RUN"),
    "runs": ("orchestrator.tracking.listing", "recent runs and sweeps, newest first: runs [--sweep S] [--status S]"),
    "compare": ("orchestrator.tracking.compare",
                "tables, summary.csv and plots of runs: compare [SWEEP_DIR | PARENT_ID | RUN_ID ...]"),
    "resume": ("orchestrator.sweep.resume", "run a sweep's unfinished jobs again, under its parent: resume SWEEP"),
    "diagnose": ("orchestrator.failures.diagnose", "name the known failure in a log: diagnose LOG"),
    "reap": ("orchestrator.run.reap", "close MLflow runs left RUNNING by a runner that is gone: reap"),
    "sync": ("orchestrator.tracking.sync", "log runs kept locally while MLflow was down: sync RUN_DIR..."),
}
_NAMED_FIRST = {"attach", "stop"}   # orchestrator.run.attach's main reads which of the two it is from argv[0]


def dispatch(name: str, argv: list[str]) -> int:
    module = importlib.import_module(COMMANDS[name][0])
    return module.main([name, *argv] if name in _NAMED_FIRST else argv)
