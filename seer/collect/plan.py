"""What a collection still has to do: work items, shards, resume, and profiling choice.

A work item is one (shape, math mode, algorithm). The plan is the grid's items minus the
keys already in the store (resume is an anti-join), grouped by shape so that each shape's
tensors are allocated once. ``--shard i/n`` keeps every n-th shape of the grid ordered by
``shape_id``, so shards are disjoint, balanced, and stable as the grid is re-generated.
"""

from __future__ import annotations

import math as _math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from seer.algorithms import REGISTRY, is_sparse
from seer.collect.protocol import ShapeWork
from seer.errors import InputError
from seer.hardware.gpus import GPUSpec
from seer.layers.grids import GridShape
from seer.layers.shapes import ConvShape
from seer.layers.sparsity import DEFAULT_PATTERN

@dataclass
class CollectOptions:
    """Everything ``seer collect`` was asked to do (see ``seer collect --help``)."""

    gpu: GPUSpec  # the GPU named by --gpu; the detected device must be this one
    shapes: list[GridShape]
    maths: list[str]
    algos: list[str]
    dataset_dir: Path
    shard_index: int = 1
    shard_count: int = 1
    profile_shapes: int | None = None  # None: every shape; 0: no profiling
    workspace_cap_bytes: int = 8 * 2**30
    budget_ms: float = 10.0
    min_reps: int = 5
    max_reps: int = 50
    min_burst_ms: float = 1.0
    energy_s: float = 0.0  # window of the energy reading per run (seer.gpu.energy); 0: none
    item_timeout_s: float = 300.0
    ncu: str | None = None
    profile_chunk_items: int = 150
    max_profile_kernels: int = 256
    ncu_metric_set: str = "core"
    ncu_replay: str = "kernel"
    ncu_cache_control: str = "all"
    retry: tuple[str, ...] = ()
    seed: int = 0
    keep_ncu_csv: bool = False
    stop_after_s: float | None = None  # stop cleanly once this much time has passed
    census: bool = False  # only cuDNN's support and workspace answers; nothing runs
    # Input sparsity levels to measure each layer at (0: dense, as before), and the patterns
    # of the zeros (seer.layers.sparsity); a level above 0 is a shape of its own per pattern.
    sparsity: tuple[float, ...] = (0.0,)
    sparsity_patterns: tuple[str, ...] = (DEFAULT_PATTERN,)
    argv: list[str] = field(default_factory=list)


#: Tensors larger than this share of device memory are not attempted: cuDNN needs room
#: for its workspace and the reference check besides input, filter and output.
MEMORY_SHARE = 0.8


def parse_shard(text: str, option: str = "--shard") -> tuple[int, int]:
    """Parse ``i/n`` (1-based) as given to ``option`` (``--shard``, ``--worker``)."""
    field = option.lstrip("-")
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise InputError(f"{option} must look like i/n (e.g. 2/8), got {text!r}", field=field) from None
    if count < 1 or not 1 <= index <= count:
        raise InputError(f"{option} {text}: need 1 <= i <= n", field=field)
    return index, count


def shard(shapes: Sequence[GridShape], index: int, count: int) -> list[GridShape]:
    """Shard ``index`` of ``count`` (1-based): every count-th shape by shape_id."""
    ordered = sorted(shapes, key=lambda gs: gs.shape.shape_id)
    return ordered[index - 1::count]


def fits_in_memory(shape: ConvShape, memory_bytes: int) -> bool:
    return shape.tensor_bytes <= MEMORY_SHARE * memory_bytes


def build_plan(shapes: Iterable[GridShape], maths: Sequence[str], algos: Sequence[str],
               done: set[tuple], sparsity: Sequence[float] = (0.0,),
               patterns: Sequence[str] = (DEFAULT_PATTERN,)) -> list[ShapeWork]:
    """Pending work per shape, in grid order; keys in ``done`` are skipped, and so is an
    algorithm with one code path under any math mode but its own (its runs stand for all).

    Each layer is measured at every level of ``sparsity``: 0 is the dense layer, as before;
    a level above 0 is a shape of its own per pattern of ``patterns``, right after its layer
    (:class:`ShapeWork`), on which the forward's algorithms run. The sparse algorithms
    (:data:`seer.algorithms.SPARSE_ALGORITHMS`) run on sparse shapes only, and the backward
    passes on dense ones only.
    """
    registry = {a.name: a for a in REGISTRY}
    one_math = {name: a.one_math for name, a in registry.items()}  # the census's item is no algorithm
    dense_algos = [a for a in algos if not is_sparse(a)]
    sparse_algos = [a for a in algos if a not in registry or registry[a].pass_ == "fwd"]
    plan = []
    for gs in shapes:
        for level in sparsity:
            variants = [ShapeWork(gs.shape, gs.grid)] if not level else [
                ShapeWork(gs.shape, gs.grid, sparsity=level, pattern=p) for p in patterns]
            for work in variants:
                sid = work.shape_id
                items = [(m, a) for m in maths for a in (sparse_algos if level else dense_algos)
                         if one_math.get(a) in (None, m) and (sid, m, a) not in done]
                if items:
                    plan.append(work.with_items(items))
    return plan


def shard_shape_ids(options: CollectOptions) -> set[str]:
    """Every ``shape_id`` the plan of ``options``' shard can hold, sparse shapes and their dense
    layers': the records a collection of the shard reads (on a dataset of a million runs,
    decoding every record was most of each shard's start)."""
    o = options
    every = build_plan(shard(o.shapes, o.shard_index, o.shard_count), o.maths, o.algos, set(),
                       o.sparsity, o.sparsity_patterns)
    return {w.shape_id for w in every} | {w.dense_shape_id for w in every}


def without(plan: Sequence[ShapeWork], keys: set[tuple]) -> list[ShapeWork]:
    """The plan less the items whose run key is in ``keys``; shapes left with none drop out."""
    out = []
    for work in plan:
        items = [(m, a) for m, a in work.items if (work.shape_id, m, a) not in keys]
        if items:
            out.append(work.with_items(items))
    return out


def take_items(plan: Sequence[ShapeWork], limit: int) -> tuple[list[ShapeWork], list[ShapeWork]]:
    """Whole shapes from the front of the plan, up to about ``limit`` items (at least one
    shape), and the rest."""
    taken, count = [], 0
    for i, work in enumerate(plan):
        if taken and count + len(work.items) > limit:
            return taken, list(plan[i:])
        taken.append(work)
        count += len(work.items)
    return taken, []


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
        strata.setdefault((gs.grid, gs.shape.dims, gs.shape.kernel_h, gs.shape.kernel_w, gs.shape.stride_w), []).append(gs)
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
        strata.setdefault((gs.grid, gs.shape.dims, gs.shape.kernel_h, gs.shape.kernel_w, gs.shape.stride_w), []).append(gs)
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
