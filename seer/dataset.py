"""From raw records to the tidy tables, splits, SEER's Excel files and provenance.

``build_dataset`` reads a dataset directory's raw records (timing, profiles, kernels) and
writes:

``measurements.csv.gz``
    One row per (shape, math, algorithm): the timing, and, where the run was profiled,
    the rolled-up ncu metrics (time and traffic summed over the run's kernels, launch
    configuration, occupancy and waves from its main kernel).
``kernels.csv.gz``
    One row per profiled kernel: the evidence the run rows are derived from.
``train.xlsx``, ``test.xlsx``
    SEER's layout, one sheet per (algorithm, variant, math mode), plus an index sheet.
``Test-set-II.txt``, ``Test-set-II-times.csv``
    The held-out network layers in SEER's format and their measured times.
``census.csv.gz``
    Where a census was collected (``seer collect --census``): one row per (shape, math,
    algorithm) with cuDNN's answer before anything runs: supported or not, the workspace
    it asks for, and the heuristic's rank.
``provenance.json``
    GPU, driver, CUDA, cuDNN, ncu, commands, dates and counts.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import (ALGORITHMS, algorithm_names, canonical_kernel_name, classify_kernel, get_algorithm,
                             heuristic_ranks)
from seer.collect.plan import CENSUS_KEY, RUN_KEY
from seer.collect.store import ALL_GROUPS, RunStore, profile_records, recorded_columns
from seer.gpus import GPUSpec, get_gpu_spec
from seer.grids import write_shapes_file
from seer.metrics import (GROUP_COLUMNS, METRIC_SETS, METRICS, columns_with_rollup, required_columns,
                          thread_flops)
from seer.shapes import SEER_FIELDS, SHAPE_COLUMNS, ConvShape

STATUSES = ("ok", "not_supported", "workspace_too_large", "oom", "wrong_result", "error", "too_large")
SPLITS = ("train", "test1", "test2")
TEST_FRACTION = 0.3
TEST_SET_II_GRID = "test-set-ii"

#: Columns of measurements.csv.gz, in order. Units: *_ms milliseconds, *_bytes bytes,
#: fractions (achieved_occupancy, sm_util, dram_util, ...) between 0 and 1.
MEASUREMENT_COLUMNS = [
    "gpu", "cudnn_version", "math", *SHAPE_COLUMNS, "shape_id", "grid", "algo", "status",
    "status_detail", "time_ms", "time_ms_iqr", "time_ms_min", "n_reps", "timing_attempts",
    "workspace_bytes",
    "heuristic_rank", "rel_error", "timing_protocol", "burst", "sm_clock_mhz", "profile_status",
    "profile_detail", "n_kernels", "main_kernel", "variant",
    "main_kernel_share", "ncu_time_ms", "grid_blocks", "block_threads", "registers",
    "shared_mem_bytes", "occupancy_limit_blocks", "occupancy_limit_registers",
    "occupancy_limit_shared_mem", "occupancy_limit_warps", "blocks_per_sm", "waves", "ncu_waves",
    "achieved_occupancy", "flops", "flops_analytic", "flops_ratio", "thread_flops", "tensor_flops",
    "inst_ffma", "inst_fadd", "inst_fmul", "inst_hfma", "inst_tensor", "dram_read_bytes",
    "dram_write_bytes", "l2_bytes", "l1_bytes", "sm_util", "dram_util", "fma_pipe_util",
    "tensor_pipe_util", "sm_throughput_util", "dram_throughput_util", "sm_clock_hz",
    "split", "collected_at",
]


# -- splitting ----------------------------------------------------------------------------
def split_of(shape_id: str, grid: str, seed: int = 0, test_fraction: float = TEST_FRACTION) -> str:
    """Train or Test-set-I by a seeded hash of the shape; Test-set-II by grid.

    A hash, unlike a shuffled split, keeps every shape on its side when the dataset grows,
    and the same shape is never on both sides (all its algorithms and math modes follow).
    """
    if grid == TEST_SET_II_GRID:
        return "test2"
    digest = hashlib.blake2b(f"{seed}:{shape_id}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    return "test1" if u < test_fraction else "train"


# -- rollup of kernels into runs ----------------------------------------------------------
def _weighted(values: pd.Series, weights: pd.Series) -> float:
    mask = values.notna() & weights.notna()
    if not mask.any() or weights[mask].sum() <= 0:
        return float("nan")
    return float(np.average(values[mask], weights=weights[mask]))


def rollup_kernels(kernels: pd.DataFrame, spec: GPUSpec | None = None) -> pd.DataFrame:
    """One row per run from its kernels, by each metric's rollup rule in seer.metrics.

    The main kernel is the longest compute kernel of the run (the longest kernel if none
    is classed as compute); its launch configuration, occupancy and waves describe the run.
    With a GPU spec, ``sm_util`` (achieved FP32 and TF32 FLOP rates over their peaks) and
    ``dram_util`` (achieved DRAM bandwidth over the peak) are derived as well.
    """
    if kernels.empty:
        return pd.DataFrame(columns=[*RUN_KEY, "n_kernels"])
    sums = columns_with_rollup("sum")
    weighted = columns_with_rollup("time_weighted")
    main_cols = columns_with_rollup("main")
    rows = []
    for key, group in kernels.groupby(list(RUN_KEY), sort=False):
        duration = group["duration_ns"]
        compute = group[group["kernel_role"] == "compute"]
        candidates = compute if not compute.empty else group
        main = candidates.loc[candidates["duration_ns"].fillna(-1).idxmax()]
        row = dict(zip(RUN_KEY, key))
        row["n_kernels"] = len(group)
        row["main_kernel"] = main["kernel_name"]
        row["variant"] = main["kernel_variant"]
        total = duration.sum(min_count=1)
        row["main_kernel_share"] = float(main["duration_ns"] / total) if total and total > 0 else np.nan
        for col in sums:
            row[col] = group[col].sum(min_count=1)
        for col in weighted:
            row[col] = _weighted(group[col], duration)
        for col in main_cols:
            row[col] = main[col]
        rows.append(row)
    runs = pd.DataFrame(rows)
    runs["ncu_time_ms"] = runs["duration_ns"] / 1e6
    runs["shared_mem_bytes"] = runs["shared_mem_static_bytes"] + runs["shared_mem_dynamic_bytes"]
    limits = runs[["occupancy_limit_blocks", "occupancy_limit_registers", "occupancy_limit_shared_mem",
                   "occupancy_limit_warps"]]
    runs["blocks_per_sm"] = limits.min(axis=1, skipna=True)
    runs["achieved_occupancy"] = runs["achieved_occupancy_pct"] / 100
    for pct, frac in (("sm_util_pct", "sm_throughput_util"), ("dram_util_pct", "dram_throughput_util"),
                      ("fma_pipe_util_pct", "fma_pipe_util"), ("tensor_pipe_util_pct", "tensor_pipe_util")):
        runs[frac] = runs[pct] / 100
    # FMA math forbids tensor cores, so an fma run's tensor FLOPs are zero, not unmeasured.
    tensor = runs["tensor_ops_tf32"].where(runs["math"] != "fma", runs["tensor_ops_tf32"].fillna(0))
    runs["thread_flops"] = thread_flops(runs["inst_ffma"], runs["inst_fadd"], runs["inst_fmul"],
                                        runs["inst_hfma"])
    runs["tensor_flops"] = tensor
    runs["flops"] = runs["thread_flops"] + tensor
    runs["ncu_waves"] = runs["waves"]
    if spec is not None:
        # ncu prints waves with two decimals (a one-block grid shows 0.00): recompute them
        # exactly, as SEER defines them, from the grid and the resident blocks per SM.
        runs["waves"] = runs["grid_blocks"] / (runs["blocks_per_sm"] * spec.sm_count)
        seconds = runs["duration_ns"] * 1e-9
        # Utilisations as a roofline sees them: achieved rate over the GPU's peak rate.
        runs["dram_util"] = (runs["dram_read_bytes"] + runs["dram_write_bytes"]) / (
            seconds * spec.memory_bandwidth_bytes_per_s)
        tf32_peak = spec.peak_tf32_flops_per_s or np.inf
        runs["sm_util"] = (runs["thread_flops"] / spec.peak_fp32_flops_per_s + tensor / tf32_peak) / seconds
    return runs


# -- the tidy table -----------------------------------------------------------------------
def measurements_table(store: RunStore, seed: int = 0, spec: GPUSpec | None = None,
                       kernels: pd.DataFrame | None = None,
                       statuses: pd.DataFrame | None = None) -> pd.DataFrame:
    """The runs table of a dataset directory (see module docstring).

    ``kernels`` and ``statuses`` (from :func:`kernels_table` and
    :func:`profile_status_table`) are computed here unless given.
    """
    timing = store.read("timing", RUN_KEY)
    if timing.empty:
        return pd.DataFrame(columns=MEASUREMENT_COLUMNS)
    statuses = profile_status_table(store) if statuses is None else statuses
    kernels = kernels_table(store, statuses) if kernels is None else kernels
    runs = rollup_kernels(kernels, spec)
    table = timing.merge(runs, on=list(RUN_KEY), how="left")
    table = table.merge(statuses, on=list(RUN_KEY), how="left")
    shapes = table[list(SHAPE_COLUMNS)].astype(int)
    table["flops_analytic"] = [ConvShape.from_mapping(r).flops for r in shapes.to_dict("records")]
    if "flops" in table.columns:
        table["flops_ratio"] = table["flops"] / table["flops_analytic"]
    table["split"] = [split_of(s, g, seed) for s, g in zip(table["shape_id"], table["grid"])]
    # Rows from before protocols were recorded were timed one call at a time (protocol 1).
    table["timing_protocol"] = table.get("timing_protocol", pd.Series(1, index=table.index)).fillna(1).astype(int)
    for col in MEASUREMENT_COLUMNS:
        if col not in table.columns:
            table[col] = np.nan
    algo_order = {a.name: i for i, a in enumerate(ALGORITHMS)}
    table = table[MEASUREMENT_COLUMNS].copy()
    # Byte counts are exact integers: written as floats, "%.6g" would round them.
    table["workspace_bytes"] = table["workspace_bytes"].astype("Int64")
    table["_algo"] = table["algo"].map(algo_order)
    table = table.sort_values(["grid", "shape_id", "math", "_algo"]).drop(columns="_algo")
    return table.reset_index(drop=True)


KERNEL_KEY = [*RUN_KEY, "kernel_idx"]
KERNEL_INFO = ["kernel_name", "kernel_family", "kernel_role", "kernel_variant"]


def _group_records(store: RunStore) -> pd.DataFrame:
    """Kernel records, the latest profile of each (run, group) only."""
    raw = store.read("kernels")
    if raw.empty:
        return raw
    if "group" not in raw.columns:
        raw["group"] = ALL_GROUPS
    raw["group"] = raw["group"].fillna(ALL_GROUPS)
    latest = raw.groupby([*RUN_KEY, "group"])["collected_at"].transform("max")
    return raw[raw["collected_at"] == latest].drop_duplicates([*KERNEL_KEY, "group"], keep="last")


def profile_status_table(store: RunStore) -> pd.DataFrame:
    """One profile status per run, over the metric columns it needs.

    Each needed column comes from the latest record of a group that measures it (current
    or retired groups, see :data:`seer.metrics.GROUP_COLUMNS`). ``ok`` when every needed
    column is covered by ok records that all saw the same kernel sequence; ``inconsistent``
    when they did not; the record's own status (``error``, ``no_kernels``,
    ``too_many_kernels``) when the latest record for some column says so; ``partial``
    while some column has not been profiled yet.
    """
    profiles = profile_records(store)
    if profiles.empty:
        return pd.DataFrame(columns=[*RUN_KEY, "profile_status", "profile_detail"])
    kernels = _group_records(store)
    signatures = (kernels.assign(kernel_name=kernels["kernel_name"].map(canonical_kernel_name))
                  .sort_values("kernel_idx").groupby([*RUN_KEY, "group"])["kernel_name"].agg(tuple)
                  if not kernels.empty else pd.Series(dtype=object))
    rows = []
    for key, runs in profiles.groupby(list(RUN_KEY), sort=False):
        missing = set(required_columns("core", key[1]))
        status, detail = "ok", None
        seen = set()
        # Records are in the order they were stored: the latest one for a column wins.
        for record in reversed(runs.to_dict("records")):
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


def kernels_table(store: RunStore, statuses: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per kernel of every fully profiled run, with every group's metrics merged."""
    records = _group_records(store)
    if records.empty:
        return records
    statuses = profile_status_table(store) if statuses is None else statuses
    ok = statuses.loc[statuses["profile_status"] == "ok", list(RUN_KEY)]
    records = records.merge(ok, on=list(RUN_KEY))
    metric_columns = [m.column for m in METRICS]
    base = records.drop_duplicates(KERNEL_KEY)[[*KERNEL_KEY, *KERNEL_INFO, "gpu", "cudnn_version",
                                                 "collected_at"]]
    for column in metric_columns:
        # Each metric comes from the latest group that measured it (or an all-groups record).
        sources = [g for g in records["group"].unique() if column in recorded_columns(g)]
        values = records[records["group"].isin(sources)]
        if column in values.columns:
            values = values.dropna(subset=[column]).drop_duplicates(KERNEL_KEY, keep="last")
            base = base.merge(values[[*KERNEL_KEY, column]], on=KERNEL_KEY, how="left")
        else:
            base[column] = np.nan
    # One kernel, one name (ncu aliases some); roles and variants follow today's rules in
    # seer.algorithms, not those of collection time.
    base["kernel_name"] = base["kernel_name"].map(canonical_kernel_name)
    info = {name: classify_kernel(name) for name in base["kernel_name"].unique()}
    base["kernel_family"] = base["kernel_name"].map(lambda n: info[n].family)
    base["kernel_role"] = base["kernel_name"].map(lambda n: info[n].role)
    base["kernel_variant"] = base["kernel_name"].map(lambda n: info[n].variant)
    return base.sort_values(KERNEL_KEY).reset_index(drop=True)


