"""Entry point: `python -m orchestrator [overrides...]` (Hydra; `-m` for multirun), `... attach <run>`,
`... stop <run>`, `... sync <run dir>...`, `... reap`."""
from __future__ import annotations

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


def _code(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)   # a message, as SystemExit would have printed it
    return 1


def main() -> None:
    from .signals import install

    install()   # SIGTERM / SIGHUP stop the runner and close the run as Ctrl-C does
    if sys.argv[1:2] in (["attach"], ["stop"]):
        from .attach import main as attach_main

        _exit_now(attach_main(sys.argv[1:]))
    if sys.argv[1:2] == ["reap"]:
        from .reap import main as reap_main

        _exit_now(reap_main(sys.argv[2:]))
    if sys.argv[1:2] == ["sync"]:
        from .sync import main as sync_main

        _exit_now(sync_main(sys.argv[2:]))
    from omegaconf import OmegaConf

    from .paths import runs_dir
    from .validate import ConfigError, check_group_choices, check_sweep

    # Run dirs are absolute (<project>/runs or SPECBENCH_RUNS_DIR) whatever the working directory.
    OmegaConf.register_new_resolver("runs_dir", lambda: str(runs_dir()), replace=True)
    multirun = bool({"-m", "--multirun"} & set(sys.argv[1:]))
    overrides = [a for a in sys.argv[1:] if not a.startswith("-") and "=" in a]
    try:
        check_group_choices(overrides)
        if multirun:
            check_sweep(overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    except Exception:
        pass  # a malformed override or an exotic sweep: Hydra's own parser and sweeper report it with context
    from .app import hydra_main

    code = 0
    try:
        hydra_main()
    except SystemExit as exc:
        code = _code(exc)
    finally:
        from .sweep import close_orphan_parent

        close_orphan_parent()
    if not multirun:
        _exit_now(code)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
