"""The Hydra config tree (groups model/, drafter/, method/, ...); a wheel installs it as `orchestrator.conf`
(orchestrator.paths.CONF_DIR finds it either way), so no top-level `conf` package collides with another's.

`random_fields(name)`: the transformers config fields of conf/model/<name>.yaml's random-weight model (its `random`
node), for scripts and tests that build the same model outside Hydra.
"""
from __future__ import annotations

from pathlib import Path

import yaml


def random_fields(name: str) -> dict:
    return yaml.safe_load((Path(__file__).parent / "model" / f"{name}.yaml").read_text())["random"]