# -- SEER's Excel layout ------------------------------------------------------------------
#: SEER's column order (its README, "Data Format"); seer reports bytes, not 32-byte transactions.
SEER_SHEET_COLUMNS = {
    "batch": "batch", "in_ch": "in_ch", "in_width": "in_width", "out_ch": "out_ch",
    "out_width": "out_width", "kernel_width": "kernel_width", "stride": "stride",
    "padding": "padding", "seer_algo_index": "algo_index", "time_ms": "time_ms",
    "flops": "fp32_flops", "dram_read_bytes": "dram_read_bytes",
    "dram_write_bytes": "dram_write_bytes", "b_max": "b_max", "grid_blocks": "grid_blocks",
    "whole_waves": "waves", "sm_util": "sm_util", "dram_util": "dram_util",
}


def _sheet_name(algo: str, variant: str, math: str, taken: set[str]) -> str:
    short = get_algorithm(algo).short
    compact = str(variant).replace("xmma_", "x").replace("cutlass_", "c").replace("sgemm_", "sg")
    name = f"{short}_{compact}_{math}"
    name = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    if len(name) > 31 or name.lower() in {t.lower() for t in taken}:
        base, n = name[:27], 1
        while f"{base}_{n}".lower() in {t.lower() for t in taken}:
            n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def seer_sheets(table: pd.DataFrame, sm_count: int) -> dict[str, pd.DataFrame]:
    """SEER-style sheets (one per algorithm, variant and math mode) and an ``index`` sheet."""
    profiled = table[(table["status"] == "ok") & (table["profile_status"] == "ok")].copy()
    profiled["seer_algo_index"] = profiled["algo"].map(lambda a: get_algorithm(a).seer_index)
    profiled["b_max"] = profiled["blocks_per_sm"] * sm_count
    profiled["whole_waves"] = np.ceil(profiled["grid_blocks"] / profiled["b_max"])
    sheets: dict[str, pd.DataFrame] = {}
    index_rows = []
    taken: set[str] = {"index"}
    for (algo, variant, math), group in profiled.groupby(["algo", "variant", "math"], sort=True):
        name = _sheet_name(algo, variant, math, taken)
        sheet = group[list(SEER_SHEET_COLUMNS)].rename(columns=SEER_SHEET_COLUMNS)
        sheets[name] = sheet.reset_index(drop=True)
        index_rows.append({"sheet": name, "algo": algo, "variant": variant, "math": math,
                           "rows": len(group), "main_kernel_example": group["main_kernel"].iloc[0]})
    return {"index": pd.DataFrame(index_rows), **sheets}


