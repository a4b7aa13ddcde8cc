"""Files shipped with the runner bundle (`remote/assets/`), named host-independently as `assets:<relative path>`.

Contract: `resolve(value, key)` turns `assets:models/demo-qwen3` into the absolute path of that file or directory
in this copy of the bundle (wherever the bundle lives on the host) and returns any other value unchanged;
`problem(value)` says why such a name is unusable (None if it is fine or not an asset name), so the orchestrator
can refuse it before anything starts; `with_assets(spec)` returns a copy of a RunSpec with its path fields (model,
tokenizer, drafter and its calibration text, dataset) resolved. A name that leaves the assets directory or does
not exist: `SpecError`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import SpecError
from .spec import RunSpec

ASSETS = Path(__file__).resolve().parent / "assets"
PREFIX = "assets:"


def is_asset(value) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def _path(value: str) -> Path:
    return (ASSETS / value[len(PREFIX):].strip("/")).resolve()


def problem(value) -> str | None:
    """Why an `assets:` value cannot be used here, or None (also for values that are not assets)."""
    if not is_asset(value):
        return None
    path = _path(value)
    if ASSETS not in path.parents:
        return f"{value!r} does not name a file under the runner's assets"
    if not path.exists():
        return f"{value!r} is not shipped with this runner (no {path})"
    return None


def resolve(value, key: str = "path"):
    if (reason := problem(value)) is not None:
        raise SpecError(f"{key}: {reason}")
    return str(_path(value)) if is_asset(value) else value


def with_assets(spec: RunSpec) -> RunSpec:
    m, d, ds = spec.model, spec.drafter, spec.dataset
    return dataclasses.replace(
        spec,
        model=dataclasses.replace(m, path=resolve(m.path, "model.path"),
                                  tokenizer=resolve(m.tokenizer, "model.tokenizer")),
        drafter=dataclasses.replace(d, path=resolve(d.path, "drafter.path"),
                                    calibration=resolve(d.calibration, "drafter.calibration")),
        dataset=dataclasses.replace(ds, path=resolve(ds.path, "dataset.path")))
