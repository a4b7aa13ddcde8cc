"""The Local host: jobs run as detached subprocesses of this machine, files are plain copies."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import uuid

from ..paths import runs_dir
from .base import CommandFailed, Host, HostError, Result
from .room import no_room


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
        tmp = f"{remote_path}.part-{uuid.uuid4().hex[:8]}"   # as over SSH: readers never see a half-written file
        try:
            shutil.copyfile(local_path, tmp)
            os.replace(tmp, remote_path)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if exc.errno == errno.ENOSPC:
                where = os.path.dirname(remote_path) or "."
                raise HostError(no_room(self, where, os.path.getsize(local_path), os.path.basename(local_path))) \
                    from None
            raise

    def get(self, remote_path: str, local_path: str) -> None:
        tmp = f"{local_path}.part{os.getpid()}"   # whole or not at all: a full disk leaves no part that looks whole
        try:
            shutil.copyfile(remote_path, tmp)
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read_from(self, path: str, offset: int, limit: int | None = None) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(-1 if limit is None else limit)
        except FileNotFoundError:
            return b""
