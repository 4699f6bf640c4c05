"""SEER's Excel files: its sheet layout, and an xlsx writer whose bytes depend on the sheets alone.

SEER (its README, "Data Format") reads one sheet per algorithm and kernel variant, with
the shape, the time and the profile of each run in a fixed column order. seer writes one
such sheet per (algorithm, variant, math mode) of the successfully profiled runs, plus an
``index`` sheet naming them. The writer fixes every timestamp openpyxl stamps, so a
rebuilt dataset does not show up as changed in git.
"""

from __future__ import annotations

import re
import zipfile
from datetime import datetime
from pathlib import Path

import pandas as pd

from seer.algorithms import get_algorithm
from seer.hardware.gpus import GPUSpec
from seer.hardware.occupancy import b_max, whole_waves
from seer.layers.shapes import is_seer_layer, seer_frame

#: SEER's column order, and seer's column each comes from; seer reports bytes, not
#: 32-byte transactions.
SEER_SHEET_COLUMNS = {
    "batch": "batch", "in_ch": "in_ch", "in_width": "in_width", "out_ch": "out_ch",
    "out_width": "out_width", "kernel_width": "kernel_width", "stride": "stride",
    "padding": "padding", "seer_algo_index": "algo_index", "time_ms": "time_ms",
    "flops": "fp32_flops", "dram_read_bytes": "dram_read_bytes",
    "dram_write_bytes": "dram_write_bytes", "b_max": "b_max", "grid_blocks": "grid_blocks",
    "whole_waves": "waves", "sm_util": "sm_util", "dram_util": "dram_util",
}
#: Excel's limit on the length of a sheet name.
MAX_SHEET_NAME = 31


def _sheet_name(algo: str, variant: str, math: str, taken: set[str]) -> str:
    """A short name, unique (case-insensitively, as Excel compares) among ``taken``."""
    short = get_algorithm(algo).short
    compact = str(variant).replace("xmma_", "x").replace("cutlass_", "c").replace("sgemm_", "sg")
    name = f"{short}_{compact}_{math}"
    name = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    if len(name) > MAX_SHEET_NAME or name.lower() in {t.lower() for t in taken}:
        base, n = name[:MAX_SHEET_NAME - 4], 1
        while f"{base}_{n}".lower() in {t.lower() for t in taken}:
            n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def seer_sheets(table: pd.DataFrame, spec: GPUSpec) -> dict[str, pd.DataFrame]:
    """SEER-style sheets of a measurements table and an ``index`` sheet, first.

    One sheet per (algorithm, variant, math mode) of the runs of square 2D layers (those
    SEER's eight numbers describe) that succeeded and were profiled. ``b_max`` (blocks the whole GPU holds) and ``waves`` (whole waves, as SEER
    counts them) come from the run's resident blocks per SM and ``spec``'s SM count.
    """
    profiled = table[(table["status"] == "ok") & (table["profile_status"] == "ok")]
    profiled = profiled[is_seer_layer(profiled)].copy()  # SEER's sheets describe square 2D layers
    eight = seer_frame(profiled)
    for name in ("in_width", "out_width", "kernel_width", "stride", "padding"):
        profiled[name] = eight[name]
    profiled["seer_algo_index"] = profiled["algo"].map(lambda a: get_algorithm(a).seer_index)
    profiled["b_max"] = b_max(profiled["blocks_per_sm"], spec.sm_count)
    profiled["whole_waves"] = whole_waves(profiled["grid_blocks"], profiled["blocks_per_sm"], spec.sm_count)
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


#: Timestamp written into Excel files, so that the same sheets give the same bytes.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def write_excel(path: Path, sheets: dict[str, pd.DataFrame]) -> None:
    """Write sheets, in order, to an .xlsx file whose bytes depend on the sheets alone."""
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
