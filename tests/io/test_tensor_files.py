"""sigdnn.io.tensor_files: every dtype crosses files bit for bit; hostile files are refused cheaply.

Oracles: the bits of the arrays written (compared as raw bytes, so NaN
payloads and -0.0 count), and safetensors' own torch reader and writer, which
share no code with sigdnn's header parser. "Cheaply" is measured with
tracemalloc, which sees NumPy's and zipfile's allocations.
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

from sigdnn.dtypes import DataType
from sigdnn.io import Expected, FileError, read_tensor_file, tensor_file_format, write_tensor_file
from sigdnn.io.tensor_files import DTYPE_MARKER

ALL_DTYPES = [dt for dt in DataType]


def every_bit_pattern(dtype: DataType, shape: tuple[int, ...] = (3, 5)) -> np.ndarray:
    """Random bits of the dtype's width, NaNs and infinities included (bool: 0/1)."""
    rng = np.random.default_rng(dtype.itemsize * 7 + len(dtype.value))
    if dtype is DataType.BOOL:
        return rng.random(shape) < 0.5
    raw = rng.integers(0, 256, size=(*shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype.numpy).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


def safetensors_file(header: object, data: bytes = b"", raw_header: bytes | None = None) -> bytes:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npz_file(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


# -- round trips ------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ""])
def test_every_dtype_round_trips_bit_for_bit(tmp_path: Path, suffix: str) -> None:
    arrays = {dt.value: every_bit_pattern(dt) for dt in ALL_DTYPES}
    arrays["scalar"] = np.array(np.float32(-0.0))
    arrays["empty"] = np.zeros((0, 4), ml_dtypes.bfloat16)
    arrays["strided"] = every_bit_pattern(DataType.FLOAT16, (4, 6)).T  # stored in its logical (C-order) shape
    path = tmp_path / f"t{suffix}"
    kind = write_tensor_file(path, arrays)
    assert kind == ("npz" if suffix == ".npz" else "safetensors")
    back = read_tensor_file(path)
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert same_bits(back[name], array), name


def test_big_endian_arrays_are_stored_by_value(tmp_path: Path) -> None:
    values = np.array([1.5, -2.25, 3e38], dtype=">f4")
    write_tensor_file(tmp_path / "t.safetensors", {"x": values})
    back = read_tensor_file(tmp_path / "t.safetensors")["x"]
    assert back.dtype == np.float32 and back.tolist() == values.tolist()


def test_safetensors_torch_reads_what_sigdnn_writes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    arrays = {dt.value: every_bit_pattern(dt) for dt in ALL_DTYPES}
    write_tensor_file(tmp_path / "t.safetensors", arrays)
    loaded = load_file(tmp_path / "t.safetensors")
    for name, array in arrays.items():
        tensor = loaded[name]
        assert str(tensor.dtype) == f"torch.{np.dtype(array.dtype).name}", name
        bits = tensor.view(torch.uint8).numpy().tobytes() if tensor.dtype != torch.bool else tensor.numpy().tobytes()
        assert bits == array.tobytes(), name


def test_sigdnn_reads_what_safetensors_torch_writes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(3)
    tensors = {
        "bf16": torch.randn(4, 3, generator=generator).to(torch.bfloat16),
        "e4m3": torch.randn(7, generator=generator).to(torch.float8_e4m3fn),
        "e5m2": torch.randn(2, 2, generator=generator).to(torch.float8_e5m2),
        "scalar": torch.tensor(2.5),
    }
    save_file(tensors, tmp_path / "t.safetensors")
    back = read_tensor_file(tmp_path / "t.safetensors")
    assert back["bf16"].dtype == ml_dtypes.bfloat16 and back["e4m3"].dtype == ml_dtypes.float8_e4m3fn
    assert back["e5m2"].dtype == ml_dtypes.float8_e5m2 and back["scalar"].shape == ()
    for name, tensor in tensors.items():
        assert back[name].tobytes() == tensor.reshape(-1).view(torch.uint8).numpy().tobytes(), name


def test_npz_stores_bf16_and_fp8_as_raw_integers_with_a_marker(tmp_path: Path) -> None:
    arrays = {"b": every_bit_pattern(DataType.BFLOAT16), "e": every_bit_pattern(DataType.FP8_E4M3)}
    write_tensor_file(tmp_path / "t.npz", arrays)
    with np.load(tmp_path / "t.npz", allow_pickle=False) as plain:  # a plain NumPy user sees integers and the marker
        assert plain["b"].dtype == np.uint16 and plain["e"].dtype == np.uint8
        assert json.loads(str(plain[DTYPE_MARKER])) == {"b": "bfloat16", "e": "fp8_e4m3"}


def test_npz_of_ml_dtypes_arrays_takes_the_expected_dtype(tmp_path: Path) -> None:
    y = every_bit_pattern(DataType.BFLOAT16, (2, 3))
    np.savez(tmp_path / "v.npz", y=y)  # stored as |V2: NumPy has no name for bfloat16
    back = read_tensor_file(tmp_path / "v.npz", expect={"y": Expected((2, 3), DataType.BFLOAT16)})
    assert same_bits(back["y"], y)
    with pytest.raises(FileError, match=r"tensor 'y': holds raw \|V2 values with no dtype to read them as"):
        read_tensor_file(tmp_path / "v.npz")


def test_raw_values_are_not_reinterpreted_as_a_different_width(tmp_path: Path) -> None:
    np.savez(tmp_path / "v.npz", y=every_bit_pattern(DataType.BFLOAT16, (2, 3)))
    with pytest.raises(FileError, match="holds raw"):
        read_tensor_file(tmp_path / "v.npz", expect={"y": Expected((2, 3), DataType.FP8_E4M3)})


def test_typed_bf16_is_never_reinterpreted(tmp_path: Path) -> None:
    """A real bfloat16 array expected as float16 stays bfloat16 (the executor then reports the mismatch)."""
    y = every_bit_pattern(DataType.BFLOAT16, (2, 3))
    write_tensor_file(tmp_path / "t.safetensors", {"y": y})
    back = read_tensor_file(tmp_path / "t.safetensors", expect={"y": Expected((2, 3), DataType.FLOAT16)})
    assert same_bits(back["y"], y)


def test_npy_is_named_after_the_only_input_or_the_file(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.arange(6.0).reshape(2, 3))
    assert list(read_tensor_file(tmp_path / "x.npy")) == ["x"]
    only = {"a": Expected((2, 3), DataType.FLOAT64)}
    assert read_tensor_file(tmp_path / "x.npy", expect=only)["a"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_fortran_order_npy_keeps_its_values(tmp_path: Path) -> None:
    values = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    np.save(tmp_path / "f.npy", values)
    assert np.array_equal(read_tensor_file(tmp_path / "f.npy")["f"], values)


def test_deflated_npz_is_read(tmp_path: Path) -> None:
    np.savez_compressed(tmp_path / "c.npz", a=np.arange(1000, dtype=np.int64))
    assert read_tensor_file(tmp_path / "c.npz")["a"].tolist() == list(range(1000))


def test_file_type_is_found_by_content(tmp_path: Path) -> None:
    write_tensor_file(tmp_path / "t.npz", {"a": np.ones(2)})
    (tmp_path / "renamed.safetensors").write_bytes((tmp_path / "t.npz").read_bytes())
    assert read_tensor_file(tmp_path / "renamed.safetensors")["a"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("name", "kind"), [("o.npz", "npz"), ("o.NPZ", "npz"), ("o", "safetensors"), ("o.bin", "safetensors")]
)
def test_format_by_extension(name: str, kind: str) -> None:
    assert tensor_file_format(name) == kind


def test_npy_cannot_hold_several_tensors(tmp_path: Path) -> None:
    with pytest.raises(FileError, match=r"a \.npy holds one unnamed array; use \.safetensors or \.npz"):
        write_tensor_file(tmp_path / "o.npy", {"a": np.ones(1)})


def test_unstorable_dtypes_and_reserved_names(tmp_path: Path) -> None:
    with pytest.raises(FileError, match="dtype complex128, which it cannot store"):
        write_tensor_file(tmp_path / "o.safetensors", {"a": np.ones(1, complex)})
    with pytest.raises(FileError, match="reserved"):
        write_tensor_file(tmp_path / "o.npz", {DTYPE_MARKER: np.ones(1)})


# -- expectations ---------------------------------------------------------------------------------------
def test_unknown_name_lists_the_inputs_and_a_close_match(tmp_path: Path) -> None:
    write_tensor_file(tmp_path / "t.safetensors", {"wieght": np.ones(3, np.float32)})
    expect = {"x": Expected((3,), DataType.FLOAT32), "weight": Expected((3,), DataType.FLOAT32)}
    with pytest.raises(
        FileError, match=r"'wieght': is not an input of this graph; did you mean 'weight'\? .*'x', 'weight'"
    ):
        read_tensor_file(tmp_path / "t.safetensors", expect=expect)


# -- hostile files: each refused with a FileError before anything large is allocated -----------------------
def assert_refused_cheaply(path: Path, match: str, expect: dict[str, Expected] | None = None) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(FileError, match=match):
            read_tensor_file(path, expect=expect)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes allocated before refusing"


def test_npy_claiming_2_to_the_40_elements(tmp_path: Path) -> None:
    path = tmp_path / "huge.npy"
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
        f.write(b"\0" * 64)
    assert_refused_cheaply(path, r"declares 4 TiB")
    assert_refused_cheaply(path, r"declares 4 TiB, more than the 64 bytes", {"x": Expected((8,), DataType.FLOAT32)})


def test_npy_shorter_than_its_header_says(tmp_path: Path) -> None:
    np.save(tmp_path / "t.npy", np.arange(100.0))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-8])
    assert_refused_cheaply(tmp_path / "t.npy", r"declares shape \[100\] of float64 .* truncated or damaged")


def test_zip_bomb_member_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    """64 MiB of zeros deflate to ~64 KiB; a graph input of 16 floats can take at most 128 bytes."""
    bomb = npy_bytes(np.zeros(16 << 20, np.float32))
    path = npz_file(tmp_path / "bomb.npz", {"x.npy": bomb}, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 1 << 20
    assert_refused_cheaply(path, r"tensor 'x': decompresses to 64 MiB", {"x": Expected((16,), DataType.FLOAT32)})


def test_zip_member_lying_about_its_size(tmp_path: Path) -> None:
    """A member whose data run past its declared size is cut there and its CRC fails: a clean error."""
    real = npy_bytes(np.arange(64, dtype=np.float64))
    path = npz_file(tmp_path / "lie.npz", {"x.npy": real})
    data = bytearray(path.read_bytes())
    size = struct.pack("<I", len(real))
    smaller = struct.pack("<I", len(real) - 256)
    data[:] = data.replace(size, smaller)  # local header and central directory both
    path.write_bytes(bytes(data))
    with pytest.raises(FileError, match="tensor file"):
        read_tensor_file(path)


def test_npz_with_a_pickled_member(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object))
    assert_refused_cheaply(
        tmp_path / "obj.npz", r"tensor 'x': holds Python objects \(pickled data\), which sigdnn never loads"
    )


def test_truncated_npz(tmp_path: Path) -> None:
    np.savez(tmp_path / "good.npz", x=np.arange(1000.0))
    data = (tmp_path / "good.npz").read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 40):
        (tmp_path / "t.npz").write_bytes(data[:cut])
        with pytest.raises(FileError, match="damaged or truncated zip archive"):
            read_tensor_file(tmp_path / "t.npz")


