"""sigdnn.io.tensor_files at its edges: each size bound at and one past its value, the formats' less common forms.

Oracles: the formats' own specifications (safetensors: an 8-byte length, a
JSON header of at most 100 MB whose __metadata__ entry is not a tensor,
offsets that are integers; .npy: versions 1.0 and 2.0, headers of at most
10,000 bytes as NumPy reads them, up to 64 dims; zip: the end records and
their zip64 forms), files written by safetensors' and NumPy's own writers,
and hand-counted bytes.
"""

from __future__ import annotations

import io
import json
import struct
import tracemalloc
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from sigdnn.dtypes import DataType
from sigdnn.io import Expected, FileError, read_tensor_file, write_tensor_file
from sigdnn.io.tensor_files import DTYPE_MARKER

F32 = DataType.FLOAT32


def safetensors_bytes(header: dict, data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def npy_v1(descr: str, shape: tuple[int, ...], data: bytes = b"", header_length: int | None = None) -> bytes:
    """A version 1.0 .npy: magic, version, a 2-byte header length, the header (padded with spaces to
    ``header_length``, ending in a newline), then ``data``."""
    header = repr({"descr": descr, "fortran_order": False, "shape": shape})
    length = header_length if header_length is not None else len(header) + 1
    padded = header.ljust(length - 1).encode("latin1") + b"\n"
    assert len(padded) == length
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", length) + padded + data


def npy_bytes(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


def zip_file(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def written(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


# -- safetensors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["i1", "<i2", "<i4", "<i8", "u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "?"])
def test_every_numpy_dtype_safetensors_writes_is_read(tmp_path: Path, dtype: str) -> None:
    array = np.arange(12).reshape(3, 4).astype(dtype)
    save_file({"t": array}, str(tmp_path / "t.safetensors"))
    (got,) = read_tensor_file(tmp_path / "t.safetensors").values()
    assert got.dtype == np.dtype(dtype) and got.tobytes() == array.tobytes()


def test_metadata_is_no_tensor_wherever_it_stands(tmp_path: Path) -> None:
    x, y = np.array([1.5, -2.0], "<f4"), np.array([7], "<i8")
    header = {
        "__metadata__": {"format": "np"},
        "x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "y": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
    }
    got = read_tensor_file(written(tmp_path / "t.safetensors", safetensors_bytes(header, x.tobytes() + y.tobytes())))
    assert list(got) == ["x", "y"]
    assert got["x"].tolist() == [1.5, -2.0] and got["y"].tolist() == [7]
    save_file({"x": x}, str(tmp_path / "m.safetensors"), metadata={"source": "test"})
    assert read_tensor_file(tmp_path / "m.safetensors")["x"].tolist() == [1.5, -2.0]


@pytest.mark.parametrize(
    "header",
    [
        # safetensors' writer puts an empty tensor at the offset where the data of its dtype group begins
        {
            "a": {"dtype": "F64", "shape": [0], "data_offsets": [0, 0]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        },
        {
            "d": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
            "c": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        },
    ],
    ids=["empty-before", "empty-after"],
)
def test_an_empty_tensor_touching_another_is_no_overlap(tmp_path: Path, header: dict) -> None:
    data = np.array([3.0, 4.0], "<f4").tobytes()
    got = read_tensor_file(written(tmp_path / "t.safetensors", safetensors_bytes(header, data)))
    assert sorted(got) == sorted(header)
    assert [a.size for a in got.values()] == [0, 2]


def test_offsets_must_be_integers_not_integral_floats(tmp_path: Path) -> None:
    header = {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]}}
    with pytest.raises(FileError, match="data_offsets"):
        read_tensor_file(written(tmp_path / "t.safetensors", safetensors_bytes(header, bytes(8))))


def test_a_header_one_byte_longer_than_the_file_is_refused_by_its_length(tmp_path: Path) -> None:
    text = json.dumps({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    content = struct.pack("<Q", len(text) + 2) + text + b"\x05"  # claims the data byte and one more
    with pytest.raises(FileError, match=f"its header claims {len(text) + 2} bytes but the file has {len(text) + 1}"):
        read_tensor_file(written(tmp_path / "t.safetensors", content))


def header_of_length(length: int) -> dict:
    """A header for tensor 'xy' (one float32 [2]) that serializes to exactly ``length`` bytes."""
    header = {"__metadata__": {"pad": ""}, "xy": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    header["__metadata__"]["pad"] = "p" * (length - len(json.dumps(header)))
    assert len(json.dumps(header)) == length
    return header


def test_the_header_bound_for_expected_tensors_is_64_kib_and_518_bytes_per_tensor_name(tmp_path: Path) -> None:
    """64 KiB, plus 512 bytes and 6 per character of each expected name: 65536 + 512 + 12 for 'xy'."""
    expect = {"xy": Expected((2,), F32)}
    limit = 65536 + 512 + 6 * 2
    ok = written(tmp_path / "ok.safetensors", safetensors_bytes(header_of_length(limit), bytes(8)))
    assert read_tensor_file(ok, expect=expect)["xy"].tolist() == [0.0, 0.0]
    over = written(tmp_path / "over.safetensors", safetensors_bytes(header_of_length(limit + 1), bytes(8)))
    with pytest.raises(FileError, match=r"its header is .*, more than .* for the tensors expected"):
        read_tensor_file(over, expect=expect)


def test_a_header_past_safetensors_100_mb_bound_is_refused_unparsed(tmp_path: Path) -> None:
    size = 100_000_001
    path = tmp_path / "big.safetensors"
    with path.open("wb") as f:
        f.write(struct.pack("<Q", size) + b"{")
        f.write(b" " * (size - 1))
    with pytest.raises(FileError, match=r"its header is 95\.4 MiB, more than 95\.4 MiB"):
        read_tensor_file(path)


def test_misaligned_data_is_given_aligned(tmp_path: Path) -> None:
    """safetensors does not align its data; the arrays handed on are aligned (a copy where needed)."""
    values = np.array([1.25, -3.5], "<f8")
    header = {
        "b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "x": {"dtype": "F64", "shape": [2], "data_offsets": [1, 17]},
    }
    got = read_tensor_file(written(tmp_path / "t.safetensors", safetensors_bytes(header, b"\x09" + values.tobytes())))
    assert got["x"].flags.aligned and got["x"].tolist() == [1.25, -3.5] and got["b"].tolist() == [9]


# -- npy ----------------------------------------------------------------------------------------------------


def test_npy_version_2_is_read(tmp_path: Path) -> None:
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    data = npy_bytes(array, version=(2, 0))
    assert data[6:8] == b"\x02\x00"
    got = read_tensor_file(written(tmp_path / "x.npy", data))["x"]
    assert got.dtype == np.int32 and got.tolist() == array.tolist()


def test_big_endian_npy_is_given_in_native_order(tmp_path: Path) -> None:
    array = np.array([1.0, -2.5, 3e38], dtype=">f4")
    got = read_tensor_file(written(tmp_path / "x.npy", npy_bytes(array)))["x"]
    assert got.dtype.isnative and got.dtype == np.float32 and got.tolist() == array.tolist()


def test_npy_of_64_dims_numpys_most_is_read(tmp_path: Path) -> None:
    got = read_tensor_file(written(tmp_path / "x.npy", npy_bytes(np.full((1,) * 64, 7, np.int8))))["x"]
    assert got.shape == (1,) * 64 and got.item() == 7


def test_npy_header_of_10000_bytes_is_read_and_one_more_is_refused(tmp_path: Path) -> None:
    """NumPy's own max_header_size: a 10,000-byte header reads, 10,001 does not."""
    data = np.arange(4, dtype="<f4").tobytes()
    got = read_tensor_file(written(tmp_path / "x.npy", npy_v1("<f4", (4,), data, header_length=10_000)))
    assert got["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(FileError, match=r"damaged \.npy header"):
        read_tensor_file(written(tmp_path / "x.npy", npy_v1("<f4", (4,), data, header_length=10_001)))


@pytest.mark.parametrize(
    ("descr", "shape", "match"),
    [
        ("<f8", (1 << 60,), "which no array can have"),  # 2^63 bytes: one past NumPy's intp
        ("|i1", (1 << 62,), "declares 4 EiB, more than"),  # 2^62 bytes: an array NumPy can describe
        ("<f4", (1 << 62,) * 8, r"shape \[" + ", ".join(["4611686018427387904"] * 8) + r"\], which no array"),
        ("<f4", (1 << 62,) * 9, r"shape \[" + ", ".join(["4611686018427387904"] * 8) + r", \.\.\. \(9 dims\)\]"),
        ("<f4", (0,) * 65, r"shape \[0, 0, 0, 0, 0, 0, 0, 0, \.\.\. \(65 dims\)\]"),
    ],
    ids=["2^63-bytes", "2^62-bytes", "8-dims", "9-dims", "65-dims"],
)
def test_npy_shapes_at_numpys_bounds(tmp_path: Path, descr: str, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(FileError, match=match):
        read_tensor_file(written(tmp_path / "x.npy", npy_v1(descr, shape)))


# -- npz ----------------------------------------------------------------------------------------------------


def test_the_file_cap_counts_the_decompressed_total_across_members(tmp_path: Path) -> None:
    """Each member fits the 1 MB cap alone; together they do not (zeros deflate to almost nothing)."""
    zeros = npy_bytes(np.zeros(600_000, np.uint8))
    path = zip_file(tmp_path / "t.npz", {"a.npy": zeros, "b.npy": zeros}, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 10_000
    with pytest.raises(FileError, match="tensor 'b': decompresses to"):
        read_tensor_file(path, max_bytes=1_000_000)
    assert read_tensor_file(path, max_bytes=1_300_000)["b"].size == 600_000


def test_a_member_larger_than_its_first_read_is_read_whole_in_two_copies_at_most(tmp_path: Path) -> None:
    array = np.random.default_rng(3).integers(0, 255, size=1 << 22, dtype=np.uint8)
    path = zip_file(tmp_path / "t.npz", {"x.npy": npy_bytes(array)})
    assert np.array_equal(read_tensor_file(path)["x"], array)
    tracemalloc.start()
    try:
        read_tensor_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * array.nbytes, f"{peak / array.nbytes:.2f} times the array allocated"


def test_an_npz_header_of_10000_bytes_is_read(tmp_path: Path) -> None:
    data = np.arange(4, dtype="<f4").tobytes()
    path = zip_file(tmp_path / "t.npz", {"x.npy": npy_v1("<f4", (4,), data, header_length=10_000)})
    assert read_tensor_file(path, expect={"x": Expected((4,), F32)})["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_member_with_more_data_than_its_header_declares_is_refused(tmp_path: Path) -> None:
    path = zip_file(tmp_path / "t.npz", {"x.npy": npy_v1("<f4", (2,), np.arange(4, dtype="<f4").tobytes())})
    with pytest.raises(FileError, match=r"tensor 'x': its \.npy header declares shape \[2\].* 16 bytes of data"):
        read_tensor_file(path)


def test_a_member_whose_data_end_before_its_declared_size_is_refused(tmp_path: Path) -> None:
    """The directory says 20,128 bytes and the CRC matches the 12,128 that decompress: zipfile reads to the end
    of the deflate stream without complaint, so the reader sees the shortfall itself."""
    short = npy_v1("<f4", (5000,), bytes(12_000))
    declared = len(npy_v1("<f4", (5000,), bytes(20_000)))
    path = zip_file(tmp_path / "t.npz", {"x.npy": short}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")
    assert struct.unpack_from("<I", data, central + 24)[0] == len(short)
    struct.pack_into("<I", data, central + 24, declared)  # the uncompressed size zipfile trusts
    path.write_bytes(bytes(data))
    with pytest.raises(FileError, match="tensor 'x': its data end early"):
        read_tensor_file(path)


def test_an_unsupported_compression_is_refused_by_name(tmp_path: Path) -> None:
    path = zip_file(tmp_path / "t.npz", {"x.npy": npy_bytes(np.zeros(2, np.float32))})
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # the method, local and central
        struct.pack_into("<H", data, data.index(signature) + offset, 99)
    path.write_bytes(bytes(data))
    with pytest.raises(FileError, match="uses a zip feature sigdnn does not read"):
        read_tensor_file(path)


def end_records(entries: int) -> bytes:
    """A zip with an empty directory whose zip64 end record claims ``entries`` (the classic one says 0xFFFF: see zip64)."""
    record64 = struct.pack(
        zipfile.structEndArchive64, zipfile.stringEndArchive64, 44, 45, 45, 0, 0, entries, entries, 0, 0
    )
    locator = struct.pack(zipfile.structEndArchive64Locator, zipfile.stringEndArchive64Locator, 0, 0, 1)
    classic = struct.pack(
        zipfile.structEndArchive, zipfile.stringEndArchive, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0
    )
    return b"PK\x03\x04" + record64 + locator + classic  # a local header signature first, as zips start


def test_the_member_count_bound_is_65536(tmp_path: Path) -> None:
    with pytest.raises(FileError, match="holds 65537 members, more than the 65536 expected here"):
        read_tensor_file(written(tmp_path / "t.npz", end_records(65_537)))
    # at the bound: not refused by its count; the directory it points at is empty, so no member is read
    assert read_tensor_file(written(tmp_path / "t.npz", end_records(65_536))) == {}


def test_an_npz_with_its_inputs_and_the_marker_is_not_too_many_members(tmp_path: Path) -> None:
    values = np.array([1.5, -0.25], dtype=ml_dtypes.bfloat16)
    write_tensor_file(tmp_path / "t.npz", {"x": values})
    got = read_tensor_file(tmp_path / "t.npz", expect={"x": Expected((2,), DataType.BFLOAT16)})
    assert got["x"].dtype == ml_dtypes.bfloat16 and got["x"].tobytes() == values.tobytes()


def marker(text: str) -> bytes:
    return npy_bytes(np.array(text))


def test_the_marker_may_come_first(tmp_path: Path) -> None:
    bf16 = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    path = zip_file(
        tmp_path / "t.npz",
        {
            f"{DTYPE_MARKER}.npy": marker('{"x": "bfloat16"}'),
            "x.npy": npy_bytes(bf16.view(np.uint16)),
            "y.npy": npy_bytes(np.array([3], np.int32)),
        },
    )
    got = read_tensor_file(path)
    assert sorted(got) == ["x", "y"] and got["x"].tobytes() == bf16.tobytes() and got["y"].tolist() == [3]


def test_a_marker_that_is_json_but_no_object_is_damaged(tmp_path: Path) -> None:
    path = zip_file(
        tmp_path / "t.npz", {"x.npy": npy_bytes(np.zeros(2, np.uint16)), f"{DTYPE_MARKER}.npy": marker("[1]")}
    )
    with pytest.raises(FileError, match=f"its {DTYPE_MARKER} member is damaged"):
        read_tensor_file(path)


def test_the_marker_may_take_10000_bytes_and_1_mib(tmp_path: Path) -> None:
    """The member at exactly its bound reads; four bytes more (one more character of <U) do not."""
    bound = 10_000 + (1 << 20)
    header = len(marker("x")) - 4  # a v1 header of 128 bytes, then 4 bytes a character
    text = '{"x": "bfloat16"}'
    exact = marker(text.ljust((bound - header) // 4))
    assert len(exact) == bound
    members = {"x.npy": npy_bytes(np.zeros(2, np.uint16))}
    got = read_tensor_file(zip_file(tmp_path / "ok.npz", {**members, f"{DTYPE_MARKER}.npy": exact}))
    assert got["x"].dtype == ml_dtypes.bfloat16
    longer = marker(text.ljust((bound - header) // 4 + 1))
    with pytest.raises(FileError, match=f"its {DTYPE_MARKER} member is 1.01 MiB; the file is damaged"):
        read_tensor_file(zip_file(tmp_path / "big.npz", {**members, f"{DTYPE_MARKER}.npy": longer}))


def test_npz_members_are_written_with_zip64_sizes(tmp_path: Path) -> None:
    """Each member's local header carries the zip64 extra field, so members past 4 GiB can be written."""
    write_tensor_file(tmp_path / "t.npz", {"x": np.zeros(3, np.float32)})
    data = (tmp_path / "t.npz").read_bytes()
    with zipfile.ZipFile(tmp_path / "t.npz") as archive:
        info = archive.getinfo("x.npy")
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    extra = data[info.header_offset + 30 + name_length : info.header_offset + 30 + name_length + extra_length]
    assert struct.unpack_from("<H", extra)[0] == 0x0001  # the zip64 extended information field


# -- the default cap, names, messages ------------------------------------------------------------------------


def test_the_default_cap_is_4_gib(tmp_path: Path) -> None:
    path = tmp_path / "sparse.npz"
    with path.open("wb") as f:
        f.write(b"PK\x03\x04")
        f.truncate((4 << 30) + 1)  # sparse: no disk, and refused by its size before a read
    with pytest.raises(FileError, match=r"^tensor file .* is 4 GiB, over the 4 GiB limit"):
        read_tensor_file(path)


def test_messages_name_a_tensor_file(tmp_path: Path) -> None:
    with pytest.raises(FileError, match=r"^tensor file .*is a directory"):
        read_tensor_file(tmp_path)
    with pytest.raises(FileError, match=r"^cannot write tensor file "):
        write_tensor_file(tmp_path / "missing" / "t.safetensors", {"x": np.zeros(1)})


def test_ml_dtypes_without_a_safetensors_code_are_not_written(tmp_path: Path) -> None:
    with pytest.raises(FileError, match="float8_e4m3fnuz, which it cannot store"):
        write_tensor_file(tmp_path / "t.safetensors", {"x": np.zeros(2, ml_dtypes.float8_e4m3fnuz)})


@pytest.mark.parametrize(("count", "listed"), [(20, 20), (21, 20)])
def test_an_unknown_name_lists_at_most_20_inputs(tmp_path: Path, count: int, listed: int) -> None:
    expect = {f"input{i:02}": Expected((1,), F32) for i in range(count)}
    write_tensor_file(tmp_path / "t.safetensors", {"zzz": np.zeros(1, np.float32)})
    with pytest.raises(FileError) as caught:
        read_tensor_file(tmp_path / "t.safetensors", expect=expect)
    names = ", ".join(repr(f"input{i:02}") for i in range(listed))
    assert str(caught.value).endswith(f"its inputs are {names}" + (", ..." if count > listed else ""))


def test_an_unreadable_file_start_is_a_file_error() -> None:
    from sigdnn.io.tensor_files import _peek

    class Unreadable(io.BytesIO):
        def read(self, n: int = -1) -> bytes:
            raise OSError(5, "Input/output error")

    with pytest.raises(FileError, match=r"cannot read tensor file .*x\.npz.*: Input/output error"):
        _peek(Unreadable(), 4, "x.npz")


def test_a_long_error_is_shown_by_its_first_200_characters() -> None:
    from sigdnn.io.tensor_files import _first_line

    assert _first_line(ValueError("e" * 300 + "\nsecond line")) == "e" * 200
    assert _first_line(ValueError("")) == "ValueError"
