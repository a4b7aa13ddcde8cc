"""A refused config value, and the closest valid choice for the one line that says so."""
from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A bad config value. `str()` is the one line shown to the user."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


def did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
