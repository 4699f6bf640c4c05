"""The provenance record of a dataset (``provenance.json``): where, how and when it was measured.

It gathers what the collection sessions logged (GPU, driver, CUDA, cuDNN, ncu and Python
versions, commands, dates), how runs were timed, checked, profiled and split, and counts
of what the tables hold, so that a reader of the dataset need not trust the code of the
day it was built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from seer.algorithms import PASSES, pass_of
from seer.collect.store import RunStore
from seer.schema import MATH_MODES, RUN_KEY


def _tolerance(value: float) -> str:
    """A tolerance as the record writes it: ``5e-3``."""
    return np.format_float_scientific(value, trim="-", exp_digits=1)


def _counts(values: pd.Series) -> dict:
    """How often each value occurs, values in the order they first appear."""
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    return dict(zip(distinct.tolist(), np.bincount(codes, minlength=len(distinct)).tolist()))


def _census_counts(census: pd.DataFrame) -> dict[str, Any]:
    # Statuses in the order they first appear by key, whatever the order of the rows.
    statuses = _counts(census[[*RUN_KEY, "status"]].sort_values(list(RUN_KEY), kind="stable")["status"])
    counts = {"census_shapes": int(census["shape_id"].nunique()), "census_answers": int(len(census)),
              "census_status": statuses}
    passes = pass_of(census["algo"])
    if (passes != "fwd").any():  # a census of the forward alone is counted as before there were others
        counts["census_answers_by_pass"] = {p: int(n) for p in PASSES if (n := (passes == p).sum())}
    return counts


def provenance(store: RunStore, table: pd.DataFrame, kernels: pd.DataFrame, census: pd.DataFrame | None = None,
               *, test_fraction: float, test_set_ii_grids: tuple[str, ...],
               sparse: pd.DataFrame | None = None) -> dict[str, Any]:
    """The provenance record of a dataset, as JSON-ready values.

    Parameters
    ----------
    store : RunStore
        The raw records; their session log names machine, software and commands.
    table, kernels, census : pandas.DataFrame
        The measurements, kernels and census tables built from ``store`` (census may be
        None or empty where none was collected).
    test_fraction : float
        Share of the training grids' shapes the split puts into Test-set-I.
    test_set_ii_grids : tuple of str
        The grids whose shapes are Test-set-II.
    sparse : pandas.DataFrame, optional
        The runs on sparse inputs (the sparse measurements table); counted only where there
        are some, so that a dataset without them keeps the record it had.
    """
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
        "math_modes": {m.name: f"{m.cudnn_name}: {m.description}" for m in MATH_MODES},
        "method": {
            "data": "fp32 NCHW (NCDHW) input and K,C/groups,(T),R,S filter, random normal; cross-correlation; "
                    "cuDNN's Nd descriptors with per-axis padding, stride and dilation and a group count",
            "timing": "timing_protocol 2 (seer.gpu.timing): CUDA events around bursts of back-to-back "
                      "forward calls (at least min_burst_ms of GPU work each), enqueued behind a spinning "
                      "kernel so that host work stays outside the timed region; one untimed warm-up "
                      "burst, then the median per-call time over bursts filling ~budget_ms within "
                      "[min_reps, max_reps]; same buffers each time (warm L2, as frameworks' benchmark "
                      "mode). Protocol 1 (one call between two events) is superseded.",
            "profiling_cap": "runs launching more than max_profile_kernels kernels per call are profiled "
                             "by the first metric group only, or not at all where the run's CUPTI trace counted them "
                             "(profile_status too_many_kernels)",
            "check": "relative L2 error of 4096 sampled outputs against a float64 direct computation; "
                     "output poisoned with NaN before the run; tolerance "
                     + ", ".join(f"{m.name} {_tolerance(m.tolerance)}" for m in MATH_MODES),
            "tracing": "after timing, one more call of each timed run under CUPTI's kernel activity "
                       "(seer.gpu.tracing, cupti-python): every kernel's name, duration and launch "
                       "configuration, launches of one name summed (traced_kernels/); runs timed "
                       "before tracing existed have trace_status empty",
            "profiling": "Nsight Compute, kernel replay, --clock-control none, one NVTX range per run, "
                         "metrics listed in seer/metrics.py",
            "split": f"seeded hash of shape_id: {test_fraction:.0%} of shapes to Test-set-I; "
                     f"grids {', '.join(test_set_ii_grids)} are Test-set-II",
            "energy": "seer collect --energy S (seer.gpu.energy): NVML's total-energy counter (mJ; it steps "
                      "about every 100 ms on the H100) read at its first and last step within about S seconds of "
                      "back-to-back calls, after 0.25 s of calls to settle; power_w = energy / host time between "
                      "the two steps, energy_mj = power_w x the run's median time; the board's power, static "
                      "included",
            "own_kernels": "algorithms SEER_*: seer's CuPy kernels (seer.gpu.kernels), FP32 FMA arithmetic under "
                           "either math mode; timed, checked, traced and profiled like cuDNN's",
            "census": "seer collect --census: per shape and math mode, cudnnGetConvolutionForwardWorkspaceSize "
                      "for every algorithm and cudnnGetConvolutionForwardAlgorithm_v7's ranking; descriptors "
                      "only, no tensor allocated, no kernel run; shapes of no timed grid",
            # Said only where the census holds the backward passes: a forward census's record stays as it was.
            **({"census_backward": "seer collect --census --algo backward: the same per backward pass, "
                                   "cudnnGetConvolutionBackward{Data,Filter}WorkspaceSize for every algorithm of "
                                   "the pass and cudnnGetConvolutionBackward{Data,Filter}Algorithm_v7's ranking"}
               if census is not None and not census.empty and (pass_of(census["algo"]) != "fwd").any() else {}),
        },
        "sessions": [{k: s.get(k) for k in ("started_at", "finished_at", "command", "shard", "counts",
                                             "timing_seconds", "profiling_seconds", "ncu_groups",
                                             "census_seconds", "interrupted")} for s in sessions],
        "counts": {
            "runs": int(len(table)),
            "shapes": int(table["shape_id"].nunique()),
            "shapes_by_grid": {g: int(n) for g, n in table.groupby("grid")["shape_id"].nunique().items()},
            "status": _counts(table["status"]),
            "ok_runs_by_math": {k: int(v) for k, v in ok.groupby("math").size().items()},
            "profiled_runs": int((table["profile_status"] == "ok").sum()),
            "profiled_shapes": int(table.loc[table["profile_status"] == "ok", "shape_id"].nunique()),
            "kernels": int(len(kernels)),
            "traced_runs": int((table["trace_status"] == "ok").sum()) if "trace_status" in table else 0,
            "shapes_by_split": {k: int(v) for k, v in table.groupby("split")["shape_id"].nunique().items()},
            **(_census_counts(census) if census is not None and not census.empty else {}),
            **(_sparse_counts(sparse) if sparse is not None and not sparse.empty else {}),
        },
        "first_collected_at": min((s["started_at"] for s in sessions), default=None),
        "last_collected_at": max((s.get("finished_at") or "" for s in sessions), default=None),
    }


def _sparse_counts(sparse: pd.DataFrame) -> dict[str, Any]:
    """Counts of the runs on sparse inputs: runs, sparse shapes, their layers, and statuses."""
    return {"sparse_runs": int(len(sparse)), "sparse_shapes": int(sparse["shape_id"].nunique()),
            "sparse_layers": int(sparse["dense_shape_id"].nunique()), "sparse_status": _counts(sparse["status"])}
