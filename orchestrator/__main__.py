"""Entry point: `python -m orchestrator [overrides...]` (Hydra; `-m` for multirun)."""
from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["attach"]:
        from .attach import main as attach_main

        raise SystemExit(attach_main(sys.argv[2:]))
    from .validate import ConfigError, check_group_choices

    overrides = [a for a in sys.argv[1:] if not a.startswith("-") and "=" in a]
    try:
        check_group_choices(overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    except Exception:
        pass  # a malformed override: Hydra's own parser reports it with context
    from omegaconf import OmegaConf

    from .app import hydra_main
    from .paths import runs_dir

    # Run dirs are absolute (<project>/runs or SPECBENCH_RUNS_DIR) whatever the working directory.
    OmegaConf.register_new_resolver("runs_dir", lambda: str(runs_dir()), replace=True)
    try:
        hydra_main()
    finally:
        from .sweep import close_orphan_parent

        close_orphan_parent()


if __name__ == "__main__":
    main()