def test_npz_with_a_corrupted_member(tmp_path: Path) -> None:
    np.savez(tmp_path / "good.npz", x=np.arange(1000.0))
    data = bytearray((tmp_path / "good.npz").read_bytes())
    data[500] ^= 0xFF  # inside x's data: the CRC no longer matches
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    with pytest.raises(FileError, match=r"damaged or truncated zip archive .*CRC"):
        read_tensor_file(tmp_path / "bad.npz")


def test_npz_members_must_be_npy(tmp_path: Path) -> None:
    path = npz_file(tmp_path / "t.npz", {"readme.txt": b"hello"})
    with pytest.raises(FileError, match=r"member 'readme\.txt' is not a \.npy array"):
        read_tensor_file(path)


def test_npz_with_more_members_than_the_graph_has_inputs(tmp_path: Path) -> None:
    path = npz_file(tmp_path / "t.npz", {f"m{i}.npy": npy_bytes(np.zeros(1)) for i in range(10)})
    with pytest.raises(FileError, match="holds 10 members, more than the 2 expected here"):
        read_tensor_file(path, expect={"x": Expected((1,), DataType.FLOAT64)})


def test_npz_duplicate_member(tmp_path: Path) -> None:
    path = tmp_path / "dup.npz"
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", npy_bytes(np.zeros(1)))
        archive.writestr("x.npy", npy_bytes(np.ones(1)))
    with pytest.raises(FileError, match="tensor 'x': appears twice"):
        read_tensor_file(path)


