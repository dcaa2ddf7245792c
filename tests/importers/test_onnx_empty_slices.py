"""ONNX Slices that select nothing, and the Concats that take them: how torch.roll by 0 exports (Swin3D's shifted
windows). An empty slice is a known value with no elements; Concat drops empty inputs; anything else that would
read an empty tensor is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import helper
from onnx_graphs import one_input_model

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import onnx as onnx_import

X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)


def model(nodes: list, known: dict[str, np.ndarray]) -> bytes:
    return one_input_model(nodes, known, X.shape)


def ints(**values: list[int]) -> dict[str, np.ndarray]:
    return {n: np.array(v, np.int64) for n, v in values.items()}


def roll(axis: int, shift: int) -> tuple[list, dict[str, np.ndarray]]:
    """torch.roll's export: the last ``shift`` elements of the axis, then the rest (Slice, Slice, Concat)."""
    size = X.shape[axis]
    nodes = [
        helper.make_node("Slice", ["x", "tail_start", "tail_end", "axes"], ["tail"]),
        helper.make_node("Slice", ["x", "head_start", "head_end", "axes"], ["head"]),
        helper.make_node("Concat", ["tail", "head"], ["y"], axis=axis),
    ]
    known = ints(tail_start=[size - shift], tail_end=[size], head_start=[0], head_end=[size - shift], axes=[axis])
    return nodes, known


@pytest.mark.parametrize(("axis", "shift"), [(1, 0), (2, 0), (2, 1), (2, 3), (1, 3)])
def test_a_roll_exported_as_slices_and_a_concat_is_numpys_roll(axis: int, shift: int) -> None:
    """A shift of 0 (or the whole axis) leaves one slice empty: the Concat takes the other alone."""
    graph = onnx_import.load(model(*roll(axis, shift)))
    np.testing.assert_array_equal(sigdnn.Executor().run(graph, {"x": X})["y"], np.roll(X, shift, axis))


def test_an_empty_slice_read_by_anything_but_a_concat_is_refused() -> None:
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["empty"]), helper.make_node("Add", ["empty", "x"], ["y"])]
    with pytest.raises(GraphError, match="Add"):
        onnx_import.load(model(nodes, ints(s=[2], e=[2], a=[1])))
