"""Hostile inputs end in a SigdnnError subclass naming the file, node or option, never a bare Python error (#32).

Each case escaped on main as ValueError, OverflowError, KeyError, TypeError,
ZeroDivisionError or RuntimeError, which the CLI printed as "internal error
... a bug in sigdnn" without the file's name.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, cli
from cudnn_json_writer import graph_json, node
from onnx import TensorProto, helper, numpy_helper

import sigdnn
from sigdnn.errors import GraphError, SigdnnError, UsageError
from sigdnn.importers import cudnn_json
from sigdnn.importers import onnx as onnx_importer
from sigdnn.io import FileError, read_tensor_file


def npy(shape: str, descr: str = "<f4") -> bytes:
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)  # noqa: UP031
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


SHAPES = {
    "65 dims of 0": "(" + "0, " * 65 + ")",
    "a 2^70 dim next to a 0": f"({1 << 70}, 0)",
    "a negative dim": "(-3, 2)",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_npy_shapes_numpy_cannot_build_are_file_errors(tmp_path: Path, shape: str) -> None:
    (tmp_path / "t.npy").write_bytes(npy(SHAPES[shape]))
    with pytest.raises(FileError, match=r"'.*t.npy', tensor 't': its .npy header declares shape .* no array can have"):
        read_tensor_file(tmp_path / "t.npy")


def test_an_npz_dtype_member_declaring_2_63_elements_is_a_file_error(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("x.npy", npy("(2,)"))
        archive.writestr("__sigdnn_dtypes__.npy", npy(f"({(1 << 63) - 1},)", "<U1"))
    (tmp_path / "t.npz").write_bytes(buffer.getvalue())
    with pytest.raises(FileError, match="no array can have"):
        read_tensor_file(tmp_path / "t.npz")


def test_an_unknown_cudnn_pointwise_mode_is_a_graph_error_with_a_suggestion() -> None:
    g = sigdnn.Graph("p", io_dtype="float32")
    a, y = g.tensor("a", (2, 3)), g.tensor("y", (2, 3))
    y.set_output(True)
    data = graph_json(g, [node("POINTWISE", "r", {"IN_0": a.uid}, {"OUT_0": y.uid}, mode="RELU_FWDD")])
    with pytest.raises(GraphError, match="node 'r': pointwise: unknown mode 'relu_fwdd'; did you mean 'relu_fwd'"):
        cudnn_json.load(data)


def test_a_misspelled_mode_in_the_graph_api_gets_a_suggestion() -> None:
    g = sigdnn.Graph("p", io_dtype="float32")
    with pytest.raises(GraphError, match="unknown pointwise mode 'mull'; did you mean 'mul'"):
        g.pointwise("mull", g.tensor("a", (2,)), g.tensor("b", (2,)))


def _model(nodes: list[Any], initializers: tuple[Any, ...] = (), dims: list[Any] | None = None) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims or [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "m", [x], [y], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


ONNX_CASES = {
    "Shape with a non-integer start": (
        _model([helper.make_node("Shape", ["x"], ["s"], start=1.5), helper.make_node("Reshape", ["x", "s"], ["y"])]),
        r"'Shape_0' \(Shape\): start 1.5 and end None must be integers",
    ),
    "Split with num_outputs=0": (
        _model([helper.make_node("Split", ["x"], ["y"], axis=0, num_outputs=0)]),
        r"'Split_0' \(Split\): num_outputs 0 is not a count >= 1",
    ),
    "Expand to 33 dims": (
        _model(
            [helper.make_node("Expand", ["c", "sh"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])],
            (
                numpy_helper.from_array(np.ones(1, np.float32), "c"),
                numpy_helper.from_array(np.ones(33, np.int64), "sh"),
            ),
        ),
        "rank 33 outside",
    ),
}


@pytest.mark.parametrize("case", ONNX_CASES)
def test_onnx_nodes_that_escaped_are_graph_errors_naming_the_node(case: str) -> None:
    data, message = ONNX_CASES[case]
    with pytest.raises(SigdnnError, match=message):
        onnx_importer.load(data)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"x": "ab"}, r"input_shapes\['x'\]: a sequence of integer dims"),
        ({"x": (None, 3)}, r"input_shapes\['x'\]: dim 0 is None, not an integer"),
        ({"x": 5}, r"input_shapes\['x'\]: a sequence of integer dims"),
        ({"x": (2.5, 3)}, r"dim 0 is 2.5, not an integer"),
        ({"x": (True, 3)}, r"dim 0 is True, not an integer"),
        ([("x", (2, 3))], "input_shapes: a mapping of input name to dims"),
    ],
)
def test_input_shapes_are_checked_not_truncated(shapes: Any, message: str) -> None:
    data = _model([helper.make_node("Relu", ["x"], ["y"])], dims=["n", 3])
    with pytest.raises(UsageError, match=message):
        onnx_importer.load(data, input_shapes=shapes)
    graph = onnx_importer.load(data, input_shapes={"x": (np.int64(4), 3)})
    assert graph.tensors[min(graph.tensors)].dims == (4, 3)


def test_the_cli_names_the_file_of_a_hostile_tensor_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import add_graph

    graph = add_graph(tmp_path / "g.sdg")
    (tmp_path / "in.npy").write_bytes(npy(SHAPES["65 dims of 0"]))
    code, _, err = cli(capsys, "run", graph, "--inputs", tmp_path / "in.npy")
    assert_one_line_error(code, err, "in.npy", "no array can have")
    assert "internal error" not in err