#: Timestamp written into Excel files, so that the same tables give the same bytes and a
#: rebuilt dataset does not show up as changed in git.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def write_excel(path: Path, sheets: dict[str, pd.DataFrame]) -> None:
    """Write sheets to an .xlsx file whose bytes depend on the sheets alone."""
    with pd.ExcelWriter(path, engine="openpyxl") as writer:
        for name, frame in sheets.items():
            frame.to_excel(writer, sheet_name=name, index=False)
        writer.book.properties.created = datetime(*_FIXED_TIME)
    # openpyxl stamps the zip members and the "modified" property with the time of saving.
    with zipfile.ZipFile(path) as source:
        members = [(info, source.read(info)) for info in source.infolist()]
    fixed = datetime(*_FIXED_TIME).strftime("%Y-%m-%dT%H:%M:%SZ")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for info, data in members:
            if info.filename == "docProps/core.xml":
                data = re.sub(rb"(<dcterms:modified[^>]*>)[^<]*", rb"\g<1>" + fixed.encode(), data)
            stamped = zipfile.ZipInfo(info.filename, date_time=_FIXED_TIME)
            stamped.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(stamped, data)


# -- Test-set-II --------------------------------------------------------------------------
def test_set_ii_times(table: pd.DataFrame) -> pd.DataFrame:
    """Measured time of every algorithm per Test-set-II layer and math mode, and the fastest."""
    t2 = table[table["split"] == "test2"]
    ok = t2[t2["status"] == "ok"]
    wide = ok.pivot_table(index=[*SEER_FIELDS, "math"], columns="algo", values="time_ms")
    order = [a.name for a in ALGORITHMS if a.name in wide.columns]
    wide = wide[order]
    wide["fastest_algo"] = wide.idxmin(axis=1)
    wide["fastest_ms"] = wide[order].min(axis=1)
    return wide.reset_index()


