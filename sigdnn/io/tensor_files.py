"""Tensor files: safetensors (every sigdnn dtype, exactly) as the main format; npz and npy read safely.

safetensors names bfloat16 and fp8 in its header (BF16, F8_E4M3, F8_E5M2), so
they cross files bit for bit, and its layout (a length, a JSON header, raw
bytes) lets every size be checked before anything is allocated. The header is
parsed here rather than by ``safetensors.numpy``, which has no bfloat16 / fp8.

npz and npy are still read, because that is what NumPy users have: never with
pickle, and with every declared size (the zip directory's, then the npy
header's) checked before a byte is decompressed or allocated. npz is written
only when asked for by the extension; its bfloat16 / fp8 members are stored as
raw unsigned integers named in a marker member, since .npy has no name for
those dtypes, and read back bit for bit.

Files are located by content, not by extension, so a renamed file still loads.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any, BinaryIO

import attrs
import numpy as np

from sigdnn.dtypes import DataType, DataTypeError, as_data_type, is_ml_dtypes
from sigdnn.io.files import FileError, PathArg, check_path, open_regular_file, read_all, shown, write_file
from sigdnn.io.units import format_bytes

DEFAULT_MAX_TENSOR_FILE_BYTES = 4 << 30
DTYPE_MARKER = "__sigdnn_dtypes__"  # npz member naming the dtypes stored as raw unsigned integers
_MAX_HEADER = 100_000_000  # safetensors' own bound on its JSON header
_MAX_NPY_HEADER = 10_000  # NumPy's default max_header_size
_MAX_MEMBERS = 1 << 16

# safetensors dtype codes <-> NumPy dtypes. Little-endian, as the format is.
# bfloat16 and fp8 by their sigdnn dtype: their NumPy types come from ml_dtypes, imported on first use.
_SAFETENSORS_DTYPES: dict[str, np.dtype | DataType] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": DataType.BFLOAT16,
    "F8_E4M3": DataType.FP8_E4M3,
    "F8_E5M2": DataType.FP8_E5M2,
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
# The dtypes .npy cannot name: stored in npz as unsigned integers of the same width.
_RAW = {
    DataType.BFLOAT16: np.dtype("<u2"),
    DataType.FP8_E4M3: np.dtype("u1"),
    DataType.FP8_E5M2: np.dtype("u1"),
}


@attrs.frozen
class Expected:
    """A tensor the caller can use: its logical dims and dtype.

    The reader refuses names it was not told to expect, allows each tensor at
    most ``max_bytes`` (its elements at 8 bytes each, so a wrong dtype still
    reaches the caller's own, clearer dtype check), and gives raw values of
    the expected width (``|V2``: bfloat16 saved by ``np.save``) that dtype.
    """

    dims: tuple[int, ...]
    dtype: DataType

    @property
    def max_bytes(self) -> int:
        return math.prod(self.dims) * 8


# -- reading --------------------------------------------------------------------------------------


def read_tensor_file(
    path: PathArg,
    *,
    expect: Mapping[str, Expected] | None = None,
    max_bytes: int = DEFAULT_MAX_TENSOR_FILE_BYTES,
) -> dict[str, np.ndarray]:
    """The arrays of a safetensors, npz or npy file, by name.

    ``max_bytes`` caps the file and, for npz, the decompressed total. A .npy
    holds one unnamed array: it is named after the only expected tensor, or
    else after the file (``x.npy`` -> ``x``). Every failure is a FileError
    naming the file (and the member) and saying what to do.
    """
    what = "tensor file"
    path, f, size = open_regular_file(path, what=what, max_bytes=max_bytes)
    with f:
        reader = _Reader(path, expect, max_bytes)
        if _peek(f, 4, path) in (b"PK\x03\x04", b"PK\x05\x06"):
            return reader.npz(f)  # read member by member: only what the directory declares is decompressed
        data = read_all(f, size, what=what, path=path, max_bytes=max_bytes)
    if data[:6] == b"\x93NUMPY":
        return reader.npy(data)
    if len(data) >= 10 and data[8:9] == b"{":
        return reader.safetensors(data)
    raise reader.error(
        f"is not a safetensors, .npz or .npy file (it starts with {bytes(data[:8])!r}); "
        "write tensors with `sigdnn run --save-inputs FILE` or safetensors.numpy.save_file"
    )


def _peek(f: BinaryIO, n: int, path: str) -> bytes:
    """The first ``n`` bytes of ``f``, leaving it at the start."""
    try:
        head = f.read(n)
        f.seek(0)
    except OSError as e:
        raise FileError(f"cannot read tensor file {shown(path)}: {e.strerror or e}") from None
    return head


class _Reader:
    """One file's reading: its path and expectations, for checks and messages."""

    def __init__(self, path: str, expect: Mapping[str, Expected] | None, max_bytes: int) -> None:
        self.path = path
        self.expect = expect
        self.budget = max_bytes  # bytes the arrays may still take (npz decompresses into new memory)

    def error(self, problem: str, member: str | None = None) -> FileError:
        where = f"tensor file {shown(self.path)}" + (f", tensor {member!r}" if member is not None else "")
        return FileError(f"{where}: {problem}")

    def limit_for(self, name: str) -> int:
        """The most bytes tensor ``name`` may take; FileError for a name the caller does not expect."""
        if self.expect is None:
            return self.budget
        if name not in self.expect:
            raise self.error(_unexpected(name, list(self.expect)), name)
        return min(self.budget, self.expect[name].max_bytes)

    def admit(self, name: str, nbytes: int) -> None:
        """Count ``nbytes`` of tensor ``name`` against what it and the file may take."""
        limit = self.limit_for(name)
        if nbytes > limit:
            raise self.error(
                f"declares {format_bytes(nbytes)}, more than the {format_bytes(limit)} it can take here; "
                "check that the file belongs to this graph",
                name,
            )
        self.budget -= nbytes

    def settle(self, name: str, array: np.ndarray) -> np.ndarray:
        """Native byte order, and raw (void) values given the expected dtype of their width."""
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("="))
        if array.dtype.type is not np.void:  # ml_dtypes types are kind "V" too, but typed
            return array
        want = self.expect.get(name) if self.expect is not None else None
        if want is None or want.dtype.itemsize != array.dtype.itemsize:
            raise self.error(
                f"holds raw {array.dtype.str} values with no dtype to read them as (ml_dtypes arrays saved by "
                "np.savez lose their dtype); save it as safetensors, or as npz with `sigdnn run --out FILE.npz`",
                name,
            )
        return array.view(want.dtype.numpy)

    # -- safetensors ------------------------------------------------------------------------------
    def safetensors(self, data: bytearray) -> dict[str, np.ndarray]:
        size = int.from_bytes(data[:8], "little")
        if size > len(data) - 8:
            raise self.error(f"its header claims {size} bytes but the file has {len(data) - 8} after the length")
        limit = _MAX_HEADER
        if self.expect is not None:  # a few hundred bytes per tensor; not millions of entries to parse
            limit = (1 << 16) + sum(512 + 6 * len(name) for name in self.expect)
        if size > limit:
            raise self.error(
                f"its header is {format_bytes(size)}, more than {format_bytes(limit)} for the tensors expected"
            )
        try:
            header = json.loads(bytes(data[8 : 8 + size]).decode("utf-8"))  # an object: it starts with "{"
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise self.error(f"its header is not valid JSON ({type(e).__name__}); the file is damaged") from None
        base, end = 8 + size, len(data)
        entries = []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            entries.append((*self._safetensors_entry(name, info, end - base), name))
        arrays: dict[str, np.ndarray] = {}
        last_end = 0
        for begin, stop, dtype, shape, name in sorted(entries, key=lambda e: (e[0], e[1])):
            if begin < last_end:
                raise self.error("its data overlaps another tensor's; the file is damaged", name)
            last_end = stop
            self.admit(name, stop - begin)
            arrays[name] = self.settle(name, _view(data, dtype, shape, base + begin))
        return {name: arrays[name] for _, _, _, _, name in entries}

    def _safetensors_entry(self, name: Any, info: Any, data_len: int) -> tuple[int, int, np.dtype, tuple[int, ...]]:
        if not isinstance(info, dict):
            raise self.error("its header entry is not a JSON object; the file is damaged", str(name))
        dtype = _SAFETENSORS_DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
        if isinstance(dtype, DataType):
            dtype = dtype.numpy
        if dtype is None:
            raise self.error(
                f"dtype {info.get('dtype')!r} is not one sigdnn reads ({', '.join(_SAFETENSORS_DTYPES)})", name
            )
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise self.error(f"shape {shape!r} is not a list of non-negative integers; the file is damaged", name)
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_len
        ):
            raise self.error(f"data_offsets {offsets!r} do not lie within the file's {data_len} data bytes", name)
        nbytes = math.prod(shape) * dtype.itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise self.error(
                f"shape {shape} of {dtype.name} needs {nbytes} bytes but data_offsets give {offsets[1] - offsets[0]}",
                name,
            )
        return offsets[0], offsets[1], dtype, tuple(shape)

    # -- npy ----------------------------------------------------------------------------------------
    def npy(self, data: bytearray) -> dict[str, np.ndarray]:
        if self.expect is not None and len(self.expect) == 1:
            name = next(iter(self.expect))
        else:
            name = os.path.splitext(os.path.basename(self.path))[0]
        stream = io.BytesIO(bytes(data[: _MAX_NPY_HEADER + 16]))
        shape, order, dtype = self._npy_header(stream, name)
        offset = stream.tell()
        self._npy_size(name, shape, dtype, len(data) - offset)
        return {name: self.settle(name, _view(data, dtype, shape, offset, order))}

    def _npy_header(self, stream: BinaryIO, name: str, text: bool = False) -> tuple[tuple[int, ...], str, np.dtype]:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream, max_header_size=_MAX_NPY_HEADER)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream, max_header_size=_MAX_NPY_HEADER)
            else:
                raise self.error(f"is .npy format version {version}, which holds no plain array sigdnn reads", name)
        except FileError:
            raise
        except Exception as e:  # NumPy's header parser raises ValueError, SyntaxError, EOFError, ...
            raise self.error(f"has a damaged .npy header ({type(e).__name__}: {_first_line(e)})", name) from None
        if not _buildable(shape, dtype.itemsize):
            shown_dims = ", ".join(map(str, shape[:8])) + (f", ... ({len(shape)} dims)" if len(shape) > 8 else "")
            raise self.error(
                f"its .npy header declares shape [{shown_dims}], which no array can have "
                f"(at most {_MAX_RANK} dims, each 0 or more, under 2^63 bytes in all); the file is damaged",
                name,
            )
        if dtype.hasobject:
            raise self.error(
                "holds Python objects (pickled data), which sigdnn never loads; save plain numeric arrays", name
            )
        plain = dtype.kind in "biuf" or (dtype.type is np.void and dtype.names is None and dtype.subdtype is None)
        if not (plain or (text and dtype.kind == "U")) or dtype.itemsize == 0:
            raise self.error(f"holds {dtype} values; sigdnn reads numbers and booleans", name)
        return shape, "F" if fortran else "C", dtype

    def _npy_size(self, name: str, shape: tuple[int, ...], dtype: np.dtype, available: int) -> None:
        nbytes = math.prod(shape) * dtype.itemsize
        self.admit(name, nbytes)
        if nbytes != available:
            raise self.error(
                f"its .npy header declares shape {list(shape)} of {dtype} ({format_bytes(nbytes)}) "
                f"but {format_bytes(available)} of data follow; the file is truncated or damaged",
                name,
            )

    # -- npz ----------------------------------------------------------------------------------------
    def npz(self, f: BinaryIO) -> dict[str, np.ndarray]:
        try:
            self._check_member_count(f)
            with zipfile.ZipFile(f) as archive:
                infos = archive.infolist()
                raw = self._marker(archive, infos)
                arrays = {}
                for info in infos:
                    if info.filename == DTYPE_MARKER + ".npy":
                        continue
                    name = self._member_name(info, arrays)
                    array = self._member(archive, info, name)
                    arrays[name] = self._unraw(name, array, raw) if name in raw else self.settle(name, array)
        except FileError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, OSError, ValueError) as e:
            raise self.error(f"is a damaged or truncated zip archive ({type(e).__name__}: {_first_line(e)})") from None
        except (NotImplementedError, RuntimeError) as e:  # unsupported compression, encryption
            raise self.error(
                f"uses a zip feature sigdnn does not read ({_first_line(e)}); save with np.savez"
            ) from None
        return arrays

    def _check_member_count(self, f: BinaryIO) -> None:
        """Refuse a directory of millions of entries before zipfile builds an object for each."""
        limit = _MAX_MEMBERS if self.expect is None else len(self.expect) + 1
        end = zipfile._EndRecData(f)  # the end-of-central-directory record, read as zipfile reads it
        if end is None:
            raise self.error("is a damaged or truncated zip archive (no end-of-directory record)")
        if end[zipfile._ECD_ENTRIES_TOTAL] > limit:
            raise self.error(f"holds {end[zipfile._ECD_ENTRIES_TOTAL]} members, more than the {limit} expected here")

    def _member_name(self, info: zipfile.ZipInfo, seen: Mapping[str, Any]) -> str:
        if not info.filename.endswith(".npy"):
            raise self.error(f"member {info.filename!r} is not a .npy array; an .npz holds only .npy members")
        name = info.filename[:-4]
        if name in seen:
            raise self.error("appears twice in the archive", name)
        return name

    def _member(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> np.ndarray:
        """One .npy member, its sizes checked before decompressing it."""
        if info.file_size > self.limit_for(name) + _MAX_NPY_HEADER + 16:
            raise self.error(
                f"decompresses to {format_bytes(info.file_size)}, more than it can take here; "
                "check that the file belongs to this graph",
                name,
            )
        with archive.open(info) as member:
            head = member.read(min(info.file_size, _MAX_NPY_HEADER + 16))
            stream = io.BytesIO(head)
            shape, order, dtype = self._npy_header(stream, name)
            offset = stream.tell()
            self._npy_size(name, shape, dtype, info.file_size - offset)
            array = np.empty(math.prod(shape), dtype=dtype)
            target = memoryview(array.view(np.uint8).reshape(-1))
            first = head[offset:]
            target[: len(first)] = first
            got = len(first)
            while got < len(target):
                n = member.readinto(target[got:])
                if not n:
                    raise self.error("its data end early; the archive is truncated", name)
                got += n
        return array.reshape(shape, order=order)

    def _marker(self, archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> dict[str, DataType]:
        """The dtypes stored as raw unsigned integers (sigdnn's own npz files), by member name."""
        info = next((i for i in infos if i.filename == DTYPE_MARKER + ".npy"), None)
        if info is None:
            return {}
        if info.file_size > _MAX_NPY_HEADER + (1 << 20):
            raise self.error(f"its {DTYPE_MARKER} member is {format_bytes(info.file_size)}; the file is damaged")
        with archive.open(info) as member:
            stream = io.BytesIO(member.read())
        shape, _, dtype = self._npy_header(stream, DTYPE_MARKER, text=True)
        try:
            text = np.frombuffer(stream.read(), dtype=dtype, count=math.prod(shape)).reshape(shape)
            marker = json.loads(str(text[()]))
            if not isinstance(marker, dict):
                raise ValueError("not a JSON object")
            return {str(k): as_data_type(str(v)) for k, v in marker.items()}
        except (ValueError, TypeError, IndexError, DataTypeError, RecursionError) as e:
            raise self.error(f"its {DTYPE_MARKER} member is damaged ({_first_line(e)})") from None

    def _unraw(self, name: str, array: np.ndarray, raw: Mapping[str, DataType]) -> np.ndarray:
        dtype = raw[name]
        if dtype not in _RAW or array.dtype != _RAW[dtype]:
            raise self.error(f"is marked {dtype} but holds {array.dtype}; the file is damaged", name)
        return array.view(dtype.numpy)


_MAX_RANK = 64  # NumPy's limit on an array's dims


def _buildable(shape: Any, itemsize: int) -> bool:
    """Whether NumPy can make an array of ``shape``: a tuple of at most 64 integers >= 0 whose bytes fit in intp."""
    if not isinstance(shape, tuple) or len(shape) > _MAX_RANK:
        return False
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 63 for d in shape):
        return False
    return math.prod(d for d in shape if d) * max(itemsize, 1) < 1 << 63


def _view(data: bytearray, dtype: np.dtype, shape: tuple[int, ...], offset: int, order: str = "C") -> np.ndarray:
    """An array over ``data`` (sizes already checked), copied only when misaligned."""
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, dtype=dtype, order=order)
    array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    if not array.flags.aligned:
        array = array.copy()
    return array.reshape(shape, order=order)


