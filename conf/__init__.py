"""The Hydra config tree (groups model/, drafter/, method/, ...), shipped as package data.

`random_fields(name)`: the transformers config fields of conf/model/<name>.yaml's random-weight model (its `random`
node), for scripts and tests that build the same model outside Hydra.
"""
from __future__ import annotations

from pathlib import Path

import yaml


def random_fields(name: str) -> dict:
    return yaml.safe_load((Path(__file__).parent / "model" / f"{name}.yaml").read_text())["random"]
