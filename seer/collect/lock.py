"""One collection at a time per shard of a job in a data folder, and a folder it can write.

Two collections of the same shard into one folder would both time every item, and on
one GPU skew each other's timings. :class:`CollectionLock` holds an exclusive ``flock`` on
``raw/collect-<job>-<i>of<n>.lock`` for the whole run (the job: its grids, and whether it is a
census; a collection of other grids writes files of its own and runs beside it). The kernel
drops the lock when the process dies (kill -9 included), so no stale lock outlives its
holder. The file names who holds it, so the second run says who to wait for. Across hosts
the lock holds where the file system honours ``flock`` (local disks; NFSv4 maps it to a
byte-range lock); where it does not, the run goes on with a warning. Taking the lock also
shows, before the first item is timed, that the folder can be written: a read-only file
system or a full disk is one sentence.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
from pathlib import Path

from seer.collect.store import shard_name
from seer.errors import EnvironmentProblem, os_reason

try:
    import fcntl
except ImportError:  # not POSIX: no lock, only the writability check
    fcntl = None

#: Free space a collection needs to start: a few records' worth, so that a full disk is
#: found before the first item is timed rather than when its row is written.
MIN_FREE_BYTES = 16 << 20

log = logging.getLogger(__name__)

def _cannot_write(folder: Path, exc: OSError) -> EnvironmentProblem:
    return EnvironmentProblem(f"{folder}: cannot write the collection's records there: {os_reason(exc)}; "
                              "nothing was collected")


class CollectionLock:
    """Context manager: this process is the only collection of ``shard`` of ``job`` writing ``raw_dir``.

    ``holder`` (command, start time) is written into the lock file for whoever comes next.
    Raises :class:`EnvironmentProblem` in one sentence when another run holds the lock, or
    when the folder cannot be written."""

    def __init__(self, raw_dir: Path, shard: tuple[int, int], holder: dict, job: str = "") -> None:
        self.raw_dir = Path(raw_dir)
        self.path = self.raw_dir / f"collect-{shard_name(*shard, job)}.lock"
        self.holder = {"pid": os.getpid(), "host": socket.gethostname(), **holder}
        self._fd: int | None = None

    def __enter__(self) -> CollectionLock:
        try:
            self.raw_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _cannot_write(self.raw_dir, exc) from None
        try:
            self._lock(fd)
            free = shutil.disk_usage(self.raw_dir).free
            if free < MIN_FREE_BYTES:
                raise OSError(errno.ENOSPC, f"no space left on the device ({free / 2**20:.1f} MiB free)")
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps(self.holder) + "\n").encode())
            os.fsync(fd)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                raise _cannot_write(self.raw_dir, exc) from None
            raise
        self._fd = fd
        return self

    def _lock(self, fd: int) -> None:
        if fcntl is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EnvironmentProblem(f"{self.raw_dir.parent}: another collection of this shard is running "
                                     f"({self._who()}); wait for it to finish or stop it") from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            # A file system without flock: the run goes on, as it did before there was a lock.
            log.warning("%s: the file system cannot lock files (%s); make sure no other collection of "
                        "this shard writes here", self.raw_dir, exc.strerror)

    def _who(self) -> str:
        try:
            holder = json.loads(self.path.read_text())
            return (f"pid {holder['pid']} on {holder['host']} since {holder.get('started_at', '?')}: "
                    f"{holder.get('command', '?')}")
        except (OSError, ValueError, KeyError, TypeError):
            return "its details are not written yet"

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays, for the next run to lock
            self._fd = None
