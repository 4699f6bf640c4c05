"""The dataset's tidy tables on disk: one Apache Parquet file per grid, in a folder per table.

A table such as ``data/h100/measurements/`` holds ``<grid>.parquet`` for every grid it has
rows of (the grid's name percent-encoded where a character could not stand in a file name).
A new collection of one grid adds or changes that grid's file only, and a part whose rows
did not change is not written again, so a rebuild leaves the other files byte-identical
(Parquet's bytes name the pyarrow version that wrote them, so equal content, not equal
bytes, is what decides). Parquet keeps each column's type, and a reader asks for the
columns it needs only.

The parts are read back in the order of their grids' names, which is the order
:func:`write_parts` sorts the rows into, so a table reads back exactly as it was written.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote, unquote

import pandas as pd

from seer.errors import InputError
from seer.output import AtomicOutput

SUFFIX = ".parquet"
# zstd at this level: about the size of gzip -9 CSV with full precision, and fast to read.
COMPRESSION = {"compression": "zstd", "compression_level": 9}


def part_name(grid: str) -> str:
    """The file name of ``grid``'s part: safe on every file system, and reversible."""
    return quote(grid, safe="") + SUFFIX


def part_grid(path: Path) -> str:
    return unquote(path.name[: -len(SUFFIX)])


def parts(directory: str | Path) -> list[Path]:
    """The table's part files, in the order of their grids."""
    directory = Path(directory)
    found = [p for p in directory.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")]
    return sorted(found, key=part_grid)


def digest(directory: str | Path) -> str:
    """SHA-256 of the table: of each part's name and bytes, in order (what a model card records)."""
    whole = hashlib.sha256()
    for path in parts(directory):
        whole.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return whole.hexdigest()


def write_parts(frame: pd.DataFrame, directory: str | Path, grids: pd.Series | None = None) -> pd.DataFrame:
    """Write ``frame`` as one part per grid into ``directory``; return it in the order it reads back.

    ``grids`` gives each row's grid where ``frame`` has no ``grid`` column (the kernel tables,
    whose rows belong to a shape and so to its grid). A part whose content is unchanged is
    left as it is; parts of grids no longer in ``frame`` are removed, and the folder too
    where ``frame`` has no rows. Each part is written to a temporary file and renamed, so a
    reader never sees half a part.
    """
    directory = Path(directory)
    if frame.empty:  # no rows, no table: a stale folder from an earlier build goes
        if directory.is_dir():
            shutil.rmtree(directory)
        return frame
    directory.mkdir(parents=True, exist_ok=True)
    keys = (frame["grid"] if grids is None else pd.Series(grids, index=frame.index)).astype(str)
    order = keys.sort_values(kind="stable").index
    frame, keys = frame.loc[order].reset_index(drop=True), keys.loc[order].reset_index(drop=True)
    wanted = set()
    for grid, rows in frame.groupby(keys.to_numpy(), sort=True):
        path = directory / part_name(grid)
        wanted.add(path.name)
        part = rows.reset_index(drop=True)
        if path.is_file() and _same_content(path, part):
            continue
        with AtomicOutput(path, binary=True) as handle:
            part.to_parquet(handle, index=False, **COMPRESSION)
    for stale in parts(directory):
        if stale.name not in wanted:
            stale.unlink()
    return frame


def _same_content(path: Path, part: pd.DataFrame) -> bool:
    try:
        return pd.read_parquet(path).equals(part)
    except Exception:  # a damaged or foreign file: written again
        return False


def read_parts(directory: str | Path, columns: Iterable[str] | None = None,
               check: Callable[[pd.DataFrame, Path], None] | None = None) -> pd.DataFrame:
    """The table in ``directory``: its parts' ``columns`` (all if None), one frame.

    ``check(part, path)`` sees each part before they are joined, so that what it reports
    names the part. Raises InputError naming the part for a missing folder, no parts, a
    part that is not Parquet or is damaged, and a part that lacks a needed column.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError("no such table folder" if not directory.exists() else "not a folder of Parquet parts",
                         path=directory)
    files = parts(directory)
    if not files:
        raise InputError(f"no {SUFFIX} parts in the table folder", path=directory)
    columns = None if columns is None else list(columns)
    import pyarrow.parquet as pq  # noqa: PLC0415 - pandas' engine, loaded by the first read

    frames = []
    for path in files:
        try:
            schema = pq.read_schema(path)
            missing = [] if columns is None else [c for c in columns if c not in schema.names]
            if missing:
                raise InputError("missing from the part's columns"
                                 + (f" (and {', '.join(missing[1:])})" if missing[1:] else ""),
                                 path=path, field=missing[0])
            frame = pd.read_parquet(path, columns=columns)
        except InputError:
            raise
        except Exception as exc:  # pyarrow's errors for a file that is not Parquet, cut short or damaged
            raise InputError(f"cannot be read as Parquet ({' '.join(str(exc).split()) or type(exc).__name__})",
                             path=path) from None
        if check is not None:
            check(frame, path)
        frames.append(frame)
    if columns is None:
        first = list(frames[0].columns)
        for path, frame in zip(files, frames):
            if list(frame.columns) != first:
                other = next(iter(set(first) ^ set(frame.columns)), None)
                raise InputError("its columns differ from the other parts'", path=path, field=other)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
