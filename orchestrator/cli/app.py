"""The Hydra app: `hydra_main(cfg)` runs one job (orchestrator.sweep.job) and returns its objective."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from ..paths import CONF_DIR
from ..sweep.job import job


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> float | None:
    """One job; returns `cfg.objective` of its results as a plain float, which is what sweepers optimise."""
    return job(cfg)
