"""seer.networks.onnx_layers: the convolutions of an ONNX model, found by shape inference, checked
against hand-worked layers and against seer.torch on the same models exported; and
`seer network FILE.onnx`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from seer.cli import main
from seer.errors import InputError
from seer.layers.calls import TRANSPOSED_REASON
from seer.layers.files import read_layers
from seer.layers.shapes import describe
from seer.networks.onnx_layers import DEVICE, onnx_conv_calls

OPSET = [helper.make_opsetid("", 17)]


def _save(path: Path, nodes: list, inputs: list, initializers: list, opset_imports: list = OPSET, **model) -> Path:
    """A model of ``nodes`` whose output is the last node's first output, saved at ``path``."""
    output = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", inputs, [output], initializers)
    onnx.save(helper.make_model(graph, opset_imports=opset_imports, **model), path)
    return path


def _weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def _input(shape: list, name: str = "x") -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _conv_file(tmp_path: Path, x: list, w: tuple[int, ...], op: str = "Conv", **attributes) -> Path:
    """A model of one node ``op`` named "conv" on input x with weight w."""
    node = helper.make_node(op, ["x", "w"], ["y"], name="conv", **attributes)
    return _save(tmp_path / "model.onnx", [node], [_input(x)], [_weight("w", w)])


def _one(tmp_path: Path, x: list, w: tuple[int, ...], **attributes) -> pd.Series:
    found = onnx_conv_calls(_conv_file(tmp_path, x, w, **attributes))
    assert len(found.layers) == 1 and found.skipped.empty and found.device == DEVICE
    assert found.channels_last is None  # a graph has no strides: the layout is not known
    row = found.layers.iloc[0]
    assert (row["name"], row["call"], row["calls"]) == ("conv", "Conv", 1)
    return row


@pytest.mark.parametrize("x, w, attributes, text", [
    ([1, 3, 32, 32], (8, 3, 3, 3), {}, "1x3x32x32 -> 8, 3x3 s1 p0"),
    ([2, 16, 56, 56], (32, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]},
     "2x16x56x56 -> 32, 3x3 s2 p1"),
    ([2, 16, 32, 32], (32, 4, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, "2x16x32x32 -> 32, 3x3 s1 p1 g4"),
    ([2, 32, 32, 32], (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}, "2x32x32x32 -> 32, 3x3 s1 p1 g32"),
    ([1, 8, 20, 20], (8, 8, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, "1x8x20x20 -> 8, 3x3 s1 p2 d2"),
    ([1, 8, 17, 17], (8, 8, 1, 7), {"pads": [0, 3, 0, 3]}, "1x8x17x17 -> 8, 1x7 s1 p0,3"),
    ([1, 8, 17, 17], (8, 8, 7, 1), {"pads": [3, 0, 3, 0], "auto_pad": "NOTSET"}, "1x8x17x17 -> 8, 7x1 s1 p3,0"),
    ([1, 3, 16, 112, 112], (8, 3, 3, 7, 7), {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]},
     "1x3x16x112x112 -> 8, 3x7x7 s1,2,2 p1,3,3"),
    ([1, 8, 9, 9], (8, 8, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}, "1x8x9x9 -> 8, 3x3 s2 p0"),
    ([1, 8, 9, 9], (8, 8, 3, 3), {"auto_pad": "VALID", "pads": [0, 0, 0, 0]}, "1x8x9x9 -> 8, 3x3 s1 p0"),
])
def test_conv_nodes_give_the_layers_worked_by_hand(tmp_path, x, w, attributes, text):
    row = _one(tmp_path, x, w, **attributes)
    assert describe(row) == text
    assert row["dims"] == len(x) - 2


