"""seer's own kernels on a real GPU (skipped without one): every element of the output
written and within FP32 tolerance of the float64 reference, for every layer kind, in both
layouts, and the kernels that ran are the ones the plan names."""

import pytest

from seer.algorithms import algorithm_names, classify_kernel
from seer.hardware.kernel_plans import DIRECT_TILES, GEMM_TILES
from seer.layers.grids import quick_general_grid
from seer.layers.shapes import ConvShape
from seer.schema import get_math_mode

pytestmark = pytest.mark.gpu

OWN = algorithm_names("cupy")
#: Every layer kind, plus shapes that reach each tile, the tails of every tile, a split
#: reduction, and the 3D layers of CosmoFlow's kind.
SHAPES = [
    *quick_general_grid(),
    ConvShape.square(1, 3, 224, 64, 7, stride=2, padding=3),
    ConvShape.square(32, 256, 14, 256, 3, stride=1, padding=1),
    ConvShape.square(1, 512, 7, 2048, 1),
    ConvShape.square(3, 17, 23, 45, 5, stride=3, padding=2),
    ConvShape(2, 96, 200, in_h=9, in_w=13, kernel_h=3, kernel_w=1, pad_h=1, dilation_h=3),
    ConvShape(1, 4, 32, in_d=64, in_h=64, in_w=64, kernel_d=3, kernel_h=3, kernel_w=3, pad_d=1, pad_h=1,
              pad_w=1),
    ConvShape(2, 64, 64, groups=2, in_d=9, in_h=10, in_w=11, kernel_d=3, kernel_h=3, kernel_w=3,
              stride_d=2, stride_h=1, stride_w=2, dilation_w=2),
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("algo", OWN)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_output_matches_float64(algo, shape, layout, tracer):
    import cupy as cp

    from seer.gpu import kernels
    from seer.gpu.reference import ShapeTensors
    from seer.hardware import kernel_plans

    refused = kernel_plans.unsupported_reason(algo, shape, layout)
    if refused:
        # Only a reduction too short to split, or a channels-last GEMM's channels.
        assert "split" in refused or (layout == "nhwc" and "multiple of 8" in refused)
        return
    tensors = ShapeTensors(shape, seed=7, layout=layout)
    forward, plan = kernels.forward(algo, shape, tensors.x, tensors.w, tensors.y, layout=layout)
    for _ in range(2):  # a second call must not add to the first (split-K zeroes its output)
        tensors.poison_output()
        forward()
        cp.cuda.Device().synchronize()
        assert tensors.relative_error() <= get_math_mode("fma").tolerance / 50
    names = [k.name for k in tracer.trace(forward)]
    launched = [n for n in names if "seer_" in n]
    assert len(launched) == 1 and classify_kernel(launched[0]).variant == plan.variant, names


#: Tails in every direction (positions, channels, reduction) for every tile, 2D and grouped 3D.
TILE_SHAPES = [ConvShape.square(3, 17, 23, 45, 5, stride=3, padding=2),
               ConvShape.square(3, 24, 23, 44, 5, stride=3, padding=2),
               ConvShape(2, 64, 160, groups=2, in_d=9, in_h=10, in_w=11, kernel_d=3, kernel_h=3, kernel_w=3,
                         stride_d=2, stride_h=1, stride_w=2, dilation_w=2, pad_h=1)]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("algo", ["SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK"])
@pytest.mark.parametrize("tile", list(GEMM_TILES))
@pytest.mark.parametrize("shape", TILE_SHAPES, ids=str)
def test_every_tile_matches_float64(algo, tile, shape, layout):
    """Every tile benchmarks/kernel_tiles.py may time is right, not only the planned ones."""
    import cupy as cp

    from seer.gpu import kernels
    from seer.gpu.reference import ShapeTensors
    from seer.hardware import kernel_plans

    if kernel_plans.unsupported_reason(algo, shape, layout):
        assert layout == "nhwc" and shape.in_ch % 8
        return
    tensors = ShapeTensors(shape, seed=11, layout=layout)
    forward, plan = kernels.forward(algo, shape, tensors.x, tensors.w, tensors.y, tile=tile, layout=layout)
    tensors.poison_output()
    forward()
    cp.cuda.Device().synchronize()
    assert tensors.relative_error() <= get_math_mode("fma").tolerance / 50
    prefix = "igemm_" if layout == "nchw" else "igemm_nhwc_"
    assert plan.variant.startswith(f"{prefix}{tile.split('_')[0]}x8_")


@pytest.mark.parametrize("tile", list(DIRECT_TILES))
@pytest.mark.parametrize("shape", [*TILE_SHAPES, ConvShape.square(2, 96, 15, 96, 7, padding=3, groups=96),
                                   ConvShape.square(3, 40, 13, 40, 5, stride=2, padding=2, groups=40)], ids=str)
def test_every_channels_last_direct_tile_matches_float64(tile, shape, tracer):
    """Every number of output columns per thread of the channels-last direct kernel is right
    (tails of a row included), not only the one its plan takes."""
    import cupy as cp

    from seer.gpu import kernels
    from seer.gpu.reference import ShapeTensors

    tensors = ShapeTensors(shape, seed=13, layout="nhwc")
    forward, plan = kernels.forward("SEER_DIRECT", shape, tensors.x, tensors.w, tensors.y, tile=tile, layout="nhwc")
    tensors.poison_output()
    forward()
    cp.cuda.Device().synchronize()
    assert tensors.relative_error() <= get_math_mode("fma").tolerance / 50
    assert plan.variant.endswith(f"_{tile}")
    assert [classify_kernel(k.name).variant for k in tracer.trace(forward)] == [plan.variant]


#: A layer per kernel path: depthwise (the direct kernel), a 2D layer whose reduction splits,
#: a grouped 3D one, a 1xN one with channels in multiples of 8 (channels-last).
BIAS_SHAPES = [ConvShape.square(2, 32, 17, 32, 3, padding=1, groups=32),
               ConvShape.square(1, 64, 14, 96, 3, padding=1),
               ConvShape(2, 64, 64, groups=2, in_d=5, in_h=6, in_w=7, kernel_d=3, kernel_h=3, kernel_w=3, pad_h=1),
               ConvShape(2, 16, 40, in_h=9, in_w=13, kernel_h=1, kernel_w=3, pad_w=1)]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("algo", OWN)
@pytest.mark.parametrize("shape", BIAS_SHAPES, ids=str)
def test_the_bias_instance_is_the_plain_output_plus_the_bias(algo, shape, layout, tracer):
    """A kernel's bias instance (what seer.torch runs for a layer with a bias) writes the plain
    instance's output plus the bias: to the bit where nothing is split (one fp32 add either
    way), within tolerance where slices add in any order; one launch, of the same tile."""
    import cupy as cp

    from seer.gpu import kernels
    from seer.gpu.reference import ShapeTensors
    from seer.hardware import kernel_plans

    if kernel_plans.unsupported_reason(algo, shape, layout):
        return
    tensors = ShapeTensors(shape, seed=5, layout=layout)
    plain, plan = kernels.forward(algo, shape, tensors.x, tensors.w, tensors.y, layout=layout)
    tensors.poison_output()
    plain()
    expected = tensors.y.copy()
    channel_axis = 1 if layout == "nchw" else tensors.y.ndim - 1
    bias = cp.random.default_rng(3).standard_normal(shape.out_ch, dtype=cp.float32)
    view = [1] * tensors.y.ndim
    view[channel_axis] = -1
    expected += bias.reshape(view)
    fused, fused_plan = kernels.forward(algo, shape, tensors.x, tensors.w, tensors.y, layout=layout, bias=bias)
    assert fused_plan == plan
    for _ in range(2):
        tensors.poison_output()
        fused()
        cp.cuda.Device().synchronize()
        if plan.splits > 1:
            assert float(cp.abs(tensors.y - expected).max() / cp.abs(expected).max()) < 1e-6
        else:
            assert bool((tensors.y == expected).all())
    names = [k.name for k in tracer.trace(fused)]
    launched = [n for n in names if "seer_" in n]
    assert len(launched) == 1 and "_bias<" in launched[0], names
    assert classify_kernel(launched[0]).variant == plan.variant
