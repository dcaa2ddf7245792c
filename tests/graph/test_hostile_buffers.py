"""Hostile bytes: every malformed buffer is a SchemaError or GraphError, fast and small.

The reader is the one piece of sigdnn that sees untrusted input. Each test
names one way a buffer can be wrong and pins the error class and that the
message points at the tensor or node involved; the exhaustive sweeps (every
truncation, every bit flip, every byte set to an interesting value) show
that nothing else escapes, and the limit tests show that absurd sizes are
refused before anything is allocated.
"""

from __future__ import annotations

import re
import sys
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import flatbuffers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sigdnn
import sigdnn.schemas.Graph as fb_graph
import sigdnn.schemas.Node as fb_node
import sigdnn.schemas.PointwiseAttributes as fb_pointwise
import sigdnn.schemas.Tensor as fb_tensor
from sigdnn import DataType, GraphError, Limits, SchemaError, SigdnnError
from sigdnn.graph import SCHEMA_VERSION
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.serialize import FILE_IDENTIFIER
from sigdnn.graph.wire_reader import Buffer, slots_of
from sigdnn.schemas.NodeAttributes import NodeAttributes
from sigdnn.schemas.PointwiseMode import PointwiseMode

F32 = DataType.FLOAT32.wire


# -- valid buffers to start from ---------------------------------------------


def small_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("small", io_dtype="float32")
    x = g.tensor("x", dims=(2, 3))
    g.pointwise("relu_fwd", x).set_output(True).set_name("y")
    return g


def conv_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="float16", compute_dtype="float32")
    x = g.tensor("x", dims=(1, 4, 5, 5), layout="NHWC")
    w = g.tensor("w", dims=(4, 2, 3, 3), layout="NHWC")
    s = g.scalar("s", 0.5)
    y = g.conv_fprop(x, w, padding=(1, 1))
    g.pointwise("mul", g.matmul(y, g.tensor("m", dims=(5, 2))), s).set_output(True).set_name("z")
    return g


SMALL = small_graph().serialize()
CONV = conv_graph().serialize()


# -- a raw writer: any field value, including ones serialize() never writes ---


