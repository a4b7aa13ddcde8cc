"""File names of a run directory: the one place that owns them, on the host and in the local copy."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class RunFiles:
    """Paths inside one run directory. `root` is a POSIX path on whichever machine holds the directory."""

    root: str

    def _join(self, name: str) -> str:
        return str(PurePosixPath(self.root) / name)

    @property
    def spec(self) -> str:
        return self._join("spec.json")

    @property
    def events(self) -> str:
        return self._join("events.jsonl")

    @property
    def results(self) -> str:
        return self._join("results.json")

    @property
    def outputs(self) -> str:
        return self._join("outputs.jsonl")

    @property
    def log(self) -> str:
        return self._join("runner.log")

    @property
    def exit_code(self) -> str:
        return self._join("exit_code")

    @property
    def pid(self) -> str:
        return self._join("pid")

    @property
    def engine_command(self) -> str:
        """Engine arms: the server command of each phase, one a line."""
        return self._join("engine_command.txt")

    @property
    def launch_script(self) -> str:
        return self._join("launch.sh")

    # What is copied back to the local run dir when a run ends (whatever of it exists); the log and events
    # arrive through the tail, the exit code through the poll.
    COLLECTED = ("results.json", "outputs.jsonl", "engine_command.txt")   # the last: engine arms' server commands
