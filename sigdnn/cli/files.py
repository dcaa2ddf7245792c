"""The files a command reads (graph files and input tensor files, each capped by --max-file-bytes) and the
check that none of them is an output the command would write."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np

from sigdnn.cli.options import limits
from sigdnn.errors import GraphError, UsageError
from sigdnn.graph import deserialize
from sigdnn.graph.limits import DEFAULT_LIMITS
from sigdnn.graph.tf32 import allow_tf32
from sigdnn.io import (
    DEFAULT_MAX_GRAPH_FILE_BYTES,
    DEFAULT_MAX_TENSOR_FILE_BYTES,
    Expected,
    read_graph_file,
    read_tensor_file,
    refuse_overwriting_inputs,
    same_file,
)
from sigdnn.io.files import shown


def file_cap(args: argparse.Namespace, default: int) -> int:
    """--max-file-bytes, or ``default`` when it was not given."""
    return default if args.max_file_bytes is None else args.max_file_bytes


def read_graph(args: argparse.Namespace, path: str) -> bytes:
    """The bytes of a graph file (sigdnn's, or a format the importers register), converted to sigdnn's;
    --input-shape fixes an ONNX model's symbolic input dims, --tf32 lets its float32 dot products run as TF32."""
    import sigdnn.importers  # noqa: F401  (registers the foreign graph formats read_graph_file detects)

    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in getattr(args, "input_shapes", None) or ():
        if name in shapes:
            raise UsageError(f"--input-shape names {name!r} twice")
        shapes[name] = dims
    try:
        data = read_graph_file(path, max_bytes=file_cap(args, DEFAULT_MAX_GRAPH_FILE_BYTES), input_shapes=shapes)
    except (UsageError, GraphError) as e:
        if shapes and ("input shapes" in str(e) or "input_shapes" in str(e)):
            raise type(e)(f"--input-shape: {e}") from None
        raise
    if not getattr(args, "tf32", False):
        return data
    graph = deserialize(data, limits=limits(args) if hasattr(args, "max_bytes") else DEFAULT_LIMITS)
    allow_tf32(graph)
    return graph.serialize()


def expected(graph: Any) -> dict[str, Expected]:
    """What an inputs file may hold: the graph's inputs and its pass-by-value scalars (overrides)."""
    wanted = [*graph.inputs, *(t for t in graph.tensors.values() if t.value is not None)]
    return {t.name: Expected(tuple(t.dims), graph.dtype_of(t)) for t in wanted}


def read_inputs(args: argparse.Namespace, graph: Any, update: Any) -> dict[str, np.ndarray]:
    """The tensors of every --inputs file by name; a name in two files is an error."""
    expect = expected(graph)
    given: dict[str, np.ndarray] = {}
    for path in args.inputs or ():
        update(f"reading {path}")
        for name, array in read_tensor_file(
            path, expect=expect, max_bytes=file_cap(args, DEFAULT_MAX_TENSOR_FILE_BYTES)
        ).items():
            if name in given:
                raise UsageError(f"--inputs: tensor {name!r} is in more than one file (again in {shown(path)})")
            given[name] = array
    return given


def check_outputs(outputs: Sequence[tuple[str | None, str]], reads: Sequence[tuple[str, str]]) -> None:
    """Refuse, before any work, an output (path or None, option) that is a file the command reads or another output.

    Compared as files (:func:`sigdnn.io.same_file`: through symbolic links, ``..``
    and hard links), so no spelling of a graph or an inputs file gets overwritten.
    """
    given = [(path, what) for path, what in outputs if path is not None]
    for i, (path, what) in enumerate(given):
        refuse_overwriting_inputs(path, what, reads)
        for other, other_what in given[:i]:
            if same_file(path, other):
                raise UsageError(f"{other_what} and {what} both name {shown(path)}; give two files")