def raw_buffer(
    tensors: list[dict[str, Any]],
    nodes: Sequence[dict[str, Any]] = (),
    *,
    name: str = "raw",
    io: int = F32,
    major: int = SCHEMA_VERSION[0],
) -> bytes:
    """A graph buffer from field values as given; unknown enums and bad bytes welcome."""
    b = flatbuffers.Builder(256)

    def longs(values: list[int]) -> int:
        return b.CreateNumpyVector(np.asarray(values, dtype="<i8"))

    def table_vector(offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    t_offs = []
    for t in tensors:
        nm = b.CreateString(t.get("name", "t"))  # str or raw bytes
        dims, strides = longs(t.get("dims", [1])), longs(t.get("strides", [1] * len(t.get("dims", [1]))))
        value = b.CreateByteVector(t["value"]) if "value" in t else None
        fb_tensor.Start(b)
        fb_tensor.AddUid(b, t["uid"])
        fb_tensor.AddName(b, nm)
        fb_tensor.AddDataType(b, t.get("dtype", F32))
        fb_tensor.AddDims(b, dims)
        fb_tensor.AddStrides(b, strides)
        fb_tensor.AddIsVirtual(b, t.get("virtual", False))
        if value is not None:
            fb_tensor.AddIsPassByValue(b, True)
            fb_tensor.AddValue(b, value)
        t_offs.append(fb_tensor.End(b))
    n_offs = []
    for n in nodes:
        nm = b.CreateString(n.get("name", "n"))
        attrs = n["attributes"](b) if "attributes" in n else None
        fb_node.Start(b)
        fb_node.AddName(b, nm)
        fb_node.AddComputeDataType(b, n.get("compute", 0))
        fb_node.AddAttributesType(b, n.get("type", NodeAttributes.PointwiseAttributes))
        if attrs is not None:
            fb_node.AddAttributes(b, attrs)
        n_offs.append(fb_node.End(b))
    tv, nv, gname = table_vector(t_offs), table_vector(n_offs), b.CreateString(name)
    fb_graph.Start(b)
    fb_graph.AddSchemaVersionMajor(b, major)
    fb_graph.AddName(b, gname)
    fb_graph.AddIoDataType(b, io)
    fb_graph.AddTensors(b, tv)
    fb_graph.AddNodes(b, nv)
    b.Finish(fb_graph.End(b), FILE_IDENTIFIER)
    return bytes(b.Output())


def pointwise_attrs(mode: int, in_0: int, out_0: int) -> Callable[[flatbuffers.Builder], int]:
    def write(b: flatbuffers.Builder) -> int:
        fb_pointwise.Start(b)
        fb_pointwise.AddMode(b, mode)
        fb_pointwise.AddIn0(b, in_0)
        fb_pointwise.AddOut0(b, out_0)
        return fb_pointwise.End(b)

    return write


RELU = PointwiseMode.RELU_FWD
RAW_OK = dict(
    tensors=[{"uid": 1, "name": "x", "dims": [2]}, {"uid": 2, "name": "y", "dims": [2]}],
    nodes=[{"name": "relu", "attributes": pointwise_attrs(RELU, 1, 2)}],
)


def reject(data: bytes, error: type[SigdnnError], *needles: str) -> str:
    """deserialize must raise exactly ``error`` with every needle in the message."""
    with pytest.raises(SigdnnError) as info:
        sigdnn.deserialize(data)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    return msg


def count_lines(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the number of Python lines it executed: a measure of work no slow runner changes."""
    lines = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        lines += event == "line"
        return local

    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        return fn(), lines
    finally:
        sys.settrace(previous)


@contextmanager
def cheap(max_lines: int = 20_000, max_bytes: int = 4 << 20) -> Iterator[None]:
    """The block may execute at most ``max_lines`` Python lines and allocate at most ``max_bytes`` (NumPy
    included): a reader that loops over a hostile count, or allocates for it, trips one of the two."""
    lines = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        lines += event == "line"
        return local

    previous = sys.gettrace()
    tracemalloc.start()
    sys.settrace(lambda frame, event, arg: local)
    try:
        yield
    finally:
        sys.settrace(previous)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert lines < max_lines, f"executed {lines} lines"
    assert peak < max_bytes, f"peak allocation {peak} bytes"


def test_raw_writer_makes_a_valid_graph() -> None:
    g = sigdnn.deserialize(raw_buffer(**RAW_OK))
    assert [n.name for n in g.nodes] == ["relu"]


# -- not a sigdnn buffer -------------------------------------------------------


@pytest.mark.parametrize("obj", ["text", None, 12, [1, 2], np.zeros(16, np.uint8)], ids=repr)
def test_non_bytes_is_schema_error(obj: object) -> None:
    with pytest.raises(SchemaError, match="expected bytes"):
        sigdnn.deserialize(obj)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, 1, 7, 11])
def test_too_short(n: int) -> None:
    reject(SMALL[:n], SchemaError, f"{n} bytes")


def test_wrong_identifier() -> None:
    bad = SMALL[:4] + b"ONNX" + SMALL[8:]
    reject(bad, SchemaError, "identifier", "ONNX", "SDG1")


@pytest.mark.parametrize("major", [0, 2, 0xFFFF])
def test_wrong_major_version(major: int) -> None:
    g = small_graph()
    g.schema_version = (major, 0)
    reject(g.serialize(), SchemaError, f"version {major}.0", "not supported")


def test_newer_minor_version_is_read() -> None:
    g = small_graph()
    g.schema_version = (SCHEMA_VERSION[0], SCHEMA_VERSION[1] + 5)
    assert sigdnn.deserialize(g.serialize()).schema_version == g.schema_version


def test_major_version_is_checked_before_the_rest() -> None:
    """A future major version may lay out tables differently: don't read past the header."""
    data = raw_buffer([{"uid": 1, "dtype": 99}], major=SCHEMA_VERSION[0] + 1)
    reject(data, SchemaError, "version")


@pytest.mark.parametrize("root", [0xFFFFFFFF, 0x7FFFFFFF, 344, 8, 9, 10])
def test_root_offset_out_of_range(root: int) -> None:
    data = bytearray(SMALL)
    data[0:4] = root.to_bytes(4, "little")
    with pytest.raises(SchemaError):
        sigdnn.deserialize(bytes(data))


# -- unknown enum / union members, bad strings, missing parts -----------------


def test_unknown_tensor_dtype_names_the_tensor() -> None:
    reject(raw_buffer([{"uid": 7, "name": "weird", "dtype": 99}]), SchemaError, "'weird'", "uid 7", "data type 99")


def test_negative_tensor_dtype() -> None:
    reject(raw_buffer([{"uid": 7, "name": "weird", "dtype": -3}]), SchemaError, "'weird'", "data type -3")


def test_unknown_graph_dtype() -> None:
    reject(raw_buffer([], io=42), SchemaError, "io dtype", "42")


def test_unknown_union_member_names_the_node() -> None:
    data = raw_buffer(RAW_OK["tensors"], [{"name": "mystery", "type": 77, "attributes": pointwise_attrs(RELU, 1, 2)}])
    reject(data, SchemaError, "'mystery'", "77")


def test_union_member_none_names_the_node() -> None:
    reject(raw_buffer(RAW_OK["tensors"], [{"name": "empty", "type": 0}]), SchemaError, "'empty'", "op")


def test_missing_attribute_table_names_the_node() -> None:
    reject(raw_buffer(RAW_OK["tensors"], [{"name": "bare"}]), SchemaError, "'bare'", "attributes are missing")


@pytest.mark.parametrize("mode", [999, -1, 50])
def test_unknown_pointwise_mode_names_the_node(mode: int) -> None:
    data = raw_buffer(RAW_OK["tensors"], [{"name": "pw", "attributes": pointwise_attrs(mode, 1, 2)}])
    reject(data, SchemaError, "'pw'", f"mode {mode}")


def test_unknown_node_compute_dtype() -> None:
    data = raw_buffer(RAW_OK["tensors"], [{"name": "pw", "compute": 120, "attributes": pointwise_attrs(RELU, 1, 2)}])
    reject(data, SchemaError, "'pw'", "120")


def test_name_not_utf8_names_the_tensor_index() -> None:
    reject(raw_buffer([{"uid": 5, "name": b"\xff\xfe"}]), SchemaError, "tensor #0", "uid 5", "UTF-8")


def test_overlong_name_is_refused_before_decoding() -> None:
    data = raw_buffer([{"uid": 5, "name": "n" * 5000}])
    reject(data, GraphError, "tensor #0", "uid 5", "5000")
    g = sigdnn.deserialize(data, limits=Limits(max_name_length=5000))
    assert g.tensors[5].name == "n" * 5000


def test_rank_above_limit_on_the_wire_names_the_tensor() -> None:
    reject(raw_buffer([{"uid": 3, "name": "deep", "dims": [1] * 9}]), GraphError, "'deep'", "9 entries")


def test_overlong_scalar_value_names_the_tensor() -> None:
    reject(raw_buffer([{"uid": 3, "name": "big", "value": bytes(65)}]), GraphError, "'big'", "65")


def test_scalar_without_its_own_dtype_is_a_graph_error() -> None:
    """Tensor.scalar() needs the tensor's dtype; the graph default must not stand in for it."""
    data = raw_buffer([{"uid": 3, "name": "alpha", "dtype": 0, "value": bytes(4)}])
    reject(data, GraphError, "'alpha'", "own data type")


def _patch_u32_of(data: bytes, slot: str, value: int) -> bytes:
    """Overwrite the length word of the root table's vector field ``slot``."""
    buf = Buffer(data)
    target = buf.root()._target(slots_of(fb_graph)[slot])
    out = bytearray(data)
    out[target : target + 4] = value.to_bytes(4, "little")
    return bytes(out)


@pytest.mark.parametrize(("slot", "limits"), [("Tensors", Limits(max_tensors=4)), ("Nodes", Limits(max_nodes=2))])
def test_vector_count_beyond_limit_is_graph_error(slot: str, limits: Limits) -> None:
    with cheap(), pytest.raises(GraphError, match=f"declares [0-9]+ {slot.lower()}"):
        sigdnn.deserialize(CONV, limits=limits)


@pytest.mark.parametrize("slot", ["Tensors", "Nodes"])
@pytest.mark.parametrize("count", [100_000, 2**31, 2**32 - 1])
def test_vector_count_past_the_end_is_schema_error(slot: str, count: int) -> None:
    """A count the bytes cannot hold is malformed whatever the limits say."""
    with cheap():
        reject(_patch_u32_of(CONV, slot, count), SchemaError, f"{slot.lower()} vector", "outside")


# -- absurd sizes: refused before allocation -----------------------------------


def tensors_graph(*tensors: sigdnn.Tensor, io: str = "float32") -> bytes:
    g = sigdnn.Graph("absurd", io_dtype=io)
    for t in tensors:
        g.tensors[t.uid] = t
    return g.serialize()


def packed(dims: tuple[int, ...]) -> tuple[int, ...]:
    from sigdnn.graph.layout import packed_strides

    return packed_strides(dims)


@pytest.mark.parametrize(
    "dims",
    [(2**31, 2**31), (2**62,), (2**63 - 1,), (2**62, 2**62, 2**62, 2**62, 2**62, 2**62, 2**62, 2**62), (2**41,)],
    ids=lambda d: "x".join(str(v) for v in d),
)
def test_absurd_dims_are_graph_error_without_allocating(dims: tuple[int, ...]) -> None:
    strides = packed(dims)
    if max(strides) >= 2**63:
        strides = (1,) * len(dims)  # the wire holds int64: make the span absurd through dims alone
    data = tensors_graph(sigdnn.Tensor(9, "huge", dims, strides))
    with cheap():
        reject(data, GraphError, "'huge'", "uid 9")
    executor = sigdnn.Executor()  # its first construction imports the registry's modules: not the buffer's cost
    with cheap(), pytest.raises(GraphError, match="'huge'"):
        executor.prepare(data)


def test_absurd_stride_on_a_unit_dim_is_graph_error() -> None:
    """(d - 1) * stride is 0 here, but NumPy would still multiply the stride out to bytes."""
    data = tensors_graph(sigdnn.Tensor(4, "odd", (1, 3), (2**62, 1)))
    with cheap():
        reject(data, GraphError, "'odd'", "stride")


def test_negative_dims_and_strides_on_the_wire() -> None:
    reject(tensors_graph(sigdnn.Tensor(4, "neg", (-2, 3), (3, 1))), GraphError, "'neg'", "dims")
    reject(tensors_graph(sigdnn.Tensor(4, "neg", (2, 3), (-3, 1))), GraphError, "'neg'", "strides")


def test_total_bytes_limit_names_the_largest_tensor() -> None:
    """Each tensor is within max_elements, together they are not."""
    big = 1 << 33  # 32 GiB of float32 each
    data = tensors_graph(
        sigdnn.Tensor(1, "a", (big,), (1,)),
        sigdnn.Tensor(2, "b", (big,), (1,)),
        sigdnn.Tensor(3, "c", (big * 2,), (1,)),
    )
    with cheap():
        msg = reject(data, GraphError, "'c'", "uid 3", str(sigdnn.graph.DEFAULT_LIMITS.max_total_bytes))
    assert "absurd" in msg
    assert sigdnn.deserialize(data, limits=Limits(max_total_bytes=1 << 40)).tensors[3].dims == (big * 2,)


def test_small_limits_refuse_a_modest_graph() -> None:
    limits = Limits(max_total_bytes=1000)
    with pytest.raises(GraphError, match="limit 1000"):
        sigdnn.deserialize(CONV, limits=limits)
    with pytest.raises(GraphError, match="limit 1000"):
        sigdnn.Executor(limits=limits).prepare(CONV)


def test_huge_conv_padding_is_graph_error_naming_the_node() -> None:
    """Padding is an attribute, not a tensor: a tiny graph could otherwise ask for a huge padded copy."""
    g = sigdnn.Graph("pad", io_dtype="float32")
    x = g.tensor("x", dims=(1, 1, 1, 1))
    w = g.tensor("w", dims=(1, 1, 1, 1))
    g.tensors[3] = sigdnn.Tensor(3, "y", (1, 1, 1, 1), (1, 1, 1, 1))
    g.nodes.append(
        sigdnn.Node(
            "padder",
            ConvFprop(
                x=x.uid,
                w=w.uid,
                y=3,
                pre_padding=(2**31, 2**31),
                post_padding=(2**31, 2**31),
                stride=(2**33, 2**33),
                dilation=(1, 1),
            ),
        )
    )
    data = g.serialize()
    with cheap():
        reject(data, GraphError, "'padder'", "scratch")
    with cheap(), pytest.raises(GraphError, match="'padder'"):
        sigdnn.Executor().prepare(data)


def test_kernel_with_millions_of_taps_from_tiny_inputs_is_graph_error() -> None:
    """Broadcasting two 16 KiB inputs makes a 4096 x 4096 kernel: memory is modest, time per tap is not."""
    k = 4096
    g = sigdnn.Graph("taps", io_dtype="float32")
    a = g.tensor("a", (1, 1, k, 1))
    b = g.tensor("b", (1, 1, 1, k))
    w = g.pointwise("add", a, b).set_name("wide_kernel")
    x = g.tensor("x", (1, 1, 1, 1))
    g.conv_fprop(x, w, padding=(k - 1, k - 1), name="tapper").set_output(True)
    data = g.serialize()
    assert len(data) < 1024
    with cheap():
        reject(data, GraphError, "'tapper'", "'wide_kernel'", f"{k * k} taps")
    with cheap(), pytest.raises(GraphError, match="taps"):
        sigdnn.Executor().prepare(data)
    assert sigdnn.deserialize(data, limits=Limits(max_kernel_taps=k * k, max_work=1 << 50)).nodes[-1].name == "tapper"


def test_many_tensors_cost_time_in_proportion_to_the_buffer() -> None:
    """A count near the limit needs a buffer that big: the reader never loops past the bytes."""
    g = sigdnn.Graph("wide", io_dtype="float32")
    for i in range(20_000):
        g.tensors[i + 1] = sigdnn.Tensor(i + 1, f"t{i}", (1,), (1,))
    data = g.serialize()
    with pytest.raises(GraphError, match="20000 tensors"):
        sigdnn.deserialize(data, limits=Limits(max_tensors=19_999))
    assert len(sigdnn.deserialize(data).tensors) == 20_000
    # Work grows linearly with the tensor count: twice the tensors, about twice the lines (not four times).
    sizes = []
    for n in (1000, 2000):
        small = sigdnn.Graph("wide", io_dtype="float32")
        for i in range(n):
            small.tensors[i + 1] = sigdnn.Tensor(i + 1, f"t{i}", (1,), (1,))
        buffer = small.serialize()
        sizes.append(count_lines(lambda buffer=buffer: sigdnn.deserialize(buffer))[1])
    assert sizes[1] < 2.2 * sizes[0], sizes


# -- exhaustive sweeps ---------------------------------------------------------


def outcome(data: bytes) -> sigdnn.Graph | SigdnnError:
    """The parsed graph, or the error (whose message must say where); anything else fails the test."""
    try:
        return sigdnn.deserialize(data)
    except (SchemaError, GraphError) as e:
        assert re.search(r"tensor|node|graph", str(e)), f"message names nothing: {e}"
        return e


@pytest.mark.parametrize("data", [SMALL, CONV], ids=["small", "conv"])
def test_every_truncation(data: bytes) -> None:
    original = sigdnn.deserialize(data)
    parsed = []
    for n in range(len(data)):
        got = outcome(data[:n])
        if isinstance(got, sigdnn.Graph):
            parsed.append(n)
            assert got == original  # only trailing padding / a string's NUL terminator was cut
        else:
            assert isinstance(got, SchemaError), f"prefix {n}: {type(got).__name__}: {got}"
    assert all(n >= len(data) - 4 for n in parsed), parsed


@pytest.mark.parametrize("data", [SMALL, CONV], ids=["small", "conv"])
def test_every_single_bit_flip(data: bytes) -> None:
    kinds: dict[str, int] = {}
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        got = outcome(bytes(flipped))
        kinds[type(got).__name__] = kinds.get(type(got).__name__, 0) + 1
    assert kinds.get("SchemaError") and kinds.get("GraphError"), kinds


@pytest.mark.parametrize("value", [0x00, 0xFF, 0x7F, 0x80])
def test_every_byte_set_to_an_interesting_value(value: int) -> None:
    for i in range(len(CONV)):
        mutated = bytearray(CONV)
        mutated[i] = value
        outcome(bytes(mutated))


def test_every_aligned_word_set_to_interesting_offsets() -> None:
    words = [0, 1, 4, len(CONV), len(CONV) - 4, 2**31 - 1, 2**31, 2**32 - 1, 2**32 - 4]
    for i in range(0, len(CONV) - 3, 4):
        for w in words:
            mutated = bytearray(CONV)
            mutated[i : i + 4] = w.to_bytes(4, "little")
            outcome(bytes(mutated))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes(data: bytes) -> None:
    got = outcome(data)
    assert isinstance(got, SchemaError) or len(data) >= 12


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=8, max_size=512), st.integers(0, 2**32 - 1))
def test_random_bytes_behind_a_valid_header(body: bytes, root: int) -> None:
    """Past the identifier check, so the table reader itself sees the garbage."""
    outcome(root.to_bytes(4, "little") + FILE_IDENTIFIER + body)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(CONV) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_random_byte_overwrites(edits: list[tuple[int, int]]) -> None:
    mutated = bytearray(CONV)
    for at, value in edits:
        mutated[at] = value
    outcome(bytes(mutated))
