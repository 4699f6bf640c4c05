"""One list of jobs shared by several processes of one host: each takes the next job no
other has taken, so a GPU that frees early takes more of the list.

A job is taken by an exclusive ``flock`` on ``DIR/<digest of its key>.claim``, held until the
job is finished (then the file says ``done``) or the process dies: the kernel drops the lock
with the process (kill -9 included), so a job left unfinished by a crash can be taken again,
by any process, up to :data:`ATTEMPTS` times in all; a job that kills every process that takes
it is not handed round for ever. The folder is local to one run (``--gpus`` makes a fresh
one), so what a rerun redoes is decided by the records, as always.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from seer.errors import EnvironmentProblem, os_reason

try:
    import fcntl
except ImportError:  # not POSIX: no lock to share a list by
    fcntl = None

#: Times one job is taken in all: a second try for a job whose process died, no third.
ATTEMPTS = 2


class JobClaims:
    """Claims on the jobs of one list in ``folder``, shared with the other processes given it."""

    def __init__(self, folder: Path) -> None:
        if fcntl is None:
            raise EnvironmentProblem("sharing a job list needs POSIX file locks (fcntl)")
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EnvironmentProblem(f"{self.folder}: cannot make the job claims' folder: {os_reason(exc)}") from None
        self._held: dict[str, int] = {}

    def _path(self, key: str) -> Path:
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".claim")

    def take(self, key: str) -> bool:
        """True if this process now holds ``key``: no other holds it, it is not done, and it
        has been taken fewer than :data:`ATTEMPTS` times."""
        if key in self._held:
            return True
        try:
            fd = os.open(self._path(key), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise EnvironmentProblem(f"{self.folder}: cannot write the job claims there: {os_reason(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:  # a file system without flock (some network ones)
            os.close(fd)
            raise EnvironmentProblem(f"{self.folder}: the file system cannot lock files ({os_reason(exc)}), so "
                                     "processes cannot share a job list there; give --claims a local folder") from None
        lines = os.pread(fd, 1 << 16, 0).decode(errors="replace").splitlines()
        if "done" in lines or sum(line.startswith("taken") for line in lines) >= ATTEMPTS:
            os.close(fd)  # releases the lock
            return False
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, f"taken {os.getpid()} {key}\n".encode())
        self._held[key] = fd
        return True

    def finish(self, key: str) -> None:
        """``key`` is done (recorded, or failed and recorded as such): no process takes it again."""
        fd = self._held.pop(key, None)
        if fd is None:
            return
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, b"done\n")
        os.close(fd)

    def close(self) -> None:
        """Let go of every claim still held (unfinished: another process may take it)."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()
