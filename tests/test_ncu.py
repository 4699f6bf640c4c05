"""Reading Nsight Compute's raw CSV, on a real capture from the H100 (ncu 2025.3.1)."""

import gzip
import io

import pandas as pd
import pytest

from conftest import DATA
from seer.collect.ncu import (kernels_from_ncu, missing_metrics, ncu_command, range_name, read_ncu_csv)
from seer.errors import InputError
from seer.layers.grids import quick_grid
from seer.metrics import (GROUP_COLUMNS, METRICS, PROFILE_GROUPS, RETIRED_GROUPS, ncu_metric_names, required_columns)

CAPTURE = DATA / "ncu-raw-quick-h100.csv.gz"


@pytest.fixture(scope="module")
def raw():
    return read_ncu_csv(io.StringIO(gzip.open(CAPTURE, "rt").read()))


def test_header_units_row_and_thousands_separators(raw):
    # 80 kernels; the units row ("", ..., "byte", "nsecond") is not a kernel.
    assert len(raw) == 80 and raw["ID"].tolist() == sorted(raw["ID"])
    assert pd.api.types.is_integer_dtype(raw["gpu__time_duration.sum"])
    first = raw.iloc[0]
    # Printed by ncu as "22,816" and "627,456".
    assert first["gpu__time_duration.sum"] == 22816 and first["dram__bytes_read.sum"] == 627456
    # The capture predates the FP16 add/multiply and FP64 counters, which profiles may lack.
    assert set(missing_metrics(raw, [m.ncu_name for m in METRICS])) == {m.ncu_name for m in METRICS if not m.required}


def test_kernels_map_to_their_run_through_nvtx(raw):
    kernels = kernels_from_ncu(raw)
    assert len(kernels) == 80
    runs = kernels.groupby(["shape_id", "math", "algo"]).size()
    assert runs.loc[("0051ed247c1d", "fma", "FFT_TILING")] == 13
    assert runs.loc[("1481ad061071", "default", "IMPLICIT_GEMM")] == 1
    # kernel_idx counts launches within each run, in launch order.
    for _, group in kernels.groupby(["shape_id", "math", "algo"]):
        assert group["kernel_idx"].tolist() == list(range(len(group)))
    first = kernels.iloc[0]
    assert (first["algo"], first["math"], first["kernel_family"]) == ("IMPLICIT_GEMM", "fma", "implicit_sgemm")


def test_fp32_instruction_count_equals_the_analytic_multiply_adds(raw):
    """cuDNN's implicit GEMM executes one FFMA per multiply-add, padded taps included."""
    kernels = kernels_from_ncu(raw)
    shape = {s.shape_id: s for s in quick_grid()}["0051ed247c1d"]  # N4 C32 32px -> K64, 3x3/s1/p1
    ig = kernels[(kernels["shape_id"] == shape.shape_id) & (kernels["algo"] == "IMPLICIT_GEMM")]
    assert (ig["inst_ffma"] == shape.macs).all()


def test_range_name_round_trips_through_the_parser():
    name = range_name("0123456789ab", "default", "WINOGRAD_NONFUSED")
    frame = pd.DataFrame({"ID": [1], "Kernel Name": ["k"],
                          "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg":
                              [f'7  "<default domain>:{name}:none:none:none:none:none"']})
    k = kernels_from_ncu(frame)
    assert (k.loc[0, "shape_id"], k.loc[0, "math"], k.loc[0, "algo"]) == ("0123456789ab", "default",
                                                                         "WINOGRAD_NONFUSED")


def test_command_profiles_only_seer_ranges_with_the_cards_own_clocks():
    cmd = ncu_command("ncu", "out.csv", ["python", "w.py"], ncu_metric_names("tensor"))
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1] == "sm__ops_path_tensor_src_tf32_dst_fp32.sum"
    assert cmd[-2:] == ["python", "w.py"] and "--nvtx" in cmd


def test_metric_groups_cover_every_metric_once_and_retired_groups_are_parts_of_counters():
    assert set(PROFILE_GROUPS) == {m.group for m in METRICS}
    columns = [c for g in PROFILE_GROUPS for c in GROUP_COLUMNS[g]]
    assert sorted(columns) == sorted(m.column for m in METRICS)
    # The one-pass `counters` group measures exactly what memory, cache and time_occupancy did.
    assert frozenset().union(*(set(c) for c in RETIRED_GROUPS.values())) == GROUP_COLUMNS["counters"]
    added_later = {"inst_hadd", "inst_hmul", "inst_dfma", "inst_dadd", "inst_dmul"}
    assert {m.column for m in METRICS if not m.required} == added_later <= GROUP_COLUMNS["launch_sass"]
    assert required_columns("core", "fma") == (GROUP_COLUMNS["launch_sass"] | GROUP_COLUMNS["counters"]) - added_later
    assert required_columns("core", "default") == required_columns("core", "fma") | {"tensor_ops_tf32"}


def test_empty_and_failed_ncu_output(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("==PROF== Disconnected from process 1\n")
    assert read_ncu_csv(empty).empty and kernels_from_ncu(read_ncu_csv(empty)).empty
    failed = tmp_path / "failed.csv"
    failed.write_text("==ERROR== Metric smsp__sass_thread_inst_executed_op_fadd_pred_on.sum is not "
                      "supported in range replay.\n")
    with pytest.raises(InputError, match="not supported in range replay"):
        read_ncu_csv(failed)
