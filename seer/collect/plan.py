"""What a collection still has to do: work items, shards, resume, and profiling choice.

A work item is one (shape, math mode, algorithm). The plan is the grid's items minus the
keys already in the store (resume is an anti-join), grouped by shape so that each shape's
tensors are allocated once. ``--shard i/n`` keeps every n-th shape of the grid ordered by
``shape_id``, so shards are disjoint, balanced, and stable as the grid is re-generated.
"""

from __future__ import annotations

import math as _math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from seer.errors import InputError
from seer.grids import GridShape
from seer.shapes import ConvShape

MATH_MODES = ("fma", "default")
RUN_KEY = ("shape_id", "math", "algo")
#: A census record answers for every algorithm of one (shape, math mode) at once.
CENSUS_KEY = ("shape_id", "math")
#: The ``algo`` of a census work item: all of them.
CENSUS_ITEM = "*"
#: Profiles are recorded per run and metric group (one ncu run per group).
GROUP_KEY = (*RUN_KEY, "group")
#: Tensors larger than this share of device memory are not attempted: cuDNN needs room
#: for its workspace and the reference check besides input, filter and output.
MEMORY_SHARE = 0.8


@dataclass
class ShapeWork:
    """The pending (math, algorithm) items of one shape."""

    shape: ConvShape
    grid: str
    items: list[tuple[str, str]] = field(default_factory=list)

    @property
    def shape_id(self) -> str:
        return self.shape.shape_id

    def to_record(self) -> dict:
        return {"shape": self.shape.as_dict(), "shape_id": self.shape_id, "grid": self.grid,
                "items": [list(item) for item in self.items]}

    def census_head(self, math_mode: str) -> dict:
        """The fields that name a census record of this shape and math mode (the worker's
        answers, or the orchestrator's record of a failure, follow them)."""
        return {"shape_id": self.shape_id, "math": math_mode, "grid": self.grid, **self.shape.as_dict()}

    @classmethod
    def from_record(cls, record: dict) -> "ShapeWork":
        return cls(ConvShape.from_mapping(record["shape"]), record["grid"],
                   [tuple(item) for item in record["items"]])


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``i/n`` (1-based) as given to ``--shard``."""
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise InputError(f"--shard must look like i/n (e.g. 2/8), got {text!r}", field="shard") from None
    if count < 1 or not 1 <= index <= count:
        raise InputError(f"--shard {text}: need 1 <= i <= n", field="shard")
    return index, count


def shard(shapes: Sequence[GridShape], index: int, count: int) -> list[GridShape]:
    """Shard ``index`` of ``count`` (1-based): every count-th shape by shape_id."""
    ordered = sorted(shapes, key=lambda gs: gs.shape.shape_id)
    return ordered[index - 1::count]


def parse_math(text: str) -> list[str]:
    modes = [m.strip().lower() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MATH_MODES]
    if bad or not modes:
        raise InputError(f"unknown math mode {', '.join(bad) or text!r}; use fma, default or fma,default",
                         field="math")
    return modes


def fits_in_memory(shape: ConvShape, memory_bytes: int) -> bool:
    return shape.tensor_bytes <= MEMORY_SHARE * memory_bytes


def build_plan(shapes: Iterable[GridShape], maths: Sequence[str], algos: Sequence[str],
               done: set[tuple]) -> list[ShapeWork]:
    """Pending work per shape, in grid order; keys in ``done`` are skipped."""
    plan = []
    for gs in shapes:
        sid = gs.shape.shape_id
        items = [(m, a) for m in maths for a in algos if (sid, m, a) not in done]
        if items:
            plan.append(ShapeWork(gs.shape, gs.grid, items))
    return plan


def select_evenly(shapes: Sequence[GridShape], count: int) -> list[GridShape]:
    """``count`` shapes that cover the grid evenly, deterministically.

    Shapes are stratified by (grid, kernel width, stride); each stratum gets a share
    proportional to its size (largest remainders), and within a stratum the picks are
    evenly spaced along the shapes ordered by analytic FLOPs, so small and large layers
    are both represented.
    """
    if count >= len(shapes):
        return list(shapes)
    if count <= 0:
        return []
    strata: dict[tuple, list[GridShape]] = {}
    for gs in shapes:
        strata.setdefault((gs.grid, gs.shape.kernel_width, gs.shape.stride), []).append(gs)
    total = len(shapes)
    quotas = {k: count * len(v) / total for k, v in strata.items()}
    taken = {k: int(_math.floor(q)) for k, q in quotas.items()}
    leftover = count - sum(taken.values())
    for k in sorted(quotas, key=lambda k: (quotas[k] - taken[k], str(k)), reverse=True)[:leftover]:
        taken[k] += 1
    chosen = []
    for key, members in strata.items():
        n = taken[key]
        if n == 0:
            continue
        ordered = sorted(members, key=lambda gs: (gs.shape.flops, gs.shape.shape_id))
        step = len(ordered) / n
        chosen.extend(ordered[int(step * (i + 0.5))] for i in range(n))
    return interleave_strata(chosen)


def interleave_strata(shapes: Sequence[GridShape]) -> list[GridShape]:
    """Reorder so that every prefix covers the strata evenly (round-robin by stratum share).

    A collection stopped part-way (time limit, Ctrl-C) then still covers the whole grid.
    Within a stratum the order is by analytic FLOPs, taken from the middle outwards in
    evenly spaced steps, so a prefix also spans small and large layers.
    """
    strata: dict[tuple, list[GridShape]] = {}
    for gs in shapes:
        strata.setdefault((gs.grid, gs.shape.kernel_width, gs.shape.stride), []).append(gs)
    keyed = []
    for members in strata.values():
        ordered = sorted(members, key=lambda gs: (gs.shape.flops, gs.shape.shape_id))
        n = len(ordered)
        for rank, index in enumerate(_spread_order(n)):
            keyed.append(((rank + 0.5) / n, ordered[index].shape.shape_id, ordered[index]))
    return [gs for _, _, gs in sorted(keyed, key=lambda t: (t[0], t[1]))]


def _spread_order(n: int) -> list[int]:
    """0..n-1 in van der Corput order: each prefix is spread evenly over the range."""
    if n <= 0:
        return []
    bits = max(1, (n - 1).bit_length())
    order = []
    for i in range(1 << bits):
        j = int(format(i, f"0{bits}b")[::-1], 2)
        if j < n:
            order.append(j)
    return order
