"""`python -m remote <run_dir>`: run the benchmark described by `<run_dir>/spec.json`.

Contract: writes events.jsonl, outputs.jsonl and results.json (atomic, last) into run_dir. Exit status 0 on success;
2 on bad input (unreadable/malformed spec, a hub that cannot serve its models (remote.hub), or a SpecError from
loading/checking) with exactly one line `error: <message>` on stderr; 1 on a crash, with the traceback on stderr.
The launcher redirects stdout/stderr to runner.log.
"""
from __future__ import annotations

import sys
import traceback


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("error: usage: python -m remote <run_dir>", file=sys.stderr)
        return 2
    from .errors import SpecError
    from .files import RunFiles
    from .spec import RunSpec
    run_dir = argv[0]
    try:
        with open(RunFiles(run_dir).spec, encoding="utf-8") as f:
            spec = RunSpec.from_json(f.read())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read the run spec: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    try:
        from .hub import prepare_hub     # before transformers is imported: HF_HUB_OFFLINE is read at import

        said = prepare_hub([(spec.model.path, spec.model.revision), (spec.model.tokenizer, None),
                            (spec.drafter.path, None)])
        if said:
            print(f"warning: {said}", file=sys.stderr, flush=True)
        from transformers.utils import logging as hf_logging

        from .runner import run
        hf_logging.disable_progress_bar()    # "Loading weights" bars are carriage-return noise in runner.log
        run(spec, run_dir)
    except SpecError as exc:
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
