"""Reading and writing the files users name: graphs and tensors, safely.

One loader for the CLI and the API: regular files only, sizes capped before
reading, no pickle, declared sizes checked before decompressing, and every
failure a :class:`FileError` (a SigdnnError) naming the file and what to do.
"""

from sigdnn.io.files import FileError, read_regular_file, refuse_overwriting_inputs, same_file, write_file
from sigdnn.io.graph_files import (
    DEFAULT_MAX_GRAPH_FILE_BYTES,
    GRAPH_FORMATS,
    GraphFormat,
    read_graph_file,
    register_format,
)
from sigdnn.io.tensor_files import (
    DEFAULT_MAX_TENSOR_FILE_BYTES,
    Expected,
    read_tensor_file,
    tensor_file_format,
    write_tensor_file,
)
from sigdnn.io.units import format_bytes, parse_bytes

__all__ = [
    "DEFAULT_MAX_GRAPH_FILE_BYTES",
    "DEFAULT_MAX_TENSOR_FILE_BYTES",
    "GRAPH_FORMATS",
    "Expected",
    "FileError",
    "GraphFormat",
    "format_bytes",
    "parse_bytes",
    "read_graph_file",
    "read_regular_file",
    "read_tensor_file",
    "refuse_overwriting_inputs",
    "register_format",
    "same_file",
    "tensor_file_format",
    "write_file",
    "write_tensor_file",
]
