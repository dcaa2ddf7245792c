"""deserialize: a cuDNN-frontend JSON graph read by sigdnn's importer into a pygraph, ready to execute.

As cuDNN's deserialize gives a graph that only executes, the pygraph comes
back planned, its plans built; its tensors are found by uid
(``query_tensor_attributes_of_uid``), and a variant pack keyed by uids runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sigdnn.cudnn.enums import to_cudnn
from sigdnn.cudnn.tensor import tensor
from sigdnn.errors import UsageError

if TYPE_CHECKING:
    from sigdnn.cudnn.graph import pygraph


def adopt(graph: pygraph, data: Any) -> None:
    """Load cuDNN JSON (bytes, text or a parsed dict) into an empty pygraph and build its plans."""
    from sigdnn.importers.cudnn_json import load

    if graph._records or graph._tensors:
        raise UsageError(f"pygraph '{graph._name}': deserialize() needs an empty graph")
    if isinstance(data, (list, tuple)):
        data = bytes(data)
    loaded = load(data)
    for t in loaded.tensors.values():
        mirror = tensor(t.dims, t.strides, to_cudnn(t.dtype), t.is_virtual, t.value is not None, t.name, t.uid,
                        t.scalar() if t.value is not None else None)  # fmt: skip
        graph._own(mirror)._bind(t, loaded)
    graph._graph, graph._name = loaded, loaded.name
    graph.build_operation_graph()
    graph.create_execution_plans()
    graph.build_plans()
