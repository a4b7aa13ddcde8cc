"""Absolute MLflow UI links for the closing lines: a run's page and a comparison of runs.

Contract: with an http(s) tracking URI the links point at that server; with a local store (sqlite, files) they
point at what `serve_command(uri)` (`mlflow ui --backend-store-uri ...`) serves, DEFAULT_UI, and `where(uri, url)`
says to start it. Links are percent-encoded (no quotes or brackets a terminal would cut them at); the UI's router
decodes them.
"""
from __future__ import annotations

import shlex
from urllib.parse import quote, urlparse

DEFAULT_UI = "http://127.0.0.1:5000"   # where `mlflow ui` listens unless told otherwise


def is_server(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")


def ui_root(uri: str) -> str:
    return uri.rstrip("/") if is_server(uri) else DEFAULT_UI


def serve_command(uri: str) -> str | None:
    return None if is_server(uri) else f"mlflow ui --backend-store-uri {shlex.quote(uri)}"


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    return f"{ui_root(uri)}/#/experiments/{experiment_id}/runs/{run_id}"


def compare_url(uri: str, experiment_id: str, run_ids: list[str]) -> str:
    """The UI's side-by-side view of `run_ids` (params, metrics, plots)."""
    runs = quote("[" + ",".join(f'"{r}"' for r in run_ids) + "]", safe=",")
    experiments = quote(f'["{experiment_id}"]')
    return f"{ui_root(uri)}/#/compare-runs?runs={runs}&experiments={experiments}"


def where(uri: str, url: str) -> str:
    """`url`, and for a local store the command that serves it."""
    command = serve_command(uri)
    return f"{url} (serve it: {command})" if command else url
