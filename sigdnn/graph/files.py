"""Graphs to and from files, through sigdnn.io's safe reader and writer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.io.files import PathArg, write_file
from sigdnn.io.graph_files import DEFAULT_MAX_GRAPH_FILE_BYTES, read_graph_file

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph


def load(path: PathArg, *, limits: Limits = DEFAULT_LIMITS, max_bytes: int = DEFAULT_MAX_GRAPH_FILE_BYTES) -> Graph:
    """Read a graph file (``.sdg``, or a format a converter in ``sigdnn.io.GRAPH_FORMATS`` recognizes)."""
    return deserialize(read_graph_file(path, max_bytes=max_bytes), limits=limits)


def save(graph: Graph, path: PathArg) -> str:
    """Write ``graph`` as a ``.sdg`` file at exactly ``path``; returns the path."""
    data = graph.serialize()
    return write_file(path, lambda f: f.write(data), what="graph file")
