"""Graph files: read safely, then handed to the first format converter that recognizes them.

sigdnn's own format (``.sdg``, FlatBuffers) needs no converter: bytes no
converter claims are returned as read, and ``deserialize`` judges them.
Other formats plug in through :func:`register_format` (``sigdnn.importers``
registers its three when imported).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from sigdnn.io.files import PathArg, check_path, read_regular_file

DEFAULT_MAX_GRAPH_FILE_BYTES = 256 << 20  # far above any real graph; a 10,000-node graph is ~2 MiB


@attrs.frozen
class GraphFormat:
    """A foreign graph format: how to recognize its files and turn them into sigdnn bytes."""

    name: str
    detect: Callable[[bytes, str], bool]  # (content, path) -> is it this format
    to_sdg: Callable[[bytes], bytes]  # content -> sigdnn graph bytes; raises a SigdnnError when it cannot
    # (content, path, byte cap) -> sigdnn graph bytes, for a format that reads files beside the graph file
    # (ONNX external data): they resolve in the graph file's folder and count against the same cap.
    to_sdg_at: Callable[[bytes, str, int], bytes] | None = None


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
) -> bytes:
    """A graph file's content as sigdnn graph bytes (regular files only, at most ``max_bytes``)."""
    path = check_path(path, "graph file")
    data = bytes(read_regular_file(path, what="graph file", max_bytes=max_bytes))
    for fmt in GRAPH_FORMATS if formats is None else formats:
        if fmt.detect(data, path):
            return fmt.to_sdg(data) if fmt.to_sdg_at is None else fmt.to_sdg_at(data, path, max_bytes)
    return data
