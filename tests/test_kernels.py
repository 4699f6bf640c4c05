"""seer's own kernels, what is decided without a GPU: which layers they run, the tile and
launch of each (seer/kernel_plans.py), and their place in the registry."""

import pytest

from seer.algorithms import algorithm_names, classify_kernel, get_algorithm, select_algorithms
from seer import kernel_plans
from seer.grids import quick_general_grid
from seer.shapes import ConvShape

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