def test_a_1d_convolution_is_a_2d_one_of_height_1(tmp_path):
    row = _one(tmp_path, [1, 8, 100], (4, 8, 5), pads=[2, 2])
    assert row["dims"] == 2 and (row["in_h"], row["kernel_h"], row["stride_h"], row["pad_h"]) == (1, 1, 1, 0)
    assert (row["in_w"], row["kernel_w"], row["pad_w"], row["out_w"], row["out_ch"]) == (100, 5, 2, 100, 4)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_padding_with_an_odd_total_pads_the_input_first(tmp_path, auto_pad):
    # Output ceil(9/2) = 5 needs 4*2 + 4 - 9 = 3 of padding: 1 + 2 (or 2 + 1), so the input grows by one
    # and both sides get 1, as PyTorch runs padding="same".
    row = _one(tmp_path, [1, 8, 9, 9], (8, 8, 4, 4), strides=[2, 2], auto_pad=auto_pad)
    assert describe(row) == "1x8x10x10 -> 8, 4x4 s2 p1" and (row["out_h"], row["out_w"]) == (5, 5)


def test_same_padding_with_an_even_total_is_symmetric(tmp_path):
    row = _one(tmp_path, [1, 8, 14, 14], (8, 8, 3, 3), auto_pad="SAME_UPPER")
    assert describe(row) == "1x8x14x14 -> 8, 3x3 s1 p1"


def test_asymmetric_pads_grow_the_input_by_the_difference_and_keep_the_output_size(tmp_path):
    # TensorFlow's stride-2 'same': nothing before, one after.
    row = _one(tmp_path, [1, 3, 224, 224], (32, 3, 3, 3), strides=[2, 2], pads=[0, 0, 1, 1])
    assert describe(row) == "1x3x225x225 -> 32, 3x3 s2 p0"
    assert row["out_h"] == (224 + 0 + 1 - 3) // 2 + 1 == 112  # ONNX's output size, with both pads
    row = _one(tmp_path, [1, 3, 20, 30], (8, 3, 5, 5), pads=[1, 4, 3, 2])  # h: 1 and 3; w: 4 and 2
    assert describe(row) == "1x3x22x32 -> 8, 5x5 s1 p1,2" and (row["out_h"], row["out_w"]) == (20, 32)


def test_a_symbolic_batch_needs_input_which_sets_it(tmp_path):
    path = _conv_file(tmp_path, ["N", 3, 32, 32], (8, 3, 3, 3), pads=[1, 1, 1, 1])
    with pytest.raises(InputError) as caught:
        onnx_conv_calls(path)
    message = str(caught.value)
    assert str(path) in message and "'x'" in message and "Nx3x32x32" in message and "--input" in message
    assert "\n" not in message and caught.value.field == "input"
    found = onnx_conv_calls(path, (4, 3, 32, 32))
    assert found.input_shape == (4, 3, 32, 32) and describe(found.layers.iloc[0]) == "4x3x32x32 -> 8, 3x3 s1 p1"
    with pytest.raises(InputError, match="has 5 sizes, but the model's input 'x' has 4"):
        onnx_conv_calls(path, (4, 3, 8, 32, 32))


def test_input_overrides_a_fixed_shape_and_what_the_file_inferred_for_it(tmp_path):
    path = _conv_file(tmp_path, [1, 3, 32, 32], (8, 3, 3, 3))
    model = onnx.shape_inference.infer_shapes(onnx.load(path))  # records y as 1x8x30x30
    onnx.save(model, path)
    found = onnx_conv_calls(path, (2, 3, 64, 64))
    assert describe(found.layers.iloc[0]) == "2x3x64x64 -> 8, 3x3 s1 p0" and found.layers.iloc[0]["out_h"] == 62


