"""Append-only storage of collection results: nothing finished is ever lost.

Each kind of record (``timing``, ``profiles``, ``kernels``, ``census``) goes to JSON-lines files under
``data/<gpu>/raw/``: one file per writer (``<kind>-<tag>.jsonl``, the tag naming host and
shard, so parallel shards never share a file), one finished record per line, flushed and
fsync'ed before the next is started. A record is complete once its newline is written.

A crash mid-write leaves a torn last line. Readers, which may run while a collection
writes, skip it and change nothing; the file's writer, when it opens the file to append,
moves the fragment to ``<file>.torn`` and truncates the file to its last complete record,
so that the torn item is simply measured again and the fragment never ends up mid-file.
Readers keep the last record of each key, so a retried run supersedes the failed one.
``pack`` merges a kind's loose files into the next numbered, sorted, xz-compressed pack
``<kind>.<n>.jsonl.xz`` for committing, leaving earlier packs as they are (a new collection
adds a file; committed ones are never rewritten); run it only when no collection is writing.
Readers take plain, ``.gz`` and ``.xz`` files alike.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import lzma
import os
import re
import socket
import zlib
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

import pandas as pd

from seer.algorithms import current_revision, stamp_revision
from seer.errors import InputError
from seer.gc_pause import collector_paused
from seer.metrics import GROUP_COLUMNS, METRICS
from seer.schema import CENSUS_DEFAULTS, GROUP_KEY

try:
    import fcntl
except ImportError:  # not POSIX: sessions are logged without a lock
    fcntl = None

KINDS = ("timing", "profiles", "kernels", "census")
#: Per kind, fields that its records gained later and the value an older record stands for:
#: readers fill them in, so that keys hold them; the files keep what was written.
FIELD_DEFAULTS: dict[str, dict[str, object]] = {"census": CENSUS_DEFAULTS}
SESSIONS_FILE = "sessions.jsonl"
#: Suffix of the file beside a record file that keeps the torn fragments cut from it.
TORN_SUFFIX = ".torn"
#: Compressed suffixes a record file may have, and their openers.
OPENERS = {".gz": gzip.open, ".xz": lzma.open}
#: xz preset of packed files: well below gzip's best on these records, which keeps the committed
#: raw data small; ``PRESET_EXTREME`` gains a little more at several times the time.
PACK_PRESET = 9
#: What reading a damaged ``.gz`` or ``.xz`` raises: not what its suffix says, cut short, or a
#: corrupt stream (``seer.dataset.build`` reads its compressed tables against the same list).
DAMAGED_COMPRESSED = (gzip.BadGzipFile, lzma.LZMAError, EOFError, zlib.error)

log = logging.getLogger(__name__)


def _file_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


def shard_name(shard_index: int = 1, shard_count: int = 1, job: str = "") -> str:
    """``<i>of<n>``, or ``<job>-<i>of<n>``: one shard of one job, as its files and its lock name it."""
    return f"{_file_safe(job)}-{shard_index}of{shard_count}" if job else f"{shard_index}of{shard_count}"


def default_tag(shard_index: int = 1, shard_count: int = 1, job: str = "") -> str:
    """``<host>-<shard>`` (:func:`shard_name`): the name of one writer's files in a raw folder.
    Collections of different grids (``job``) into one folder at once each write their own
    (:func:`job_name`)."""
    host = _file_safe(socket.gethostname()) or "host"
    return f"{host}-{shard_name(shard_index, shard_count, job)}"


#: Longest job name spelt out in a file name; a longer one is cut and keeps a digest of the rest.
MAX_JOB_NAME = 64


def job_name(grids: Iterable[str]) -> str:
    """The grids a collection plans, as its files and its lock name them: ``general``,
    ``networks+test-set-ii``; a list too long for a file name, its start and a digest."""
    name = "+".join(sorted({_file_safe(g) for g in grids}))
    if len(name) <= MAX_JOB_NAME:
        return name
    return f"{name[:MAX_JOB_NAME - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _open_text(path: Path):
    # Lines end at "\n" alone, as the writer's repair sees them; undecodable bytes (a
    # crash's garbage) fail as a corrupt record, with file and line.
    opener = OPENERS.get(path.suffix, open)
    return opener(path, "rt", newline="", errors="replace")


#: A record's shape, read without decoding the record.
_SHAPE_ID = re.compile(r'"shape_id":\s*"([^"]*)"')


def read_jsonl(path: Path, shape_ids: Collection[str] | None = None) -> list[dict]:
    """Records of one JSON-lines file (plain, gzip or xz); a torn last line is skipped.

    The last line is torn when no newline ends it, or when it does not parse; anything
    else that does not parse is reported with file and line. The file is not changed.
    With ``shape_ids``, only the records of those shapes are decoded and returned (a
    line whose shape is another is not looked at further).
    """
    try:
        with _open_text(path) as handle:
            *lines, _unfinished = handle.read().split("\n")
    except DAMAGED_COMPRESSED as exc:  # a packed file cut short or not what its suffix says
        raise InputError(f"damaged compressed file ({exc})", path=path) from None
    with collector_paused():
        return _decoded(lines, path, shape_ids)


def _decoded(lines: list[str], path: Path, shape_ids: Collection[str] | None = None) -> list[dict]:
    """The records of ``lines`` (a file's complete lines), by :func:`read_jsonl`'s rule."""
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if shape_ids is not None:
            found = _SHAPE_ID.search(line)
            if found is not None and found.group(1) not in shape_ids:
                continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):  # torn write of a crashed writer: the record never finished
                break
            raise InputError(f"corrupt record ({exc.msg})", path=path, line=number) from None
    return records


def _previous_newline(handle, end: int, chunk: int = 1 << 16) -> int:
    """Offset of the last newline before ``end`` in a binary file, or -1."""
    while end > 0:
        start = max(0, end - chunk)
        handle.seek(start)
        found = handle.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def complete_length(handle) -> int:
    """Bytes of a binary JSON-lines file up to the end of its last complete record,
    by the rule of :func:`read_jsonl` (reading only the file's end)."""
    last = _previous_newline(handle, handle.seek(0, os.SEEK_END))
    if last < 0:
        return 0
    before = _previous_newline(handle, last)
    handle.seek(before + 1)
    line = handle.read(last - before - 1).decode(errors="replace")
    try:
        if line.strip():
            json.loads(line)
    except json.JSONDecodeError:
        return before + 1
    return last + 1


def set_aside_torn_tail(path: Path) -> int:
    """Move a torn last line of ``path`` to ``<path>.torn`` and cut it off; bytes moved.

    Only for the file's writer: a reader must never change a file a collection may be
    writing. The fragment is saved (fsync'ed) before the file is truncated, so a crash
    in between loses nothing.
    """
    try:
        handle = open(path, "r+b")
    except FileNotFoundError:
        return 0
    with handle:
        size = handle.seek(0, os.SEEK_END)
        keep = complete_length(handle)
        if keep == size:
            return 0
        handle.seek(keep)
        torn = handle.read()
        with open(path.with_name(path.name + TORN_SUFFIX), "ab") as aside:
            aside.write(torn if torn.endswith(b"\n") else torn + b"\n")
            aside.flush()
            os.fsync(aside.fileno())
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning("%s: set aside a torn last line (%d bytes) in %s%s", path, size - keep, path.name, TORN_SUFFIX)
    return size - keep


class RunStore:
    """The raw results of one dataset directory (``data/<gpu>``).

    Parameters
    ----------
    dataset_dir : Path
        ``data/<gpu>``; records live in its ``raw/`` subfolder.
    tag : str
        Names this writer's files; defaults to host and shard 1 of 1.
    kinds : sequence of str
        The record kinds this store holds (default :data:`KINDS`, a collection's).
    """

    def __init__(self, dataset_dir: str | Path, tag: str | None = None, kinds: Sequence[str] = KINDS) -> None:
        self.kinds = tuple(kinds)
        self.dataset_dir = Path(dataset_dir)
        self.raw_dir = self.dataset_dir / "raw"
        self.tag = tag or default_tag()
        self._handles: dict[str, object] = {}

    # -- writing -----------------------------------------------------------------------
    def _handle(self, kind: str):
        if kind not in self._handles:
            self.raw_dir.mkdir(parents=True, exist_ok=True)
            path = self.raw_dir / f"{kind}-{self.tag}.jsonl"
            set_aside_torn_tail(path)  # this store is the file's only writer (one per tag)
            self._handles[kind] = open(path, "a", buffering=1)
        return self._handles[kind]

    def append(self, kind: str, records: Iterable[dict]) -> int:
        """Append finished records durably; returns how many were written. A run of seer's
        own kernels is stamped with the revision of the code that ran it
        (:func:`seer.algorithms.stamp_revision`)."""
        if kind not in self.kinds:
            raise ValueError(f"unknown record kind {kind!r}")
        handle = self._handle(kind)
        count = 0
        for record in records:
            record = stamp_revision(record)
            handle.write(json.dumps(record, separators=(",", ":"), default=_json_default) + "\n")
            count += 1
        if count:
            handle.flush()
            os.fsync(handle.fileno())
        return count

    def log_session(self, record: dict) -> None:
        """Append one line about a collection session (what ran, where, when).

        Every writer of the dataset (each shard) logs here: the lock keeps one writer's
        repair of a torn line from cutting another's line in progress.
        """
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        path = self.raw_dir / SESSIONS_FILE
        with open(path, "a") as handle:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
            set_aside_torn_tail(path)
            handle.write(json.dumps(record, default=_json_default) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------
    def packs(self, kind: str) -> list[Path]:
        """A kind's packed files, oldest first: the single packs of earlier versions
        (``<kind>.jsonl.gz``, then ``.xz``), then the numbered ones in order."""
        if not self.raw_dir.exists():
            return []
        single = [p for s in (".gz", ".xz") if (p := self.raw_dir / f"{kind}.jsonl{s}").exists()]
        numbered = {int(m.group(1)): p for p in self.raw_dir.glob(f"{kind}.*.jsonl.xz")
                    if (m := re.fullmatch(rf"{re.escape(kind)}\.(\d+)\.jsonl\.xz", p.name))}
        return single + [numbered[n] for n in sorted(numbered)]

    def files(self, kind: str) -> list[Path]:
        if not self.raw_dir.exists():
            return []
        suffixes = ("", *OPENERS)
        loose = [p for s in suffixes for p in self.raw_dir.glob(f"{kind}-*.jsonl{s}")]
        # Packed first, then loose files oldest first, so that later records come later.
        return self.packs(kind) + sorted(loose, key=lambda p: (p.stat().st_mtime, p.name))

    def records(self, kind: str, shape_ids: Collection[str] | None = None) -> list[dict]:
        """Every record of a kind (with ``shape_ids``, of those shapes), oldest first (by
        ``collected_at`` where all have one), with the kind's :data:`FIELD_DEFAULTS` where a
        record lacks them."""
        out: list[dict] = []
        for path in self.files(kind):
            out.extend(read_jsonl(path, shape_ids))
        defaults = FIELD_DEFAULTS.get(kind)
        if defaults:
            out = [r if defaults.keys() <= r.keys() else {**r, **{k: v for k, v in defaults.items() if k not in r}}
                   for r in out]
        if out and all("collected_at" in r for r in out):
            out.sort(key=lambda r: r["collected_at"] or "")  # stable: ties keep file order
        return out

    def read(self, kind: str, key: Sequence[str] | None = None,
             shape_ids: Collection[str] | None = None) -> pd.DataFrame:
        """All records of a kind as a frame (with ``shape_ids``, of those shapes); with
        ``key``, the last record of each key."""
        with collector_paused():  # the records, then their frame: see collector_paused
            frame = pd.DataFrame.from_records(self.records(kind, shape_ids))
        return frame if key is None else latest_records(frame, key)

    def sessions(self) -> list[dict]:
        path = self.raw_dir / SESSIONS_FILE
        return read_jsonl(path) if path.exists() else []

    def done_keys(self, kind: str, key: Sequence[str], skip_status: Iterable[str] | None = None,
                  status_column: str = "status", require: Mapping[str, object] | None = None) -> set[tuple]:
        """Keys already recorded: :func:`keys_done` of the kind's latest records."""
        return keys_done(self.read(kind, key), key, skip_status, status_column, require)

    # -- packing -----------------------------------------------------------------------
    def pack(self, kind: str, key: Sequence[str], sort_by: Sequence[str] | None = None) -> Path | None:
        """Merge a kind's loose files into the next numbered pack and delete them.

        Only for a store no collection is writing to. Earlier packs are never rewritten, so
        a new collection adds one file to a repository. Within the new pack the last record
        of a key wins, as in :meth:`read`, and a record equal to the packed one it would
        supersede is left out (collecting again what was already packed adds nothing); with
        ``sort_by`` the pack is ordered. Returns the new pack, or the latest one where
        nothing was loose (None if the kind has no files).
        """
        self.close()
        packs = self.packs(kind)
        loose = [p for p in self.files(kind) if p not in packs]
        if not loose:
            return packs[-1] if packs else None
        fields, defaults = list(key), FIELD_DEFAULTS.get(kind, {})
        packed: dict[tuple, dict] = {}
        for path in packs:
            for record in read_jsonl(path):
                packed[tuple(record.get(k, defaults.get(k)) for k in fields)] = record
        seen: dict[tuple, dict] = {}
        for path in loose:
            for record in read_jsonl(path):
                seen[tuple(record.get(k, defaults.get(k)) for k in fields)] = record
        merged = [r for k, r in seen.items() if packed.get(k) != r]
        if merged:
            order = list(sort_by or key)
            merged.sort(key=lambda r: tuple("" if r.get(k) is None else str(r.get(k)) for k in order))
            numbers = [int(m.group(1)) for p in packs if (m := re.search(r"\.(\d+)\.jsonl\.xz$", p.name))]
            target = self.raw_dir / f"{kind}.{max(numbers, default=0) + 1:03d}.jsonl.xz"
            tmp = target.with_suffix(".tmp")
            with lzma.open(tmp, "wb", preset=PACK_PRESET) as handle:
                for record in merged:
                    handle.write((json.dumps(record, separators=(",", ":"), default=_json_default) + "\n").encode())
            os.replace(tmp, target)
        for path in loose:
            path.unlink()
        return target if merged else (packs[-1] if packs else None)


def _json_default(value):
    # numpy scalars and paths reach the store from collectors; store them as plain JSON.
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} in a record")


#: Group name of profile and kernel records written before metrics were collected in
#: groups: each such record holds every core group's metrics at once.
ALL_GROUPS = "all"


def latest_records(frame: pd.DataFrame, key: Sequence[str]) -> pd.DataFrame:
    """The last record of each key (``frame`` oldest first, as the store reads it)."""
    if frame.empty:
        return frame
    return frame.drop_duplicates(subset=list(key), keep="last").reset_index(drop=True)


def keys_done(latest: pd.DataFrame, key: Sequence[str], skip_status: Iterable[str] | None = None,
              status_column: str = "status", require: Mapping[str, object] | None = None) -> set[tuple]:
    """Keys of ``latest`` (one record per key), less those whose status is to be retried and
    those whose record does not hold every ``require`` value (a record without the column
    does not)."""
    if latest.empty:
        return set()
    if skip_status is not None:
        latest = latest[~latest[status_column].isin(list(skip_status))]
    for column, value in (require or {}).items():
        latest = latest[latest[column] == value] if column in latest.columns else latest.iloc[:0]
    return set(latest[list(key)].itertuples(index=False, name=None))


def first_grids(history: pd.DataFrame) -> pd.Series:
    """The grid of each shape's oldest timing record, by shape_id (``history`` oldest first).

    A shape belongs to the grid that first timed it. A later command over another grid
    that holds it too (``--retry untraced`` over the network grids, say) times its runs
    again; its grid, and so its split, must not move with them.
    """
    if history.empty:
        return pd.Series(dtype=object)
    return history.drop_duplicates("shape_id", keep="first").set_index("shape_id")["grid"]


def recorded_columns(group: str) -> frozenset[str]:
    """Metric columns that a profile record of ``group`` (current, retired or ``all``) measured."""
    if group == ALL_GROUPS:
        return frozenset(m.column for m in METRICS)
    return GROUP_COLUMNS.get(group, frozenset())


def grouped_records(store: RunStore, kind: str) -> pd.DataFrame:
    """Every record of a profiling kind (``profiles``, ``kernels``) with its metric group;
    records from before metric groups belong to :data:`ALL_GROUPS`. Profiles of an earlier
    revision of seer's kernels (:func:`seer.algorithms.current_revision`) are left out: they
    profiled other code."""
    frame = store.read(kind)
    if frame.empty:
        return frame
    frame = frame[current_revision(frame)].reset_index(drop=True)
    if "group" not in frame.columns:
        frame["group"] = ALL_GROUPS
    frame["group"] = frame["group"].fillna(ALL_GROUPS)
    return frame


def profile_records(store: RunStore) -> pd.DataFrame:
    """Latest profile record per (run, metric group); older records count for all groups."""
    frame = grouped_records(store, "profiles")
    if frame.empty:
        return frame
    return frame.drop_duplicates(subset=list(GROUP_KEY), keep="last").reset_index(drop=True)
