"""`python -m remote <run_dir>`: run the benchmark described by `<run_dir>/spec.json`.

Contract: writes events.jsonl, outputs.jsonl and results.json (atomic, last) into run_dir. Exit status 0 on
success; 2 on bad input (unreadable/malformed spec, a hub that cannot serve its models (remote.hub), or a SpecError
from loading/checking) with exactly one line `error: <message>` on stderr; 1 on a crash, with the traceback on
stderr, or on an engine arm's server that could not start (`error: ...` and the server's last lines). The launcher
redirects stdout/stderr to runner.log.
"""
from __future__ import annotations

import sys
import traceback


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("error: usage: python -m remote <run_dir>", file=sys.stderr)
        return 2
    from .errors import EngineStartError, SpecError
    from .files import RunFiles
    from .spec import RunSpec
    run_dir = argv[0]
    path = RunFiles(run_dir).spec
    try:
        with open(path, encoding="utf-8") as f:
            spec = RunSpec.from_json(f.read())
    except (OSError, ValueError) as exc:   # UnicodeDecodeError and JSONDecodeError among them
        print(f"error: cannot read the run spec {path}: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    try:
        from .hub import prepare_hub     # before transformers is imported: HF_HUB_OFFLINE is read at import

        said = prepare_hub([(spec.model.path, spec.model.revision), (spec.model.tokenizer, None),
                            (spec.drafter.path, None)])
        if said:
            print(f"warning: {said}", file=sys.stderr, flush=True)
        from transformers.utils import logging as hf_logging

        if spec.engine is not None:     # a serving engine's own decoding (remote.engines)
            from .engines import run
        else:
            from .runner import run
        hf_logging.disable_progress_bar()    # "Loading weights" bars are carriage-return noise in runner.log
        run(spec, run_dir)
    except SpecError as exc:
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except EngineStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