def test_other_inputs_must_be_fixed_and_initializers_listed_as_inputs_are_not_inputs(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv"), helper.make_node("Add", ["a", "m"], ["y"])]
    path = _save(tmp_path / "two.onnx", nodes, [_input(["N", 3, 8, 8]), _input(["N", 4, 6, 6], "m")],
                 [_weight("w", (4, 3, 3, 3))])
    with pytest.raises(InputError, match="input 'm' has sizes Nx4x6x6, left open in the file; --input sets only the "
                                         "first input, 'x'"):
        onnx_conv_calls(path, (1, 3, 8, 8))
    # IR version 3 files list every initializer as an input too, before the real one.
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    path = _save(tmp_path / "old.onnx", [node], [_input([4, 3, 3, 3], "w"), _input([1, 3, 8, 8])],
                 [_weight("w", (4, 3, 3, 3))], ir_version=3, opset_imports=[helper.make_opsetid("", 8)])
    found = onnx_conv_calls(path)
    assert found.input_shape == (1, 3, 8, 8) and describe(found.layers.iloc[0]) == "1x3x8x8 -> 4, 3x3 s1 p0"


def test_convolutions_seer_does_not_model_are_skipped_with_the_reason(tmp_path):
    nodes = [
        helper.make_node("ConvTranspose", ["x", "wt"], ["up"], name="up", strides=[2, 2]),
        helper.make_node("FusedConv", ["up", "w"], ["fused"], name="fused", domain="com.microsoft"),
        helper.make_node("Conv", ["fused", "w"], ["after"], name="after_unknown"),
        helper.make_node("Conv", ["up", "w"], ["y"], name="kept"),
    ]
    path = _save(tmp_path / "skips.onnx", nodes, [_input([1, 8, 16, 16])], [_weight("wt", (8, 8, 2, 2)),
                                                                            _weight("w", (8, 8, 3, 3))],
                 opset_imports=[*OPSET, helper.make_opsetid("com.microsoft", 1)])
    found = onnx_conv_calls(path)
    assert list(found.layers["name"]) == ["kept"] and describe(found.layers.iloc[0]) == "1x8x32x32 -> 8, 3x3 s1 p0"
    reasons = dict(zip(found.skipped["name"], found.skipped["reason"]))
    assert list(found.skipped["call"]) == ["ConvTranspose", "FusedConv", "Conv"]
    assert reasons["up"] == TRANSPOSED_REASON
    assert "domain 'com.microsoft'" in reasons["fused"] and "not the standard ONNX Conv" in reasons["fused"]
    assert "could not work out its input's shape" in reasons["after_unknown"]
    assert found.total_calls == 4


def test_conv_nodes_inside_an_if_are_skipped_and_local_functions_are_inlined(tmp_path):
    def branch(name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Conv", ["x", "w"], [f"{name}_y"], name=f"{name}_conv")], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    block = onnx.helper.make_function(
        "local", "Block", ["bx", "bw"], ["by"], [helper.make_node("Conv", ["bx", "bw"], ["by"], name="inner",
                                                                  pads=[1, 1, 1, 1])],
        opset_imports=OPSET)
    nodes = [helper.make_node("If", ["flag"], ["branched"], name="choose", then_branch=branch("then"),
                              else_branch=branch("else")),
             helper.make_node("Block", ["x", "w"], ["y"], name="block", domain="local")]
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    path = _save(tmp_path / "nested.onnx", nodes, [_input([1, 4, 8, 8]), flag], [_weight("w", (4, 4, 3, 3))],
                 opset_imports=[*OPSET, helper.make_opsetid("local", 1)], functions=[block])
    found = onnx_conv_calls(path)
    assert len(found.layers) == 1 and describe(found.layers.iloc[0]) == "1x4x8x8 -> 4, 3x3 s1 p1"
    assert sorted(found.skipped["name"]) == ["else_conv", "then_conv"]
    assert found.skipped["reason"].str.contains("inside the subgraph of If 'choose'").all()


def test_repeated_nodes_of_one_name_and_layer_are_one_row_run_twice(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="block", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w"], ["y"], name="block", pads=[1, 1, 1, 1])]
    found = onnx_conv_calls(_save(tmp_path / "twice.onnx", nodes, [_input([1, 4, 8, 8])],
                                  [_weight("w", (4, 4, 3, 3))]))
    assert len(found.layers) == 1 and found.layers.iloc[0]["calls"] == 2 and list(found.order) == [0, 0]
    # A node without a name is named by its output.
    nodes = [helper.make_node("Conv", ["x", "w"], ["out0"])]
    found = onnx_conv_calls(_save(tmp_path / "anonymous.onnx", nodes, [_input([1, 4, 8, 8])],
                                  [_weight("w", (4, 4, 3, 3))]))
    assert list(found.per_call()["name"]) == ["out0"]


@pytest.mark.parametrize("content, words", [
    (b"batch,in_ch\n1,3\n", "not an ONNX model"),
    (b"", "not an ONNX model: it holds no graph"),
    (None, "cannot be read"),
])
def test_a_file_that_is_not_an_onnx_model_is_one_input_error_naming_it(tmp_path, content, words):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        onnx_conv_calls(path)
    assert str(caught.value).startswith(f"{path}: ") and words in str(caught.value) and "\n" not in str(caught.value)


def test_failed_shape_inference_is_one_input_error(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    graph = helper.make_graph([node], "g", [_input([1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 7, 7])],  # 6x6 in truth
                              [_weight("w", (4, 3, 3, 3))])
    path = tmp_path / "wrong.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    with pytest.raises(InputError, match="ONNX shape inference failed: .*differ") as caught:
        onnx_conv_calls(path)
    assert caught.value.path == str(path)


# -- hostile files: one InputError naming the node, never a traceback -------------------------
def _typed(name: str, value) -> onnx.AttributeProto:
    """An attribute of the type its Python value has: bytes and str a STRING, int an INT, a list INTS."""
    if isinstance(value, list):
        return helper.make_attribute(name, value, attr_type=onnx.AttributeProto.INTS)
    return helper.make_attribute(name, value)


def _hostile(tmp_path: Path, x: list, w: tuple[int, ...], attributes: dict, name: str = "block#1/conv",
             file: str = "hostile.onnx") -> Path:
    """A one-Conv model whose attributes are set as given, of whatever type they have."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], name=name)
    node.attribute.extend(_typed(key, value) for key, value in attributes.items())
    return _save(tmp_path / file, [node], [_input(x)], [_weight("w", w)])


def _one_line_error(path: Path, field: str, words: str) -> InputError:
    with pytest.raises(InputError) as caught:
        onnx_conv_calls(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field}: Conv node 'block#1/conv': ") and words in message, message
    assert "\n" not in message and caught.value.field == field
    return caught.value


@pytest.mark.parametrize("auto_pad, words", [
    (b"\xff\xfeSAME", "must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got b'\\xff\\xfeSAME'"),
    (1, "must be an attribute of type STRING, got INT"),
    ([1, 1], "must be an attribute of type STRING, got INTS"),
    ("same_upper", "got 'same_upper'"),
    ("VALID\n# not a comment", "got 'VALID\\n# not a comment'"),
])
def test_an_auto_pad_that_is_no_known_string_is_one_input_error(tmp_path, auto_pad, words):
    _one_line_error(_hostile(tmp_path, [1, 3, 8, 8], (4, 3, 3, 3), {"auto_pad": auto_pad}), "auto_pad", words)


@pytest.mark.parametrize("x, w, attributes, field, words", [
    ([1, 3, 8, 8], (4, 5, 3, 3), {}, "weight", ("its weight 'w' (4x5x3x3) takes 5 input channels, but its "
                                               "input (1x3x8x8) has 3")),
    ([1, 6, 8, 8], (4, 3, 3, 3), {}, "weight", "takes 3 input channels, but its input (1x6x8x8) has 6"),
    ([1, 6, 8, 8], (6, 3, 3, 3), {"group": 3}, "weight", "3 input channels per group, 9 in its 3 groups"),
    ([1, 6, 8, 8], (3, 3, 3, 3), {"group": 2}, "group", "3 output channels, not a multiple of group 2"),
    ([1, 6, 8, 8], (6, 3, 3, 3), {"group": 0}, "group", "must be at least 1, got 0"),
    ([1, 3, 8, 8], (4, 3, 3, 3), {"group": 1.0}, "group", "must be an attribute of type INT, got FLOAT"),
    ([1, 3, 8, 8], (4, 3, 3, 3), {"kernel_shape": [2, 2]}, "kernel_shape", ("is 2x2, but the kernel of its "
                                                                           "weight 'w' is 3x3")),
    # Inference takes the pads (a 9x9 output here), onnxruntime auto_pad (8x8).
    ([1, 3, 8, 8], (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "pads": [1, 1, 2, 2]}, "pads",
     "are given with auto_pad SAME_UPPER: give only one of them"),
])
def test_a_weight_that_does_not_fit_its_input_or_attributes_is_one_input_error(tmp_path, x, w, attributes, field,
                                                                                words):
    # ONNX shape inference lets every one of these through: before, seer predicted the layer silently.
    _one_line_error(_hostile(tmp_path, x, w, attributes), field, words)


def test_an_attribute_given_twice_or_referring_to_no_function_is_one_input_error(tmp_path):
    path = _hostile(tmp_path, [1, 4, 8, 8], (4, 2, 3, 3), {"group": 2})
    model = onnx.load(path)
    model.graph.node[0].attribute.append(helper.make_attribute("group", 1))
    onnx.save(model, path)
    _one_line_error(path, "group", "the attribute is given twice")
    model.graph.node[0].attribute.pop()
    model.graph.node[0].attribute[0].ref_attr_name = "g"
    onnx.save(model, path)
    _one_line_error(path, "group", "refers to an attribute 'g' of a function, outside any function")


def test_a_name_that_is_not_utf8_is_shown_escaped(tmp_path):
    path = _conv_file(tmp_path, [1, 3, 8, 8], (4, 3, 3, 3))
    path.write_bytes(path.read_bytes().replace(b"\x04conv", b"\x04c\xffnv"))  # the node's name, in place
    assert list(onnx_conv_calls(path).layers["name"]) == ["c\\xffnv"]


HOSTILE_NAMES = ["block#1/conv", "#start", 'say "hi", twice', "line\nbreak", "cr\rlf\r\nboth", " spaced ",
                 "ünï©ødé 卷积", "tab\there", "nul\x00"]


def test_hostile_node_names_go_through_layers_out_and_read_back(small_models, tmp_path, capsys):
    nodes, inputs = [], "x"
    for i, name in enumerate(HOSTILE_NAMES):
        nodes.append(helper.make_node("Conv", [inputs, "w"], [f"y{i}"], name=name, pads=[1, 1, 1, 1]))
        inputs = f"y{i}"
    path = _save(tmp_path / "names.onnx", nodes, [_input([1, 4, 8, 8])], [_weight("w", (4, 4, 3, 3))])
    layers_out = tmp_path / "layers.csv"
    code = main(["network", str(path), "--models-dir", str(small_models), "--layers-out", str(layers_out)])
    capsys.readouterr()
    assert code == 0
    back = read_layers(layers_out)  # seer predict's reader
    assert list(back["name"]) == HOSTILE_NAMES
    expected = onnx_conv_calls(path).per_call()
    pd.testing.assert_frame_equal(back.drop(columns="name"), expected.drop(columns="name"))


# Random attributes and weights of one Conv node: mostly valid, often hostile.
HOSTILE_AUTO_PADS = st.sampled_from(["", "same", "#", "VALID\n", b"\xff", 1, 1.5, [0]])
HOSTILE_INTS = st.lists(st.integers(-1, 3), max_size=5)


@st.composite
def conv_graphs(draw) -> tuple[list[int], tuple[int, ...], dict, str]:
    """(input shape, weight shape, attributes, node name) of a one-Conv model."""
    dims = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 1, 2, 3, 0, -1]))
    channels = draw(st.integers(1, 6))
    x = [draw(st.integers(1, 2)), channels, *draw(st.lists(st.integers(3, 9), min_size=dims, max_size=dims))]
    fits = max(group, 1) if channels % max(group, 1) == 0 else 1
    in_ch = draw(st.sampled_from([channels // fits] * 3 + [5]))
    out_ch = draw(st.sampled_from([max(group, 1) * draw(st.integers(1, 2))] * 3 + [4]))
    kernel = draw(st.lists(st.integers(1, 3), min_size=dims, max_size=dims))
    if draw(st.integers(0, 9)) == 0:  # a weight of the wrong rank
        kernel.append(1)
    valid = {"auto_pad": st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]),
             "pads": st.lists(st.integers(0, 2), min_size=2 * dims, max_size=2 * dims),
             "strides": st.lists(st.integers(1, 3), min_size=dims, max_size=dims),
             "dilations": st.lists(st.integers(1, 2), min_size=dims, max_size=dims),
             "kernel_shape": st.sampled_from([kernel, [k + 1 for k in kernel]]), "group": st.just(group)}
    hostile = {"auto_pad": HOSTILE_AUTO_PADS, "group": st.sampled_from([1.0, "1", [1]])}
    attributes = {}
    for name, values in valid.items():
        choice = draw(st.sampled_from(["absent", "absent", "valid", "valid", "hostile"]))
        if choice != "absent":
            attributes[name] = draw(values if choice == "valid" else hostile.get(name, HOSTILE_INTS))
    return x, (out_ch, in_ch, *kernel), attributes, draw(st.text(max_size=12))


def _onnx_output(path: Path) -> list | None:
    """The output shape ONNX infers for the node's output ``y``."""
    model = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True)
    for value in (*model.graph.value_info, *model.graph.output):
        if value.name == "y" and value.type.tensor_type.HasField("shape"):
            return [d.dim_value for d in value.type.tensor_type.shape.dim]
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv_graphs())
def test_fuzzed_conv_nodes_give_layers_that_fit_their_weights_or_one_input_error(tmp_path, graph):
    x, w, attributes, name = graph
    path = _hostile(tmp_path, x, w, attributes, name=name)
    try:
        found = onnx_conv_calls(path)
    except InputError as err:
        assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
        return
    assert len(found.layers) + len(found.skipped) == 1 and list(found.order) == [0] * len(found.layers)
    if found.skipped.empty:
        row = found.layers.iloc[0]
        group = attributes.get("group", 1)
        assert (row["name"], row["in_ch"], row["out_ch"], row["groups"]) == (name or "y", x[1], w[0], group)
        assert x[1] == w[1] * group and w[0] % group == 0
        kernel = (row["kernel_h"], row["kernel_w"]) if len(x) == 4 else (row["kernel_w"],)
        assert kernel == w[2:]
        y = _onnx_output(path)  # the layer's output is the one ONNX gives the node
        assert y is not None and [row["batch"], row["out_ch"], *((row["out_h"],) if len(x) == 4 else ()),
                                  row["out_w"]] == y


def test_reading_onnx_needs_no_torch():
    code = "import sys, seer.networks.onnx_layers, seer.layers.calls; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the same models through PyTorch and through their ONNX export ---------------------------
@pytest.mark.filterwarnings("ignore")  # the legacy exporter's deprecation and constant-folding notes
@pytest.mark.parametrize("net, shape", [("every_kind", (2, 3, 64, 48)), ("video", (1, 3, 16, 56, 56)),
                                        ("resnet50", (1, 3, 224, 224))])
@pytest.mark.slow
def test_an_exported_model_gives_the_layers_its_forward_pass_runs(tmp_path, net, shape):
    import torch
    import torch_nets

    from seer.torch import build_model, conv_calls

    path = tmp_path / f"{net}.onnx"
    # The TorchScript exporter (dynamo=False) needs no onnxscript; a symbolic batch, as exports often have.
    torch.onnx.export(getattr(torch_nets, net)().eval(), torch.zeros(shape), path, dynamo=False,
                      input_names=["x"], dynamic_axes={"x": {0: "N"}})
    batch = (3, *shape[1:])
    ours = onnx_conv_calls(path, batch).per_call()
    theirs = conv_calls(build_model(getattr(torch_nets, net)), batch).per_call()
    if net == "every_kind":
        # The exported reflect padding computes its pads in the graph, which shape inference does not follow.
        skipped = onnx_conv_calls(path, batch).skipped
        assert list(skipped["name"]) == ["/reflect/Conv", "/up/ConvTranspose"]
        theirs = theirs[theirs["name"] != "reflect"]
    assert ours.drop(columns="name").equals(theirs.drop(columns="name").reset_index(drop=True))
    assert ours["name"].str.endswith("/Conv").all()  # the exporter's node names: /module/path/Conv


# -- seer network FILE.onnx -----------------------------------------------------------------
def _refused(code: int, err: str, words: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("seer: error:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert words in lines[0], err


def test_seer_network_reads_an_onnx_file(small_models, tmp_path, capsys):
    path = _conv_file(tmp_path, ["N", 16, 28, 28], (32, 16, 3, 3), pads=[1, 1, 1, 1])
    out, layers_out = tmp_path / "net.csv", tmp_path / "layers.csv"
    code = main(["network", str(path), "--input", "8x16x28x28", "--models-dir", str(small_models), "--out", str(out),
                 "--layers-out", str(layers_out)])
    shown, _ = capsys.readouterr()
    assert code == 0
    frame = pd.read_csv(out)
    assert len(frame) and set(frame["name"]) == {"conv"} and frame["calls"].eq(1).all()
    assert (frame["batch"].eq(8) & frame["in_ch"].eq(16) & frame["out_ch"].eq(32)).all()
    assert list(pd.read_csv(layers_out)["name"]) == ["conv"]
    assert "input 8x16x28x28" in shown and "seer's picks" in shown


def test_seer_network_json_of_an_onnx_file_without_input(small_models, tmp_path, capsys):
    path = _conv_file(tmp_path, [1, 3, 8, 16, 16], (4, 3, 3, 3, 3))
    upper = path.rename(tmp_path / "Model.ONNX")  # the suffix in any case
    out = tmp_path / "net.json"
    assert main(["network", str(upper), "--models-dir", str(small_models), "-o", str(out)]) == 0
    capsys.readouterr()
    about = pd.read_json(out, typ="series")
    assert about["device"] == DEVICE and about["input"] == [1, 3, 8, 16, 16] and about["layers"][0]["dims"] == 3


@pytest.mark.parametrize("case, words", [
    ("not_onnx", "bad.onnx: not an ONNX model"),
    ("open_batch", "input: the model's input 'x' has sizes Nx3x8x8, left open in the file: pass --input"),
    ("device", "device: --device meta is for PyTorch models"),
    ("torch_without_input", "input: a PyTorch model needs --input"),
    ("auto_pad_bytes", "auto_pad.onnx: auto_pad: Conv node 'block#1/conv': must be NOTSET, SAME_UPPER"),
    ("auto_pad_int", "auto_pad: Conv node 'block#1/conv': must be an attribute of type STRING, got INT"),
    ("weight", "weight.onnx: weight: Conv node 'block#1/conv': its weight 'w' (4x5x3x3) takes 5 input channels"),
])
def test_seer_network_mistakes_with_onnx_are_one_line_and_exit_2(small_models, tmp_path, capsys, case, words):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model\n")
    open_batch = _conv_file(tmp_path, ["N", 3, 8, 8], (4, 3, 3, 3))
    argv = {"not_onnx": [str(bad)], "open_batch": [str(open_batch)],
            "device": [str(open_batch), "--input", "1x3x8x8", "--device", "meta"],
            "torch_without_input": ["torch_nets:every_kind"],
            "auto_pad_bytes": [str(_hostile(tmp_path, [1, 3, 8, 8], (4, 3, 3, 3), {"auto_pad": b"\xc3("},
                                            file="auto_pad.onnx"))],
            "auto_pad_int": [str(_hostile(tmp_path, [1, 3, 8, 8], (4, 3, 3, 3), {"auto_pad": 2}, file="int.onnx"))],
            "weight": [str(_hostile(tmp_path, [1, 3, 8, 8], (4, 5, 3, 3), {}, file="weight.onnx"))]}[case]
    out = tmp_path / "net.csv"
    code = main(["network", *argv, "--models-dir", str(small_models), "-o", str(out)])
    _refused(code, capsys.readouterr().err, words)
    assert not out.exists()
