"""MLflow as a view over a run's local directory, kept whether or not the tracking server answers.

Contract: everything is written to the local run dir first, including the run's tracking record (`tracking.json`: what
MLflow should show, the MLflow run id once known, and which steps reached it). `Tracker` mirrors the record to MLflow:
the run and its params when it opens (in the background, never delaying the tail), metrics, tags, artifacts and the
final status FINISHED / FAILED / KILLED when it finishes. The final payload is recorded before any upload is tried; what
did not reach MLflow is replayed later from the record by `sync` (orchestrator.tracking.sync), which finds the MLflow
run by the record or its `run_id_local` tag, never makes it twice and adds nothing twice. Every MLflow wait is bounded:
HTTP requests (HTTP_DEFAULTS, unless the user set them), and `finish` gives up CLOSE_WITHIN_S after its call
(LOCAL_CLOSE_WITHIN_S for a local store), then tries once within TERMINATE_WITHIN_S to close the MLflow run FAILED
(unless the server could not be reached: `sync` closes it). A tracker made `away` (a sweep's job whose parent MLflow
could not open) keeps the record and tries nothing. A reader sees first the headline metrics, the run's description and
`definitions.md` (orchestrator.tracking.run_note); the `gpu` tag is as the runner saw it; `url()` is its absolute UI
address, for the closing note. Non-goals: logging while the run goes, queueing uploads across processes.
"""
from __future__ import annotations

import enum
import functools
import importlib
import json
import logging
import math
import os
import re
import shlex
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from remote.events import write_json_atomic, write_text_atomic

from ..config.knobs import DEFAULT_EXPERIMENT, EXPERIMENT_ENV, EXPERIMENT_ID_ENV, URI_ENV
from ..paths import default_artifact_root, default_tracking_uri, no_room_here, room_here
from ..program import program
from .run_note import HEADLINE, NOTE_TAG, definitions_table, description, headline, headline_name
from .ui_links import experiment_tags, run_url, runs_list_url, where

log = logging.getLogger(__name__)

RECORD = "tracking.json"
# MLflow's own (7 retries, backoff factor 2, 120 s a request) hold one call ~4 min on a refused port and ~20 min
# on a black hole; these hold it ~3 s and ~34 s (3 tries, 10 s each, backoff 0 + 2 s + jitter). Read by MLflow
# on every request, so setting them before the first call is enough. Each only where the user set none.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    # closing a run on a server printed two lines of its own ("View run ... at", "View experiment at") after asking
    # the server for the run once more: our closing line names the run and its address
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
CLOSE_WITHIN_S = 15.0      # finish, with a tracking server: waiting for the opening, then the final logging
TERMINATE_WITHIN_S = 5.0   # then one try to close an incomplete MLflow run (FAILED)
# The same as CLOSE_WITHIN_S for a local store (sqlite, files): nothing there can go away, its work is local (the
# import and a new database's migrations take 10+ s on a loaded machine) and its lock waits are sqlite's own
# (20 s a statement, with parallel jobs on one database); this bound only guards against a hung disk.
LOCAL_CLOSE_WITHIN_S = 120.0
STORE_ROOM = 1 << 20   # free bytes a local store needs beyond the artifacts' size for a run's rows (sqlite's journal)


class Status(enum.Enum):
    """Final state of a run, as MLflow shows it."""

    FINISHED = "FINISHED"   # the runner exited 0 and its results were collected
    FAILED = "FAILED"       # the runner or the orchestrator failed; failure.* tags say why
    KILLED = "KILLED"       # stopped by the user (Ctrl-C) or by fail-fast


