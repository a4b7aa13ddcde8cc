"""The runs `compare` and a sweep's summary show: picked from MLflow, turned into rows, and split into the groups
whose numbers can be compared.

Contract: `select_runs(client, experiment, parent, filter)` returns MLflow runs oldest first (a sweep's parent run and
a job's superseded attempt left out); a run or experiment that does not exist, or a filter MLflow cannot parse, is a
SystemExit with one line. `row_of(run)` / `rows_of(runs)` are the rows (runs launched apart that would share a name
get the params that tell them apart). `comparable(rows)` splits rows into groups that agree on GROUP_KEYS (model,
drafter, host, GPU, dtype, dataset, temperature: a speedup or tau of one group says nothing of another's; an
engine arm's run joins ours of the same setup); a baseline run (our AR or an engine's own, no drafter) joins the
one group it matches otherwise. `differs(groups)` names the keys that set them apart,
`label(group, keys)` says a group by them and `context(rows)` what rows' numbers belong to (model, host, GPU, date);
`series(rows)` splits rows into runs of one setup (all their params but the tree budget), each with its name.
"""
from __future__ import annotations

import datetime
import re

from ..config.arms import logged_baseline, method_named

METRICS = ("tau", "tau_ci_low", "tau_ci_high", "tpot_ms", "speedup_vs_ar", "speedup_vs_ar_ci_low",
           "speedup_vs_ar_ci_high", "exact_match_vs_ar", "divergence_near_tie_share", "tokens_per_s",
           "ar_tokens_per_s", "num_prompts", "timing_noise")
GROUP_KEYS = ("model", "drafter", "host", "gpu", "dtype", "dataset", "temperature")
_DEPTH = re.compile(r"accept_rate_depth_(\d+)$")


def _budget(text: str) -> int | str | None:
    """A ddtree run's tree_budget param: its number, "auto", or None when unreadable."""
    return int(text) if text.isdigit() else "auto" if text == "auto" else None


def _dataset(params: dict, tags: dict) -> str:
    """The dataset option (tag `dataset`, param `dataset.option`), or for a run logged without it its loader and
    file."""
    if tags.get("dataset") or params.get("dataset.option"):
        return tags.get("dataset") or params["dataset.option"]
    path = params.get("dataset.path", "")
    return " ".join(filter(None, [params.get("dataset.name", ""), path.rsplit("/", 1)[-1] if path != "None" else ""]))


def row_of(run) -> dict:
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    skipped = tags.get("skipped") == "true"
    start = run.info.start_time
    method = tags.get("method") or params.get("method.name", "")
    arm = method_named(method, tags)   # None: not one of ours nor an engine (a user's script: our configs unused)
    engine = tags.get("engine")
    row = {
        "run": run.info.run_name or run.info.run_id[:8], "status": "SKIPPED" if skipped else run.info.status,
        "model": params.get("model.name", "") if arm else "", "method": method,
        "engine": f"{engine} {tags.get('engine_version', '')}".strip() if engine else None,
        # what the others are compared with: our AR, or an engine without its speculative config (its own AR)
        "baseline": logged_baseline(tags, params),
        # Only a tree reads the budget: another method's run under a swept budget is the same run.
        "tree_budget": _budget(params.get("tree_budget", "")) if arm and arm.builds_tree else None,
        "temperature": params.get("temperature", ""), "host": tags.get("host", ""),
        "gpu": tags.get("gpu") or tags.get("gpu_name", ""),
        "drafter": params.get("drafter.name") or None,   # logged only by an arm that drafts with it (Arm.unread)
        "dtype": params.get("model.dtype", ""), "dataset": _dataset(params, tags) if arm else "",
        "date": datetime.datetime.fromtimestamp(start / 1000).strftime("%Y-%m-%d") if start else "",
        "fairness": tags.get("fairness", ""),
        "duplicate_of": tags.get("duplicate_of") or tags.get("duplicate_of.name") if skipped else None,
        "duplicate_name": tags.get("duplicate_of.name") if skipped else None, "run_id": run.info.run_id,
        # what it ran with but its tree budget: runs of one setup at several budgets make one line of a plot
        "setup": {k: v for k, v in params.items() if k != "tree_budget"},
    }
    row.update({k: metrics.get(k) for k in METRICS})
    if row["baseline"] and row["tau"] is None and row["status"] == "FINISHED":
        row["tau"] = 1.0   # AR commits one token per target forward (a run that failed measured nothing)
    depths = {int(m.group(1)): v for k, v in metrics.items() if (m := _DEPTH.match(k))}
    row["accept_by_depth"] = [depths[d] for d in sorted(depths)]
    return row


# params that set comparable groups apart: a group's table says them in its title, its runs' names need not
GROUP_PARAMS = ("model.name", "drafter.name", "model.dtype", "temperature", "dataset.option", "dataset.name",
                "dataset.path")


def rows_of(runs) -> list[dict]:
    """`row_of` each run; runs that would share a name (two runs launched apart that differ only in, say,
    `max_new_tokens`) get the params that tell them apart added to it, two at most (not those of GROUP_PARAMS:
    runs apart in those are in different groups)."""
    rows = [row_of(run) for run in runs]
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if row["status"] != "SKIPPED":   # a skipped duplicate is named by the run it repeats
            groups.setdefault(row["run"], []).append(index)
    for name, members in groups.items():
        params = [runs[i].data.params for i in members]
        apart = sorted(key for key in set().union(*params) - set(GROUP_PARAMS)
                       if len({p.get(key) for p in params}) > 1)[:2]
        for i, own in zip(members, params):
            if apart:
                rows[i]["run"] = " ".join([name, *(f"{key}={own.get(key, '-')}" for key in apart)])
    return rows