def test_npz_damaged_marker(tmp_path: Path) -> None:
    path = npz_file(
        tmp_path / "t.npz",
        {"x.npy": npy_bytes(np.zeros(2, np.uint16)), f"{DTYPE_MARKER}.npy": npy_bytes(np.array("{not json"))},
    )
    with pytest.raises(FileError, match=f"its {DTYPE_MARKER} member is damaged"):
        read_tensor_file(path)
    path = npz_file(
        tmp_path / "u.npz",
        {"x.npy": npy_bytes(np.zeros(2, np.float32)), f"{DTYPE_MARKER}.npy": npy_bytes(np.array('{"x": "bfloat16"}'))},
    )
    with pytest.raises(FileError, match="tensor 'x': is marked bfloat16 but holds float32"):
        read_tensor_file(path)


@pytest.mark.parametrize(
    "array", [np.array(["text"]), np.zeros(2, complex), np.zeros(2, "M8[s]"), np.zeros(2, [("a", "<f4")])]
)
def test_npy_that_holds_no_numbers(tmp_path: Path, array: np.ndarray) -> None:
    (tmp_path / "x.npy").write_bytes(npy_bytes(array))
    with pytest.raises(FileError, match="sigdnn reads numbers and booleans"):
        read_tensor_file(tmp_path / "x.npy")


