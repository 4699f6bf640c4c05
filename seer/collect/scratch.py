"""Scratch folders of collection runs: plan, results and log files of the children.

Each run gets one folder under the temp directory and removes it when it ends, cleanly or
not. A run killed outright (SIGKILL, out of memory) cannot, so every new run first removes
the folders of this host's runs whose process is gone: the owner's host and pid are in
the folder's name.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from seer.collect.children import process_running
from seer.errors import EnvironmentProblem

PREFIX = "seer-collect-"


def _host() -> str:
    # No "-" in it, so that the pid after it is found unambiguously.
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def remove_stale() -> list[Path]:
    """Remove scratch folders of this host's runs whose process no longer exists; those removed.

    Folders of other hosts (a shared temp directory) and of other users are left alone.
    """
    owner = re.compile(rf"{re.escape(PREFIX + _host())}-(\d+)-")
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}{_host()}-*"):
        match = owner.match(path.name)
        if not match or not path.is_dir() or process_running(int(match.group(1))):
            continue
        try:
            if path.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


@contextmanager
def scratch_folder() -> Iterator[Path]:
    """A new scratch folder for this run, removed on leaving however that happens.

    Stale folders of dead runs are removed first.
    """
    remove_stale()
    try:
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{_host()}-{os.getpid()}-"))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot make a scratch folder in {tempfile.gettempdir()}: "
                                 f"{exc.strerror or exc}; point TMPDIR at a writable folder with space") from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
