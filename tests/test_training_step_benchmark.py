"""benchmarks/training_step.py's per-network comparison of a step's predicted and measured
convolution time."""

from __future__ import annotations

import numpy as np
from conftest import benchmark_module

from seer.layers.known_networks import network_layers


def test_a_networks_step_sums_its_layers_as_often_as_they_repeat_and_a_network_lacking_a_layer_is_left_out():
    network_steps = benchmark_module("training_step").network_steps
    ids = [layer.shape.shape_id for layer in network_layers("squeezenet1_1", 1)]
    distinct = list(dict.fromkeys(ids))
    assert len(distinct) < len(ids)  # SqueezeNet repeats shapes: each repeat counts
    measured = np.arange(1.0, len(distinct) + 1)
    predicted = 1.1 * measured
    bounds = {80: (measured, predicted), 95: (predicted, 2 * predicted)}
    rows = network_steps(distinct, predicted, measured, bounds, {"pytorch": 2 * measured})
    [row] = [r for r in rows if (r["network"], r["batch"]) == ("squeezenet1_1", 1)]
    expected = sum(measured[distinct.index(i)] for i in ids)
    assert row["layers"] == len(ids) and np.isclose(row["measured_ms"], expected)
    assert np.isclose(row["pytorch_ms"], 2 * expected)  # a reference step sums the same way
    assert np.isclose(row["predicted_ms"], 1.1 * expected) and np.isclose(row["error_pct"], 10.0)
    assert row["within_80"] and not row["within_95"]
    assert not network_steps(distinct[1:], predicted[1:], measured[1:], {})  # a layer missing: no total
