"""Progress while nothing else moves: a line naming each stage (connect and preflight, sync, launch, the runner's
loading and warm-up), an ETA on the decoding bars from the runner's own clock, and `attach` showing the run's own
elapsed time (read from the host's files). Real runs of the tiny model on the Local host; the stages are checked
in the order the output shows them, against what the run's own events say happened."""
from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.run.display import LiveDisplay
from orchestrator.run.job import Job
from orchestrator.run.progress import LABELS
from remote.events import RunnerStage

SMALL = ["model=tiny-qwen3", "num_prompts=3", "max_new_tokens=8", "host=local"]
STAGED = Path(__file__).parent / "scripts" / "staged_runner.py"


def cli(args: list[str], runs: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECBENCH_RUNS_DIR": str(runs), "COLUMNS": "200"}   # no wrapped stage lines
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def only_run_dir(runs: Path) -> Path:
    found = [p.parent for p in runs.rglob("job.json") if ".host" not in p.parts]
    assert len(found) == 1, found
    return found[0]


def events_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def runner_labels(events: list[dict]) -> list[str]:
    """What the stage line must name once the runner is up: its `stage` events, or (a runner that sends none)
    `warming up` from its start event on."""
    told = [RunnerStage(e["stage"]) for e in events if e["event"] == "stage"]
    if not told:
        return ["warming up…"]
    return [LABELS[s] for s in told if s in LABELS]


def in_order(lines: list[str], prefixes: list[str]) -> list[int]:
    """Line numbers of the first line starting with each prefix, each found after the one before."""
    at, found = -1, []
    for prefix in prefixes:
        at = next((i for i in range(at + 1, len(lines)) if lines[i].startswith(prefix)), None)
        assert at is not None, f"{prefix!r} missing after line {found[-1] if found else 0}:\n" + "\n".join(lines)
        found.append(at)
    return found


@pytest.fixture(scope="module")
def ddtree_run(tmp_path_factory):
    """One real DDTree run (AR baseline included): its output and its run dir."""
    root = tmp_path_factory.mktemp("progress")
    proc = cli(["method=ddtree", *SMALL], root / "runs", root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, only_run_dir(root / "runs")


def test_a_run_names_each_stage_in_order_then_shows_the_bars(ddtree_run):
    stdout, run_dir = ddtree_run
    lines = stdout.splitlines()
    expected = ["connecting to local, preflight…", "syncing runner bundle ", "launching runner…",
                "starting runner…", *runner_labels(events_of(run_dir))]
    stages = in_order(lines, expected)
    bars = [i for i, line in enumerate(lines) if re.match(r"(ar|ddtree)\s+\S+ 3/3 ", line)]
    assert len(bars) == 2 and min(bars) > stages[-1]        # the bars come once the stages are done
    assert all("done" in lines[i] for i in bars)


def test_the_eta_comes_from_the_runners_own_clock_and_a_burst_gives_the_same(ddtree_run):
    _, run_dir = ddtree_run
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    began = next((e["time"] for e in events if e["event"] == "stage" and e["stage"] == "decoding"), None)
    if began is None:   # a runner without stage events: decoding began when its first generation did
        first = next(e for e in events if e["event"] == "prompt")
        began = first["time"] - (first["ttft_ms"] + first["decode_ms"]) / 1000
    hour_ago = time.time() - 3600
    display = LiveDisplay(Console(file=io.StringIO(), force_terminal=True, width=120), show_log=False,
                          started_at=hour_ago)
    checked = 0
    for line, event in zip(lines, events):
        display.feed([], [line])
        fed = time.time()
        if event["event"] == "progress" and event["done"] < event["total"]:
            task = next(t for t in display.progress.tasks if t.description == event["method"])
            want = (event["time"] - began) / event["done"] * (event["total"] - event["done"])
            assert task.fields["eta_at"] - fed == pytest.approx(want, abs=0.05)
            checked += 1
    assert checked == 4   # 2 methods x the 2 of 3 prompts that leave some to do
    shown = render(display)
    assert re.search(r"ddtree .* 3/3 .* done 1:00:0\d", shown), shown   # elapsed: since the run started

    burst = LiveDisplay(Console(file=io.StringIO(), force_terminal=True, width=120), show_log=False)
    cut = max(i for i, e in enumerate(events) if e["event"] == "progress" and e["done"] < e["total"])
    burst.feed([], lines[:cut + 1])
    one_by_one = LiveDisplay(Console(file=io.StringIO(), force_terminal=True, width=120), show_log=False)
    for line in lines[:cut + 1]:
        one_by_one.feed([], [line])
    method = events[cut]["method"]
    etas = [next(t for t in d.progress.tasks if t.description == method).fields["eta_at"]
            for d in (burst, one_by_one)]
    assert etas[0] == pytest.approx(etas[1], abs=0.05)


def render(display: LiveDisplay) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(display.progress.get_renderable())
    return console.file.getvalue()


def test_on_a_terminal_the_stage_is_one_live_line_with_the_runs_elapsed_time(ddtree_run):
    _, run_dir = ddtree_run
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    out = io.StringIO()
    display = LiveDisplay(Console(file=out, force_terminal=True, width=120), show_log=False,
                          started_at=time.time() - 3600)
    assert re.search(r"starting runner… +1:00:0\d", render(display))
    start = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "start")
    display.feed([], lines[:start + 1])
    assert "warming up" in render(display) or "loading target" in render(display)
    display.feed([], lines[start + 1:])
    assert "…" not in render(display)                  # decoding: the bars alone
    assert "starting runner" not in out.getvalue()       # on a terminal nothing is printed for a stage


def test_a_runner_that_reports_its_stages_gets_them_named(tmp_path):
    proc = cli(["runner=script", f"runner.path={STAGED}", "host=local"], tmp_path / "runs", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    found = in_order(lines, ["launching runner…", "starting runner…", "loading target staged-model…",
                             "runner started:", "warming up staged…"])
    assert any(re.match(r"staged\s+\S+ 2/2 ", line) for line in lines[found[-1]:]), "\n".join(lines)


def test_attach_replays_the_events_and_reads_the_runners_start_from_the_host(host, tmp_path):
    job = Job(host, "run-age", tmp_path / "local")
    job.prepare("{}")
    script = ("import json\nwith open('events.jsonl', 'a') as f:\n    for i in (1, 2):\n"
              "        f.write(json.dumps({'event': 'progress', 'done': i, 'total': 2}) + '\\n')\n"
              "print('log line', flush=True)\n")
    job.launch(bundle="/x", gpus=None, env={}, argv=[host.python, "-c", script])
    seen: list[str] = []
    assert job.wait(lambda log, events: seen.extend(events), interval=0.05) == 0
    assert len(seen) == 2
    hour_ago = int(time.time()) - 3600      # as if the runner had started an hour ago
    host.run(f"touch -d @{hour_ago} {shlex.quote(job.files.pid)}")

    again = Job(host, "run-age", tmp_path / "local")
    again.attach()
    assert again.started_at == pytest.approx(hour_ago, abs=5)
    log, events = again.poll()
    assert log == [] and [json.loads(e)["done"] for e in events] == [1, 2]   # the events once more, not the log
    assert again.poll() == ([], [])
    assert (tmp_path / "local" / "events.jsonl").read_text().count("\n") == 2   # the mirror is not doubled


def _wait_for(pattern: str, root: Path, deadline: float) -> list[Path]:
    found: list[Path] = []
    while time.time() < deadline and not (found := [p for p in root.rglob(pattern) if p.stat().st_size]):
        time.sleep(0.1)
    return found


def test_attach_shows_the_runs_own_elapsed_time_and_its_stages(tmp_path):
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "method=ar", "baseline=none", *SMALL],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    pid_files = _wait_for("pid", tmp_path / "runs" / ".host", deadline)
    assert pid_files, "the runner never started"
    group = int(pid_files[0].read_text())
    os.killpg(group, signal.SIGSTOP)     # held until the orchestrator is gone: the attach sees the whole run
    try:
        job_files = _wait_for("job.json", tmp_path / "runs", deadline)
        assert job_files, "the run never launched"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        hour_ago = time.time() - 3600    # the runner's start, as the host's files tell it
        os.utime(pid_files[0], (hour_ago, hour_ago))
    finally:
        os.killpg(group, signal.SIGCONT)
    run_id = json.loads(job_files[0].read_text())["run_id"]
    attached = subprocess.run([sys.executable, "-m", "orchestrator", "attach", run_id], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
    assert attached.returncode == 0, attached.stdout[-2000:] + attached.stderr[-2000:]
    found = re.search(r"attached to \S+ on local: (\d+):(\d\d):(\d\d) elapsed since the runner started",
                      attached.stdout)
    assert found, attached.stdout
    hours, minutes, seconds = map(int, found.groups())
    assert 3600 <= hours * 3600 + minutes * 60 + seconds < 3600 + 300
    assert re.search(r"^ar\s+\S+ 3/3 .* done 1:0\d:\d\d", attached.stdout, re.M), attached.stdout
    lines = attached.stdout.splitlines()
    in_order(lines, ["attached to ", "starting runner…", *runner_labels(events_of(job_files[0].parent))])
