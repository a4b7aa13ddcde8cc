"""What Hydra says of the job being run: its dir, its number, its overrides and its sweep (and the sweeper's kind).

Contract: `JobContext.current()` reads Hydra's runtime config once; nothing else of the sweep layer asks Hydra.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf


@dataclass(frozen=True)
class JobContext:
    run_dir: Path
    num: int
    multirun: bool
    grid: bool                      # Hydra's basic sweeper: a grid of overrides, its jobs not scored
    sweep_dir: Path
    overrides: tuple[str, ...]      # the job's own (a sweep's values for it)
    choices: Mapping[str, Any]      # the option chosen in each config group

    @property
    def scored(self) -> bool:
        """A sweeper that optimises the jobs' objective (Optuna, Nevergrad), not Hydra's basic grid."""
        return self.multirun and not self.grid

    @classmethod
    def current(cls) -> "JobContext":
        hydra_cfg = HydraConfig.get()
        multirun = hydra_cfg.mode is not None and hydra_cfg.mode.name == "MULTIRUN"
        sweeper = str(OmegaConf.select(hydra_cfg, "sweeper._target_", default=""))
        return cls(run_dir=Path(hydra_cfg.runtime.output_dir), num=hydra_cfg.job.num if multirun else 0,
                   multirun=multirun,
                   grid="BasicSweeper" in sweeper, sweep_dir=Path(str(hydra_cfg.sweep.dir)),
                   overrides=tuple(hydra_cfg.overrides.task), choices=dict(hydra_cfg.runtime.choices))
