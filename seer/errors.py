"""Exceptions that the command line turns into one clear sentence and an exit code.

Library code raises these; only :mod:`seer.cli` prints them. Anything else that escapes
is a bug in seer and keeps its traceback.
"""

from __future__ import annotations

import errno
from pathlib import Path

#: Exit codes: 2 for bad input (like argparse's usage errors), 1 for an environment that
#: cannot do the job (no GPU, no ncu, no cuDNN, unknown GPU name).
EXIT_INPUT = 2
EXIT_ENVIRONMENT = 1
EXIT_INTERRUPTED = 130
#: A closed pipe on standard output: what a shell reports for a tool stopped by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13


class SeerError(Exception):
    """Base class: a problem the user can fix, reported without a traceback."""

    exit_code = EXIT_ENVIRONMENT


class InputError(SeerError):
    """A malformed input file or value, located by file, line and field.

    Parameters
    ----------
    message : str
        What is wrong and, where possible, what was expected.
    path : str or Path, optional
        The file that holds the mistake.
    line : int, optional
        1-based line number in ``path``.
    field : str, optional
        Name of the offending field (e.g. ``out_width``).
    """

    exit_code = EXIT_INPUT

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class EnvironmentProblem(SeerError):
    """The machine cannot do the job: no GPU, no ncu, no cuDNN, wrong GPU."""

    exit_code = EXIT_ENVIRONMENT


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, cut at ``limit`` characters: for a message that
    quotes another library's error."""
    return " ".join(str(exc).split())[:limit]


def import_failed(package: str, exc: BaseException, fix: str) -> EnvironmentProblem:
    """One sentence for an optional dependency that is missing or installed but broken (a
    torchvision built for another torch fails with a RuntimeError, not an ImportError)."""
    if isinstance(exc, ModuleNotFoundError):
        return EnvironmentProblem(f"{package} is not installed: {fix}")
    return EnvironmentProblem(f"{package} is installed but fails to import ({type(exc).__name__}: "
                              f"{one_line(exc, 200)}): {fix}")


#: What an OSError means to someone writing files, by errno.
_OS_REASONS = {errno.ENOENT: "no such folder", errno.ENOSPC: "no space left on the device",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.EROFS: "read-only file system", errno.ENAMETOOLONG: "file name too long",
               errno.EISDIR: "is a directory", errno.ENOTDIR: "a part of the path is not a folder",
               errno.EDQUOT: "disk quota exceeded"}


def os_reason(exc: OSError) -> str:
    """Why a write failed, in a few words: the errno's plain meaning, else the system's text."""
    return _OS_REASONS.get(exc.errno, exc.strerror or str(exc))
