"""Merging the raw records of shards run apart (SLURM array tasks, other machines) into one folder.

A source is a folder with a ``raw/`` subfolder: a dataset (``data/<gpu>``) of ``seer collect``
or an output folder of ``seer profile-network``. Its record files (``<kind>-<tag>.jsonl``,
plain, ``.gz`` or ``.xz``) are copied into the target's ``raw/`` under the same name; shards
name their files by tag, so they never collide. A name in both with other content is
compared: where one is the other cut short (a shard that went on writing since), the longer
is kept; anything else is the file of another writer that used the same tag (lent machines
often share a host name), copied beside it as ``<kind>-<tag>-merged-<hash>.jsonl``, so that
merging it again finds it there. A packed file
(``<kind>.<n>.jsonl.xz``) is copied as ``<kind>-merged-<hash>.jsonl.xz``, a name the store
reads and that cannot overwrite the target's own packs. ``sessions.jsonl`` is appended line by line.

Only complete records are copied: a torn last line stays behind. Every file is written under a
temporary name and renamed into place. As with ``seer parse --pack``, run it only when no
collection writes to the target.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Sequence

from seer.collect.store import DAMAGED_COMPRESSED, OPENERS, SESSIONS_FILE, complete_length, set_aside_torn_tail
from seer.errors import InputError
from seer.output import AtomicOutput

#: ``<kind>-<tag>.jsonl``, as :class:`seer.collect.store.RunStore` names a writer's file.
_LOOSE = re.compile(r"(?P<kind>[A-Za-z0-9_]+)-(?P<tag>.+)\.jsonl(?P<suffix>\.gz|\.xz)?")
#: ``<kind>.<n>.jsonl.xz``, as ``pack`` names a kind's packs (``<kind>.jsonl.xz`` before they were numbered).
_PACKED = re.compile(r"(?P<kind>[A-Za-z0-9_]+)(?:\.\d+)?\.jsonl(?P<suffix>\.gz|\.xz)?")
_CHUNK = 1 << 20


@dataclass
class MergeResult:
    """What :func:`merge_raw` did."""

    written: list[Path] = field(default_factory=list)  # target files written, new or extended
    skipped: int = 0  # source files the target already held (the same, or longer)
    records: int = 0  # records in the files written
    sessions: int = 0  # session lines added to the target's sessions.jsonl
    kinds: set[str] = field(default_factory=set)  # record kinds in the sources
    ignored: list[Path] = field(default_factory=list)  # other files of the sources' raw/, not copied
    shared_tag: list[Path] = field(default_factory=list)  # source files of a writer whose tag another used


@dataclass
class _Version:
    """A record file's content: its complete records (``length`` bytes of a plain file, all of a compressed one)."""

    path: Path
    length: int | None

    @property
    def compressed(self) -> bool:
        return self.path.suffix in OPENERS

    def open(self):
        """Its content as a binary stream, decompressed and cut to the complete records."""
        if self.compressed:
            return OPENERS[self.path.suffix](self.path, "rb")
        return _Limited(open(self.path, "rb"), self.length)


class _Limited:
    """The first ``limit`` bytes of a binary file."""

    def __init__(self, handle, limit: int) -> None:
        self.handle, self.left = handle, limit

    def read(self, size: int) -> bytes:
        data = self.handle.read(min(size, self.left))
        self.left -= len(data)
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


def _version(path: Path) -> _Version:
    if path.suffix in OPENERS:
        return _Version(path, None)  # written whole (packed, or compressed afterwards): nothing torn to cut
    with open(path, "rb") as handle:
        return _Version(path, complete_length(handle))


def _read(stream, size: int) -> bytes:
    """``size`` bytes, fewer only at the end (a decompressing stream may return less)."""
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _chunks(version: _Version):
    """Its content in chunks; a damaged compressed file is an InputError naming it."""
    try:
        with version.open() as stream:
            while chunk := _read(stream, _CHUNK):
                yield chunk
    except DAMAGED_COMPRESSED as exc:
        raise InputError(f"damaged compressed file ({exc})", path=version.path) from None


def _compare(a: _Version, b: _Version) -> int | None:
    """0 where a and b hold the same records, 1 where a extends b, -1 where b extends a, None
    where neither."""
    fa, fb = _chunks(a), _chunks(b)
    try:
        while True:
            # Whole chunks but at the end: a short one is the last.
            ca, cb = next(fa, b""), next(fb, b"")
            if ca == cb:
                if not ca:
                    return 0
                continue
            if len(ca) < _CHUNK and cb.startswith(ca):  # a ended: b goes on
                return -1
            if len(cb) < _CHUNK and ca.startswith(cb):
                return 1
            return None
    finally:
        fa.close()
        fb.close()


