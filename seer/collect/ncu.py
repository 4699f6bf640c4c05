"""Nsight Compute: the command line seer runs, and the reader of its raw CSV.

Every profiled forward call sits in an NVTX push/pop range named by :func:`range_name`
(``seer_<shape_id>_<math>_<algo>``); ncu profiles only kernels inside such ranges and
writes the range into each kernel's row, so a kernel maps to its run without guessing
from names. The raw CSV (``--csv --page raw``) has ``==PROF==`` lines before the header,
a units row after it, and thousands separators in numbers; :func:`read_ncu_csv` handles
all three with pandas and returns one row per kernel.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from glob import glob
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from seer.algorithms import classify_kernel
from seer.errors import EnvironmentProblem, InputError
from seer.metrics import METRICS, ncu_metric_names
from seer.schema import KERNEL_INFO_COLUMNS, RUN_KEY

RANGE_PREFIX = "seer_"
_RANGE_RE = re.compile(r"seer_(?P<shape_id>[0-9a-f]{12})_(?P<math>[a-z_]+?)_(?P<algo>[A-Z][A-Z0-9_]*)")
_NVTX_COLUMN_PREFIX = "thread Domain:Push/Pop_Range"


def range_name(shape_id: str, math: str, algo: str) -> str:
    """NVTX range name of one (shape, math, algorithm) run."""
    return f"{RANGE_PREFIX}{shape_id}_{math}_{algo}"


def find_ncu(explicit: str | None = None) -> str:
    """Path of the ncu executable, or EnvironmentProblem in one sentence."""
    if explicit:
        if Path(explicit).exists() or shutil.which(explicit):
            return shutil.which(explicit) or explicit
        raise EnvironmentProblem(f"ncu not found at {explicit}.")
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob("/opt/nvidia/nsight-compute/*/ncu")) + sorted(glob("/usr/local/cuda*/bin/ncu"))
    if candidates:
        return candidates[-1]
    raise EnvironmentProblem(
        "Nsight Compute (ncu) is not installed or not on PATH; install it, pass --ncu PATH, "
        "or collect timings only with --profile-shapes 0.")


def ncu_version(ncu: str) -> str:
    out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"Version\s+([\w.\-]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


REPLAY_MODES = ("kernel", "application")
CACHE_CONTROLS = ("all", "none")


def ncu_command(ncu: str, log_file: str | Path, app: Sequence[str], metrics: Sequence[str],
                replay_mode: str = "kernel", cache_control: str = "all") -> list[str]:
    """ncu invocation that profiles only seer's NVTX ranges and writes raw CSV to log_file.

    Clocks are left as the card has them (``--clock-control none``): a shared machine's
    settings are not ours to change, and timing outside ncu sees the same clocks.
    ``replay_mode="application"`` reruns the whole worker once per counter pass instead
    of saving and restoring memory around every kernel; ``cache_control="all"`` flushes
    the caches before each pass, so DRAM traffic is that of a cold start.
    """
    return [
        ncu,
        "--target-processes", "all",
        "--nvtx", "--nvtx-include", f"regex:{RANGE_PREFIX}[0-9a-f]+_[a-z_]+_[A-Z_]+/",
        "--metrics", ",".join(metrics),
        "--clock-control", "none",
        "--cache-control", cache_control,
        "--replay-mode", replay_mode,
        "--csv", "--page", "raw",
        "--log-file", str(log_file),
        *app,
    ]


def read_ncu_csv(source: str | Path | io.TextIOBase) -> pd.DataFrame:
    """Read ncu's ``--csv --page raw`` output into one row per profiled kernel.

    Lines before the header (``==PROF==``, warnings) are skipped, the units row is dropped
    and thousands separators are parsed. A file with no header (ncu profiled nothing)
    gives an empty frame; a file that is not ncu CSV at all raises InputError.
    """
    name = str(source) if not isinstance(source, io.TextIOBase) else "<stream>"
    text = source.read() if isinstance(source, io.TextIOBase) else Path(source).read_text(errors="replace")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        if any(line.startswith("==ERROR==") for line in lines):
            errors = [line for line in lines if line.startswith("==ERROR==")]
            raise InputError("ncu reported errors: " + " | ".join(errors[:3]), path=name)
        return pd.DataFrame()
    # Only rows that start with a quoted field belong to the table: the header, the units
    # row right after it, and one row per kernel; ==PROF== and ==WARNING== lines do not.
    table = [line for line in lines[start:] if line.startswith('"')]
    body = "\n".join(table[:1] + table[2:])
    return pd.read_csv(io.StringIO(body), thousands=",", na_values=["n/a"], low_memory=False)


def _nvtx_column(frame: pd.DataFrame) -> str | None:
    return next((c for c in frame.columns if c.startswith(_NVTX_COLUMN_PREFIX)), None)


def kernels_from_ncu(raw: pd.DataFrame) -> pd.DataFrame:
    """Tidy kernels table: run key from the NVTX range, kernel name and role, metric columns.

    Columns: ``shape_id, math, algo, kernel_idx, kernel_name, kernel_family, kernel_role,
    kernel_variant`` and one column per entry of :data:`seer.metrics.METRICS` (NaN where
    ncu did not report the metric). Kernels outside a seer range are dropped.
    """
    columns = [*RUN_KEY, "kernel_idx", *KERNEL_INFO_COLUMNS, *(m.column for m in METRICS)]
    if raw.empty:
        return pd.DataFrame(columns=columns)
    nvtx = _nvtx_column(raw)
    if nvtx is None:
        raise InputError("ncu CSV has no NVTX column: was ncu run with --nvtx?")
    keys = raw[nvtx].astype(str).str.extract(_RANGE_RE)
    out = pd.DataFrame({
        "shape_id": keys["shape_id"], "math": keys["math"], "algo": keys["algo"],
        "ncu_id": raw["ID"], "kernel_name": raw["Kernel Name"].astype(str),
    })
    for m in METRICS:
        if m.ncu_name in raw.columns:
            out[m.column] = pd.to_numeric(raw[m.ncu_name], errors="coerce")
        else:
            out[m.column] = np.nan
    out = out.dropna(subset=["shape_id"]).sort_values("ncu_id", kind="stable")
    out["kernel_idx"] = out.groupby(list(RUN_KEY), sort=False).cumcount()
    info = out["kernel_name"].map(classify_kernel)
    out["kernel_family"] = info.map(lambda i: i.family)
    out["kernel_role"] = info.map(lambda i: i.role)
    out["kernel_variant"] = info.map(lambda i: i.variant)
    return out[columns].reset_index(drop=True)


def missing_metrics(raw: pd.DataFrame, requested: Sequence[str] | None = None) -> list[str]:
    """Requested ncu metrics that the CSV does not contain (unknown on this chip)."""
    return [name for name in (requested or ncu_metric_names()) if name not in raw.columns]