def _key(row: dict, without: tuple[str, ...] = ()) -> tuple:
    return tuple(str(row.get(k) or "") for k in GROUP_KEYS if k not in without)


def comparable(rows: list[dict]) -> list[list[dict]]:
    """The rows in groups of GROUP_KEYS, in order of first appearance; an AR run (it has no drafter) joins the one
    group that matches it on the other keys, or stands alone."""
    groups: dict[tuple, list[dict]] = {}
    baseline = []
    for row in rows:
        (baseline if row.get("baseline") else groups.setdefault(_key(row), [])).append(row)
    for row in baseline:
        matches = [k for k in groups if k[:1] + k[2:] == _key(row, ("drafter",))]
        groups.setdefault(matches[0] if len(matches) == 1 else _key(row), []).append(row)
    return [sorted(group, key=rows.index) for group in groups.values()]


def series(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Rows of one method and setup at several budgets, named by the method and (where one method has several) the
    params that set them apart, two at most."""
    by: dict[tuple, list[dict]] = {}
    for row in rows:
        by.setdefault((row["method"], tuple(sorted(row.get("setup", {}).items()))), []).append(row)
    named = []
    for (method, _), members in by.items():
        others = [m[0].get("setup", {}) for (k, _), m in by.items() if k == method]
        apart = sorted(k for k in set().union(*others) if len({str(o.get(k)) for o in others}) > 1)[:2]
        own = members[0].get("setup", {})
        named.append((" ".join([method, *(f"{k}={own.get(k, '-')}" for k in apart)]), members))
    return named


def differs(groups: list[list[dict]]) -> list[str]:
    """The GROUP_KEYS whose values set `groups` apart (an AR run's missing drafter aside)."""
    return [k for k in GROUP_KEYS if len({str(r.get(k) or "") for g in groups for r in g
                                          if not (k == "drafter" and r.get(k) is None)}) > 1]


def label(group: list[dict], keys: list[str]) -> str:
    """`drafter x, dtype bfloat16`: the group by the keys that set the groups apart, beyond what `context` says
    (model, host, GPU)."""
    return ", ".join(f"{k} {'/'.join(values_of(group, k)) or '-'}" for k in keys if k not in ("model", "host", "gpu"))


def values_of(rows: list[dict], key: str) -> list[str]:
    return sorted({str(r[key]) for r in rows if r.get(key)})


def _joined(values: list[str], what: str) -> str:
    return ", ".join(values) if len(values) <= 2 else f"{len(values)} {what}"


def hosts(rows: list[dict]) -> list[str]:
    """The hosts that ran; a pool's name list (`pool:a,b`, the tag of a job that never got a host) only where none
    did: beside them it counted as one host more."""
    named = values_of(rows, "host")
    return [host for host in named if not host.startswith("pool:")] or named


def context(rows: list[dict]) -> str:
    """`model demo-qwen3, host gpu1 (NVIDIA H200), 2025-06-01`: what the rows' numbers belong to."""
    where = _joined(hosts(rows), "hosts") or "?"
    gpus = _joined(values_of(rows, "gpu"), "GPUs") or "?"
    return (f"model {_joined(values_of(rows, 'model'), 'models') or '?'}, host {where} ({gpus}), "
            f"{_joined(values_of(rows, 'date'), 'dates') or '?'}")


def select_runs(client, experiment: str | None = None, parent: str | None = None, filter_string: str = ""):
    """The runs of `experiment`, or the children of `parent`, matching `filter_string`, oldest first, without sweep
    parents and superseded attempts; a parent or experiment that does not exist, or a filter MLflow rejects, is a
    SystemExit with one line."""
    from mlflow.exceptions import MlflowException

    if parent:
        try:
            parent_run = client.get_run(parent)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            raise SystemExit(f"compare: no run with id {parent!r} in {client.tracking_uri}") from None
        exp_ids = [parent_run.info.experiment_id]
        clause = f"tags.mlflow.parentRunId = '{parent}'"
        query = f"{clause} and {filter_string}" if filter_string else clause
    else:
        exp = client.get_experiment_by_name(experiment or "specbench")
        if exp is None:
            known = ", ".join(sorted(e.name for e in client.search_experiments()))
            raise SystemExit(f"compare: no experiment {experiment!r} in {client.tracking_uri} (there: {known})")
        exp_ids, query = [exp.experiment_id], filter_string
    try:
        runs = client.search_runs(exp_ids, filter_string=query, max_results=5000)
    except MlflowException as exc:
        if exc.error_code != "INVALID_PARAMETER_VALUE":
            raise
        raise SystemExit(f"compare: bad --filter {filter_string!r}: {exc.message} "
                         "(e.g. \"params.method.name = 'ddtree'\")") from None
    if parent and not runs and not filter_string and "sweep.overrides" in parent_run.data.params:
        from ..program import program

        raise SystemExit(f"compare: sweep {parent} has no child runs in {client.tracking_uri} (its jobs did not "
                         f"reach MLflow: `{program()} sync <its sweep dir>` logs what they kept)")
    superseded = {r.data.tags["supersedes"] for r in runs if r.data.tags.get("supersedes")}
    runs = [r for r in runs if r.data.tags.get("sweep") != "parent" and r.info.run_id not in superseded]
    return sorted(runs, key=lambda r: r.info.start_time or 0)