# -- census -------------------------------------------------------------------------------
#: Columns of census.csv.gz, in order (see :func:`census_table`).
CENSUS_COLUMNS = ["math", *SHAPE_COLUMNS, "shape_id", "grid", "algo", "status", "workspace_bytes",
                  "heuristic_rank", "heuristic_math_type"]


def census_table(store: RunStore) -> pd.DataFrame:
    """One row per (shape, math, algorithm) of the census records, latest record per key.

    ``status`` uses the vocabulary of the timing rows: ``ok`` (cuDNN accepts the algorithm
    with a workspace within the collection's cap), ``not_supported``,
    ``workspace_too_large`` or ``error``; ``heuristic_rank`` is 1 for cuDNN's first choice
    and ``heuristic_math_type`` the math type it would use (cudnnMathType_t).
    """
    records = store.read("census", CENSUS_KEY)
    if records.empty:
        return pd.DataFrame(columns=CENSUS_COLUMNS)
    algos = algorithm_names("cudnn")
    rows = []
    for record in records.to_dict("records"):
        shape = {c: int(record[c]) for c in SHAPE_COLUMNS}
        workspace = record.get("workspace_bytes")
        workspace = workspace if isinstance(workspace, dict) else {}
        errors = record.get("errors")
        errors = errors if isinstance(errors, dict) else {}
        heuristic = record.get("heuristic")
        heuristic = heuristic if isinstance(heuristic, list) else []
        ranks = heuristic_ranks(heuristic)
        math_types: dict[str, int] = {}
        for name, math_type in heuristic:
            math_types.setdefault(name, math_type)
        cap = record.get("workspace_cap_bytes")
        for algo in algos:
            if record.get("status") != "ok" or algo in errors:
                status = "error"
            elif algo not in workspace:
                status = "not_supported"
            elif cap is not None and workspace[algo] > cap:
                status = "workspace_too_large"
            else:
                status = "ok"
            rows.append({"math": record["math"], **shape, "shape_id": record["shape_id"], "grid": record["grid"],
                         "algo": algo, "status": status, "workspace_bytes": workspace.get(algo),
                         "heuristic_rank": ranks.get(algo), "heuristic_math_type": math_types.get(algo)})
    table = pd.DataFrame(rows, columns=CENSUS_COLUMNS)
    for column in ("workspace_bytes", "heuristic_rank", "heuristic_math_type"):
        table[column] = table[column].astype("Int64")
    return table.sort_values(["shape_id", "math", "algo"], kind="stable").reset_index(drop=True)


