"""seer's sparse convolutions on a real GPU: the product of a sparse input is the dense one."""

import pytest

from seer.layers.shapes import ConvShape
from seer.layers.sparsity import PATTERNS, sparse_input

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("shape", [ConvShape.square(8, 64, 28, 128, 1, 1, 0),
                                   ConvShape(batch=2, in_ch=32, out_ch=16, groups=1, dims=3, in_d=4, in_h=8, in_w=8,
                                             kernel_d=1, kernel_h=1, kernel_w=1)])
def test_pointwise_gives_the_dense_product_at_any_sparsity(pattern, sparsity, shape):
    import cupy as cp

    from seer.gpu.sparse_kernels import pointwise

    x = sparse_input(shape.input_dims, sparsity, pattern, seed=0, xp=cp)
    w = cp.random.default_rng(1).standard_normal(shape.filter_dims, dtype=cp.float32)
    y = cp.full(shape.output_dims, cp.nan, dtype=cp.float32)  # poisoned: every value must be written
    pointwise(shape, x, w, y)
    x64, w64 = x.astype(cp.float64), w.reshape(shape.out_ch, shape.in_ch).astype(cp.float64)
    expected = cp.einsum("ncp,kc->nkp", x64.reshape(shape.batch, shape.in_ch, -1), w64).reshape(shape.output_dims)
    error = float(cp.linalg.norm(y - expected) / max(float(cp.linalg.norm(expected)), 1e-30))
    assert error < 1e-5 or float(cp.linalg.norm(expected)) == 0


def test_pointwise_refuses_what_is_not_a_1x1_stride_1_layer():
    from seer.gpu.sparse_kernels import pointwise_refusal

    assert pointwise_refusal(ConvShape.square(1, 8, 8, 8, 1, 1, 0)) is None
    assert "1x1" in pointwise_refusal(ConvShape.square(1, 8, 8, 8, 3, 1, 1))
    assert "stride 1" in pointwise_refusal(ConvShape.square(1, 8, 8, 8, 1, 2, 0))