class Step(enum.Enum):
    """What of a run has reached MLflow (the record's `logged`), after the run itself (`mlflow_run_id`)."""

    PARAMS = "params"   # the resolved config, as params
    FINAL = "final"     # metrics, tags, artifacts, then the final status: the run is fully in MLflow


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts/lists to dotted keys (`model.random.hidden_size`, `gpus.0`) with string values."""
    out: dict[str, str] = {}
    if isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        return {prefix: str(obj)}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, (Mapping, list, tuple)) and len(value):
            out.update(flatten(value, name))
        else:
            out[name] = str(value)
    return out


def resolve_uri(uri: str | None) -> str:
    """The store a run logs to: `uri` (tracking.uri, --tracking-uri), else MLflow's own MLFLOW_TRACKING_URI, else
    the embedded default; a local path made absolute (`sqlite:///my.db` of the directory the command ran in): the
    run's records keep it, and `show`, `sync` or `reap` from another directory must reach the same store."""
    uri = uri or os.environ.get(URI_ENV)
    if not uri:
        return default_tracking_uri()
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite" and uri.startswith("sqlite:///") and uri[len("sqlite:///"):] not in ("", ":memory:"):
        return "sqlite:///" + os.path.abspath(os.path.expanduser(uri[len("sqlite:///"):]))
    if parsed.scheme == "" or (parsed.scheme == "file" and not parsed.netloc):    # a file store's directory
        return os.path.abspath(os.path.expanduser(parsed.path if parsed.scheme else uri))
    return uri


def uri_source(uri: str | None) -> str:
    """Where the store of `resolve_uri(uri)` comes from, for the line that names it."""
    return "tracking.uri" if uri else URI_ENV if os.environ.get(URI_ENV) else "the default"


def resolve_experiment(name: str | None) -> str:
    """The experiment runs go to: `name` (tracking.experiment), else MLFLOW_EXPERIMENT_NAME, else DEFAULT_EXPERIMENT
    (MLFLOW_EXPERIMENT_ID, where set instead of a name, is looked up when the run opens)."""
    return name or os.environ.get(EXPERIMENT_ENV) or DEFAULT_EXPERIMENT