# -- provenance ---------------------------------------------------------------------------
def provenance(store: RunStore, table: pd.DataFrame, kernels: pd.DataFrame,
               census: pd.DataFrame | None = None) -> dict:
    sessions = store.sessions()
    probes = [s["probe"] for s in sessions if s.get("probe")]
    last = probes[-1] if probes else {}

    def distinct(key: str) -> list:
        return sorted({str(p.get(key)) for p in probes if p.get(key) is not None})

    def distinct_session(key: str) -> list:
        return sorted({str(s.get(key)) for s in sessions if s.get(key) is not None})

    ok = table[table["status"] == "ok"]
    return {
        "gpu": {"device_name": distinct("device_name"), "sm_count": last.get("sm_count"),
                "memory_bytes": last.get("memory_bytes"), "compute_capability": last.get("compute_capability"),
                "max_sm_clock_mhz": last.get("max_sm_clock_mhz"), "power_limit_w": last.get("power_limit_w")},
        "software": {"driver_version": distinct("driver_version"),
                     "cuda_runtime_version": distinct("cuda_runtime_version"),
                     "cudnn_version": distinct("cudnn_version"), "cudnn_library": distinct("cudnn_library"),
                     "ncu_version": distinct_session("ncu_version"), "cupy_version": distinct("cupy_version"),
                     "python": distinct("python")},
        "math_modes": {"fma": "CUDNN_FMA_MATH: strict FP32, no tensor cores",
                       "default": "CUDNN_DEFAULT_MATH: cuDNN may use TF32 tensor cores for fp32 data"},
        "method": {
            "data": "fp32 NCHW input and KCRS filter, random normal; cross-correlation, dilation 1",
            "timing": "timing_protocol 2 (seer.gpu.timing): CUDA events around bursts of back-to-back "
                      "forward calls (at least min_burst_ms of GPU work each), enqueued behind a spinning "
                      "kernel so that host work stays outside the timed region; one untimed warm-up "
                      "burst, then the median per-call time over bursts filling ~budget_ms within "
                      "[min_reps, max_reps]; same buffers each time (warm L2, as frameworks' benchmark "
                      "mode). Protocol 1 (one call between two events) is superseded.",
            "profiling_cap": "runs launching more than max_profile_kernels kernels per call are profiled "
                             "by the first metric group only (profile_status too_many_kernels)",
            "check": "relative L2 error of 4096 sampled outputs against a float64 direct computation; "
                     "output poisoned with NaN before the run; tolerance fma 5e-3, default 1e-2",
            "profiling": "Nsight Compute, kernel replay, --clock-control none, one NVTX range per run, "
                         "metrics listed in seer/metrics.py",
            "split": f"seeded hash of shape_id: {TEST_FRACTION:.0%} of shapes to Test-set-I; "
                     "grid test-set-ii is Test-set-II",
            "census": "seer collect --census: per shape and math mode, cudnnGetConvolutionForwardWorkspaceSize "
                      "for every algorithm and cudnnGetConvolutionForwardAlgorithm_v7's ranking; descriptors "
                      "only, no tensor allocated, no kernel run; shapes of no timed grid",
        },
        "sessions": [{k: s.get(k) for k in ("started_at", "finished_at", "command", "shard", "counts",
                                             "timing_seconds", "profiling_seconds", "ncu_groups",
                                             "census_seconds", "interrupted")} for s in sessions],
        "counts": {
            "runs": int(len(table)),
            "shapes": int(table["shape_id"].nunique()),
            "shapes_by_grid": {g: int(n) for g, n in table.groupby("grid")["shape_id"].nunique().items()},
            "status": {k: int(v) for k, v in Counter(table["status"]).items()},
            "ok_runs_by_math": {k: int(v) for k, v in ok.groupby("math").size().items()},
            "profiled_runs": int((table["profile_status"] == "ok").sum()),
            "profiled_shapes": int(table.loc[table["profile_status"] == "ok", "shape_id"].nunique()),
            "kernels": int(len(kernels)),
            "shapes_by_split": {k: int(v) for k, v in table.groupby("split")["shape_id"].nunique().items()},
            **({"census_shapes": int(census["shape_id"].nunique()), "census_answers": int(len(census)),
                "census_status": {k: int(v) for k, v in Counter(census["status"]).items()}}
               if census is not None and not census.empty else {}),
        },
        "first_collected_at": min((s["started_at"] for s in sessions), default=None),
        "last_collected_at": max((s.get("finished_at") or "" for s in sessions), default=None),
    }


