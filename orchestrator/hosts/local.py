"""The Local host: jobs run as detached subprocesses of this machine, files are plain copies."""
from __future__ import annotations

import shutil
import subprocess
import sys

from ..paths import runs_dir
from .base import CommandFailed, Host, Result


class LocalHost(Host):
    def __init__(self, name: str = "local", workdir: str | None = None, python: str | None = None):
        self.name = name
        self.workdir = workdir or str(runs_dir() / ".host")
        self.python = python or sys.executable

    def run(self, command: str, *, check: bool = True, timeout: float | None = None,
            stdin: bytes | None = None) -> Result:
        proc = subprocess.run(["bash", "-c", command], input=stdin or b"", capture_output=True, timeout=timeout)
        result = Result(command, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                        proc.stderr.decode("utf-8", "replace"), host=self.name)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def put(self, local_path: str, remote_path: str) -> None:
        shutil.copyfile(local_path, remote_path)

    def get(self, remote_path: str, local_path: str) -> None:
        shutil.copyfile(remote_path, local_path)

    def read_from(self, path: str, offset: int) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""
