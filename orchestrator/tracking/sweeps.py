"""A sweep's parent run: its local record (SWEEP_RECORD in the sweep dir), and its end.

Contract: `close_sweep(parent)` ends a sweep from its jobs' local records (orchestrator.tracking.records), so its table,
status and exit code never depend on MLflow: it prints the table, writes the summary (CSV, plots) to
`<sweep dir>/summary`, records the sweep's end in SWEEP_RECORD and, where MLflow has the parent, logs the summary there
and closes the parent FAILED if any job did not finish (or a planned job, PLANNED_TAG, left no record), KILLED if every
job that did not finish was stopped, FINISHED otherwise; it returns how many did not finish. The parent's description
(the summary as markdown) links the absolute compare URL of the children that ran (also its `sweep.compare_url` tag);
its headline metrics are its best job's (`sweep.best`), so that its row in the runs list answers for it.
Each skipped duplicate (SKIPPED_FILE in its run dir, orchestrator.sweep.dedupe) is resolved to the run that holds its
result (`duplicate_of` tag; `sweep.skipped` counts them). What MLflow did not get, `sync <sweep dir>` logs later
(orchestrator.tracking.sync).
"""
from __future__ import annotations

import shlex
import time
from pathlib import Path

from .run_note import NOTE_TAG, headline
from .tracker import Status, Tracker, mlflow_client, mlflow_error, sync_command
from .ui_links import compare_url, runs_list_url, where

SWEEP_RECORD = "sweep.json"             # the parent's tracking record, plus the sweep's `end`


PLANNED_TAG = "sweep.planned"   # on the parent: how many jobs the sweep was to run (so a killed one shows the gap)


def sweep_id(sweep_dir: Path) -> str:
    """The sweep's local id (`<date>/<time>-<tag>`, its dir below multirun/): `sync` finds its parent by it."""
    return f"{sweep_dir.parent.name}/{sweep_dir.name}"


def close_sweep(parent: Tracker, missing: Status = Status.KILLED, tags: dict[str, str] | None = None) -> int:
    """End the sweep whose parent record `parent` holds (its run_dir is the sweep dir): the table of its jobs'
    records, printed and written to the summary, then logged on the MLflow parent, closed; returns the number of
    planned jobs that did not finish. A planned job without a record counts as `missing`: KILLED where the sweep was
    killed or stopped before it (`reap`), FAILED at a sweep's normal end (it failed before it began). The sweep's
    end is recorded once: `sync` closes it later as it ended. `tags`: more for the parent (`reap`'s). Its last
    lines name the parent run and the commands that find the sweep again (`where_next`)."""
    failed = _close(parent, missing, tags)
    where_next(parent, failed)
    return failed


def where_next(parent: Tracker, failed: int) -> None:
    """The sweep's parent run id and the commands that show it again (and run its unfinished jobs again)."""
    from rich.console import Console

    from ..program import program

    sweep_dir, console = parent.run_dir, Console()
    said = f"sweep {sweep_id(sweep_dir)}: parent run {parent.run_id}" if parent.run_id else \
        f"sweep {sweep_id(sweep_dir)} (no MLflow parent run)"
    console.print(f"{said}; its table again: {program()} compare {shlex.quote(str(sweep_dir))}"
                  + (f" (or {program()} compare {parent.run_id})" if parent.run_id else ""),
                  soft_wrap=True, highlight=False)
    if parent.run_id and parent.record.get("experiment_id"):
        console.print(f"its experiment's runs in MLflow, headline metrics as columns: "
                      f"{where(parent.uri, runs_list_url(parent.uri, parent.record['experiment_id']))}",
                      soft_wrap=True, highlight=False)
    if failed:
        console.print(f"{failed} job(s) did not finish; run them again under the same parent: {program()} resume "
                      f"{shlex.quote(str(sweep_dir))}", soft_wrap=True, highlight=False)