# -- everything ---------------------------------------------------------------------------
@dataclass
class DatasetFiles:
    measurements: Path
    kernels: Path
    train_xlsx: Path
    test_xlsx: Path
    test_set_ii: Path | None
    provenance: Path
    rows: int
    census: Path | None = None


def build_dataset(dataset_dir: str | Path, gpu: str, seed: int = 0, pack: bool = False) -> DatasetFiles:
    """Write every derived file of a dataset directory from its raw records."""
    dataset_dir = Path(dataset_dir)
    spec = get_gpu_spec(gpu)
    store = RunStore(dataset_dir)
    if pack:
        store.pack("timing", RUN_KEY, sort_by=("grid", *RUN_KEY))
        store.pack("profiles", (*RUN_KEY, "group"))
        store.pack("kernels", (*RUN_KEY, "kernel_idx", "group"))
        store.pack("census", CENSUS_KEY)
    statuses = profile_status_table(store)
    kernels = kernels_table(store, statuses)
    table = measurements_table(store, seed, spec, kernels, statuses)
    out = DatasetFiles(dataset_dir / "measurements.csv.gz", dataset_dir / "kernels.csv.gz",
                       dataset_dir / "train.xlsx", dataset_dir / "test.xlsx", None,
                       dataset_dir / "provenance.json", len(table))
    _write_csv_gz(table, out.measurements)
    kernel_cols = [c for c in [*RUN_KEY, "kernel_idx", "kernel_name", "kernel_family", "kernel_role",
                               "kernel_variant", *[m.column for m in METRICS], "gpu", "cudnn_version"]
                   if c in kernels.columns]
    _write_csv_gz(kernels[kernel_cols] if not kernels.empty else kernels, out.kernels)
    sm_count = spec.sm_count
    for split, path in (("train", out.train_xlsx), ("test1", out.test_xlsx)):
        write_excel(path, seer_sheets(table[table["split"] == split], sm_count))
    if (table["grid"] == TEST_SET_II_GRID).any():
        t2 = table[table["grid"] == TEST_SET_II_GRID].drop_duplicates("shape_id")
        shapes = [ConvShape.from_mapping(r) for r in t2[list(SHAPE_COLUMNS)].astype(int).to_dict("records")]
        out.test_set_ii = dataset_dir / "Test-set-II.txt"
        write_shapes_file(out.test_set_ii, shapes)
        test_set_ii_times(table).to_csv(dataset_dir / "Test-set-II-times.csv", index=False,
                                        float_format="%.6g")
    census = census_table(store)
    if not census.empty:
        out.census = dataset_dir / "census.csv.gz"
        _write_csv_gz(census, out.census)
    out.provenance.write_text(json.dumps(provenance(store, table, kernels, census), indent=2) + "\n")
    return out


def _write_csv_gz(frame: pd.DataFrame, path: Path) -> None:
    # mtime 0 keeps the bytes identical for identical content (quiet git diffs).
    frame.to_csv(path, index=False, float_format="%.6g",
                 compression={"method": "gzip", "compresslevel": 9, "mtime": 0})


def load_measurements(path: str | Path) -> pd.DataFrame:
    """Read measurements.csv.gz with stable dtypes."""
    return pd.read_csv(path, low_memory=False)
