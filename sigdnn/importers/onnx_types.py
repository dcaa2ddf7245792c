"""Each ONNX value's element type, from ONNX's own type inference run on the model's structure without its weights.

``onnx.shape_inference.infer_shapes`` hands the model to C++ as serialized
bytes and parses the answer back: for ViT-B/16 that copies its 330 MB of
weights three times (1.4 s, most of an import). An element type never
depends on a weight's values, only on its type, so inference runs on a copy
in which each large initializer is a graph input of the same type and dims.
Small initializers keep their data: a shape, axes or pads given as a tensor
is read by inference (Reshape, Slice, Pad, ...), and those hold a few
elements a dim.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.importers.onnx_node import onnx_dtype

MAX_KEPT_ELEMENTS = 1024  # initializers up to this size keep their data for inference (shape-like values)


EINSUM_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,->. ")


def inferred_dtypes(onnx: Any, model: Any) -> dict[str, DataType]:
    """Each value's ONNX element type (best effort: a value inference cannot type is left out). Not inferred at
    all for a model with an Einsum equation outside the equation grammar: ONNX's C++ inference can loop forever on
    one (a mutated NUL-holding equation did, in the fuzzers); the Einsum's own mapping refuses it later."""
    try:
        if _odd_einsum(model.graph):
            raise ValueError("an Einsum equation outside the grammar")
        inferred = onnx.shape_inference.infer_shapes(without_weights(onnx, model), strict_mode=False)
    except Exception:  # inference is only a hint; the mapping checks every shape itself
        inferred = model
    declared = {info.name for info in model.graph.input}  # not the weights made inputs here
    inputs = [info for info in inferred.graph.input if info.name in declared]
    found: dict[str, DataType] = {}
    for info in (*inferred.graph.value_info, *inferred.graph.output, *inputs):
        elem = info.type.tensor_type.elem_type
        if elem:
            with contextlib.suppress(GraphError):  # a type sigdnn lacks fails later, where it is used
                found[info.name] = onnx_dtype(elem, f"value '{info.name}'")
    return found


def _odd_einsum(graph: Any) -> bool:
    """Whether an Einsum node of ``graph`` (or of a graph inside a node's attributes) has an equation with a
    character outside letters, ',', '->', '...' and spaces."""
    for node in graph.node:
        for attribute in node.attribute:
            equation = node.op_type == "Einsum" and attribute.name == "equation"
            if equation and not set(attribute.s.decode("latin-1")) <= EINSUM_CHARACTERS:
                return True
            inner = [attribute.g] if attribute.HasField("g") else []
            if any(_odd_einsum(sub) for sub in (*inner, *attribute.graphs)):
                return True
    return False


def without_weights(onnx: Any, model: Any) -> Any:
    """A copy of ``model`` whose initializers over MAX_KEPT_ELEMENTS are graph inputs of their type and dims."""
    light = onnx.ModelProto()
    _copy_fields(light, model, skipped={"graph"})
    graph, source = light.graph, model.graph
    _copy_fields(graph, source, skipped={"initializer"})
    declared = {info.name for info in source.input}
    for tensor in source.initializer:
        if math.prod(tensor.dims) <= MAX_KEPT_ELEMENTS:
            graph.initializer.append(tensor)
        elif tensor.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light


def _copy_fields(target: Any, source: Any, skipped: set[str]) -> None:
    """Copy every set field of the protobuf message ``source`` into ``target``, except ``skipped``.

    ModelProto's one singular message field (``graph``) is skipped and GraphProto has none: every other field is
    a repeated one or a scalar.
    """
    for field, value in source.ListFields():
        if field.name in skipped:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        else:
            setattr(target, field.name, value)