def _close(parent: Tracker, missing: Status, tags: dict[str, str] | None) -> int:
    from rich.console import Console

    from .compare_plots import Incomparable, summarize
    from .compare_rows import rows_of
    from .compare_table import render_tables
    from .records import as_run, job_records

    sweep_dir = parent.run_dir
    missing = Status((parent.record.get("end") or {}).get("missing", missing.value))
    runs = [as_run(r) for r in job_records(sweep_dir)]
    resolve_skipped(runs)
    rows = rows_of(runs)
    failed, skipped, title, status = _outcome(rows, int(parent.record["start"]["tags"].get(PLANNED_TAG) or 0),
                                              missing)
    if parent.record.get("end") is None:
        parent.keep(end={"missing": missing.value, "status": status.value})
    console = Console()
    for table in render_tables(rows, title):
        console.print(table)
    try:
        files = summarize(rows, sweep_dir / "summary")
    except Incomparable as exc:   # the table and summary.csv stand; the plots would mix setups
        console.print(f"[yellow]plots not drawn: {exc}[/]", soft_wrap=True, highlight=False)
        files = [sweep_dir / "summary" / "summary.csv"]
    later = f"log it later: {sync_command(sweep_dir)}"
    if parent.run_id is None:
        why = parent.warning or parent.record.get("error") or "never opened"
        console.print(f"[yellow]sweep not in MLflow ({why}); its summary is in {sweep_dir / 'summary'}; {later}[/]",
                      soft_wrap=True, highlight=False)
        return failed
    try:
        counts = {"sweep.jobs": str(len(rows)), "sweep.failed": str(failed), "sweep.skipped": str(skipped)}
        url = _log_summary(parent, runs, rows, title, files, {**counts, **(tags or {})})
        mlflow_client(parent.uri).set_terminated(parent.run_id, status.value)
    except Exception as exc:   # the table and summary are kept; the server's answer is the user's to see
        console.print(f"[yellow]sweep summary not logged to MLflow at {parent.uri} ({mlflow_error(exc)}); {later}[/]",
                      soft_wrap=True, highlight=False)
        return failed
    if all(r.logged for r in runs):
        parent.mark_logged()
    else:
        console.print(f"[yellow]{sum(not r.logged for r in runs)} job(s) not in MLflow; {later}[/]",
                      soft_wrap=True, highlight=False)
    console.print(f"compare the sweep in MLflow: {where(parent.uri, url)}", soft_wrap=True, highlight=False)
    return failed


def _outcome(rows: list[dict], planned: int, missing: Status) -> tuple[int, int, str, Status]:
    """(jobs that did not finish, jobs skipped, the table's title, the sweep's status) of its rows and its plan."""
    absent = max(0, planned - len(rows))
    failed = sum(r["status"] not in ("FINISHED", "SKIPPED") for r in rows) + absent
    skipped = sum(r["status"] == "SKIPPED" for r in rows)
    jobs = f"{len(rows)} of {planned}" if absent else f"{len(rows)}"
    ended = {r["status"] for r in rows} - {"FINISHED", "SKIPPED"} | ({missing.value} if absent else set())
    # a sweep stopped by the user or a scheduler (every job that did not finish was KILLED) is KILLED too
    status = Status.FINISHED if rows and not ended else Status.KILLED if ended == {"KILLED"} else Status.FAILED
    return failed, skipped, f"sweep: {jobs} jobs, {failed} not finished, {skipped} skipped", status


def _log_summary(parent: Tracker, runs, rows: list[dict], title: str, files: list[Path], tags: dict[str, str]) -> str:
    """The summary on the MLflow parent (artifacts, tags, the markdown description), skipped jobs pointed at their
    holders' MLflow runs; returns the compare URL of the jobs that ran."""
    from .compare_table import markdown

    client = mlflow_client(parent.uri)
    ran = [r.info.run_id for r in runs if r.logged and r.data.tags.get("skipped") != "true"]
    url = compare_url(parent.uri, client.get_run(parent.run_id).info.experiment_id, ran)
    for run in runs:
        if run.logged and run.data.tags.get("skipped") == "true":   # named by local id until now
            for key in ("duplicate_of", "host", "gpu"):
                if key in run.data.tags:
                    client.set_tag(run.info.run_id, key, run.data.tags[key])
    for path in files:
        client.log_artifact(parent.run_id, str(path))
    best = _best(runs, rows)
    for key, value in {"sweep.compare_url": url, NOTE_TAG: markdown(rows, title, url), **tags,
                       **({"sweep.best": best.info.run_name} if best else {})}.items():
        client.set_tag(parent.run_id, key, value)
    if best is not None:   # the runs list's headline columns show the sweep's answer on its row
        from mlflow.entities import Metric

        client.log_batch(parent.run_id, metrics=[Metric(k, v, int(time.time() * 1000), 0)
                                                 for k, v in headline(best.data.metrics)])
    return url


def _best(runs, rows: list[dict]):
    """The job run the sweep's table leads with (compare_table.leader: the best speedup, else tokens/s), or None."""
    done = [(run, row) for run, row in zip(runs, rows) if row["status"] == "FINISHED"]
    key = "speedup_vs_ar" if any(row.get("speedup_vs_ar") is not None for _, row in done) else "tokens_per_s"
    done = [(run, row) for run, row in done if row.get(key) is not None]
    return max(done, key=lambda pair: pair[1][key])[0] if done else None


def resolve_skipped(runs) -> None:
    """A skipped job names its holder by local run id (the holder's MLflow run may not have existed yet): point
    it at the holder's MLflow run where there is one, and give it the holder's host and GPU tags."""
    by_local = {r.data.tags.get("run_id_local"): r for r in runs}
    for run in runs:
        tags = run.data.tags
        holder = by_local.get(tags.get("duplicate_of.run_id_local")) if tags.get("skipped") == "true" else None
        if holder is None:
            continue
        if holder.logged:
            tags["duplicate_of"] = holder.info.run_id
        tags.update({k: holder.data.tags[k] for k in ("host", "gpu") if k in holder.data.tags})


SKIPPED_FILE = "skipped.json"
