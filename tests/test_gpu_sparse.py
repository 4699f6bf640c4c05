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


SPARSE_LAYERS = {
    "3x3": ConvShape.square(4, 32, 28, 48, 3, 1, 1),
    "3x3 stride 2": ConvShape.square(4, 32, 28, 48, 3, 2, 1),
    "5x5 dilated": ConvShape(batch=2, in_ch=16, out_ch=16, in_h=20, in_w=24, kernel_h=5, kernel_w=5, pad_h=4,
                             pad_w=4, dilation_h=2, dilation_w=2),
    "grouped": ConvShape(batch=2, in_ch=32, out_ch=64, groups=4, in_h=16, in_w=16, kernel_h=3, kernel_w=3,
                         pad_h=1, pad_w=1),
    "depthwise": ConvShape(batch=2, in_ch=32, out_ch=32, groups=32, in_h=16, in_w=16, kernel_h=3, kernel_w=3,
                           stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    "1x7": ConvShape(batch=2, in_ch=24, out_ch=24, in_h=17, in_w=17, kernel_h=1, kernel_w=7, pad_w=3),
    "3D": ConvShape(batch=2, in_ch=8, out_ch=16, dims=3, in_d=8, in_h=16, in_w=16, kernel_d=3, kernel_h=3,
                    kernel_w=3, pad_d=1, pad_h=1, pad_w=1),
}


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("sparsity", [0.0, 0.9, 0.99])
@pytest.mark.parametrize("name", list(SPARSE_LAYERS))
@pytest.mark.parametrize("kernel", ["scatter", "gather"])
def test_sparse_kernels_check_against_float64_on_every_layer_kind(kernel, name, sparsity, pattern):
    import cupy as cp

    from seer.gpu import sparse_kernels
    from seer.gpu.reference import ShapeTensors

    shape = SPARSE_LAYERS[name]
    tensors = ShapeTensors(shape, seed=0, x=sparse_input(shape.input_dims, sparsity, pattern, seed=0, xp=cp))
    tensors.poison_output()
    getattr(sparse_kernels, kernel)(shape, tensors.x, tensors.w, tensors.y)
    assert tensors.relative_error() < 1e-5, name