def _digest(version: _Version) -> str:
    sha = hashlib.sha256()
    for chunk in _chunks(version):
        sha.update(chunk)
    return sha.hexdigest()[:12]


def _lines(path: Path) -> list[bytes]:
    """The complete, non-blank lines of a plain JSON-lines file (none if it is absent)."""
    if not path.exists():
        return []
    version = _version(path)
    with version.open() as stream:
        return [line for line in _read(stream, version.length).split(b"\n") if line.strip()]


def _count_records(version: _Version) -> int:
    return sum(chunk.count(b"\n") for chunk in _chunks(version))


def _write_atomic(target: Path, version: _Version | None = None, data: bytes | None = None) -> None:
    """``target`` from a version's bytes (as stored: compressed stays compressed) or from ``data``."""
    with AtomicOutput(target, binary=True) as out:
        if data is not None:
            out.write(data)
        else:
            with open(version.path, "rb") as source:
                shutil.copyfileobj(_Limited(source, version.length) if version.length is not None else source,
                                   out, _CHUNK)
    if version is not None:
        # The store reads loose files oldest first by modification time: a copy keeps its shard's.
        stat = version.path.stat()
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def merge_raw(sources: Sequence[str | Path], target: str | Path,
              kinds: Collection[str] | None = None) -> MergeResult:
    """Copy the record files of each source's ``raw/`` into ``target/raw/`` (see the module
    docstring); ``kinds``, if given, the only record kinds the target takes.

    Everything is checked before anything is written: a source without ``raw/``, the
    target among the sources, a record kind not taken or a conflicting file is an
    InputError and leaves the target as it was.
    """
    target_raw = Path(target) / "raw"
    result = MergeResult()
    # name in target/raw -> the version it will hold; absent: the target's own file, if any.
    chosen: dict[str, _Version] = {}
    session_files: list[Path] = []
    for source in map(Path, sources):
        raw = source / "raw"
        if not raw.is_dir():
            raise InputError("no raw/ folder here: give dataset folders (data/<gpu>) or output folders "
                             "with raw records", path=source)
        if target_raw.exists() and raw.samefile(target_raw):
            raise InputError("is the merge's target; give the target once, with --into or --gpu", path=source)
        for path in sorted(raw.iterdir()):
            if path.name == SESSIONS_FILE:
                session_files.append(path)
                continue
            loose, packed = _LOOSE.fullmatch(path.name), _PACKED.fullmatch(path.name)
            if not path.is_file() or not (loose or packed):
                result.ignored.append(path)  # torn fragments, ncu CSV files, ...
                continue
            kind = (loose or packed)["kind"]
            if kinds is not None and kind not in kinds:
                raise InputError(f"holds {kind} records, which this target does not take "
                                 f"({', '.join(kinds)})", path=path)
            result.kinds.add(kind)
            version = _version(path)
            if packed:
                # The target may hold its own pack of this kind: the copy takes a loose file's
                # name, by content, so that the same pack merged twice is one file.
                if (own := target_raw / path.name).exists() and _compare(version, _version(own)) == 0:
                    result.skipped += 1
                    continue
                name = f"{kind}-merged-{_digest(version)}.jsonl{packed['suffix'] or ''}"
            else:
                name = path.name
            held = chosen.get(name)
            if held is None and (target_raw / name).exists():
                held = _version(target_raw / name)
            order = None if held is None else _compare(version, held)
            if order is None and held is not None:
                # Neither extends the other: two writers used one tag. This one's records go beside
                # the other's, under a name by content (the store reads every file of raw/).
                result.shared_tag.append(path)
                tag, suffix = (loose["tag"], loose["suffix"]) if loose else ("pack", packed["suffix"])
                name = f"{kind}-{tag}-merged-{_digest(version)}.jsonl{suffix or ''}"
                held = chosen.get(name) or (_version(target_raw / name) if (target_raw / name).exists() else None)
                order = None if held is None else _compare(version, held)
            if held is None or order == 1:
                chosen[name] = version
            else:
                result.skipped += 1
    # The target's sessions first, then each source's, each line once.
    lines = _lines(target_raw / SESSIONS_FILE)
    seen = set(lines)
    for path in session_files:
        for line in _lines(path):
            if line not in seen:
                seen.add(line)
                lines.append(line)
                result.sessions += 1

    # Read through once more before writing: a damaged compressed file is refused here.
    result.records = sum(_count_records(version) for version in chosen.values())

    target_raw.mkdir(parents=True, exist_ok=True)
    for name, version in chosen.items():
        _write_atomic(target_raw / name, version)
        result.written.append(target_raw / name)
    if result.sessions:
        set_aside_torn_tail(target_raw / SESSIONS_FILE)  # its torn line, left out above, is kept aside
        _write_atomic(target_raw / SESSIONS_FILE, data=b"".join(line + b"\n" for line in lines))
    return result
