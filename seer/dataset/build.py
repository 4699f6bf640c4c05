"""From raw records to the tidy tables and splits, and the validated reading of those tables.

``build_dataset`` reads a dataset directory's raw records (timing, profiles, kernels,
census) and writes:

``measurements/``
    One row per (shape, math, algorithm): the timing, and, where the run was profiled,
    the rolled-up ncu metrics (time and traffic summed over the run's kernels, launch
    configuration, occupancy and waves from its main kernel).
``kernels/``, ``traced_kernels/``
    One row per profiled kernel: the evidence the run rows are derived from; one row per
    kernel name that a timed run launched (CUPTI traces).
``census/``
    Where a census was collected (``seer collect --census``): one row per (shape, math,
    algorithm) with cuDNN's answer before anything runs: supported or not, the workspace
    it asks for, and the heuristic's rank.

Each table is a folder of Parquet files, one per grid (:mod:`seer.dataset.tables`).
``train.xlsx``, ``test.xlsx``
    SEER's layout (:mod:`seer.dataset.excel`).
``Test-set-II.txt``, ``Test-set-II-times.csv``
    The held-out network layers in SEER's format and their measured times.
``provenance.json``
    GPU, driver, CUDA, cuDNN, ncu, commands, dates and counts (:mod:`seer.dataset.provenance`).

Every derived file depends on the raw records alone (a table part is written only when its
rows change, Excel files carry no dates), so a rebuilt dataset shows no change in git. The tables are read
back with :func:`read_measurements` and :func:`read_census`, which check them and report
a malformed file as one :class:`~seer.errors.InputError` naming file, line and column.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import (ALGORITHMS, ALL_ALGORITHMS, PASSES, REGISTRY, algorithm_names, canonical_kernel_name,
                             classify_kernel, current_revision, get_algorithm, heuristic_ranks, pass_of)
from seer.collect.records import stored_trace
from seer.collect.store import (DAMAGED_COMPRESSED, RunStore, first_grids, grouped_records, latest_records,
                                profile_records, recorded_columns)
from seer.dataset.excel import seer_sheets, write_excel
from seer.dataset.provenance import provenance
from seer.dataset.tables import read_parts, write_parts
from seer.gc_pause import collector_paused
from seer.errors import InputError
from seer.gpu.energy import ENERGY_FIELDS
from seer.hardware.gpus import GPUSpec
from seer.hardware.occupancy import blocks_per_sm, waves
from seer.layers.files import write_layers
from seer.layers.shapes import LAYER_COLUMNS, LAYER_FIELDS, SEER_FIELDS, frame_flops, layer_frame
from seer.metrics import (GROUP_COLUMNS, METRIC_SETS, METRICS, RUN_COLUMNS, columns_with_rollup, required_columns,
                          thread_flops)
from seer.schema import (CENSUS_COLUMNS, CENSUS_KEY, KERNEL_COLUMNS, KERNEL_INFO_COLUMNS, KERNEL_KEY, MATH_MODE_NAMES,
                         MATH_MODES, MEASUREMENT_COLUMNS, MEASUREMENT_TEXT_COLUMNS, PASS_COLUMN, RUN_KEY,
                         SPARSE_COLUMNS, SPARSE_MEASUREMENT_COLUMNS, SPARSE_TEXT_COLUMNS, STATUSES, TRACE_FIELDS,
                         TRACED_KERNEL_COLUMNS, DatasetDir)

TEST_FRACTION = 0.3
TEST_SET_II_GRID = "test-set-ii"
#: The held-out networks' layers of every kind (:func:`seer.layers.grids.test_set_ii_general_grid`).
TEST_SET_II_GENERAL_GRID = "test-set-ii-general"
#: Grids whose shapes form Test-set-II.
TEST_SET_II_GRIDS = (TEST_SET_II_GRID, TEST_SET_II_GENERAL_GRID)
#: Shape fields of records written before seer 0.3 (SEER's eight and three depths).
_OLD_SHAPE_FIELDS = (*SEER_FIELDS, "in_depth", "kernel_depth", "out_depth")


def with_layer_columns(records: pd.DataFrame) -> pd.DataFrame:
    """Records with seer's layer columns (:data:`~seer.layers.shapes.LAYER_COLUMNS`), int64.

    Records written before seer 0.3 carry SEER's eight fields instead (all 2D and square);
    both kinds may be mixed in one store.
    """
    if records.empty:
        return records
    old = records["in_h"].isna().to_numpy() if "in_h" in records.columns else np.ones(len(records), dtype=bool)
    parts = []
    if old.any():
        parts.append(layer_frame(records.loc[old, list(SEER_FIELDS)].astype(np.int64)))
    if (~old).any():
        new = records.loc[~old, [c for c in LAYER_FIELDS if c in records.columns]]
        parts.append(layer_frame(new.astype(np.int64)))
    layers = pd.concat(parts).loc[records.index]
    out = records.drop(columns=[c for c in (*_OLD_SHAPE_FIELDS, *LAYER_COLUMNS) if c in records.columns])
    return pd.concat([out, layers], axis=1)


# -- splitting ----------------------------------------------------------------------------
def split_of(shape_id: str, grid: str, seed: int = 0, test_fraction: float = TEST_FRACTION) -> str:
    """Train or Test-set-I by a seeded hash of the shape; Test-set-II by grid.

    A hash, unlike a shuffled split, keeps every shape on its side when the dataset grows,
    and the same shape is never on both sides (all its algorithms and math modes follow).
    """
    if grid in TEST_SET_II_GRIDS:
        return "test2"
    digest = hashlib.blake2b(f"{seed}:{shape_id}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    return "test1" if u < test_fraction else "train"


# -- rollup of kernels into runs ----------------------------------------------------------
def rollup_kernels(kernels: pd.DataFrame, spec: GPUSpec) -> pd.DataFrame:
    """One row per run from its kernels, by each metric's rollup rule in seer.metrics, with
    the run columns of :data:`seer.metrics.RUN_COLUMNS` but those from the layer's shape.

    The main kernel is the longest compute kernel of the run (the longest kernel if none
    is classed as compute; the first of equals); its launch configuration, occupancy and
    waves describe the run. ``spec`` gives the SM count for waves, and the peak rates for
    ``sm_util`` (achieved FP32 and TF32 FLOP rates over their peaks) and ``dram_util``
    (achieved DRAM bandwidth over the peak).
    """
    if kernels.empty:
        return pd.DataFrame(columns=[*RUN_KEY, "n_kernels"])
    # Kernels profiled before a metric joined its group lack it (seer.metrics.Metric.required).
    added_later = [m.column for m in METRICS if not m.required and m.column not in kernels.columns]
    kernels = kernels.assign(**{column: np.nan for column in added_later}).reset_index(drop=True)
    run = kernels.groupby(list(RUN_KEY), sort=False).ngroup().to_numpy()  # in order of first appearance
    duration = kernels["duration_ns"]
    # The main kernel: compute kernels first, then the longest, then the earliest.
    compute = (kernels["kernel_role"] == "compute").to_numpy()
    order = np.lexsort((np.arange(len(kernels)), -duration.fillna(-1).to_numpy(), ~compute, run))
    first = np.r_[True, run[order][1:] != run[order][:-1]]
    main = kernels.iloc[order[first]].reset_index(drop=True)  # one row per run, in run order
    runs = main[list(RUN_KEY)].copy()
    runs["n_kernels"] = np.bincount(run)
    runs["main_kernel"] = main["kernel_name"]
    runs["variant"] = main["kernel_variant"]
    total = duration.groupby(run).sum(min_count=1).to_numpy()
    runs["main_kernel_share"] = np.where(total > 0, main["duration_ns"].to_numpy() / np.where(total > 0, total, 1),
                                         np.nan)
    sums = kernels[columns_with_rollup("sum")].groupby(run).sum(min_count=1).reset_index(drop=True)
    weighted = {}
    for col in columns_with_rollup("time_weighted"):
        # np.average over the kernels where both the value and the duration are known.
        known = kernels[col].notna() & duration.notna()
        weight = duration.where(known)
        numerator = (kernels[col] * weight).groupby(run).sum(min_count=1).to_numpy()
        denominator = weight.groupby(run).sum(min_count=1).to_numpy()
        weighted[col] = np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)
    runs = pd.concat([runs, sums, pd.DataFrame(weighted), main[columns_with_rollup("main")]], axis=1)
    # Run columns that are metrics renamed, summed or converted (seer.metrics.RUN_COLUMNS);
    # ncu_waves takes ncu's waves before they are recomputed below.
    for c in RUN_COLUMNS:
        if c.metrics and c.metrics != (c.column,):
            value = functools.reduce(operator.add, (runs[m] for m in c.metrics))  # no 0 + -0.0
            # Dividing by 1 would turn integer counts into floats.
            runs[c.column] = value / c.per if c.per != 1 else value
    runs["blocks_per_sm"] = blocks_per_sm(runs)
    # FMA math forbids tensor cores, so an fma run's tensor FLOPs are zero, not unmeasured.
    tensor_math = runs["math"].isin([m.name for m in MATH_MODES if m.tensor_cores])
    tensor = runs["tensor_ops_tf32"].where(tensor_math, runs["tensor_ops_tf32"].fillna(0))
    runs["thread_flops"] = thread_flops(runs)
    runs["tensor_flops"] = tensor
    runs["flops"] = runs["thread_flops"] + tensor
    # ncu prints waves with two decimals (a one-block grid shows 0.00), kept as ncu_waves:
    # recompute them exactly, as SEER defines them.
    runs["waves"] = waves(runs["grid_blocks"], runs["blocks_per_sm"], spec.sm_count)
    seconds = runs["duration_ns"] * 1e-9
    # Utilisations as a roofline sees them: achieved rate over the GPU's peak rate.
    runs["dram_util"] = (runs["dram_read_bytes"] + runs["dram_write_bytes"]) / (
        seconds * spec.memory_bandwidth_bytes_per_s)
    tf32_peak = spec.peak_tf32_flops_per_s or np.inf
    runs["sm_util"] = (runs["thread_flops"] / spec.peak_fp32_flops_per_s + tensor / tf32_peak) / seconds
    return runs


# -- CUPTI traces of the timed runs -------------------------------------------------------
def traced_kernels_table(timing: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, kernel name) of the timing records' CUPTI traces, in order of first
    launch, launches of a name summed, each kernel classified by the kernel rules
    (:func:`seer.algorithms.classify_kernel`).

    Records hold kernels summed by name, in either stored format
    (:func:`seer.collect.records.stored_trace`).
    """
    traced, entries, counts = [], [], []
    if "traced_kernels" in timing.columns:
        for position, kernels in enumerate(timing["traced_kernels"]):
            if isinstance(kernels, list):
                summed = stored_trace(kernels)
                traced.append(position)
                entries.extend(summed)
                counts.append(len(summed))
    if not entries:
        return _with_kernel_info(pd.DataFrame([], columns=[*RUN_KEY, "kernel_idx", *TRACE_FIELDS]))[
            list(TRACED_KERNEL_COLUMNS)]
    run = np.repeat(np.asarray(traced), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    table = timing[list(RUN_KEY)].iloc[run].reset_index(drop=True)
    table["kernel_idx"] = np.arange(len(run)) - starts
    table = pd.concat([table, pd.DataFrame(entries, columns=list(TRACE_FIELDS))], axis=1)
    return _with_kernel_info(table)[list(TRACED_KERNEL_COLUMNS)]


def _with_kernel_info(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` with one name per kernel (ncu aliases some, :func:`canonical_kernel_name`)
    and each kernel's family, role and variant by today's rules in seer.algorithms
    (:func:`classify_kernel`), not those of collection time."""
    names = _map_distinct(kernels["kernel_name"], canonical_kernel_name)
    classify = functools.cache(classify_kernel)
    info = {f"kernel_{field}": _map_distinct(names, lambda name, field=field: getattr(classify(name), field))
            for field in ("family", "role", "variant")}
    return kernels.assign(kernel_name=names, **info)


def _map_distinct(values: pd.Series, function) -> pd.Series:
    """``values.map(function)``, with ``function`` called once per distinct value (kernel
    names repeat: a dataset has hundreds of thousands of kernels, and a few hundred names)."""
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    if not len(distinct):
        return values.map(function)
    mapped = np.empty(len(distinct), dtype=object)
    for i, value in enumerate(distinct):
        mapped[i] = function(value)
    return pd.Series(mapped[codes], index=values.index)


def trace_rollup(traced: pd.DataFrame) -> pd.DataFrame:
    """Per traced run: kernels launched, their summed time, and the main kernel (the longest
    compute kernel, else the longest) with its variant."""
    if traced.empty:
        return pd.DataFrame(columns=[*RUN_KEY, "trace_n_kernels", "trace_time_ms", "trace_main_kernel",
                                     "trace_variant"])
    ranked = traced.assign(_compute=traced["kernel_role"] == "compute").sort_values(
        [*RUN_KEY, "_compute", "duration_ns"], ascending=[True] * len(RUN_KEY) + [False, False], kind="stable")
    main = ranked.drop_duplicates(list(RUN_KEY)).set_index(list(RUN_KEY))
    sums = traced.groupby(list(RUN_KEY))[["launches", "duration_ns"]].sum()
    out = pd.DataFrame({"trace_n_kernels": sums["launches"], "trace_time_ms": sums["duration_ns"] / 1e6,
                        "trace_main_kernel": main["kernel_name"], "trace_variant": main["kernel_variant"]})
    return out.reset_index()


# -- the tidy tables ----------------------------------------------------------------------
def latest_timing_records(store: RunStore) -> pd.DataFrame:
    """The latest timing record of each run, each labelled with its shape's first grid. A run
    whose latest record measured an earlier revision of seer's kernels is left out (the raw
    records keep it): it timed other code. A run whose latest record read no energy, or traced no
    kernels, keeps those of its latest record that did (:func:`_with_earlier_readings`)."""
    history = store.read("timing")  # oldest first
    if history.empty:
        return history
    records = latest_records(history, RUN_KEY)
    records = _with_earlier_readings(records[current_revision(records)].reset_index(drop=True), history)
    return records.assign(grid=records["shape_id"].map(first_grids(history)))


#: The readings of a timing record that a later record of the same run may lack (timed again
#: for another reason): the column that says whether a record has it, its test, and the fields it brings.
CARRIED_READINGS = (("energy_mj", pd.Series.notna, ENERGY_FIELDS),
                    ("trace_status", lambda status: status.eq("ok"), ("trace_status", "trace_detail", "traced_kernels")))


def _with_earlier_readings(records: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """``records`` (the latest of each run) with the energy reading and the kernel trace of the
    run's latest record that has each, where the latest itself has none: a run timed again
    without reading its energy (``--retry untraced``, to trace it) keeps the reading, and one timed
    again without CUPTI keeps its trace, that an earlier record of the same code made. Only
    successful runs of the kernel revision in force, earlier and latest alike."""
    if records.empty:
        return records
    for marker, has, fields in CARRIED_READINGS:
        if marker not in history.columns:
            continue
        read = history[has(history[marker]) & (history["status"] == "ok")]
        read = latest_records(read[current_revision(read)], RUN_KEY)
        if read.empty:
            continue
        present = [f for f in fields if f in history.columns]  # records hold history's columns
        earlier = records[list(RUN_KEY)].merge(read[[*RUN_KEY, *present]], on=list(RUN_KEY), how="left")
        fill = (~has(records[marker]) & (records["status"] == "ok") & earlier[marker].notna()).to_numpy()
        if not fill.any():
            continue
        records = records.copy()
        for field in present:
            values, column = earlier.loc[fill, field].to_numpy(), records[field]
            if pd.api.types.is_numeric_dtype(column):
                records.loc[fill, field] = values.astype(float)
            elif column.dtype == object:  # the traced kernels: a list of entries per record
                records.loc[fill, field] = pd.Series(list(values), index=records.index[fill], dtype=object)
            else:  # text, in the column's own string type
                records.loc[fill, field] = pd.array(values, dtype=column.dtype)
    return records


def split_sparse_records(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Timing records of dense layers, and those of runs on sparse inputs (a ``sparsity``
    above 0), each with its own fields only. Without sparse records the first is ``records``
    itself: the dense tables are built from exactly what they were built from before."""
    if records.empty or "sparsity" not in records.columns:
        return records, records.iloc[:0]
    sparse = (records["sparsity"].fillna(0) > 0).to_numpy()
    dense = records[~sparse].drop(columns=[c for c in SPARSE_COLUMNS if c in records.columns])
    return dense.reset_index(drop=True), records[sparse].reset_index(drop=True)


def sparse_measurements_table(records: pd.DataFrame, spec: GPUSpec, seed: int = 0) -> pd.DataFrame:
    """The runs on sparse inputs (``records``: their latest timing records), one row each,
    with :data:`seer.schema.SPARSE_MEASUREMENT_COLUMNS`.

    As the measurements table, less the ncu profile (sparse shapes are not profiled; their
    CUPTI traces are rolled up): a run's split is its layer's (``split_of`` of its
    ``dense_shape_id`` and grid), so that a layer and its sparse inputs are never on both sides.
    Rows are ordered by grid, layer, pattern, sparsity, math and the registry's algorithm order.
    """
    if records.empty:
        return pd.DataFrame(columns=list(SPARSE_MEASUREMENT_COLUMNS))
    no_profiles = pd.DataFrame(columns=[*RUN_KEY, "profile_status", "profile_detail"])
    table = measurements_table(None, spec, seed, kernels=pd.DataFrame(), statuses=no_profiles, records=records)
    fields = records.reindex(columns=[*RUN_KEY, *SPARSE_COLUMNS])
    table = table.merge(fields, on=list(RUN_KEY), how="left")
    table["sparsity"] = table["sparsity"].astype(float)
    for column in ("input_zero_fraction", "input_crowding"):
        table[column] = table[column].astype(float)
    pairs = table[["dense_shape_id", "grid"]].drop_duplicates()
    split = {(d, g): split_of(d, g, seed) for d, g in zip(pairs["dense_shape_id"], pairs["grid"])}
    table["split"] = [split[pair] for pair in zip(table["dense_shape_id"], table["grid"])]
    order = {a.name: i for i, a in enumerate(REGISTRY)}
    table["_algo"] = table["algo"].map(order)
    table = table.sort_values(["grid", "dense_shape_id", "sparsity_pattern", "sparsity", "math", "_algo"],
                              kind="stable")
    return table[list(SPARSE_MEASUREMENT_COLUMNS)].reset_index(drop=True)


def measurements_table(store: RunStore | None, spec: GPUSpec, seed: int = 0, kernels: pd.DataFrame | None = None,
                       statuses: pd.DataFrame | None = None, traced: pd.DataFrame | None = None,
                       records: pd.DataFrame | None = None) -> pd.DataFrame:
    """The runs table of a dataset directory (see the module docstring).

    ``kernels``, ``statuses``, ``traced`` and ``records`` (from :func:`kernels_table`,
    :func:`profile_status_table`, :func:`traced_kernels_table` and the store's timing
    records) are computed or read here unless given.
    """
    records = latest_timing_records(store) if records is None else records
    timing = with_layer_columns(records)
    if timing.empty:
        return pd.DataFrame(columns=list(MEASUREMENT_COLUMNS))
    traced = traced_kernels_table(records) if traced is None else traced
    timing = timing.drop(columns=["traced_kernels"], errors="ignore").merge(trace_rollup(traced), on=list(RUN_KEY),
                                                                           how="left")
    statuses = profile_status_table(store) if statuses is None else statuses
    kernels = kernels_table(store, statuses) if kernels is None else kernels
    runs = rollup_kernels(kernels, spec)
    table = timing.merge(runs, on=list(RUN_KEY), how="left")
    table = table.merge(statuses, on=list(RUN_KEY), how="left")
    table["flops_analytic"] = frame_flops(table)
    if "flops" in table.columns:
        table["flops_ratio"] = table["flops"] / table["flops_analytic"]
    # A shape's runs share its grid, and so its split: each (shape, grid) is hashed once.
    shape_grid = table[["shape_id", "grid"]]
    pair = shape_grid.groupby(["shape_id", "grid"], sort=False, dropna=False).ngroup().to_numpy()
    first = shape_grid[~shape_grid.duplicated()]
    splits = [split_of(s, g, seed) for s, g in zip(first["shape_id"].tolist(), first["grid"].tolist())]
    table["split"] = np.asarray(splits, dtype=object)[pair]
    # Rows from before protocols were recorded were timed one call at a time (protocol 1).
    table["timing_protocol"] = table.get("timing_protocol", pd.Series(1, index=table.index)).fillna(1).astype(int)
    algo_order = {a.name: i for i, a in enumerate(ALL_ALGORITHMS)}
    table = table.reindex(columns=list(MEASUREMENT_COLUMNS))  # a column no record has is empty
    # Byte counts are exact integers: written as floats, "%.6g" would round them.
    table["workspace_bytes"] = table["workspace_bytes"].astype("Int64")
    table["_algo"] = table["algo"].map(algo_order)
    table = table.sort_values(["grid", "shape_id", "math", "_algo"]).drop(columns="_algo")
    return table.reset_index(drop=True)


def _group_records(store: RunStore) -> pd.DataFrame:
    """Kernel records, the latest profile of each (run, group) only."""
    raw = grouped_records(store, "kernels")
    if raw.empty:
        return raw
    latest = raw.groupby([*RUN_KEY, "group"])["collected_at"].transform("max")
    return raw[raw["collected_at"] == latest].drop_duplicates([*KERNEL_KEY, "group"], keep="last")


def profile_status_table(store: RunStore, kernel_records: pd.DataFrame | None = None) -> pd.DataFrame:
    """One profile status per run, over the metric columns it needs.

    Each needed column comes from the latest record of a group that measures it (current
    or retired groups, see :data:`seer.metrics.GROUP_COLUMNS`). ``ok`` when every needed
    column is covered by ok records that all saw the same kernel sequence; ``inconsistent``
    when they did not; the record's own status (``error``, ``no_kernels``,
    ``too_many_kernels``) when the latest record for some column says so; ``partial``
    while some column has not been profiled yet. ``kernel_records`` (the store's latest
    kernel records of each run and group) are read here unless given.
    """
    profiles = profile_records(store)
    if profiles.empty:
        return pd.DataFrame(columns=[*RUN_KEY, "profile_status", "profile_detail"])
    kernels = _group_records(store) if kernel_records is None else kernel_records
    signatures = _kernel_sequences(kernels)
    rows = []
    records = profiles[[c for c in (*RUN_KEY, "group", "profile_status", "status_detail")
                        if c in profiles.columns]].to_dict("records")
    run = profiles.groupby(list(RUN_KEY), sort=False).ngroup().to_numpy()
    by_run = np.split(np.argsort(run, kind="stable"), np.cumsum(np.bincount(run))[:-1])
    for positions in by_run:  # each run's records in the order they were stored, runs in order of appearance
        key = tuple(records[positions[0]][k] for k in RUN_KEY)
        missing = set(required_columns("core", key[1]))
        status, detail = "ok", None
        seen = set()
        # The latest record for a column wins.
        for record in (records[i] for i in reversed(positions)):
            provides = recorded_columns(record["group"]) & missing
            if not provides:
                continue
            missing -= provides
            if record["profile_status"] != "ok":
                status, detail = record["profile_status"], f"{record['group']}: {record.get('status_detail')}"
                break
            seen.add(signatures.get((*key, record["group"]), ()))
        if status == "ok" and missing:
            groups = [g for g in METRIC_SETS["core"] if GROUP_COLUMNS[g] & missing]
            status, detail = "partial", f"group {', '.join(groups)} not profiled yet"
        elif status == "ok" and len(seen) > 1:
            status, detail = "inconsistent", "metric groups saw different kernel sequences"
        rows.append(dict(zip(RUN_KEY, key)) | {"profile_status": status, "profile_detail": detail})
    return pd.DataFrame(rows)


def _kernel_sequences(kernels: pd.DataFrame) -> dict[tuple, tuple]:
    """The canonical kernel names of each (run, group) of kernel records, in launch order."""
    if kernels.empty:
        return {}
    ordered = kernels.sort_values("kernel_idx", kind="stable")
    names = _map_distinct(ordered["kernel_name"], canonical_kernel_name)
    sequences: dict[tuple, list] = {}
    for key, name in zip(zip(*(ordered[c].tolist() for c in (*RUN_KEY, "group"))), names.tolist()):
        sequences.setdefault(key, []).append(name)
    return {key: tuple(names) for key, names in sequences.items()}


def kernels_table(store: RunStore, statuses: pd.DataFrame | None = None,
                  kernel_records: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per kernel of every fully profiled run, with every group's metrics merged.

    ``statuses`` (:func:`profile_status_table`) and ``kernel_records`` (the store's latest
    kernel records of each run and group) are computed or read here unless given.
    """
    records = _group_records(store) if kernel_records is None else kernel_records
    if records.empty:
        return records
    statuses = profile_status_table(store, records) if statuses is None else statuses
    ok = statuses.loc[statuses["profile_status"] == "ok", list(RUN_KEY)]
    records = records.merge(ok, on=list(RUN_KEY))
    metric_columns = [m.column for m in METRICS]
    base = records.drop_duplicates(list(KERNEL_KEY))[[*KERNEL_KEY, *KERNEL_INFO_COLUMNS, "gpu", "cudnn_version",
                                                      "collected_at"]]
    for column in metric_columns:
        # Each metric comes from the latest group that measured it (or an all-groups record).
        sources = [g for g in records["group"].unique() if column in recorded_columns(g)]
        values = records[records["group"].isin(sources)]
        if column in values.columns:
            values = values.dropna(subset=[column]).drop_duplicates(list(KERNEL_KEY), keep="last")
            base = base.merge(values[[*KERNEL_KEY, column]], on=list(KERNEL_KEY), how="left")
        else:
            base[column] = np.nan
    return _with_kernel_info(base).sort_values(list(KERNEL_KEY)).reset_index(drop=True)


#: Census columns that hold whole numbers and may be empty (the algorithm is not supported).
_CENSUS_OPTIONAL_INTS = ("workspace_bytes", "heuristic_rank", "heuristic_math_type")
#: Census columns that hold text.
_CENSUS_TEXT_COLUMNS = frozenset({"math", "shape_id", "grid", "algo", "status"})


def untimed_census(census: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The census rows of (shape, pass) pairs that ``table`` holds no run of. The first stage
    learns cuDNN's answers from shapes that never ran; a census shape that a grid drawn later
    also timed (grids are redrawn when their bounds change) gives its answers in its runs, but
    only for the pass it was timed in: its census rows of the other passes stay."""
    if census.empty or table.empty:
        return census.reset_index(drop=True)
    timed = pd.MultiIndex.from_frame(pd.DataFrame({"shape_id": table["shape_id"].to_numpy(),
                                                   "pass": pass_of(table["algo"]).to_numpy()}).drop_duplicates())
    keys = pd.MultiIndex.from_arrays([census["shape_id"].to_numpy(), pass_of(census["algo"]).to_numpy()])
    return census[~keys.isin(timed)].reset_index(drop=True)


def census_table(store: RunStore) -> pd.DataFrame:
    """One row per (shape, math, algorithm) of the census records, latest record per key
    (shape, math, pass).

    ``status`` uses the vocabulary of the timing rows: ``ok`` (cuDNN accepts the algorithm
    with a workspace within the collection's cap), ``not_supported``,
    ``workspace_too_large`` or ``error``; ``heuristic_rank`` is 1 for cuDNN's first choice
    of its pass and ``heuristic_math_type`` the math type it would use (cudnnMathType_t).
    The pass is the algorithm's (:func:`read_census` gives it as a column).

    Rows are ordered by shape (its columns in schema order), then pass (:data:`PASSES`
    order), then algorithm (registry order), then math mode (:data:`seer.schema.MATH_MODES`
    order): neighbouring rows then share most of their text, which keeps the census table
    small enough to commit. A census of the forward alone gives the rows it gave before the
    backward passes had one.
    """
    records = with_layer_columns(store.read("census", CENSUS_KEY))
    if records.empty:
        return pd.DataFrame(columns=list(CENSUS_COLUMNS))
    parts = [_census_part(records[(records[PASS_COLUMN] == pass_).to_numpy()].reset_index(drop=True), pass_)
             for pass_ in PASSES if (records[PASS_COLUMN] == pass_).any()]
    if len(parts) == 1:
        return parts[0]
    # Each part is ordered by shape already: a stable sort keeps a shape's passes in PASSES order.
    return (pd.concat(parts, ignore_index=True).sort_values([*LAYER_COLUMNS, "shape_id"], kind="stable")
            .reset_index(drop=True))


def _census_part(records: pd.DataFrame, pass_: str) -> pd.DataFrame:
    """:func:`census_table`'s rows of one pass, from that pass's latest records."""
    algos = algorithm_names("cudnn", pass_=pass_)
    # The records in the table's order, by shape, then math mode (ties keep the store's order);
    # each shape's rows then go algorithm by algorithm, its math modes within each.
    records = (records.assign(_math=records["math"].map({m: i for i, m in enumerate(MATH_MODE_NAMES)}))
               .sort_values([*LAYER_COLUMNS, "shape_id", "_math"], kind="stable").reset_index(drop=True))
    record, algo = _census_rows(records, len(algos))
    table = records.loc[record, ["math", *LAYER_COLUMNS, "shape_id", "grid"]].reset_index(drop=True)
    table["algo"] = np.asarray(algos, dtype=object)[algo]
    at = record * len(algos) + algo
    for column, values in _census_answers(records, algos).items():
        table[column] = values[at]
    return table[list(CENSUS_COLUMNS)]


def _census_rows(records: pd.DataFrame, n_algos: int) -> tuple[np.ndarray, np.ndarray]:
    """The record and the algorithm (its index) of each census row: a shape's records
    (consecutive in ``records``) give ``n_algos`` rows each, algorithm by algorithm and,
    within one algorithm, record by record."""
    shape = pd.factorize(records["shape_id"])[0]
    layer = records[list(LAYER_COLUMNS)].to_numpy()
    starts = np.flatnonzero(np.r_[True, (shape[1:] != shape[:-1]) | (layer[1:] != layer[:-1]).any(axis=1)])
    sizes = np.diff(np.r_[starts, len(records)])
    shape_of_row = np.repeat(np.arange(len(starts)), sizes * n_algos)
    offset = np.arange(len(shape_of_row)) - np.repeat(starts * n_algos, sizes * n_algos)
    size = sizes[shape_of_row]
    return starts[shape_of_row] + offset % size, offset // size


def _census_answers(records: pd.DataFrame, algos: list[str]) -> dict[str, np.ndarray | pd.arrays.IntegerArray]:
    """The census records' answers, one per (record, algorithm), record-major: ``status``
    (text) and the whole numbers ``workspace_bytes``, ``heuristic_rank`` and
    ``heuristic_math_type`` (Int64, empty where the record does not give them)."""
    def field(name: str, kind: type) -> list:
        values = records[name] if name in records.columns else [None] * len(records)
        return [v if isinstance(v, kind) else kind() for v in values]

    def per_algo(answers: list[dict]) -> pd.arrays.IntegerArray:
        values = np.array([answer.get(a, np.nan) for answer in answers for a in algos], dtype=float)
        return pd.Series(values).astype("Int64").array  # as pandas reads whole numbers with gaps

    workspace, errors, heuristic = field("workspace_bytes", dict), field("errors", dict), field("heuristic", list)
    math_types = []
    for choices in heuristic:  # the math type of each algorithm's first appearance
        first: dict[str, int] = {}
        for name, math_type in choices:
            first.setdefault(name, math_type)
        math_types.append(first)
    workspace_bytes = per_algo(workspace)
    asked = np.array([a in w for w in workspace for a in algos], dtype=bool)
    failed = np.array([a in e for e in errors for a in algos], dtype=bool)
    if "status" in records.columns:
        failed |= np.repeat((records["status"] != "ok").to_numpy(dtype=bool), len(algos))
    else:
        failed[:] = True
    cap = (pd.to_numeric(records["workspace_cap_bytes"]).to_numpy(dtype=float, na_value=np.nan)
           if "workspace_cap_bytes" in records.columns else np.full(len(records), np.nan))
    too_large = asked & (workspace_bytes.to_numpy(dtype=float, na_value=np.nan) > np.repeat(cap, len(algos)))
    status = np.select([failed, ~asked, too_large], ["error", "not_supported", "workspace_too_large"], "ok")
    return {"status": status.astype(object), "workspace_bytes": workspace_bytes,
            "heuristic_rank": per_algo([heuristic_ranks(choices) for choices in heuristic]),
            "heuristic_math_type": per_algo(math_types)}


# -- Test-set-II --------------------------------------------------------------------------
def test_set_ii_times(table: pd.DataFrame) -> pd.DataFrame:
    """Measured time of every algorithm and of PyTorch's policies per Test-set-II layer and math
    mode, and the fastest algorithm (PyTorch's policies are shown, not ranked)."""
    t2 = table[table["split"] == "test2"]
    ok = t2[t2["status"] == "ok"]
    wide = ok.pivot_table(index=[*LAYER_COLUMNS, "math"], columns="algo", values="time_ms")
    order = [a.name for a in ALGORITHMS if a.name in wide.columns]
    algorithms = [a for a in order if get_algorithm(a).source != "pytorch"]
    if not algorithms:  # a dataset of PyTorch's policies (or the backward passes) only
        return pd.DataFrame()
    wide = wide[order]
    wide["fastest_algo"] = wide[algorithms].idxmin(axis=1)
    wide["fastest_ms"] = wide[algorithms].min(axis=1)
    return wide.reset_index()


# -- everything ---------------------------------------------------------------------------
@dataclass
class DatasetFiles:
    """What :func:`build_dataset` wrote; ``rows`` counts the measurement rows."""

    measurements: Path
    kernels: Path
    train_xlsx: Path
    test_xlsx: Path
    test_set_ii: Path | None
    provenance: Path
    rows: int
    census: Path | None = None
    traced_kernels: Path | None = None
    sparse_measurements: Path | None = None  # runs on sparse inputs, where there are some
    sparse_rows: int = 0


def build_dataset(dataset_dir: str | Path, spec: GPUSpec, seed: int = 0, pack: bool = False) -> DatasetFiles:
    """Write every derived file of a dataset directory from its raw records.

    ``spec`` is the GPU the records were measured on (waves and roofline utilisations
    need its SM count and peak rates); ``seed`` seeds the train/Test-set-I split;
    ``pack`` first merges the raw records into one compressed file per kind.
    """
    if not isinstance(spec, GPUSpec):
        raise TypeError(f"spec must be a seer.hardware.gpus.GPUSpec (seer.hardware.gpus.get_gpu_spec(name)), "
                        f"got {spec!r}")
    # The build keeps millions of decoded records (dicts and lists) alive from the first table to
    # the last: the garbage collector's passes over them, none of them garbage, took a third of it.
    with collector_paused():
        return _build_dataset(Path(dataset_dir), spec, seed, pack)


def _build_dataset(dataset_dir: Path, spec: GPUSpec, seed: int, pack: bool) -> DatasetFiles:
    """:func:`build_dataset`, its arguments checked."""
    store = RunStore(dataset_dir)
    if pack:
        store.pack("timing", RUN_KEY, sort_by=("grid", *RUN_KEY))
        store.pack("profiles", (*RUN_KEY, "group"))
        store.pack("kernels", (*RUN_KEY, "kernel_idx", "group"))
        store.pack("census", CENSUS_KEY)
    kernel_records = _group_records(store)
    statuses = profile_status_table(store, kernel_records)
    kernels = kernels_table(store, statuses, kernel_records)
    # Runs on sparse inputs get a table of their own: the dense tables, Excel files and
    # provenance, which the models are trained and evaluated on, stay as they were.
    records, sparse_records = split_sparse_records(latest_timing_records(store))
    traced = traced_kernels_table(records)
    table = measurements_table(store, spec, seed, kernels, statuses, traced, records)
    files = DatasetDir(dataset_dir)
    out = DatasetFiles(files.measurements, files.kernels, files.train_xlsx, files.test_xlsx, None,
                       files.provenance, len(table))
    table = write_parts(table, out.measurements)
    sparse = write_parts(sparse_measurements_table(sparse_records, spec, seed), files.sparse_measurements)
    if not sparse.empty:
        out.sparse_measurements, out.sparse_rows = files.sparse_measurements, len(sparse)
    # A kernel belongs to its run's shape, and so to the grid that timed the shape.
    grid_of = table.drop_duplicates("shape_id").set_index("shape_id")["grid"]
    kernel_cols = [c for c in KERNEL_COLUMNS if c in kernels.columns]
    kernels = kernels[kernel_cols] if not kernels.empty else kernels
    write_parts(kernels, out.kernels, grids=kernels["shape_id"].map(grid_of) if len(kernels) else None)
    if not traced.empty:
        out.traced_kernels = files.traced_kernels
        write_parts(traced, out.traced_kernels, grids=traced["shape_id"].map(grid_of))
    # SEER's sheets and the Test-set-II times are the forward's.
    forward = table[(pass_of(table["algo"]) == "fwd").to_numpy()]
    for split, path in (("train", out.train_xlsx), ("test1", out.test_xlsx)):
        write_excel(path, seer_sheets(forward[forward["split"] == split], spec))
    if (table["split"] == "test2").any():
        # SEER's held-out layers in SEER's format; the held-out networks of every kind in the layer CSV.
        for grid, path, fmt in ((TEST_SET_II_GRID, files.test_set_ii, "seer"),
                                (TEST_SET_II_GENERAL_GRID, files.test_set_ii_general, "csv")):
            held_out = table[table["grid"] == grid].drop_duplicates("shape_id")
            if len(held_out):
                write_layers(path, layer_frame(held_out), fmt)
        out.test_set_ii = files.test_set_ii
        times = test_set_ii_times(forward)
        if not times.empty:
            times.to_csv(files.test_set_ii_times, index=False, float_format="%.6g")
    census = untimed_census(census_table(store), table)
    census_path = files.census
    if not census.empty:
        out.census = census_path
        census = write_parts(census, out.census)
    else:
        write_parts(census, census_path)  # an earlier build's census, now all timed, goes
    record = provenance(store, table, kernels, census, test_fraction=TEST_FRACTION,
                        test_set_ii_grids=TEST_SET_II_GRIDS, sparse=sparse)
    out.provenance.write_text(json.dumps(record, indent=2) + "\n")
    return out


# -- reading the tables back --------------------------------------------------------------
def parsed_measurements(files: DatasetDir, gpu: str, columns: Iterable[str] | None = None,
                        passes: Iterable[str] | None = None) -> pd.DataFrame:
    """:func:`read_measurements` of a dataset folder, or an InputError saying to run ``seer parse`` first."""
    if not files.measurements.exists():
        raise InputError(f"no dataset; run `seer parse --gpu {gpu}` first", path=files.measurements)
    return read_measurements(files.measurements, columns, passes)


def read_measurements(path: str | Path, columns: Iterable[str] | None = None,
                      passes: Iterable[str] | None = None) -> pd.DataFrame:
    """The measurements table, checked: every column of the schema and the run's pass
    (:data:`seer.schema.PASS_COLUMN`, after ``algo``), or those in ``columns``; the runs of
    ``passes`` only (default: every pass). The table holds dense layers only: runs on sparse
    inputs are in the sparse measurements table (:func:`read_sparse_measurements`), so what
    training and evaluation read is what it was before sparse runs existed.

    Columns named in :data:`seer.schema.MEASUREMENT_TEXT_COLUMNS` are read as text, every
    other column must hold numbers; ``status`` and ``math`` must hold known values.

    Parameters
    ----------
    path : str or Path
        The table: a folder of Parquet parts (``data/<gpu>/measurements``), or a CSV
        file (``.csv`` or ``.csv.gz``).
    columns : iterable of str, optional
        The columns the caller needs, in the order it wants them; only these are read,
        checked and returned. Default: all of :data:`seer.schema.MEASUREMENT_COLUMNS`, in
        schema order (other columns in the file are dropped).

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    InputError
        One line naming file, line (or a Parquet part's row) and column: a missing,
        unreadable or empty file, a header without a needed column, a non-numeric value in
        a numeric column, an unknown status or math mode.
    """
    if columns is None:
        at = MEASUREMENT_COLUMNS.index("algo") + 1
        columns = (*MEASUREMENT_COLUMNS[:at], PASS_COLUMN, *MEASUREMENT_COLUMNS[at:])
    wanted = list(dict.fromkeys(columns))
    unknown = [c for c in wanted if c not in MEASUREMENT_COLUMNS and c != PASS_COLUMN]
    if unknown:
        raise ValueError(f"not measurement columns: {', '.join(unknown)}")
    stored = [c for c in wanted if c != PASS_COLUMN]
    derive = PASS_COLUMN in wanted or passes is not None
    if derive and "algo" not in stored:
        stored.append("algo")
    frame = _read_table(path, stored, text=MEASUREMENT_TEXT_COLUMNS, check=_check_vocabulary)
    if not derive:
        return frame
    runs_pass = pass_of(frame["algo"])
    if passes is not None:
        keep = runs_pass.isin(list(passes)).to_numpy()
        frame, runs_pass = frame[keep].reset_index(drop=True), runs_pass[keep].reset_index(drop=True)
    return frame.assign(**{PASS_COLUMN: runs_pass.astype(frame["algo"].dtype)})[wanted]


def read_sparse_measurements(path: str | Path, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """The sparse measurements table (``data/<gpu>/sparse_measurements``, or a CSV file),
    checked as :func:`read_measurements` checks its table: every column of
    :data:`seer.schema.SPARSE_MEASUREMENT_COLUMNS`, or those in ``columns``, and the run's pass.

    Runs on sparse inputs are in this table only: :func:`read_measurements`, which training
    and evaluation read, returns dense layers alone. A row's dense counterparts are the
    measurements table's rows whose ``shape_id`` is its ``dense_shape_id``.
    """
    wanted = list(dict.fromkeys(columns if columns is not None else
                                (*SPARSE_MEASUREMENT_COLUMNS[:SPARSE_MEASUREMENT_COLUMNS.index("algo") + 1],
                                 PASS_COLUMN,
                                 *SPARSE_MEASUREMENT_COLUMNS[SPARSE_MEASUREMENT_COLUMNS.index("algo") + 1:])))
    unknown = [c for c in wanted if c not in SPARSE_MEASUREMENT_COLUMNS and c != PASS_COLUMN]
    if unknown:
        raise ValueError(f"not sparse measurement columns: {', '.join(unknown)}")
    stored = [c for c in wanted if c != PASS_COLUMN]
    if PASS_COLUMN in wanted and "algo" not in stored:
        stored.append("algo")
    frame = _read_table(path, stored, text=SPARSE_TEXT_COLUMNS, check=_check_vocabulary)
    if PASS_COLUMN in wanted:
        frame[PASS_COLUMN] = pass_of(frame["algo"]).astype(frame["algo"].dtype)
    return frame[wanted]


def read_census(path: str | Path, passes: Iterable[str] | None = None) -> pd.DataFrame:
    """The census table (a folder of Parquet parts or a CSV file), checked, with the dtypes
    :func:`census_table` gives, and each answer's pass (:data:`seer.schema.PASS_COLUMN`,
    after ``algo``, from the algorithm registry as for :func:`read_measurements`); the
    answers of ``passes`` only (default: every pass).

    Shape columns are whole numbers (int64); ``workspace_bytes``, ``heuristic_rank`` and
    ``heuristic_math_type`` whole numbers or empty (Int64); ``status`` and ``math`` known
    values.

    Raises
    ------
    InputError
        As :func:`read_measurements`; also for an empty shape field or a number that is not
        whole, or an algorithm the registry does not know (its pass would be unknown).
    """
    def check(frame: pd.DataFrame, at: _Locate) -> None:
        _check_vocabulary(frame, at)
        unknown = pass_of(frame["algo"]).isna()
        if unknown.any():
            row = _first_true(unknown)
            raise at.error(f"unknown algorithm {frame['algo'].iloc[row]!r}", row, "algo")
        for column in LAYER_COLUMNS:
            _check_whole(frame, column, at, required=True)
        for column in _CENSUS_OPTIONAL_INTS:
            _check_whole(frame, column, at, required=False)

    frame = _read_table(path, list(CENSUS_COLUMNS), text=_CENSUS_TEXT_COLUMNS, check=check)
    answers_pass = pass_of(frame["algo"])
    if passes is not None:
        keep = answers_pass.isin(list(passes)).to_numpy()
        frame, answers_pass = frame[keep].reset_index(drop=True), answers_pass[keep].reset_index(drop=True)
    for column in LAYER_COLUMNS:
        frame[column] = frame[column].astype(np.int64)
    for column in _CENSUS_OPTIONAL_INTS:
        frame[column] = frame[column].astype("Int64")
    frame.insert(CENSUS_COLUMNS.index("algo") + 1, PASS_COLUMN, answers_pass.astype(frame["algo"].dtype))
    return frame


class _Locate:
    """Where row ``i`` (0-based) of a table stands: line ``i + 2`` of a CSV file, or row
    ``i + 1`` of a Parquet part (which has no lines)."""

    def __init__(self, path: Path, csv: bool) -> None:
        self.path, self.csv = path, csv

    def error(self, message: str, row: int | None, field: str) -> InputError:
        if row is None or self.csv:
            return InputError(message, path=self.path, line=None if row is None else row + 2, field=field)
        return InputError(f"{message} (row {row + 1})", path=self.path, field=field)


def _read_table(path: str | Path, columns: list[str], text: Iterable[str], check) -> pd.DataFrame:
    """``columns`` of a table, text columns as text and every other one numeric, each part
    passed to ``check(frame, locate)``.

    A folder holds Parquet parts (:mod:`seer.dataset.tables`), each checked before they are joined.
    A CSV file's header is read first, so that a missing column is reported as such
    (line 1); then only the needed columns are parsed. Data row ``i`` (0-based) is line
    ``i + 2``.
    """
    path = Path(path)
    text = set(text)
    numeric = [c for c in columns if c not in text]
    if path.is_dir():
        def check_part(frame: pd.DataFrame, part: Path) -> None:
            at = _Locate(part, csv=False)
            _check_numeric(frame, numeric, at)
            check(frame, at)

        frame = read_parts(path, columns, check=check_part)
        # As from a CSV file: a whole-number column that may be empty is float.
        for column in numeric:
            if isinstance(frame[column].dtype, pd.api.extensions.ExtensionDtype):
                frame[column] = frame[column].astype(float)
        return frame
    if not path.is_file():
        raise InputError("no such file" if not path.exists() else "not a file", path=path)
    header = _guarded(path, lambda: pd.read_csv(path, nrows=0)).columns
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError("missing from the header" + (f" (and {', '.join(missing[1:])})" if missing[1:] else ""),
                         path=path, line=1, field=missing[0])
    # Blank lines are kept (as empty rows) so that row i stays line i + 2.
    frame = _guarded(path, lambda: pd.read_csv(path, usecols=columns, dtype={c: str for c in columns if c in text},
                                               skip_blank_lines=False, low_memory=False))
    frame = frame[columns]
    at = _Locate(path, csv=True)
    _check_numeric(frame, numeric, at)
    check(frame, at)
    return frame


def _guarded(path: Path, read):
    """Run ``read``; what a damaged or malformed file raises becomes one InputError."""
    try:
        return read()
    except DAMAGED_COMPRESSED as exc:
        if isinstance(exc, EOFError):
            kind = "cut short"
        elif isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
            kind = "not a gzip file"
        else:
            kind = "damaged"
        raise InputError(f"cannot be read: {kind} ({_one_line(exc)})", path=path) from None
    except OSError as exc:  # unreadable: permissions, a device error
        raise InputError(f"cannot be read ({_one_line(exc)})", path=path) from None
    except pd.errors.EmptyDataError:
        raise InputError("empty file: no header", path=path) from None
    except pd.errors.ParserError as exc:
        # pandas names a 1-based line ("Expected 9 fields in line 7") or a 0-based row
        # ("EOF inside string starting at row 6").
        line = re.search(r"line (\d+)", str(exc))
        row = re.search(r"row (\d+)", str(exc))
        number = int(line.group(1)) if line else int(row.group(1)) + 1 if row else None
        raise InputError(f"malformed CSV ({_one_line(exc)})", path=path, line=number) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file ({_one_line(exc)})", path=path) from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _first_true(mask: pd.Series | np.ndarray) -> int:
    """Position of the first true value of ``mask``."""
    return int(np.argmax(np.asarray(mask)))


def _check_numeric(frame: pd.DataFrame, columns: list[str], at: _Locate) -> None:
    """Numeric columns that pandas read as text (or as booleans) become numbers, or the
    earliest row holding a value that is not a number is reported."""
    first: tuple[int, str, str] | None = None
    for column in columns:
        values = frame[column]
        if pd.api.types.is_bool_dtype(values):
            bad = values.notna()
        elif pd.api.types.is_numeric_dtype(values):
            continue
        else:
            parsed = pd.to_numeric(values.astype(object), errors="coerce")
            bad = parsed.isna() & values.notna()
            if not bad.any():
                frame[column] = parsed.astype(float)
                continue
        row = _first_true(bad)
        if first is None or row < first[0]:
            first = (row, column, str(values.iloc[row]))
    if first is not None:
        row, column, value = first
        raise at.error(f"not a number {value!r}", row, column)


def _check_vocabulary(frame: pd.DataFrame, at: _Locate) -> None:
    """InputError at the earliest row with a status or math mode outside the schema's."""
    first: tuple[int, str, str] | None = None
    for column, known in (("status", STATUSES), ("math", MATH_MODE_NAMES)):
        if column not in frame.columns:
            continue
        bad = ~frame[column].isin(list(known))
        if not bad.any():
            continue
        row = _first_true(bad)
        value = frame[column].iloc[row]
        message = ("empty" if pd.isna(value) else f"unknown {column} {value!r}") + \
            f"; expected one of {', '.join(known)}"
        if first is None or row < first[0]:
            first = (row, column, message)
    if first is not None:
        row, column, message = first
        raise at.error(message, row, column)


def _check_whole(frame: pd.DataFrame, column: str, at: _Locate, required: bool) -> None:
    """InputError at the first row of ``column`` that is empty (if ``required``) or not
    a whole number."""
    values = frame[column].to_numpy(dtype=float)
    finite = np.isfinite(values)
    bad = ~finite if required else np.isinf(values)
    bad |= finite & (values != np.floor(np.where(finite, values, 0.0)))
    if bad.any():
        row = _first_true(bad)
        value = float(values[row])
        message = "empty" if np.isnan(value) else f"not a whole number {value!r}"
        raise at.error(message, row, column)
