"""What a run's MLflow page says first: its headline figures, rounded, and what every metric means.

Contract: `headline(metrics)` -> [(name, value)]: the HEADLINE metrics present, named `<n>.<metric>` (n = the
metric's fixed place in HEADLINE, so `1.speedup_vs_ar` means the same in every run) and rounded to SIG_DIGITS
significant digits. Logged before all other metrics: the run page lists metrics in logging order and the
compare page sorts names by code point, where a digit comes before every letter; the unprefixed metrics keep full
precision. `description(...)` is the run's description (the `mlflow.note.content` tag, markdown, shown above
everything on the run page): name, host, GPU, the headline table with intervals, and the definitions, within
MLflow's 8000 characters. `definitions_table(metrics, definitions, tags, tag_definitions)` is `definitions.md`:
every metric and every tag the run logs with its value and meaning (orchestrator.tracking.definitions).
"""
from __future__ import annotations

from typing import Mapping

from .definitions import definition_of, tag_definition_of

SIG_DIGITS = 4
NOTE_TAG = "mlflow.note.content"
NOTE_LIMIT = 8000   # MLflow's longest tag value
HEADLINE = ("speedup_vs_ar", "speedup_vs_ar_ci_low", "speedup_vs_ar_ci_high", "tau", "tokens_per_s", "tpot_ms",
            "ttft_ms", "exact_match_vs_ar")
_INTERVALS = ("speedup_vs_ar", "tau")   # shown with their `_ci_low`/`_ci_high` in the description


def rounded(value: float) -> float:
    return float(f"{value:.{SIG_DIGITS}g}")


def _order(metric: str) -> tuple:
    """Headline metrics first, in HEADLINE's order, then the others alphabetically."""
    return (0, HEADLINE.index(metric), "") if metric in HEADLINE else (1, 0, metric)


def headline_name(metric: str) -> str:
    return f"{HEADLINE.index(metric) + 1}.{metric}"


def headline(metrics: Mapping[str, float]) -> list[tuple[str, float]]:
    return [(headline_name(k), rounded(float(metrics[k]))) for k in HEADLINE if _number(metrics.get(k))]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _fmt(value) -> str:
    return f"{value:.{SIG_DIGITS}g}" if _number(value) else "-"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _headline_rows(metrics: Mapping[str, float]) -> list[str]:
    rows = []
    for key in HEADLINE:
        if key.endswith(("_ci_low", "_ci_high")) or not _number(metrics.get(key)):
            continue
        low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
        interval = ""
        if key in _INTERVALS and _number(low) and _number(high):
            interval = f"[{_fmt(low)}, {_fmt(high)}]"
            if key == "speedup_vs_ar" and low <= 1.0 <= high:
                interval += " includes 1.0: not significant"
        rows.append(f"| {key} | {_fmt(metrics[key])} | {interval} |")
    return rows


def description(name: str, tags: Mapping[str, str], metrics: Mapping[str, float],
                definitions: Mapping[str, str]) -> str:
    lines = [f"**{_cell(name)}** on host `{tags.get('host', '?')}`, GPU `{tags.get('gpu', '?')}`",
             "", "| headline | value | 95% interval |", "|---|---|---|", *_headline_rows(metrics), "",
             f"Metrics `1.`...`{len(HEADLINE)}.` are these figures rounded to {SIG_DIGITS} significant digits, "
             "listed first; the unprefixed ones keep full precision. All of them with their meaning: the "
             "`definitions.md` artifact.", "", "| metric | definition |", "|---|---|"]
    text = "\n".join(lines)
    for key in sorted(definitions, key=_order):
        row = f"\n| {key} | {_cell(definitions[key])} |"
        if len(text) + len(row) > NOTE_LIMIT - 40:
            return text + "\n\n(more in definitions.md)"
        text += row
    return text


def definitions_table(metrics: Mapping[str, float], definitions: Mapping[str, str], tags: Mapping[str, str] = {},
                      tag_definitions: Mapping[str, str] = {}) -> str:
    keys = sorted(set(metrics) | set(definitions), key=_order)
    rows = [f"| {k} | {_fmt(metrics.get(k))} | {_cell(definition_of(k, definitions))} |" for k in keys]
    named = sorted(k for k in tags if not k.startswith("mlflow."))
    tag_rows = [f"| {k} | {_cell(str(tags[k])[:200])} | {_cell(tag_definition_of(k, tag_definitions))} |"
                for k in named]
    return "\n".join(["| metric | value | definition |", "|---|---|---|", *rows, "",
                      "| tag | value | definition |", "|---|---|---|", *tag_rows]) + "\n"
