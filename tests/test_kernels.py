"""seer's own kernels, what is decided without a GPU: which layers they run, the tile and
launch of each (seer/hardware/kernel_plans.py), and their place in the registry."""

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import algorithm_names, classify_kernel, get_algorithm, select_algorithms
from seer.hardware import kernel_plans
from seer.layers.grids import quick_general_grid
from seer.layers.shapes import ConvShape

OWN = ("SEER_DIRECT", "SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK")


def test_registered_beside_cudnn():
    assert algorithm_names("cupy") == list(OWN)
    assert select_algorithms("seer") == list(OWN)
    assert select_algorithms("cudnn,SEER_DIRECT") == [*algorithm_names("cudnn"), "SEER_DIRECT"]
    assert select_algorithms("all") == algorithm_names()
    assert all(get_algorithm(a).enum is None for a in OWN)
    with pytest.raises(KeyError, match="group"):
        select_algorithms("fastest")


@pytest.mark.parametrize("shape", [*quick_general_grid(), ConvShape.square(64, 512, 7, 512, 3, padding=1),
                                   ConvShape.square(1, 2048, 7, 512, 1)], ids=str)
def test_every_output_is_covered(shape):
    """The launch covers every output position and channel of every group, and a split
    covers the whole reduction."""
    k_group = shape.out_ch // shape.groups
    positions = shape.batch * shape.out_d * shape.out_h * shape.out_w
    for algo in OWN:
        if kernel_plans.unsupported_reason(algo, shape):
            continue
        plan = kernel_plans.plan(algo, shape)
        info = classify_kernel(plan.kernel)
        assert info.role == "compute" and info.variant == plan.variant
        if algo == "SEER_DIRECT":
            kpt = int(plan.variant.removeprefix("direct_k"))
            assert plan.grid[0] * plan.block >= positions * shape.groups * -(-k_group // kpt)
            continue
        bm, bn = (int(v) for v in plan.variant.split("_")[1].split("x")[:2])
        assert plan.grid[0] * bm >= positions and plan.grid[1] * bn >= k_group
        assert plan.grid[2] == shape.groups * plan.splits
        reduction = shape.in_ch // shape.groups * shape.kernel_d * shape.kernel_h * shape.kernel_w
        assert plan.tiles_per_split * plan.splits >= -(-reduction // 8)
        assert (plan.tiles_per_split * (plan.splits - 1) < -(-reduction // 8)), "no empty slice"
        if algo == "SEER_IMPLICIT_GEMM_SPLITK":
            assert plan.splits >= 2


def test_tiles_follow_the_layer():
    wide = kernel_plans.plan("SEER_IMPLICIT_GEMM", ConvShape.square(32, 256, 56, 256, 3, padding=1))
    thin = kernel_plans.plan("SEER_IMPLICIT_GEMM", ConvShape.square(1, 256, 7, 32, 1))
    few = kernel_plans.plan("SEER_IMPLICIT_GEMM", ConvShape.square(1, 256, 14, 256, 3, padding=1))
    assert wide.variant == "igemm_256x64x8_8x8_b2_s3" and thin.variant == "igemm_64x32x8_4x4_b2_s3"
    assert few.variant == "igemm_64x32x8_4x4_b2_s3"  # 196 positions: the smallest tile, for the most blocks
    assert kernel_plans.plan("SEER_IMPLICIT_GEMM_SPLITK", ConvShape.square(1, 256, 14, 256, 3, padding=1)).splits > 1
    # A GPU of fewer SMs fills with bigger tiles: 1.5 blocks per SM is the bar.
    layer = ConvShape.square(8, 256, 14, 256, 3, padding=1)  # 1,568 positions
    assert kernel_plans.plan("SEER_IMPLICIT_GEMM", layer).variant == "igemm_64x32x8_4x4_b2_s3"  # 200 blocks
    assert kernel_plans.plan("SEER_IMPLICIT_GEMM", layer, sms=20).variant == "igemm_128x64x8_8x8_b2_s3"  # 52
    depthwise = kernel_plans.plan("SEER_DIRECT", ConvShape(8, 32, 32, groups=32, in_h=28, in_w=28, kernel_h=3,
                                                      kernel_w=3, pad_h=1, pad_w=1))
    assert depthwise.variant == "direct_k1"


def test_refusals_say_why():
    assert "nothing to split" in kernel_plans.unsupported_reason("SEER_IMPLICIT_GEMM_SPLITK", ConvShape.square(1, 3, 32, 8, 1))
    huge = ConvShape.square(64, 1024, 256, 1024, 3, padding=1)  # 4.3e9 input elements
    assert "32-bit" in kernel_plans.unsupported_reason("SEER_DIRECT", huge)
    with pytest.raises(ValueError, match="32-bit"):
        kernel_plans.plan("SEER_IMPLICIT_GEMM", huge)


# -- the tap tables, read as the kernels read them -------------------------------------------
def _direct(shape: ConvShape, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution by definition, in float64 (x NCDHW, w K(C/G)TRS, a 2D layer of depth 1)."""
    x, w = x.reshape(shape.batch, shape.in_ch, shape.in_d, shape.in_h, shape.in_w), \
        w.reshape(shape.out_ch, shape.in_ch // shape.groups, shape.kernel_d, shape.kernel_h, shape.kernel_w)
    pads = ((0, 0), (0, 0), (shape.pad_d,) * 2, (shape.pad_h,) * 2, (shape.pad_w,) * 2)
    xp = np.pad(x, pads)
    y = np.zeros((shape.batch, shape.out_ch, shape.out_d, shape.out_h, shape.out_w))
    cg, kg = shape.in_ch // shape.groups, shape.out_ch // shape.groups
    for t, r, s in np.ndindex(shape.kernel_d, shape.kernel_h, shape.kernel_w):
        window = xp[:, :, t * shape.dilation_d::shape.stride_d, r * shape.dilation_h::shape.stride_h,
                    s * shape.dilation_w::shape.stride_w][:, :, :shape.out_d, :shape.out_h, :shape.out_w]
        for g in range(shape.groups):
            y[:, g * kg:(g + 1) * kg] += np.einsum("ncdhw,kc->nkdhw", window[:, g * cg:(g + 1) * cg],
                                                   w[g * kg:(g + 1) * kg, :, t, r, s])
    return y


def _implicit_gemm(shape: ConvShape, x: np.ndarray, w: np.ndarray, layout: str) -> np.ndarray:
    """The implicit GEMM's arithmetic on flat tensors in ``layout``: each output position's
    im2col row gathered through the tap table with the kernel's bounds checks, times the
    filter's (C/G x taps) rows; the output NCDHW."""
    D, H, W, C = shape.in_d, shape.in_h, shape.in_w, shape.in_ch
    cg, kg = C // shape.groups, shape.out_ch // shape.groups
    m = np.arange(shape.batch * shape.out_d * shape.out_h * shape.out_w)
    n, p = np.divmod(m, shape.out_d * shape.out_h * shape.out_w)
    od, rest = np.divmod(p, shape.out_h * shape.out_w)
    oh, ow = np.divmod(rest, shape.out_w)
    id0, ih0, iw0 = od * shape.stride_d - shape.pad_d, oh * shape.stride_h - shape.pad_h, ow * shape.stride_w - shape.pad_w
    taps = kernel_plans.tap_table(shape, layout).astype(np.int64)
    reduction = cg * shape.kernel_d * shape.kernel_h * shape.kernel_w
    flat_x, out = x.ravel(), np.zeros((len(m), shape.out_ch))
    for g in range(shape.groups):
        if layout == "nhwc":
            base = (((n * D + id0) * H + ih0) * W + iw0) * C + g * cg
            lanes = np.arange(kernel_plans.CHANNELS_LAST_SLICE)  # a slice: channels of one tap
        else:
            base = (n * C + g * cg) * D * H * W + (id0 * H + ih0) * W + iw0
            lanes = np.arange(1)
        columns = []
        for offset, dt, dr, ds in taps:
            ok = (0 <= id0 + dt) & (id0 + dt < D) & (0 <= ih0 + dr) & (ih0 + dr < H) & (0 <= iw0 + ds) & (iw0 + ds < W)
            index = np.where(ok, base + offset, 0)[:, None] + lanes
            columns.append(np.where(ok[:, None], flat_x[index], 0.0))
        im2col = np.concatenate(columns, axis=1)[:, :reduction]
        filters = w.reshape(shape.out_ch, reduction)[g * kg:(g + 1) * kg]  # K(C/G)TRS or KTRS(C/G), flat
        out[:, g * kg:(g + 1) * kg] = im2col @ filters.T
    return out.reshape(shape.batch, shape.out_d, shape.out_h, shape.out_w, shape.out_ch).transpose(0, 4, 1, 2, 3)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", [
    ConvShape.square(2, 16, 9, 12, 3, padding=1),
    ConvShape(2, 16, 8, in_h=11, in_w=7, kernel_h=3, kernel_w=2, stride_h=2, pad_h=2, pad_w=1, dilation_w=2),
    ConvShape(1, 32, 12, groups=2, in_h=6, in_w=6, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
    ConvShape(2, 8, 4, in_d=5, in_h=6, in_w=4, kernel_d=3, kernel_h=2, kernel_w=3, stride_d=2, pad_d=1, pad_w=1,
              dilation_h=2)], ids=str)
def test_tap_tables_compute_the_convolution(shape, layout):
    """Gathering each output's im2col row through the tap table, with the kernels' bounds
    checks and offsets, and multiplying by the filter gives the convolution in either layout."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(shape.input_dims), rng.standard_normal(shape.filter_dims)
    order = shape.layout_order(layout)
    got = _implicit_gemm(shape, np.ascontiguousarray(x.transpose(order)), np.ascontiguousarray(w.transpose(order)),
                         layout)
    np.testing.assert_allclose(got, _direct(shape, x, w).reshape(got.shape), rtol=1e-12, atol=1e-12)


def test_channels_last_plans_and_refusals():
    layer = ConvShape.square(32, 256, 56, 256, 3, padding=1)
    nchw, nhwc = (kernel_plans.plan("SEER_IMPLICIT_GEMM", layer, layout=layout) for layout in ("nchw", "nhwc"))
    assert nhwc.kernel.startswith("seer_implicit_gemm_nhwc<") and nhwc.grid == nchw.grid
    assert classify_kernel(nhwc.kernel).variant == "igemm_nhwc_256x64x8_8x8_b2_s3" == nhwc.variant
    assert len(kernel_plans.tap_table(layer, "nhwc")) == 256 * 9 // 8  # one tap per slice of 8 channels
    assert kernel_plans.unsupported_reason("SEER_DIRECT", layer, "nhwc") is None
    odd = ConvShape.square(1, 12, 8, 16, 3)
    assert "multiple of 8" in kernel_plans.unsupported_reason("SEER_IMPLICIT_GEMM", odd, "nhwc")
    assert kernel_plans.unsupported_reason("SEER_IMPLICIT_GEMM", odd, "nchw") is None
    assert "not one of" in kernel_plans.unsupported_reason("SEER_IMPLICIT_GEMM", layer, "chwn")
    with pytest.raises(ValueError, match="multiple of 8"):
        kernel_plans.plan("SEER_IMPLICIT_GEMM_SPLITK", odd, layout="nhwc")


@pytest.mark.parametrize(("layer", "sms", "kernel"), [
    # ConvNeXt-T's first depthwise 7x7 layer at batch 32: rows enough for 8 columns a thread.
    (ConvShape.square(32, 96, 56, 96, 7, padding=3, groups=96), 132, "seer_direct_conv_nhwc<1, 8>"),
    # Its last at batch 1: 7 rows of 768 channels fill the GPU only a column a thread.
    (ConvShape.square(1, 768, 7, 768, 7, padding=3, groups=768), 132, "seer_direct_conv_nhwc<1, 1>"),
    (ConvShape.square(1, 768, 7, 768, 7, padding=3, groups=768), 8, "seer_direct_conv_nhwc<1, 8>"),
    # A grouped layer of 16 output channels per group: 8 a thread, as in NC[D]HW.
    (ConvShape.square(4, 64, 28, 64, 3, padding=1, groups=4), 8, "seer_direct_conv_nhwc<8, 4>")], ids=str)
def test_the_channels_last_direct_kernel_takes_the_most_columns_that_fill_the_gpu(layer, sms, kernel):
    """The channels-last direct kernel reads each filter value once for several output columns,
    as many as still make two blocks per SM; its NC[D]HW twin keeps its launch."""
    got = kernel_plans.plan("SEER_DIRECT", layer, sms=sms, layout="nhwc")
    assert got.kernel == kernel and got.block == kernel_plans.THREADS_DIRECT
    columns = kernel_plans.DIRECT_TILES[got.variant.rsplit("_", 1)[1]]
    channel_blocks = layer.groups * -(-(layer.out_ch // layer.groups) // int(kernel.split("<")[1].split(",")[0]))
    threads = channel_blocks * layer.batch * layer.out_h * -(-layer.out_w // columns)
    assert got.grid == (-(-threads // 256), 1, 1)
    nchw = kernel_plans.plan("SEER_DIRECT", layer, sms=sms)
    positions = layer.batch * layer.out_h * layer.out_w
    assert nchw.kernel.startswith("seer_direct_conv<") and nchw.grid == (-(-channel_blocks * positions // 256), 1, 1)
    for tile in kernel_plans.DIRECT_TILES:
        assert kernel_plans.plan("SEER_DIRECT", layer, tile, sms, "nhwc").variant.endswith(f"_{tile}")


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("algo", ["SEER_DIRECT", "SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK"])
def test_a_kernels_bias_instance_is_named_and_classified_as_its_tile(algo, layout):
    """The instance that adds a bias (what seer.torch runs for a layer with one) is the plan's
    kernel with ``_bias`` before its template arguments, compiled beside the plannable ones, and
    its traced name falls in the plain kernel's variant."""
    from seer.gpu import kernels

    layer = ConvShape.square(8, 64, 28, 64, 3, padding=1, groups=64 if algo == "SEER_DIRECT" else 1)
    plain = kernel_plans.plan(algo, layer, layout=layout)
    name = kernels.with_bias(plain.kernel)
    assert name == plain.kernel.replace("<", "_bias<", 1) and name != plain.kernel
    assert name in kernels._plannable_kernels(layout, bias=True)
    assert plain.kernel not in kernels._plannable_kernels(layout, bias=True)
    traced = f"void {name}(float const*, float const*, float*, int, int)"
    assert classify_kernel(traced).variant == plain.variant


def test_the_algorithms_said_to_split_always_split():
    """The guard counts a zeroing launch for them (seer.torch.convolution.extra_host_ms)."""
    layers = [ConvShape.square(1, 8, 7, 8, 2), ConvShape.square(256, 1024, 56, 1024, 3, padding=1),
              ConvShape.square(2, 64, 9, 64, 3, padding=1, groups=2), ConvShape.square(1, 3, 224, 64, 7, 2, 3)]
    for algo in kernel_plans.SPLITS_ALWAYS:
        planned = [kernel_plans.plan(algo, layer, sms=132) for layer in layers
                   if not kernel_plans.unsupported_reason(algo, layer)]
        assert len(planned) >= 3 and all(p.splits >= 2 for p in planned)


def test_the_channels_last_direct_benchmark_summary_is_what_its_runs_say():
    """benchmarks/direct_channels_last.py's committed summary comes from its committed runs and
    the network layer files, and the runs it marked planned are what the plan takes today."""
    from conftest import REPO, benchmark_module

    bench = benchmark_module("direct_channels_last")
    folder = REPO / "benchmarks" / "results" / "h200-direct-channels-last"
    runs = pd.read_csv(folder / "runs.csv")
    runs["planned"] = runs["planned"].astype(bool)
    calls = bench.grouped_calls(sorted((REPO / "benchmarks" / "results" / "h200-network-oracle" / "layers").glob("*.csv")))
    assert bench.summarize(runs, calls) == (folder / "summary.md").read_text().split("\n", 3)[3]
    assert set(calls["layer"]) == set(runs["layer"]) and len(set(runs["layer"])) == 100
    shapes = dict(zip(calls["layer"], calls["shape"]))
    for row in runs[runs["planned"] & runs["way"].str.startswith("seer_nhwc")].itertuples():
        assert kernel_plans.plan("SEER_DIRECT", shapes[row.layer], sms=132, layout="nhwc").kernel == row.kernel
