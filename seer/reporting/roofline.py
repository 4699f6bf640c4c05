"""The hierarchical roofline: each profiled run's arithmetic intensity at DRAM, L2 and L1
against its achieved FLOP/s, under the GPU's measured ceilings (``seer roofline``).

As in the hierarchical roofline of Nsight Compute's method (Yang et al.): FLOPs are the
FP32 thread instructions (FMA counted twice: :func:`seer.metrics.thread_flops`) plus the
tensor path's TF32 operations; bytes are ``dram__bytes``, ``lts__t_bytes`` and
``l1tex__t_bytes``; time is the kernels' duration under ncu. The ceilings are measured
by ``seer ceilings`` into ``DATA/GPU/ceilings.json`` (:mod:`seer.gpu.ceilings`), with the
datasheet's figures beside them; a GPU not measured yet may be drawn under its datasheet's
peaks (FP32, TF32 and DRAM only: a datasheet gives no L2 or L1 bandwidth). Every pass: the
backward-data and backward-filter runs are drawn as the forward's, one plot per pass and math.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import PASS_TITLES, get_algorithm
from seer.dataset.build import read_measurements
from seer.errors import InputError
from seer.gpu.ceilings import CEILINGS
from seer.hardware.gpus import GPUSpec
from seer.layers.shapes import LAYER_COLUMNS
from seer.output import AtomicOutput
from seer.schema import MEASUREMENT_COLUMNS, PASS_COLUMN, DatasetDir


@dataclass(frozen=True)
class Level:
    name: str
    bytes_columns: tuple[str, ...]  # of the measurements table, summed
    ceiling: str  # key of the measured ceilings


LEVELS = (
    Level("DRAM", ("dram_read_bytes", "dram_write_bytes"), "dram_bytes"),
    Level("L2", ("l2_bytes",), "l2_bytes"),
    Level("L1", ("l1_bytes",), "l1_bytes"),
)
#: Columns of roofline.csv, one row per profiled run.
POINT_COLUMNS = ("math", PASS_COLUMN, *LAYER_COLUMNS, "shape_id", "algo", "variant", "time_ms", "ncu_time_ms", "flops",
                 "flops_per_s", *(f"{lv.name.lower()}_bytes" for lv in LEVELS),
                 *(f"ai_{lv.name.lower()}" for lv in LEVELS))


def write_ceilings(dataset_dir: Path, spec: GPUSpec, measured: dict[str, float], machine: dict,
                   argv: list[str]) -> Path:
    """Store measured ceilings beside the datasheet's, with the machine and command."""

    record = {
        "gpu": spec.name, "measured": measured,
        "datasheet": datasheet_ceilings(spec),
        "method": {name: f"{unit}: {how}" for name, (unit, how) in CEILINGS.items()},
        "machine": machine, "command": "seer " + " ".join(argv),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    path = DatasetDir(dataset_dir).ceilings
    path.parent.mkdir(parents=True, exist_ok=True)  # as `seer collect` makes DATA_DIR/GPU/
    with AtomicOutput(path) as handle:
        json.dump(record, handle, indent=1)
    return path


def read_ceilings(dataset_dir: Path) -> dict:
    path = DatasetDir(dataset_dir).ceilings
    if not path.exists():
        raise InputError("no measured ceilings; run `seer ceilings --gpu GPU` on that GPU first, or draw the "
                         "datasheet's peaks (`seer roofline --ceilings datasheet`)", path=path)
    try:
        record = json.loads(path.read_text())
        measured = {k: float(v) for k, v in record["measured"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"not a ceilings file ({type(exc).__name__}: {exc})", path=path) from None
    return {**record, "measured": measured}


def roofline_points(measurements: pd.DataFrame) -> pd.DataFrame:
    """One row per successful, profiled run: FLOP/s achieved and intensity at each level."""
    needed = ["flops", "ncu_time_ms", *(c for lv in LEVELS for c in lv.bytes_columns)]
    if measurements.empty or any(c not in measurements.columns for c in needed):
        return pd.DataFrame(columns=list(POINT_COLUMNS))
    runs = measurements[(measurements["status"] == "ok") & measurements[needed].notna().all(axis=1)
                        & (measurements["ncu_time_ms"] > 0) & (measurements["flops"] > 0)].copy()
    runs["flops_per_s"] = runs["flops"] / (runs["ncu_time_ms"] * 1e-3)
    for lv in LEVELS:
        key = lv.name.lower()
        runs[f"{key}_bytes"] = runs[list(lv.bytes_columns)].sum(axis=1)
        with np.errstate(divide="ignore"):
            runs[f"ai_{key}"] = runs["flops"] / runs[f"{key}_bytes"].where(runs[f"{key}_bytes"] > 0)
    return runs.reindex(columns=list(POINT_COLUMNS)).reset_index(drop=True)


#: Columns of the measurements table the points are made of (the pass is the algorithm's).
RUN_COLUMNS = tuple(dict.fromkeys(c for c in (*POINT_COLUMNS, "status", *(c for lv in LEVELS for c in lv.bytes_columns))
                                  if c in MEASUREMENT_COLUMNS or c == PASS_COLUMN))

#: Where the ceilings drawn come from: ``seer ceilings``'s measurement, or the GPU's datasheet.
CEILING_SOURCES = ("measured", "datasheet")


def datasheet_ceilings(spec: GPUSpec) -> dict:
    """The datasheet's peaks in the shape of :func:`read_ceilings`'s ``measured``: FP32 and TF32
    FLOP/s and DRAM bytes/s (no L2 or L1 bandwidth: datasheets give none)."""
    return {"fp32_gemm_flops": spec.peak_fp32_flops_per_s, "tf32_gemm_flops": spec.peak_tf32_flops_per_s,
            "dram_bytes": spec.memory_bandwidth_bytes_per_s}


def write_roofline(dataset_dir: Path, spec: GPUSpec, out_dir: Path, algos: Sequence[str], maths: Sequence[str],
                   shape_ids: set[str] | None = None, ceilings: str = "measured") -> list[Path]:
    """``out_dir/roofline.csv`` and one plot per pass and math mode, of the dataset's profiled
    runs of these algorithms (of any pass) and math modes (and layers, by shape_id), under the
    ``ceilings`` of :data:`CEILING_SOURCES`; the files written."""
    if ceilings not in CEILING_SOURCES:
        raise InputError(f"unknown ceilings {ceilings!r}; choose one of: {', '.join(CEILING_SOURCES)}",
                         field="ceilings")
    lines = read_ceilings(dataset_dir)["measured"] if ceilings == "measured" else datasheet_ceilings(spec)
    passes = {get_algorithm(a).pass_ for a in algos}
    runs = read_measurements(DatasetDir(dataset_dir).measurements, columns=RUN_COLUMNS, passes=passes)
    runs = runs[runs["algo"].isin(algos) & runs["math"].isin(maths)]
    if shape_ids is not None:
        runs = runs[runs["shape_id"].isin(shape_ids)]
    points = roofline_points(runs)
    if points.empty:
        raise InputError("no profiled run matches (profile with `seer collect --profile-shapes`)", field="layers")
    out_dir.mkdir(parents=True, exist_ok=True)
    with AtomicOutput(out_dir / "roofline.csv") as handle:
        points.to_csv(handle, index=False, float_format="%.6g")
    with AtomicOutput(out_dir / "summary.csv") as handle:
        roofline_summary(points, lines).to_csv(handle, index=False, float_format="%.4g")
    written = [out_dir / "roofline.csv", out_dir / "summary.csv"]
    for (pass_, math), group in points.groupby([PASS_COLUMN, "math"], sort=False, observed=True):
        stem = f"roofline-{math}" if pass_ == "fwd" else f"roofline-{pass_}-{math}"
        of_pass = f"{PASS_TITLES[pass_]}, " if PASS_TITLES[pass_] else ""  # the forward's title is empty
        title = f"{spec.display_name}, {of_pass}{math} math: {len(group)} profiled runs"
        written.append(plot_roofline(group, lines, out_dir / f"{stem}.png", title, ceilings))
    return written


def roofline_summary(points: pd.DataFrame, ceilings: dict[str, float]) -> pd.DataFrame:
    """Per pass, math mode and algorithm: its profiled runs, the median and 90th percentile of
    the FLOP/s they achieved, the median's share of the FP32 ceiling, the median intensity at
    each level, and the share of runs left of the DRAM ridge of the FP32 ceiling (below it, DRAM
    bandwidth bounds a run before FP32 compute does)."""
    fp32 = ceilings["fp32_gemm_flops"]
    ridge = fp32 / ceilings["dram_bytes"]
    grouped = points.groupby([PASS_COLUMN, "math", "algo"], observed=True)
    summary = grouped.agg(runs=("flops_per_s", "size"), median_flops_per_s=("flops_per_s", "median"),
                          p90_flops_per_s=("flops_per_s", lambda x: x.quantile(0.9)),
                          **{f"median_ai_{lv.name.lower()}": (f"ai_{lv.name.lower()}", "median") for lv in LEVELS})
    summary.insert(3, "median_share_of_fp32", summary["median_flops_per_s"] / fp32)
    summary["share_dram_bound"] = grouped["ai_dram"].apply(lambda x: float((x < ridge).mean()))
    return summary.reset_index()


def plot_roofline(points: pd.DataFrame, ceilings: dict[str, float], path: Path, title: str,
                  source: str = "measured") -> Path:
    """One panel per memory level: the ``ceilings`` (compute flat, bandwidth sloped where
    known; ``source`` says whence) and every run as a point, one colour per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seer.output import AtomicOutput

    fig, axes = plt.subplots(1, len(LEVELS), figsize=(5.2 * len(LEVELS), 4.6), constrained_layout=True, sharey=True)
    algos = list(dict.fromkeys(points["algo"]))
    colours = {a: plt.cm.tab10(i % 10) for i, a in enumerate(algos)}
    markers = {a: "o" if get_algorithm(a).source == "cupy" else "s" for a in algos}  # seer's kernels round
    ai_range = np.logspace(-2, 4, 200)
    for ax, lv in zip(axes, LEVELS):
        key = lv.name.lower()
        bandwidth = ceilings.get(lv.ceiling, np.inf)  # none: the compute ceilings alone
        for name, style in (("fp32_gemm_flops", "-"), ("tf32_gemm_flops", ":")):
            peak = ceilings[name]
            ax.loglog(ai_range, np.minimum(peak, bandwidth * ai_range), "k", ls=style, lw=1,
                      label=f"{name.split('_')[0].upper()} {'GEMM' if source == 'measured' else 'peak'} "
                            f"{peak / 1e12:.0f} TFLOP/s")
        for algo in algos:
            p = points[points["algo"] == algo]
            ax.loglog(p[f"ai_{key}"], p["flops_per_s"], markers[algo], ms=3.5, alpha=0.7, color=colours[algo],
                      label=algo)
        heading = f"{bandwidth / 1e12:.1f} TB/s {source}" if np.isfinite(bandwidth) else f"no {source} bandwidth"
        ax.set(title=f"{lv.name}: {heading}", xlabel=f"FLOP per {lv.name} byte")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("FLOP/s achieved")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title)
    with AtomicOutput(path, binary=True) as handle:
        fig.savefig(handle, dpi=110, format="png")
    plt.close(fig)
    return path
