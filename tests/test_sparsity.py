"""Inputs of a given sparsity (:mod:`seer.layers.sparsity`): the share of zeros asked for,
in independent zeros or in patches as a rectified feature map has them."""

import numpy as np
import pytest

from seer.layers.sparsity import PATTERNS, sparse_input, zero_fraction


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.9, 0.99])
def test_the_share_of_zeros_is_the_one_asked_for(pattern, sparsity):
    x = sparse_input((4, 16, 56, 56), sparsity, pattern, seed=1)
    assert x.dtype == np.float32 and x.shape == (4, 16, 56, 56)
    assert zero_fraction(x) == pytest.approx(sparsity, abs=0.005)


def test_relu_zeros_come_in_patches_and_the_rest_is_positive():
    def neighbour_zero(x):
        zero = x == 0
        return (zero[..., 1:] & zero[..., :-1]).sum() / zero[..., :-1].sum()

    relu = sparse_input((2, 4, 64, 64), 0.7, "relu", seed=0)
    uniform = sparse_input((2, 4, 64, 64), 0.7, "uniform", seed=0)
    assert (relu >= 0).all() and (uniform < 0).any()
    assert neighbour_zero(uniform) == pytest.approx(0.7, abs=0.02)  # independent zeros
    assert neighbour_zero(relu) > 0.9                                 # a zero's neighbour is mostly zero too


def test_every_image_and_channel_has_its_share_and_3d_inputs_work():
    x = sparse_input((3, 5, 8, 16, 16), 0.8, "relu", seed=2)
    per_map = (x == 0).reshape(15, -1).mean(axis=1)
    assert np.allclose(per_map, 0.8, atol=0.01)
    assert not np.array_equal(x, sparse_input((3, 5, 8, 16, 16), 0.8, "relu", seed=3))
    assert np.array_equal(x, sparse_input((3, 5, 8, 16, 16), 0.8, "relu", seed=2))  # seeded


@pytest.mark.parametrize("args, message", [((1.0,), "sparsity must lie in"), ((-0.1,), "sparsity must lie in"),
                                           ((0.5, "blocks"), "unknown sparsity pattern")])
def test_impossible_sparsities_and_unknown_patterns_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        sparse_input((1, 2, 8, 8), *args)


@pytest.mark.parametrize("pattern", ["uniform", "relu"])
def test_even_patterns_are_not_crowded_and_shared_active_pixels_are(pattern):
    from seer.layers.sparsity import input_crowding

    x = sparse_input((8, 128, 28, 28), 0.99, pattern, seed=0)
    assert input_crowding(x) == pytest.approx(1.0, abs=0.3)
    # The same share of non-zeros, all on 1% of the pixels, where every channel is active.
    crowded = np.zeros_like(x)
    crowded.reshape(8, 128, -1)[:, :, :8] = 1.0
    assert zero_fraction(crowded) == pytest.approx(0.99, abs=0.001)
    assert input_crowding(crowded) > 10
    assert np.isnan(input_crowding(np.zeros_like(x)))


def test_the_crowded_pattern_crowds_more_with_more_zeros_and_keeps_each_maps_share():
    from seer.layers.sparsity import input_crowding

    crowding = {level: [input_crowding(sparse_input((4, 256, 28, 28), level, "crowded", seed=s)) for s in range(3)]
                for level in (0.5, 0.9, 0.99)}
    assert all(1.2 < c < 3 for c in crowding[0.5]) and all(c > 3 for c in crowding[0.9])
    assert all(more > less for more, less in zip(crowding[0.99], crowding[0.9]))  # a seed draws the same share
    assert len(set(crowding[0.99])) == 3  # each input draws its own shared share
    x = sparse_input((3, 5, 8, 16, 16), 0.8, "crowded", seed=2)
    assert np.allclose((x == 0).reshape(15, -1).mean(axis=1), 0.8, atol=0.01) and (x >= 0).all()
