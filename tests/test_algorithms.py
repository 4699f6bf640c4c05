"""The algorithm registry and the kernel-name rules, on kernel names the H100 really ran."""

import csv

import pytest

import pandas as pd

from conftest import DATA, REPO, benchmark_module
from seer.algorithms import (ALGORITHMS, KERNEL_RULES, algorithm_names, canonical_kernel_name, classify_kernel,
                             cudnn_algorithm_by_enum, get_algorithm)
from seer.dataset.tables import read_parts

KERNEL_NAMES = DATA / "h100-kernel-names.tsv"
#: The least share of traced calls whose launches Algorithm.launches gets within 2x, per
#: algorithm, math and kind of layer (IMPLICIT_PRECOMP_GEMM under default math, with its
#: layout kernels, and FFT_TILING, with its chunks, vary most).
WITHIN_2X = 0.45


def test_registry_matches_cudnn_enum():
    cudnn = [a for a in ALGORITHMS if a.source == "cudnn"]
    assert [a.enum for a in cudnn] == list(range(8))
    assert algorithm_names("cudnn") == ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                        "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"]
    assert cudnn_algorithm_by_enum(5).name == "FFT_TILING"
    assert get_algorithm("fft").name == "FFT"
    assert len({a.short for a in ALGORITHMS}) == len(ALGORITHMS)
    # SEER numbered Winograd before FFT; its index is kept for its Excel layout.
    assert get_algorithm("WINOGRAD_NONFUSED").seer_index == 5 and get_algorithm("FFT").seer_index == 6
    with pytest.raises(KeyError, match="known: IMPLICIT_GEMM"):
        get_algorithm("FAST")


@pytest.mark.parametrize("name, family, role, variant", [
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, 0, 0, 1>(int, int, int, const T1 *, int, T2 *)",
     "implicit_sgemm", "compute", "sgemm_1024x5x5_333"),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
     "xmma_fprop", "compute", "sm90_fprop_tf32f32_64x128x32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x16x64_stage1_warpsize4x1x1_g1_tensor16x8x8_execute_kernel__5x_cudnn",
     "xmma_fprop", "compute", "sm80_fprop_idxwo_tf32f32_128x16x64"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(T1::Params)",
     "cutlass_tensorop", "compute", "cutlass_s1688gemm_64x64_32x6"),
    ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize32x64x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x_cublas",
     "xmma_gemm", "compute", "sm80_gemm_cf32cf32_f32f32_32x64x8"),
    ("void fft2d_r2c_32x32<float, 0, 0, 0>(float2 *, const T1 *, int, int, int)", "fft", "transform", "fft_r2c_32x32"),
    ("void engines_precompiled::nchwToNhwcKernel<float, float, float, 0, 1, 0>(engines_precompiled::nchw2nhwc_params_t<T3>, const T1 *, T2 *)",
     "layout", "transform", "layout"),
    ("void winograd_nonfused::winogradForwardData9x9_5x5<float, float>(winograd_nonfused::WinogradDataParams<T1, T2>)",
     "winograd_transform", "transform", "winograd_9x9"),
    ("void gemv2N_kernel<int, int, float2, float2, float2, float2, 128, 4, 4, 4, 1, 0, cublasGemvParamsEx<int>>(T13)",
     "cublas_gemv", "compute", "gemv"),
    ("some_kernel_nobody_knows", "helper", "transform", "other"),
])
def test_rules_on_real_kernel_names(name, family, role, variant):
    info = classify_kernel(name)
    assert (info.family, info.role, info.variant) == (family, role, variant)


