"""The file protocol between ``seer collect`` (the orchestrator) and its GPU worker child.

The orchestrator writes a *plan file*: one :class:`ShapeWork` per line, a shape and its
pending (math mode, algorithm) items. The worker appends *events* to a results file, one
JSON object per line, each naming its kind in :data:`EVENT`:

``start``
    before each item (``shape_id``, ``math``, ``algo``): if the worker dies, the last
    ``start`` names the item that killed it;
``row``
    a timing result (``row``: the record to store);
``profiled``
    an item run once under ncu (``shape_id``, ``math``, ``algo``, ``status``);
``census``
    a batch of census answers (``records``); a census item's ``algo`` names every cuDNN
    algorithm of one pass at once (:func:`census_item`: :data:`CENSUS_ITEM` for the forward);
``done``
    the worker finished its plan (or stopped early as asked) and exits normally.

The tests' stand-in worker speaks the same protocol through these names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from seer.layers.shapes import ConvShape
from seer.layers.sparsity import sparse_shape_id
from seer.schema import RUN_KEY

#: The field that names an event's kind, and the kinds.
EVENT = "event"
START, ROW, PROFILED, CENSUS, DONE = "start", "row", "profiled", "census", "done"
EVENTS = (START, ROW, PROFILED, CENSUS, DONE)
#: The ``algo`` of a forward census item: every algorithm, answered at once.
CENSUS_ITEM = "*"


def census_item(pass_: str) -> str:
    """The ``algo`` of a census item of one pass: every cuDNN algorithm of ``pass_``, answered
    at once (``*`` for the forward, as before there were others; ``*bwd_data``, ...)."""
    return CENSUS_ITEM if pass_ == "fwd" else CENSUS_ITEM + pass_


def census_pass(item: str) -> str:
    """The pass a census item (:func:`census_item`) asks about."""
    if not item.startswith(CENSUS_ITEM):
        raise ValueError(f"{item!r} is not a census item")
    return item[len(CENSUS_ITEM):] or "fwd"


def finished_item(record: dict) -> tuple[str, str, str]:
    """The item (shape_id, math, algo) a stored record finishes: a run's own key, or for a
    census record (which names no algorithm) the census item of its pass."""
    algo = record["algo"] if "algo" in record else census_item(record.get("pass", "fwd"))
    return record["shape_id"], record["math"], algo


@dataclass
class ShapeWork:
    """The pending (math, algorithm) items of one shape: one line of a plan file.

    With ``sparsity`` above 0 the shape is the layer measured on inputs with that share of
    zeros, made in ``pattern`` (:mod:`seer.layers.sparsity`): a shape of its own, whose id
    hashes the dense layer's id, the level and the pattern
    (:func:`seer.layers.sparsity.sparse_shape_id`).
    """

    shape: ConvShape
    grid: str
    items: list[tuple[str, str]] = field(default_factory=list)
    sparsity: float = 0.0
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.sparsity and self.pattern is None:
            raise ValueError("a sparse shape needs its pattern")

    @property
    def dense_shape_id(self) -> str:
        """The id of the layer itself, whatever its input."""
        return self.shape.shape_id

    @property
    def shape_id(self) -> str:
        if not self.sparsity:
            return self.shape.shape_id
        return sparse_shape_id(self.shape.shape_id, self.sparsity, self.pattern)

    def sparse_fields(self) -> dict:
        """What a record of a sparse shape adds to a dense one's (nothing for a dense shape, whose
        records stay as they were before sparse shapes existed)."""
        if not self.sparsity:
            return {}
        return {"sparsity": self.sparsity, "sparsity_pattern": self.pattern, "dense_shape_id": self.dense_shape_id}

    def to_record(self) -> dict:
        return {"shape": self.shape.as_dict(), "shape_id": self.shape_id, "grid": self.grid,
                "items": [list(item) for item in self.items], **self.sparse_fields()}

    @classmethod
    def from_record(cls, record: dict) -> "ShapeWork":
        return cls(ConvShape.from_mapping(record["shape"]), record["grid"],
                   [tuple(item) for item in record["items"]], record.get("sparsity", 0.0),
                   record.get("sparsity_pattern"))

    def with_items(self, items: list[tuple[str, str]]) -> "ShapeWork":
        """The same shape (its sparsity included) with other items."""
        return ShapeWork(self.shape, self.grid, list(items), self.sparsity, self.pattern)

    def head(self, math_mode: str) -> dict:
        """The fields that name a record of this shape and math mode: the worker's census
        answers, or the orchestrator's record of a failure, follow them."""
        return {"shape_id": self.shape_id, "math": math_mode, "grid": self.grid, **self.shape.as_dict(),
                **self.sparse_fields()}


def write_plan(path: Path, plan: Iterable[ShapeWork]) -> None:
    path.write_text("".join(json.dumps(work.to_record()) + "\n" for work in plan))


def read_plan(path: str | Path) -> list[ShapeWork]:
    with open(path) as handle:
        return [ShapeWork.from_record(json.loads(line)) for line in handle if line.strip()]


def event_key(event: dict) -> tuple:
    """The run key (shape_id, math, algo) an event names."""
    return tuple(event[k] for k in RUN_KEY)


def start_event(shape_id: str, math_mode: str, algo: str) -> dict:
    return {EVENT: START, "shape_id": shape_id, "math": math_mode, "algo": algo}


def emitter(path: str | Path) -> Callable[[dict], None]:
    """A function that appends one event to the results file and flushes it at once."""
    handle = open(path, "a", buffering=1)

    def emit(event: dict) -> None:
        handle.write(json.dumps(event, separators=(",", ":")) + "\n")
        handle.flush()

    return emit


class EventReader:
    """Reads the events a worker has appended to a results file since the last call.

    A line is handed over only once its newline has arrived, so an event the worker is
    still writing is never parsed half-way.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._buffer = ""

    def new_events(self) -> list[dict]:
        with open(self.path) as handle:
            handle.seek(self._offset)
            chunk = handle.read()
            self._offset = handle.tell()
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split("\n")
        return [json.loads(line) for line in lines if line.strip()]