def _unexpected(name: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    listed = ", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
    return f"is not an input of this graph; {hint}its inputs are {listed or 'none'}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


# -- writing --------------------------------------------------------------------------------------


def tensor_file_format(path: str) -> str:
    """ "npz" for a .npz path, "safetensors" for anything else; FileError for .npy (one array per file)."""
    extension = os.path.splitext(path)[1].lower()
    if extension == ".npy":
        raise FileError(f"tensor file {shown(path)}: a .npy holds one unnamed array; use .safetensors or .npz")
    return "npz" if extension == ".npz" else "safetensors"


def write_tensor_file(path: PathArg, tensors: Mapping[str, Any], *, what: str = "tensor file") -> str:
    """Write ``tensors`` (name -> array) to exactly ``path``; returns the format written.

    safetensors unless the path ends in .npz; both carry every sigdnn dtype
    exactly. Arrays are stored in their logical (C-order) shape whatever
    their strides.
    """
    path = check_path(path, what)
    kind = tensor_file_format(path)
    arrays = {str(name): _c_order(value) for name, value in tensors.items()}
    for name, array in arrays.items():
        if not _storable(array.dtype):
            raise FileError(f"{what} {shown(path)}: tensor {name!r} has dtype {array.dtype}, which it cannot store")
    if kind == "npz":
        if DTYPE_MARKER in arrays:
            raise FileError(
                f"{what} {shown(path)}: the name {DTYPE_MARKER!r} is reserved in npz files; use safetensors"
            )
        write_file(path, lambda f: _write_npz(f, arrays), what=what)
    else:
        write_file(path, lambda f: f.write(_safetensors_bytes(arrays)), what=what)
    return kind


def _c_order(value: Any) -> np.ndarray:
    """A C-contiguous array of ``value``, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    array = np.asarray(value)
    return array if array.flags.c_contiguous else array.copy(order="C")


def _storable(dtype: np.dtype) -> bool:
    """Whether safetensors (and so sigdnn's npz) has a code for ``dtype``."""
    if is_ml_dtypes(dtype):
        return any(isinstance(d, DataType) and dtype == d.numpy for d in _SAFETENSORS_DTYPES.values())
    return any(
        isinstance(d, np.dtype) and dtype.newbyteorder("=") == d.newbyteorder("=") for d in _SAFETENSORS_DTYPES.values()
    )


def _safetensors_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    from safetensors import TensorSpec, serialize  # the format's own writer: headers exactly as its readers expect

    little = {
        name: a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a for name, a in arrays.items()
    }
    specs = {
        name: TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
        for name, a in little.items()
    }
    return bytes(serialize(specs, metadata=None))


def _write_npz(f: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    raw = {name: str(as_data_type(a.dtype)) for name, a in arrays.items() if is_ml_dtypes(a.dtype)}
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            stored = array.view(_RAW[as_data_type(array.dtype)]) if name in raw else array
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, stored, allow_pickle=False)
        if raw:
            with archive.open(DTYPE_MARKER + ".npy", "w") as member:
                np.lib.format.write_array(member, np.array(json.dumps(raw)), allow_pickle=False)
