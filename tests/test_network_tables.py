"""The committed layer tables of real networks (seer/data/networks) and the grids built on them."""

import json

import pytest

from seer.layers import grids
from seer.layers.files import read_layers
from seer.layers.shapes import layer_frame, layer_kind_flags

INDEX = json.loads((grids.NETWORKS_DIR / "networks.json").read_text())


def test_every_table_reads_through_seers_checks_and_matches_its_index():
    for entry in INDEX["files"]:
        frame = read_layers(grids.NETWORKS_DIR / entry["file"])  # every row checked as a user's file is
        assert len(frame) == entry["conv_calls"] > 0
        assert (frame["batch"] == 1).all() and frame["name"].notna().all()
        assert entry["role"] in ("train", "test")
        assert int((frame["dims"] == 3).sum()) == entry["kinds"]["conv3d"]  # counted by seer.layers.shapes
        flags = layer_kind_flags(frame)
        assert int(flags["depthwise"].sum()) == entry["kinds"]["depthwise"]
        assert int(flags["grouped"].sum()) == entry["kinds"]["grouped"]


@pytest.mark.slow
def test_held_out_networks_cover_every_kind_and_never_reach_training():
    held_out = grids.test_set_ii_general_grid()
    training = set(grids.networks_general_grid()) | set(grids.seer_grid()) | set(grids.networks_grid())
    assert held_out and not training & set(held_out)
    flags = layer_kind_flags(layer_frame(held_out))
    assert flags.drop(columns="square").any(axis=0).all()  # grouped, depthwise, 1xN, non-square, dilated, 3D
    trained = {e["network"] for e in INDEX["files"] if e["role"] == "train"}
    tested = {e["network"] for e in INDEX["files"] if e["role"] == "test"}
    assert trained.isdisjoint(tested)