def _recorded():
    with open(KERNEL_NAMES, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_every_kernel_the_h100_ran_keeps_its_classification():
    """Regression over all 101 distinct kernel names profiled on the H100 so far."""
    rows = _recorded()
    assert len(rows) >= 100
    for row in rows:
        info = classify_kernel(row["kernel_name"])
        assert (info.family, info.role, info.variant) == (row["family"], row["role"], row["variant"]), row


def test_no_real_kernel_falls_through_to_the_catch_all_except_known_helpers():
    leftovers = [r["kernel_name"] for r in _recorded() if r["family"] == "helper"]
    assert all("init_device_workspace" in n for n in leftovers), leftovers


def test_variants_fit_excel_sheet_names():
    # "<SHORT>_<variant>_<math>" must stay within Excel's 31 characters for most variants.
    longest = max(len(r["variant"]) for r in _recorded())
    assert longest <= 36
    assert KERNEL_RULES[-1].pattern == ""  # the catch-all is last


def test_ncu_aliases_of_one_kernel_get_one_name():
    names = [row[3] for row in csv.reader(open(DATA / "h100-kernel-names.tsv"), delimiter="\t")]
    aliased = [n for n in names if "internal::kernel<" in n]
    assert aliased
    for name in aliased:
        # ncu named this cuBLAS GEMV kernel gemvx::kernel in other processes.
        assert canonical_kernel_name(name) == name.replace("internal::kernel<", "gemvx::kernel<")
        assert classify_kernel(canonical_kernel_name(name)) == classify_kernel(name)
    assert sum(canonical_kernel_name(n) in names for n in aliased) >= 1  # a real pair
    for name in names:
        if name not in aliased:
            assert canonical_kernel_name(name) == name


def test_the_engine_table_realises_every_legacy_run_recorded():
    """seer's rule for the graph-API plan of a legacy algorithm (Algorithm.engines) picks, on
    every layer the engine benchmark recorded, a plan that launches the legacy call's kernels."""
    realised = benchmark_module("cudnn_engines").realised
    results = REPO / "benchmarks" / "results"
    table = pd.concat([pd.read_csv(results / f"h200-cudnn-engines-{part}.csv.gz") for part in ("networks", "general")],
                      ignore_index=True)
    runs = realised(table)
    assert len(runs) == 218 and runs["same_kernels"].all(), runs[~runs["same_kernels"]]
    assert set(runs["algo"]) == {a.name for a in ALGORITHMS if a.engines is not None}


def test_the_backward_engine_table_realises_all_but_four_legacy_runs_recorded():
    """The same for the backward passes, on 30 layers (ResNet-50's, grouped and depthwise
    layers of seven networks, 3D layers): the plan seer's rule picks launches the legacy call's
    kernels on 442 of 446 runs. The four others: two 3D layers under default math, and the
    depthwise 3x3 stride-2 layer whose legacy backward-data FFT_TILING runs engine 5 where a
    5x5 one runs engine 50 (no ranking tells them apart; the plan is the faster there)."""
    from seer.algorithms import BACKWARD_ALGORITHMS

    realised = benchmark_module("cudnn_engines").realised
    table = pd.read_csv(REPO / "benchmarks" / "results" / "h200-cudnn-engines-bwd.csv.gz")
    runs = realised(table)
    assert len(runs) == 446 and set(runs["algo"]) == {a.name for a in BACKWARD_ALGORITHMS if a.engines is not None}
    off = runs[~runs["same_kernels"]]
    assert sorted(zip(off["algo"], off["math"], off["dims"])) == [
        ("BWD_DATA_ALGO_1", "default", 3), ("BWD_DATA_FFT_TILING", "default", 2), ("BWD_DATA_FFT_TILING", "fma", 2),
        ("BWD_FILTER_ALGO_1", "default", 3)], off


def _traced_launches(dataset, table, keep) -> pd.DataFrame:
    """One row per traced call of the algorithms ``keep`` accepts in ``dataset``: its launches,
    the kind of its layer (dense, grouped, depthwise), what ``Algorithm.launches`` says (``table``)
    and their ``ratio``."""
    from seer.layers.shapes import ConvShape

    traced = read_parts(dataset / "traced_kernels", columns=["shape_id", "math", "algo", "launches"])
    traced = traced[traced["algo"].map(keep)]
    launches = traced.groupby(["shape_id", "math", "algo"], as_index=False)["launches"].sum()
    fields = ["shape_id", "math", "algo", "groups", "in_ch"]
    calls = launches.merge(table[fields].drop_duplicates(fields[:3]), on=fields[:3])
    calls["kind"] = ["dense" if g == 1 else "depthwise" if g == c else "grouped"
                     for g, c in zip(calls["groups"], calls["in_ch"])]
    calls["table"] = [get_algorithm(a).launches.of(ConvShape.square(1, c, 8, c, 1, groups=g), m)
                      for a, m, g, c in zip(calls["algo"], calls["math"], calls["groups"], calls["in_ch"])]
    calls["ratio"] = calls["launches"] / calls["table"]
    return calls


@pytest.mark.slow
def test_the_launch_table_is_the_median_of_the_traced_launches(table):
    """Algorithm.launches against every traced call of the H100 dataset: per algorithm, math
    and kind of layer, the table's count is the median of the traced counts, and within a
    factor of two of most of them."""
    from conftest import DATASET

    # seer never runs PyTorch's policies
    calls = _traced_launches(DATASET, table, lambda a: get_algorithm(a).source != "pytorch")
    summary = calls.groupby(["algo", "math", "kind"])["ratio"].agg(
        median="median", within_2x=lambda r: ((r >= 0.5) & (r <= 2)).mean(), n="size")
    assert len(summary) >= 30
    assert (summary["median"] == 1).all(), summary
    assert (summary["within_2x"] >= WITHIN_2X).all(), summary




@pytest.mark.slow
def test_the_backward_launch_table_is_the_median_of_the_h200s_traced_launches():
    """Algorithm.launches of cuDNN's backward algorithms against every traced backward call of
    the H200 dataset: where a call launches many kernels (a loop over the groups), the table's
    count is the median of the traced counts; elsewhere within 5x of it."""
    from seer.dataset.build import read_measurements

    h200 = REPO / "data" / "h200"
    table = read_measurements(h200 / "measurements", columns=["shape_id", "math", "algo", "groups", "in_ch"])
    calls = _traced_launches(h200, table, lambda a: get_algorithm(a).pass_ != "fwd" and get_algorithm(a).source == "cudnn")
    summary = calls.groupby(["algo", "math", "kind"]).agg(median=("ratio", "median"), launches=("launches", "median"))
    assert len(summary) >= 60
    loops = summary["launches"] > 8
    assert loops.sum() >= 15 and (summary.loc[loops, "median"] == 1).all(), summary[loops]
    assert summary["median"].between(0.2, 5).all(), summary


def test_every_algorithm_names_its_family_and_the_families_are_the_registrys():
    from seer.algorithms import FAMILIES

    assert {get_algorithm(name).family for name in algorithm_names()} == set(FAMILIES)
    assert algorithm_names(family="fft") == ["FFT", "FFT_TILING"]
    assert algorithm_names(family="winograd") == ["WINOGRAD", "WINOGRAD_NONFUSED"]
    assert algorithm_names("cupy", family="implicit_gemm") == ["SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK"]
    with pytest.raises(ValueError, match="family"):
        ALGORITHMS[0].__class__("X", "cudnn", None, "X", None, "", family="tiles")


def test_the_backward_registry_lists_each_enum_once_per_pass():
    from seer.algorithms import BACKWARD_ALGORITHMS, PASSES, backward_algorithms

    for pass_ in PASSES[1:]:
        enums = [a.enum for a in backward_algorithms(pass_)]
        assert enums == list(range(len(enums)))  # cudnnConvolutionBwd{Data,Filter}Algo_t, in order
    assert len({a.name for a in BACKWARD_ALGORITHMS}) == len(BACKWARD_ALGORITHMS)
    assert [a.name for a in BACKWARD_ALGORITHMS if not a.deterministic] == [
        "BWD_DATA_ALGO_0", "BWD_FILTER_ALGO_0", "BWD_FILTER_ALGO_3"]
    with pytest.raises(KeyError, match="unknown backward pass"):
        backward_algorithms("fwd")



def test_backward_algorithms_are_named_grouped_and_found_by_pass():
    from seer.algorithms import (ALGORITHM_GROUPS, algorithm_names, cudnn_algorithm_by_enum, get_algorithm,
                                 select_algorithms)

    assert algorithm_names("cudnn") == algorithm_names("cudnn", pass_="fwd")  # the forward, unless asked
    assert not set(algorithm_names(pass_="fwd")) & set(algorithm_names(pass_="bwd_data"))
    assert select_algorithms("all") == algorithm_names()
    assert select_algorithms("backward") == algorithm_names(pass_="bwd_data") + algorithm_names(pass_="bwd_filter")
    assert select_algorithms("bwd_filter,FFT") == [*algorithm_names(pass_="bwd_filter"), "FFT"]
    assert algorithm_names("pytorch", pass_="bwd_data") == ["PYTORCH_BWD_DATA", "PYTORCH_BENCHMARK_BWD_DATA"]
    assert {"bwd_data", "bwd_filter", "backward"} <= set(ALGORITHM_GROUPS)
    assert get_algorithm("bwd_filter_algo_3").pass_ == "bwd_filter" and not get_algorithm("BWD_FILTER_ALGO_3").deterministic
    assert cudnn_algorithm_by_enum(2).name == "GEMM"
    assert cudnn_algorithm_by_enum(2, "bwd_data").name == "BWD_DATA_FFT"
    assert cudnn_algorithm_by_enum(2, "bwd_filter").name == "BWD_FILTER_FFT"
    with pytest.raises(KeyError, match="bwd_data"):
        cudnn_algorithm_by_enum(6, "bwd_data")
    with pytest.raises(ValueError, match="pass"):
        ALGORITHMS[0].__class__("X", "cudnn", None, "X", None, "", pass_="backward")
    shorts = [get_algorithm(n).short for n in algorithm_names(pass_=None)]
    assert len(set(shorts)) == len(shorts)  # Excel sheet names tell the algorithms apart by them


@pytest.mark.parametrize("name, family, role, variant", [
    ("sm80_xmma_dgrad_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize2x2x1_g1",
     "xmma_bwd", "compute", "sm80_dgrad_f32f32_32x32x8"),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize32x32x8_stage3",
     "xmma_bwd", "compute", "sm80_wgrad_idx_f32f32_32x32x8"),
    ("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*)",
     "bwd_engine", "compute", "wgrad_alg0_128x5x5"),
    ("void cudnn::cnn::wgrad_alg1_engine<float, float, 128, 5, 5, 3, 3, 3, false, false>(int, int)",
     "bwd_engine", "compute", "wgrad_alg1_128x5x5"),
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*)",
     "bwd_engine", "compute", "dgrad_512x6x5"),
    ("void cudnn::cnn::dgrad2d_grouped_direct_kernel<float, int, float, float, false, true, 1, 0>(int)",
     "bwd_grouped_direct", "compute", "dgrad_grouped_direct"),
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int)",
     "split_k_reduce", "transform", "reduce_wgrad"),
])
def test_backward_kernel_names_read_as_their_role(name, family, role, variant):
    # Names as CUPTI traced them on the H200 (data/h200/traced_kernels), cut after the arguments' start.
    from seer.algorithms import classify_kernel

    info = classify_kernel(name)
    assert (info.family, info.role, info.variant) == (family, role, variant)
