"""Reading an ONNX model and its external data: only files the user gave, sizes checked before reading.

An ONNX tensor may keep its bytes in another file (``external_data``:
location, offset, length). onnx resolves a location against whatever base
it is handed (the process's working directory for a model given as bytes),
so a hostile model could copy any readable file into the graph. Here a
location resolves only inside the model file's own folder: absolute paths,
``..`` and symbolic links that lead out are refused, the model file and
every piece of external data count together against one byte cap before a
byte is read, and a model given as bytes with external data is refused
unless the caller names the folder (``base_dir``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from sigdnn.errors import SchemaError
from sigdnn.io.files import FileError, PathArg, check_path, open_regular_file, read_regular_file, shown

_KEYS = {"location", "offset", "length", "checksum"}


def read_model(model_or_path: Any, base_dir: PathArg | None, max_bytes: int) -> Any:
    """The ModelProto (given, as bytes, or read from a path), its external data read from inside its folder only."""
    onnx = _onnx_module()
    if isinstance(model_or_path, onnx.ModelProto):
        model, size = model_or_path, 0
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        model, size = _parse(onnx, bytes(model_or_path)), len(model_or_path)
    elif isinstance(model_or_path, (str, os.PathLike)):
        data, folder = read_model_file(model_or_path, max_bytes)
        model, size = _parse(onnx, data), len(data)
        base_dir = folder if base_dir is None else base_dir
    else:
        raise SchemaError(f"expected an ONNX ModelProto, bytes or a path, got {type(model_or_path).__name__}")
    check_text(model, "ONNX model")
    folder = None if base_dir is None else check_path(base_dir, "ONNX base_dir")
    load_external_data(model, folder, max_bytes - size)
    return model


def check_text(message: Any, where: str) -> None:
    """SchemaError for a text field that is not UTF-8 (protobuf hands such a proto2 string over as bytes)."""
    for field, value in message.ListFields():
        values = value if field.is_repeated else (value,)
        if field.type == field.TYPE_MESSAGE:
            for sub in values:
                check_text(sub, where)
        elif field.type == field.TYPE_STRING:
            bad = next((v for v in values if isinstance(v, bytes)), None)
            if bad is not None:
                raise SchemaError(f"{where}: {message.DESCRIPTOR.name}.{field.name} {bad[:60]!r} is not UTF-8 text")


def _parse(onnx: Any, data: bytes) -> Any:
    try:
        return onnx.load_from_string(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise SchemaError(f"not a readable ONNX model: {type(e).__name__}: {e}") from None


def read_model_file(path: PathArg, max_bytes: int) -> tuple[bytes, str]:
    """(the model file's bytes, its folder) through sigdnn.io's checks: regular file, at most ``max_bytes``."""
    path = check_path(path, "ONNX model")
    data = bytes(read_regular_file(path, what="ONNX model", max_bytes=max_bytes))
    return data, os.path.dirname(os.path.abspath(path))


def load_external_data(model: Any, base_dir: str | None, budget: int, where: str = "ONNX model") -> None:
    """Replace every external tensor's reference by its bytes, read from inside ``base_dir`` only.

    ``budget`` is how many bytes of external data may still be read (the
    file cap less the model file's own size).
    """
    onnx = _onnx_module()
    root = None if base_dir is None else os.path.realpath(base_dir)
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        what = f"{where}: tensor '{tensor.name}'"
        if root is None:
            raise SchemaError(
                f"{what} keeps its data in an external file; a model given as bytes has no folder to read it "
                "from: load the model from its file (sigdnn.importers.onnx.load(PATH)) or pass base_dir="
            )
        location, offset, length = _reference(tensor, what)
        data = _read_piece(_inside(root, location, what), offset, length, budget, what)
        budget -= len(data)
        tensor.raw_data = data
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def _onnx_module() -> Any:
    import onnx

    return onnx


def _tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of a graph: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for sub in attribute.graphs:
                yield from _tensors(sub)


def _reference(tensor: Any, what: str) -> tuple[str, int, int | None]:
    """(location, offset, length or None) from the tensor's external_data entries, each checked."""
    entries = {e.key: e.value for e in tensor.external_data}
    unknown = sorted(set(entries) - _KEYS)
    if unknown:
        raise SchemaError(f"{what}: unknown external_data key(s) {unknown}")
    location = entries.get("location", "")
    if not location or "\0" in location:
        raise SchemaError(f"{what}: external data without a usable location ({location!r})")
    numbers = []
    for key in ("offset", "length"):
        text = entries.get(key)
        if text is None:
            numbers.append(None)
            continue
        if not text.isdigit() or len(text) > 19:
            raise SchemaError(f"{what}: external data {key} {text!r} is not an integer >= 0")
        numbers.append(int(text))
    return location, numbers[0] or 0, numbers[1]


def _inside(root: str, location: str, what: str) -> str:
    """The external file's path, refused unless it is (after links) inside the model's folder."""
    parts = location.replace("\\", "/").split("/")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or os.path.splitdrive(location)[0]:
        raise SchemaError(f"{what}: external data location {shown(location)} is absolute; sigdnn reads external "
                          "data only from the model's own folder")  # fmt: skip
    if ".." in parts:
        raise SchemaError(f"{what}: external data location {shown(location)} climbs out of the model's folder ('..')")
    path = os.path.join(root, *parts)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise SchemaError(
            f"{what}: external data location {shown(location)} is a link to a file outside the model's folder"
        )
    return real


def _read_piece(path: str, offset: int, length: int | None, budget: int, what: str) -> bytes:
    """``length`` bytes (or the rest of the file) from ``offset``, refused before reading when over ``budget``."""
    try:
        path, f, size = open_regular_file(path, what=f"{what}: external data file", max_bytes=1 << 62)
    except FileError as e:
        raise SchemaError(str(e)) from None
    with f:
        if offset > size or (length is not None and offset + length > size):
            raise SchemaError(
                f"{what}: external data asks for bytes {offset}..{offset + (length or 0)} of {shown(path)}, "
                f"which holds {size}"
            )
        want = size - offset if length is None else length
        if want > budget:
            raise SchemaError(
                f"{what}: external data of {want} bytes is over what the file limit leaves ({max(budget, 0)} bytes); "
                "if you trust the model, raise the limit (sigdnn: --max-file-bytes; Python: max_bytes=)"
            )
        f.seek(offset)
        data = f.read(want)
    if len(data) != want:
        raise SchemaError(f"{what}: external data file {shown(path)} ended early")
    return data
