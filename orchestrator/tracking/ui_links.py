"""Absolute MLflow UI links for the closing lines: a run's page, a comparison of runs, the experiment's runs list.

Contract: with an http(s) tracking URI the links point at that server; with a local store (sqlite, files) they
point at what `serve_command(uri)` (`mlflow ui --backend-store-uri ...`) serves, DEFAULT_UI, and `where(uri, url)`
says to start it. Links are percent-encoded (no quotes or brackets a terminal would cut them at); the UI's router
decodes them. Every link asks for the UI's "Model training" workflow (WORKFLOW): MLflow 3.17 opens an experiment
on its GenAI overview, empty for our runs, unless told. `runs_list_url` opens the runs list with the headline
metrics as columns: the view EXPERIMENT_TAGS stores on the experiment (`mlflow.sharedViewState.<VIEW_KEY>`, what
the UI's own "share view" writes), named in the link.
"""
from __future__ import annotations

import json
import shlex
from urllib.parse import quote, urlparse

DEFAULT_UI = "http://127.0.0.1:5000"   # where `mlflow ui` listens unless told otherwise
WORKFLOW = "workflowType=machine_learning"
VIEW_KEY = "specbench-headline"


def is_server(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")


def ui_root(uri: str) -> str:
    return uri.rstrip("/") if is_server(uri) else DEFAULT_UI


def serve_command(uri: str) -> str | None:
    return None if is_server(uri) else f"mlflow ui --backend-store-uri {shlex.quote(uri)}"


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    return f"{ui_root(uri)}/#/experiments/{experiment_id}/runs/{run_id}?{WORKFLOW}"


def compare_url(uri: str, experiment_id: str, run_ids: list[str]) -> str:
    """The UI's side-by-side view of `run_ids` (params, metrics, plots)."""
    runs = quote("[" + ",".join(f'"{r}"' for r in run_ids) + "]", safe=",")
    experiments = quote(f'["{experiment_id}"]')
    return f"{ui_root(uri)}/#/compare-runs?runs={runs}&experiments={experiments}&{WORKFLOW}"


def runs_list_url(uri: str, experiment_id: str) -> str:
    """The experiment's runs list, its columns the headline metrics (the view of `experiment_tags`)."""
    return f"{ui_root(uri)}/#/experiments/{experiment_id}/runs?{WORKFLOW}&viewStateShareKey={VIEW_KEY}"


def experiment_tags(headline_metrics: list[str]) -> dict[str, str]:
    """What an experiment of ours carries for the UI: its kind (model training, not GenAI) and the runs-list view
    whose columns are `headline_metrics`, newest run first (the UI's experiment page state, as its share button
    stores it)."""
    view = {"orderByKey": "attributes.start_time", "orderByAsc": False, "startTime": "ALL",
            "lifecycleFilter": "Active", "modelVersionFilter": "All Runs", "datasetsFilter": [], "searchFilter": "",
            "selectedColumns": [f"metrics.`{name}`" for name in headline_metrics], "columnOrder": [],
            "columnWidths": {}, "runsExpanded": {}, "runsPinned": [], "runsHidden": [], "runsVisibilityMap": {},
            "runsHiddenMode": "FIRST_10_RUNS", "viewMaximized": False, "runListHidden": False,
            "isAccordionReordered": False, "groupBy": None, "groupsExpanded": {}, "autoRefreshEnabled": True,
            "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
            "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""}}
    return {"mlflow.experimentKind": "custom_model_development", f"mlflow.sharedViewState.{VIEW_KEY}": json.dumps(view)}


def where(uri: str, url: str) -> str:
    """`url`, and for a local store the command that serves it."""
    command = serve_command(uri)
    return f"{url} (serve it: {command})" if command else url
