"""Graph files: read safely, then handed to the first format converter that recognizes them.

sigdnn's own format (``.sdg``, FlatBuffers) needs no converter: bytes no
converter claims are returned as read, and ``deserialize`` judges them.
Other formats plug in through :func:`register_format` (``sigdnn.importers``
registers its three when imported).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from sigdnn.errors import UsageError
from sigdnn.io.files import PathArg, check_path, read_regular_file, shown

DEFAULT_MAX_GRAPH_FILE_BYTES = 256 << 20  # far above any real graph; a 10,000-node graph is ~2 MiB


@attrs.frozen
class GraphFormat:
    """A foreign graph format: how to recognize its files and turn them into sigdnn bytes."""

    name: str
    detect: Callable[[bytes, str], bool]  # (content, path) -> is it this format
    to_sdg: Callable[[bytes], bytes]  # content -> sigdnn graph bytes; raises a SigdnnError when it cannot
    # (content, path, byte cap) -> sigdnn graph bytes, for a format that reads files beside the graph file
    # (ONNX external data): they resolve in the graph file's folder and count against the same cap.
    to_sdg_at: Callable[..., bytes] | None = None
    # whether to_sdg_at takes input_shapes= (fixed dims for the graph's symbolic input dims: ONNX)
    takes_input_shapes: bool = False


# Foreign formats read_graph_file converts, in the order they are tried. sigdnn.io knows none itself:
# importing sigdnn.importers registers ONNX, cuDNN JSON and hipDNN (the CLI, sigdnn.load and
# Executor.prepare(path) do), so `sigdnn run model.onnx` works as it is.
GRAPH_FORMATS: list[GraphFormat] = []


def register_format(fmt: GraphFormat) -> None:
    """Try ``fmt`` on every graph file read from now on (after the formats registered before it; once per name)."""
    if all(known.name != fmt.name for known in GRAPH_FORMATS):
        GRAPH_FORMATS.append(fmt)


def read_graph_file(
    path: PathArg,
    *,
    max_bytes: int = DEFAULT_MAX_GRAPH_FILE_BYTES,
    formats: Sequence[GraphFormat] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> bytes:
    """A graph file's content as sigdnn graph bytes (regular files only, at most ``max_bytes``).

    ``input_shapes`` fixes the symbolic dims of a model's inputs (``{"x": (1, 3, 224, 224)}``), for the formats
    that have them (ONNX); a graph of fixed dims given them is a UsageError.
    """
    path = check_path(path, "graph file")
    data = bytes(read_regular_file(path, what="graph file", max_bytes=max_bytes))
    for fmt in GRAPH_FORMATS if formats is None else formats:
        if fmt.detect(data, path):
            if input_shapes and not fmt.takes_input_shapes:
                break
            if fmt.to_sdg_at is None:
                return fmt.to_sdg(data)
            return fmt.to_sdg_at(data, path, max_bytes, **({"input_shapes": input_shapes} if input_shapes else {}))
    else:
        if not input_shapes:
            return data
    raise UsageError(
        f"input shapes fix an ONNX model's symbolic dims; graph file {shown(path)} is no ONNX model, its dims are fixed"
    )