def test_npy_with_a_damaged_header(tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': nope}\n")
    with pytest.raises(FileError, match=r"damaged \.npy header"):
        read_tensor_file(tmp_path / "x.npy")


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (struct.pack("<Q", 1 << 40) + b"{}", "its header claims 1099511627776 bytes"),
        (safetensors_file(None, raw_header=b"{\xff}"), "its header is not valid JSON"),
        (safetensors_file(None, raw_header=b"{" + b"[" * 100000 + b"}"), "its header is not valid JSON"),
        (safetensors_file({"x": 5}), "tensor 'x': its header entry is not a JSON object"),
        (safetensors_file({"x": {**F32, "dtype": "F4"}}, b"\0" * 8), "dtype 'F4' is not one sigdnn reads"),
        (safetensors_file({"x": {**F32, "shape": [-2]}}, b"\0" * 8), "shape \\[-2\\] is not a list of non-negative"),
        (safetensors_file({"x": {**F32, "shape": [True, 2]}}, b"\0" * 8), "is not a list of non-negative integers"),
        (safetensors_file({"x": {**F32, "data_offsets": [0, 80]}}, b"\0" * 8), "do not lie within the file's 8 data"),
        (safetensors_file({"x": {**F32, "data_offsets": [4, 0]}}, b"\0" * 8), "do not lie within"),
        (
            safetensors_file({"x": {**F32, "shape": [1 << 40]}}, b"\0" * 8),
            "needs 4398046511104 bytes but data_offsets give 8",
        ),
        (safetensors_file({"x": F32, "y": F32}, b"\0" * 8), "tensor 'y': its data overlaps another tensor's"),
        (b"hi\n", "is not a safetensors, .npz or .npy file"),
        (b"", "is not a safetensors, .npz or .npy file"),
    ],
    ids=lambda value: value.split(" ")[0][:30] if isinstance(value, str) else "",
)
def test_hostile_safetensors(tmp_path: Path, content: bytes, match: str) -> None:
    (tmp_path / "t.safetensors").write_bytes(content)
    assert_refused_cheaply(tmp_path / "t.safetensors", match)


def test_safetensors_header_bounded_by_what_is_expected(tmp_path: Path) -> None:
    header = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(5000)}
    (tmp_path / "t.safetensors").write_bytes(safetensors_file(header))
    assert_refused_cheaply(
        tmp_path / "t.safetensors", "more than .* for the tensors expected", {"x": Expected((1,), DataType.UINT8)}
    )


def test_safetensors_tensor_larger_than_its_input(tmp_path: Path) -> None:
    write_tensor_file(tmp_path / "t.safetensors", {"x": np.zeros(100, np.float64)})
    with pytest.raises(FileError, match="tensor 'x': declares 800 bytes, more than the 80 bytes it can take here"):
        read_tensor_file(tmp_path / "t.safetensors", expect={"x": Expected((10,), DataType.FLOAT32)})


def test_file_size_cap(tmp_path: Path) -> None:
    write_tensor_file(tmp_path / "t.safetensors", {"x": np.zeros(100, np.float64)})
    with pytest.raises(FileError, match="over the 100 bytes limit"):
        read_tensor_file(tmp_path / "t.safetensors", max_bytes=100)
