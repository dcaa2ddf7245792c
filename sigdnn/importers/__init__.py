"""Importers: graphs from where users have them, turned into sigdnn graphs.

One mapping layer per source format, each op mapped in one place:
``sigdnn.importers.onnx`` (ONNX models, needs ``sigdnn[onnx]``),
``sigdnn.importers.hipdnn`` (hipDNN's serialized FlatBuffers graphs) and
``sigdnn.importers.cudnn_json`` (cuDNN-frontend graph JSON). Each exposes
``load(...) -> Graph`` and ``to_sdg(bytes) -> bytes``.

Importing this package registers the three formats with ``sigdnn.io``'s
graph reader (detection by ``sigdnn.importers.detect``, a few byte checks;
each importer loads on its first file), so ``sigdnn.load``,
``Executor.prepare(path)`` and ``sigdnn run / inspect / validate``, which
import it, take such files as they are. ``sigdnn.io`` itself knows no format
but its own.
"""

from __future__ import annotations

import importlib

from sigdnn.graph.files import load
from sigdnn.importers import detect
from sigdnn.io.graph_files import GraphFormat, register_format

__all__ = ["load"]


def _lazy(module: str, check: str, beside: bool = False, shapes: bool = False) -> GraphFormat:
    """A format whose detection (byte checks only) runs on every file and whose importer loads on first use;
    ``beside``: it reads files next to the graph file (ONNX external data), resolved in its folder;
    ``shapes``: its to_sdg takes input_shapes= (symbolic input dims, fixed by --input-shape)."""

    def to_sdg(data: bytes) -> bytes:
        return importlib.import_module(f"sigdnn.importers.{module}").to_sdg(data)

    def to_sdg_at(data: bytes, path: str, max_bytes: int, **options: object) -> bytes:
        return importlib.import_module(f"sigdnn.importers.{module}").to_sdg(data, path, max_bytes, **options)

    return GraphFormat(module, getattr(detect, check), to_sdg, to_sdg_at if beside else None, shapes)


for _format in (
    _lazy("onnx", "is_onnx", beside=True, shapes=True),
    _lazy("cudnn_json", "is_cudnn_json"),
    _lazy("hipdnn", "is_hipdnn"),
):
    register_format(_format)
