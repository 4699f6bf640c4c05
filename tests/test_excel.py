"""SEER's sheet layout and the byte-stable xlsx writer."""

import time

import numpy as np
import pandas as pd
import pytest

from seer.dataset.excel import SEER_SHEET_COLUMNS, seer_sheets, write_excel
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import SEER_FIELDS, layer_frame

SPEC = get_gpu_spec("h100")


def _runs() -> pd.DataFrame:
    """Four runs: two profiled IMPLICIT_GEMM runs of one variant, one profiled FFT run,
    and one run that was not profiled (NaN launch data), which no sheet shows."""
    runs = pd.DataFrame({
        "batch": [1, 8, 1, 1], "in_ch": 3, "in_width": 32, "out_ch": 16, "out_width": 32, "kernel_width": 3,
        "stride": 1, "padding": 1, "algo": ["IMPLICIT_GEMM", "IMPLICIT_GEMM", "FFT", "GEMM"],
        "variant": ["sm80_xmma_fprop_implicit_gemm_64x64", "sm80_xmma_fprop_implicit_gemm_64x64", "fft_32x32", None],
        "math": "fma", "status": "ok", "profile_status": ["ok", "ok", "ok", "partial"],
        "main_kernel": ["k1", "k1", "k2", None], "time_ms": [0.5, 1.0, 2.0, 3.0],
        "grid_blocks": [264.0, 265.0, 10.0, np.nan], "blocks_per_sm": [2.0, 2.0, 1.0, np.nan],
    })
    for column in ("flops", "dram_read_bytes", "dram_write_bytes", "sm_util", "dram_util"):
        runs[column] = 1.0
    # Tables carry the layer columns; SEER's eight are the sheets' own.
    return pd.concat([runs.drop(columns=list(SEER_FIELDS)), layer_frame(runs)], axis=1)


def test_sheets_hold_profiled_runs_with_b_max_and_whole_waves():
    sheets = seer_sheets(_runs(), SPEC)
    index = sheets["index"]
    assert list(sheets)[0] == "index" and list(index["sheet"]) == list(sheets)[1:]
    assert list(index["algo"]) == ["FFT", "IMPLICIT_GEMM"] and index["rows"].sum() == 3
    ig = sheets[index.loc[index["algo"] == "IMPLICIT_GEMM", "sheet"].item()]
    assert list(ig.columns) == list(SEER_SHEET_COLUMNS.values())
    # B_max = blocks per SM x SMs; whole waves round up: 264 blocks fill 2 x 132 once, 265 twice.
    assert list(ig["b_max"]) == [2 * SPEC.sm_count] * 2 and list(ig["waves"]) == [1, 2]
    assert list(ig["algo_index"]) == [ig["algo_index"].iloc[0]] * 2


def test_sheet_names_fit_excel_and_stay_unique():
    runs = _runs().iloc[:2].copy()
    runs["variant"] = ["x" * 40 + "a", "x" * 40 + "b"]
    names = list(seer_sheets(runs, SPEC))[1:]
    assert len(names) == 2 and len(set(n.lower() for n in names)) == 2
    assert all(len(n) <= 31 for n in names)


def test_sheets_refuse_impossible_occupancy():
    runs = _runs()
    runs.loc[0, "blocks_per_sm"] = 0.0
    with pytest.raises(ValueError, match="blocks_per_sm"):
        seer_sheets(runs, SPEC)


@pytest.mark.slow
def test_excel_files_depend_only_on_their_sheets(tmp_path):
    sheets = {"index": pd.DataFrame({"sheet": ["IG_x_fma"], "rows": [2]}),
              "IG_x_fma": pd.DataFrame({"batch": [1, 8], "time_ms": [0.5, 1.25]})}
    first, second = tmp_path / "a.xlsx", tmp_path / "b.xlsx"
    write_excel(first, sheets)
    time.sleep(1.1)  # zip timestamps have a resolution of two seconds, properties of one
    write_excel(second, sheets)
    assert first.read_bytes() == second.read_bytes()
    back = pd.read_excel(first, sheet_name=None)
    assert list(back) == ["index", "IG_x_fma"]
    pd.testing.assert_frame_equal(back["IG_x_fma"], sheets["IG_x_fma"])
