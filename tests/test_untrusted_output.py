"""A runner's output is untrusted: on a real terminal (a pty) its escape sequences arrive as visible pictures, never
as sequences the terminal would act on (a window title, a screen clear, a query answered into stdin), while runner.log
keeps every byte; and one line of 64 MB costs the follower a bounded amount of memory (it took 3.4x the line)."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT
from orchestrator.untrusted import LINE_BYTES, log_line, printable

SCRIPT = Path(__file__).parent / "scripts" / "hostile_output.py"
RAW = (b"\x1b]0;PWNED\x07", b"\x1b[38;5;199m", b"\x1b[2J", b"\x1b[6n", b"\xc2\x9b31m", b"\x07 bell")
# The peak RSS of a process and of the children it waited for, in KiB: the CLI's (the runner is not its child: it
# runs detached, orphaned by the launch's shell).
PEAK = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
        "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(code)")


def run_measured(tmp_path: Path, name: str, args: list[str], tty: bool) -> tuple[int, bytes, int]:
    """(exit code, what the terminal or pipe received, the CLI's peak RSS in KiB)."""
    peak = tmp_path / f"{name}.peak"
    argv = [sys.executable, "-c", PEAK, str(peak), sys.executable, "-m", "orchestrator", "runner=script",
            f"runner.path={SCRIPT}", f"host.workdir={tmp_path / name}", *args]
    env = {**os.environ, "COLUMNS": "200" if tty else "100000", "TERM": "xterm-256color"}
    if not tty:
        proc = subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, timeout=300, env=env)
        return proc.returncode, proc.stdout + proc.stderr, int(peak.read_text())
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    received = bytearray()

    def drain() -> None:   # the terminal's side: read until the last writer closes it
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:   # EIO: every process holding the pty's other end is gone
                return
            if not data:
                return
            received.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    code = proc.wait(timeout=300)
    reader.join(timeout=30)
    os.close(main)
    return code, bytes(received), int(peak.read_text())


def test_runner_escape_sequences_reach_a_terminal_as_pictures(tmp_path):
    code, screen, _ = run_measured(tmp_path, "tty", [], tty=True)
    assert code == 0, screen[-3000:]
    for sequence in RAW:
        assert sequence not in screen, (sequence, screen[-3000:])
    shown = screen.decode("utf-8", "replace")
    assert "␛]0;PWNED␇" in shown and "␛[6n" in shown and "\ufffd31m" in shown, shown[-3000:]
    assert "loading 100%" in shown and "loading 10%" not in shown, shown[-3000:]   # the last redraw
    (log,) = (tmp_path / "tty" / "runs").glob("*/runner.log")
    assert log.read_bytes().startswith(b"title \x1b]0;PWNED\x07 colour \x1b[38;5;199mPINK")   # every byte kept



def test_a_64_mb_line_costs_the_follower_little_memory(tmp_path):
    code, out, small = run_measured(tmp_path, "small", [], tty=False)
    assert code == 0, out[-3000:]
    code, out, big = run_measured(tmp_path, "big", ["runner.args=[--line-mb,64]"], tty=False)
    assert code == 0, out[-3000:]
    print(f"peak RSS: {small / 1024:.0f} MiB with short lines, {big / 1024:.0f} MiB with a 64 MiB line")
    assert big - small < 32 * 1024, (small, big)
    assert f"[a line of {64 * 2**20} bytes, its first {LINE_BYTES} here: runner.log has it all] xxx".encode() in out
    (log,) = (tmp_path / "big" / "runs").glob("*/runner.log")
    assert log.stat().st_size > 64 * 2**20   # the log on disk keeps everything


def test_a_line_is_shown_as_a_terminal_would_leave_it_with_its_controls_visible():
    assert printable("a\x1bb\x7fc\x9bd\te\n") == "a␛b␡c\ufffdd\te\n"
    assert log_line(b"10%\r55%\r\r") == "55%" and log_line(b"\xff ok") == "\ufffd ok"
    assert log_line(b"x" * 8, more=5) == "[a line of 13 bytes, its first 8 here: runner.log has it all] xxxxxxxx"