def sqlite_file(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` store, None for any other."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


# The client API, never the fluent one's global "active run": parallel jobs in one process cannot mix their runs.
def mlflow_client(uri: str):
    """An MlflowClient for `uri` whose HTTP waits are bounded (HTTP_DEFAULTS, where the user set none)."""
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    # urllib3 logs each retry of an unreachable server, timestamped, in the middle of the run's display; the
    # outage is said once, by Tracker (`... unavailable; results kept locally`) and in the closing line.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    # "Creating initial MLflow database tables..." on a run's terminal says nothing a user acts on
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    from mlflow.tracking import MlflowClient

    database = sqlite_file(uri)
    if database is None or not database.is_absolute() or not database.parent.is_dir():
        return MlflowClient(tracking_uri=uri)
    # The client makes and migrates a new database: two commands doing so at once raced in MLflow's migrations
    # ("Online migration expected to match one row"), and one lost its run. One at a time, the second finds it
    # made. (The store's module is imported first: its import is most of a client's making, and needs no lock.)
    from filelock import FileLock

    importlib.import_module("mlflow.store.tracking.sqlalchemy_store")
    with FileLock(f"{database}.lock"):
        return MlflowClient(tracking_uri=uri)


def close_within(uri: str) -> float:
    """How long a run's logging may wait on the store at `uri` (CLOSE_WITHIN_S, LOCAL_CLOSE_WITHIN_S)."""
    return LOCAL_CLOSE_WITHIN_S if urlparse(uri).scheme in ("", "file", "sqlite") else CLOSE_WITHIN_S


def sync_command(run_dir: Path) -> str:
    return f"{program()} sync {shlex.quote(str(run_dir))}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def mlflow_error(exc: BaseException) -> str:
    """The gist of an MLflow client error (its message nests urllib3's several times over)."""
    text = " ".join(str(exc).split())
    found = re.search(r"\[Errno -?\d+\] [^'\")]+|Read timed out", text)
    return f"{type(exc).__name__}: {found.group(0) if found else text[:300]}"


def _no_connection(exc: BaseException) -> bool:
    """Whether `exc` is a connection to the server that could not be made (refused, no route, unknown name): MLflow
    raises its own exception in the handler of requests' ConnectionError, which is thus its context."""
    from requests.exceptions import ConnectionError as NoConnection

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, NoConnection):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class _Call:
    """`fn` in a daemon thread (a hung MLflow call must not hold the process's exit), waited for through an
    Event rather than `Thread.join`: on CPython 3.11 a join that Ctrl-C interrupts marks the thread stopped while
    it still runs, so the next join returns at once."""

    def __init__(self, fn: Callable[[], None], name: str):
        self.done = threading.Event()
        self.error: Exception | None = None
        threading.Thread(target=self._body, args=(fn,), name=name, daemon=True).start()

    def _body(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # the caller reports it
            self.error = exc
        finally:
            self.done.set()

    def wait(self, seconds: float) -> bool:
        """True once `fn` is done (`error` says how), False if it still runs after `seconds`."""
        return self.done.wait(max(seconds, 0.0))


class Tracker:
    """One run's MLflow mirror and its local record (`run_dir / name`, when a run dir is given; a sweep's parent
    keeps its own in the sweep dir, orchestrator.tracking.sweeps)."""

    def __init__(self, uri: str | None, experiment: str | None, run_dir: Path | None = None, name: str = RECORD,
                 away: str | None = None, sweep_job: bool = False, parent_run_id: str | None = None):
        self.uri = resolve_uri(uri)
        # MLFLOW_EXPERIMENT_ID names the experiment where neither tracking.experiment nor a name in the environment
        # does (MLflow's fluent API reads it so)
        self._experiment_by_id = None if experiment or os.environ.get(EXPERIMENT_ENV) else \
            os.environ.get(EXPERIMENT_ID_ENV)
        experiment = resolve_experiment(experiment)
        self.parent_run_id = parent_run_id   # a sweep job's parent run, which record_start names by default
        # a sweep's job: one that ends before its launch is still recorded, as a child run saying why
        # (orchestrator.sweep.job)
        self.sweep_job = sweep_job
        # why MLflow is not to be tried at all (a sweep whose parent it could not open): kept locally, for `sync`
        self.away = away
        self.experiment = experiment
        self.run_dir = run_dir
        self.name = name
        self.record: dict[str, Any] = {"tracking_uri": self.uri, "experiment": experiment, "mlflow_run_id": None,
                                       "logged": [], "error": None, "start": None, "final": None,
                                       "experiment_by_id": self._experiment_by_id}
        self.warning: str | None = away   # why the run is not (fully) in MLflow
        self._lock = threading.RLock()    # the record is written from the opening's thread too
        self._opening: _Call | None = None

    @classmethod
    def load(cls, run_dir: Path, uri: str | None = None, name: str = RECORD) -> "Tracker":
        """The tracker of a kept run, from its record; `uri`: log it there instead (the record starts over there)."""
        record = json.loads((run_dir / name).read_text())
        tracker = cls(uri or record["tracking_uri"], record["experiment"], run_dir, name)
        tracker.record.update(record)
        if not record.get("experiment_id"):   # never opened: the experiment MLFLOW_EXPERIMENT_ID named, if it did
            tracker._experiment_by_id = record.get("experiment_by_id")
        if tracker.uri != record["tracking_uri"]:
            tracker.record.update(tracking_uri=tracker.uri, mlflow_run_id=None, logged=[])
        return tracker

    @property
    def run_id(self) -> str | None:
        return self.record["mlflow_run_id"]

    @property
    def opened(self) -> bool:
        """The run got as far as MLflow: it was opened (or is being opened), or an MLflow run is known."""
        return self._opening is not None or self.record["start"] is not None or self.run_id is not None

    @property
    def logged(self) -> bool:
        """The run is fully in MLflow: its final logging succeeded."""
        return Step.FINAL.value in self.record["logged"]

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self.record.update(changes)
            if self.run_dir is not None:
                write_json_atomic(str(self.run_dir / self.name), self.record)

    def _mark(self, step: Step) -> None:
        with self._lock:
            self._update(logged=[*self.record["logged"], step.value])

    def keep(self, **fields: Any) -> None:
        """Record `fields` beside the run's own (a sweep's end, orchestrator.tracking.sweeps)."""
        self._update(**fields)

    def mark_logged(self) -> None:
        """Everything the run has is in MLflow, by its owner's account (a sweep parent's summary)."""
        if not self.logged:
            self._mark(Step.FINAL)

    def adopt(self, parent_run_id: str) -> bool:
        """Put the run under the sweep parent `parent_run_id` (an MLflow run at this tracker's URI): recorded, sent
        with the run when it opens (an open one: by the caller); False if it was there already."""
        start = self.record["start"]
        if start is None or start["parent_run_id"] == parent_run_id:
            return False
        self._update(start={**start, "parent_run_id": parent_run_id})
        return True

    def start(self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str],
              parent_run_id: str | None = None) -> None:
        """Record what the run is, then open it in MLflow (the run and its params). Never raises: tracking must
        never cost the run; `warning` says what went wrong."""
        self.record_start(run_name, params, tags, parent_run_id)
        self.send()

    def record_start(self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str],
                     parent_run_id: str | None = None) -> None:
        """Record what the run is, locally only: from here on `sync` (or `attach`'s end) can open it in MLflow."""
        self._update(start={"run_name": run_name, "start_time": _now_ms(), "params": dict(params),
                            "tags": dict(tags), "parent_run_id": parent_run_id or self.parent_run_id})

    def send(self, tags: Mapping[str, str] | None = None, quiet: bool = False) -> None:
        """Open the recorded run in MLflow, with `tags` added to the recorded ones. Never raises (as `start`).
        `quiet`: an outage is left to the caller to say (`warning` has it), once, with what it means there."""
        if tags:
            with self._lock:
                start = self.record["start"]
                self._update(start={**start, "tags": {**start["tags"], **tags}})
        if self.away:
            self._update(error=self.away)
            return
        try:
            self.replay()
        except Exception as exc:
            self.warning = f"MLflow at {self.uri} unavailable ({mlflow_error(exc)})"
            if not quiet:
                log.warning("%s; results kept locally", self.warning)
            self._update(error=self.warning)

    def open_async(self, opener: Callable[[], None]) -> threading.Event:
        """Run `opener` (which calls `start`) in the background: MLflow's import, database work and an unreachable
        server's timeouts never delay the tail. `finish` waits for it, bounded. The Event is set once it is done."""
        def opening() -> None:
            try:
                opener()
            except Exception:   # not MLflow's (start never raises): a bug of ours, shown though no one waits
                log.exception("opening the MLflow run failed")
                raise

        self._opening = _Call(opening, "mlflow-open")
        return self._opening.done

    def resume(self, run_id: str | None) -> None:
        """Continue the record the original command kept in the run dir (attach); `run_id`: its MLflow run, as
        job.json has it. Nothing is sent before `finish`."""
        if self.run_dir is not None and (self.run_dir / self.name).exists():
            self.record.update(json.loads((self.run_dir / self.name).read_text()))
        if run_id and not self.run_id:
            self.record["mlflow_run_id"] = run_id

    def finish(self, status: Status, metrics: Mapping[str, float], tags: Mapping[str, str],
               artifacts: list[Path], history: list[tuple[str, float, int]] = ()) -> None:
        """Final metrics (step 0), per-step `history` (name, value, step), tags, artifacts and the status: recorded
        locally first, then logged within CLOSE_WITHIN_S. Never raises; `logged` and `warning` say how it went."""
        if not self.opened:
            return   # it failed before its launch (preflight): MLflow was never part of it, nor is it later
        if not self.away:
            importlib.import_module("mlflow.tracking")   # local work (seconds under load), not a wait on the server
        within = close_within(self.uri)
        deadline = time.monotonic() + within
        now = _now_ms()
        tags = {**tags, **self._gpu_tag(tags)}
        if metrics:
            tags, artifacts = self._described(metrics, tags, artifacts)
        points = [(k, v, 0) for k, v in [*headline(metrics), *metrics.items()]] + list(history)
        names = [str(p.relative_to(self.run_dir)) if self.run_dir and p.is_relative_to(self.run_dir) else str(p)
                 for p in artifacts if p.exists()]
        tags = {k: str(v)[:8000] for k, v in tags.items()}
        # A second outcome (attach followed the runner on after this command lost the host and closed the run
        # FAILED) is logged anew, and what the first one tagged that this one does not (failure.*) is removed.
        earlier = {*(self.record["final"] or {}).get("tags", {}), *(self.record.get("unsettled") or {})}
        stale = sorted(earlier - set(tags))
        self._update(final={
            "status": status.value, "end_time": now, "tags": tags,
            "metrics": [[k, float(v), now, step] for k, v, step in points
                        if isinstance(v, (int, float)) and math.isfinite(float(v))],
            "artifacts": names, "stale_tags": stale},
            logged=[step for step in self.record["logged"] if step != Step.FINAL.value], unsettled=None)
        if self.away:
            return
        late = f"MLflow at {self.uri} did not answer within {within:g} s"
        if self._opening is not None and not self._opening.wait(deadline - time.monotonic()):
            return self._give_up(late)   # still opening: no second attempt beside it
        if (no_room := self._no_room(names)) is not None:   # not tried: it would leave part of an artifact
            return self._give_up(no_room)
        upload = _Call(self.replay, "mlflow-finish")
        if not upload.wait(deadline - time.monotonic()):
            return self._give_up(late)
        if upload.error is not None:
            return self._give_up(f"MLflow at {self.uri} unavailable ({mlflow_error(upload.error)})",
                                 server_down=_no_connection(upload.error))
        self.warning = None

    def leave_open(self, tags: Mapping[str, str]) -> None:
        """The run's end is not known (a stop the host did not confirm: its runner may still be running), so its
        MLflow run stays RUNNING, with `tags` saying why; the record keeps them (`unsettled`), and the `finish` that
        settles the run later (attach, stop, reap) removes them. Bounded as `finish` is; never raises."""
        self._update(unsettled={k: str(v) for k, v in tags.items()})
        if self.away or not self.opened:
            return
        deadline = time.monotonic() + close_within(self.uri)
        if self._opening is not None and not self._opening.wait(deadline - time.monotonic()):
            self.warning = f"MLflow at {self.uri} did not answer"
            return

        def tag(run_id: str) -> None:
            from mlflow.entities import RunTag

            mlflow_client(self.uri).log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

        if self.run_id is not None:
            call = _Call(functools.partial(tag, self.run_id), "mlflow-tag")
            if not call.wait(deadline - time.monotonic()) or call.error is not None:
                why = mlflow_error(call.error) if call.error else "no answer"
                self.warning = f"MLflow at {self.uri} unavailable ({why})"

    def open_note(self) -> str:
        """For the line of a run left open: where its MLflow run is, RUNNING, or that MLflow has none yet."""
        if self.run_id is None:
            return "(not in MLflow yet)"
        return f"(MLflow run {self.run_id} left RUNNING{f'; {self.warning}' if self.warning else ''})"

    def _described(self, metrics: Mapping[str, float], tags: dict[str, str],
                   artifacts: list[Path]) -> tuple[dict[str, str], list[Path]]:
        """The run's description (unless it has one) and definitions.md, from results.json's definitions."""
        results = self.run_dir / "results.json" if self.run_dir is not None else None
        try:
            kept = json.loads(results.read_text()) if results else {}
        except (OSError, ValueError):
            kept = {}
        definitions = kept.get("definitions") or {}
        start = self.record["start"] or {}
        known = {**start.get("tags", {}), **tags}
        if NOTE_TAG not in known:
            tags = {**tags, NOTE_TAG: description(start.get("run_name", ""), known, metrics, definitions)}
        if self.run_dir is not None and definitions:
            table = self.run_dir / "definitions.md"
            try:   # whole or not at all: a full disk once left it 0 bytes, looking written
                write_text_atomic(str(table), definitions_table(metrics, definitions, known,
                                                                kept.get("tag_definitions") or {}))
                artifacts = [*artifacts, table]
            except OSError:
                pass   # the description carries the definitions too
        return tags, artifacts

    @staticmethod
    def _gpu_tag(tags: Mapping[str, str]) -> dict[str, str]:
        """`gpu` as the runner saw it (its `device` and `gpu_name`): the label preflight gave may not be what ran
        (device=cpu on a GPU host)."""
        device = tags.get("device")
        if device is None:
            return {}
        if not str(device).startswith("cuda") or tags.get("gpu_name") in (None, "", "none"):
            return {"gpu": "cpu"}
        count = int(tags["gpu_count"]) if str(tags.get("gpu_count", "")).isdigit() else 1
        return {"gpu": tags["gpu_name"] if count <= 1 else f"{count}x {tags['gpu_name']}"}

    def _no_room(self, artifacts: list[str]) -> str | None:
        """Why a local store has no room for the run's final logging (its artifacts' copies, its rows), or None."""
        database = sqlite_file(self.uri)
        if database is None or not database.parent.exists():
            return None
        need = STORE_ROOM + sum(os.path.getsize(p) for name in artifacts
                                if (p := (self.run_dir or Path(".")) / name).is_file())
        if room_here(database.parent)[0] >= need:
            return None
        return no_room_here(database.parent, need, "the run's MLflow rows and artifact copies")

    def _give_up(self, why: str, server_down: bool = False) -> None:
        """Keep the reason in the record; close a half-logged MLflow run FAILED (once, bounded), not RUNNING. Not
        where the server could not be connected to just now (`server_down`): the try would be refused as surely,
        after MLflow's retries (~2.5 s at each run's end of an outage); `sync` closes the run from the record."""
        self.warning = why
        self._update(error=why)
        if self.run_id is not None and not server_down:
            run_id = self.run_id
            _Call(lambda: mlflow_client(self.uri).set_terminated(run_id, Status.FAILED.value),
                  "mlflow-terminate").wait(TERMINATE_WITHIN_S)

    def replay(self) -> None:
        """Bring MLflow up to the record: find or create the run, log its params, then the final payload and
        status. Raises on the first failure. Every step may be repeated: params keep their values, metric points
        their timestamps (MLflow skips identical ones), tags and artifacts overwrite. A run the record says is
        fully in MLflow (a sweep's parent whose summary is on it, synced again) asks MLflow nothing: its import and
        a database's opening alone took seconds."""
        start, final = self.record["start"], self.record["final"]
        params_due = start is not None and Step.PARAMS.value not in self.record["logged"]
        final_due = final is not None and not self.logged
        if self.logged and self.run_id is not None and not params_due:
            return
        client = mlflow_client(self.uri)
        if self.run_id is None:
            self._update(mlflow_run_id=self._find_or_create(client))
        if params_due:
            self._log_params(client, start["params"])
            self._mark(Step.PARAMS)
        if final_due:
            self._log_final(client, final)
            self._mark(Step.FINAL)
            self._update(error=None)

    def _find_or_create(self, client) -> str:
        """The run a lost answer may have left on the server (by its `run_id_local` tag), or a new one."""
        start = self.record["start"]
        if start is None:
            raise ValueError(f"no MLflow run recorded and nothing to open one from in {self.run_dir}/{self.name}")
        exp_id = self._experiment_id(client)
        local = start["tags"].get("run_id_local")
        if local and "'" not in local:
            found = client.search_runs([exp_id], f"tags.run_id_local = '{local}'", max_results=1)
            if found:
                return found[0].info.run_id
        tags = dict(start["tags"])
        if start["parent_run_id"]:
            tags["mlflow.parentRunId"] = start["parent_run_id"]
        return client.create_run(exp_id, start_time=start["start_time"], tags=tags,
                                 run_name=start["run_name"]).info.run_id

    def _experiment_id(self, client) -> str:
        if (database := sqlite_file(self.uri)) is not None:
            database.parent.mkdir(parents=True, exist_ok=True)
        if self._experiment_by_id:   # raises where the store has no such experiment: said as the store's answer
            exp = client.get_experiment(self._experiment_by_id)
            self.experiment = exp.name
            self._update(experiment=exp.name)
        else:
            exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            # A local database gets local artifacts in runs/, wherever the command was started from.
            location = default_artifact_root() if self.uri.startswith("sqlite:") else None
            exp_id, tags = client.create_experiment(self.experiment, artifact_location=location), {}
        else:
            exp_id, tags = exp.experiment_id, exp.tags
        self._describe_experiment(client, exp_id, tags)
        self._update(experiment_id=exp_id)
        return exp_id

    def _describe_experiment(self, client, exp_id: str, tags: Mapping[str, str]) -> None:
        for key, value in experiment_tags([headline_name(k) for k in HEADLINE]).items():
            if tags.get(key) != value:   # the UI's view of our runs (ui_links), set once per experiment
                client.set_experiment_tag(exp_id, key, value)
        if NOTE_TAG not in tags:         # the experiment's description, unless its owner wrote one
            client.set_experiment_tag(exp_id, NOTE_TAG, f"specbench runs: [the runs list with the headline metrics as "
                                                        f"columns]({runs_list_url(self.uri, exp_id)}) (or the "
                                                        f"UI's *Model training* view)")

    def _log_params(self, client, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(self.run_id, params=items[i:i + 100])

    def _log_final(self, client, final: dict) -> None:
        from mlflow.entities import Metric, RunTag

        metrics = [Metric(k, v, ts, step) for k, v, ts, step in final["metrics"]]
        tags = [RunTag(k, v) for k, v in final["tags"].items()]
        for i in range(0, len(metrics), 1000):   # MLflow's limits per batch: 1000 metrics, 100 tags
            client.log_batch(self.run_id, metrics=metrics[i:i + 1000])
        for i in range(0, len(tags), 100):
            client.log_batch(self.run_id, tags=tags[i:i + 100])
        present = client.get_run(self.run_id).data.tags if final.get("stale_tags") else {}
        for key in final.get("stale_tags", []):
            if key in present:   # (MLflow refuses to delete a tag that is not there: a replay may repeat this)
                client.delete_tag(self.run_id, key)
        for name in final["artifacts"]:
            path = (self.run_dir or Path(".")) / name
            if path.exists():
                client.log_artifact(self.run_id, str(path))
        client.set_terminated(self.run_id, final["status"], end_time=final["end_time"])

    def url(self) -> str:
        """The run's page in the MLflow UI, absolute ("" before the run is known); for a local store with the
        command that serves it."""
        exp_id = self.record.get("experiment_id")
        if not (self.run_id and exp_id):
            return ""
        return where(self.uri, run_url(self.uri, exp_id, self.run_id))

    def closing_note(self, later: str | None = None) -> str:
        """For the run's closing line: where it is in MLflow, or why it is not and how to log it later (`sync`, or
        `later` where that finishes the job)."""
        if self.logged:
            return f"mlflow run: {self.run_id} {self.url()}".rstrip()
        if not self.opened and self.sweep_job:
            return "(ended before its launch: the sweep records it as a child run saying why)"
        if not self.opened:   # said, or a user would look for it in MLflow and try `sync`
            return "(never reached MLflow: it ended before its launch; nothing to sync)"
        what = f"not fully in MLflow (run {self.run_id} incomplete)" if self.run_id else "not in MLflow"
        return (f"({what}: {self.warning or 'not logged'}; results kept locally; log it later: "
                f"{later or sync_command(self.run_dir or Path('.'))})")
