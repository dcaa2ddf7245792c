"""Graph rules: well-formed bytes that describe a broken graph are a GraphError naming the culprit.

The builder API refuses most of these at the call, so the graphs here are
made from the IR directly (serialize() runs no checks) and go through the
wire, as a hostile or buggy producer's would. Each case checks both
``deserialize`` and ``check_graph`` on the in-memory IR where the two can
differ.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import sigdnn
from sigdnn import DataType, GraphError
from sigdnn.graph import Graph, Node, Tensor, check_graph
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import Pointwise

F32 = DataType.FLOAT32


def t(uid: int, name: str, dims: tuple[int, ...] = (2, 3), **kw: object) -> Tensor:
    """A packed float32 tensor unless told otherwise."""
    from sigdnn.graph.layout import packed_strides

    kw.setdefault("dtype", F32)
    strides = kw.pop("strides", None) or packed_strides(dims)
    return Tensor(uid, name, tuple(dims), tuple(strides), **kw)  # type: ignore[arg-type]


def v(uid: int, name: str, dims: tuple[int, ...] = (2, 3), **kw: object) -> Tensor:
    return t(uid, name, dims, is_virtual=True, **kw)


def pw(mode: str, name: str, in_0: int, out_0: int, in_1: int | None = None, **params: object) -> Node:
    return Node(name, Pointwise(mode=mode, in_0=in_0, out_0=out_0, in_1=in_1, **params))  # type: ignore[arg-type]


def ir(tensors: list[Tensor], nodes: list[Node], name: str = "g") -> Graph:
    g = Graph(name, io_dtype=F32)
    for x in tensors:
        g.tensors[x.uid] = x
    g.nodes.extend(nodes)
    return g


def reject(g: Graph, *needles: str, wire: bool = True) -> str:
    """check_graph and (with ``wire``) deserialize(serialize(g)) both raise GraphError naming every needle."""
    messages = []
    with pytest.raises(GraphError) as info:
        check_graph(g)
    messages.append(str(info.value))
    if wire:
        data = g.serialize()
        with pytest.raises(GraphError) as info:
            sigdnn.deserialize(data)
        messages.append(str(info.value))
        assert sigdnn.deserialize(data, check=False) == g  # the bytes themselves are fine
    for msg in messages:
        for needle in needles:
            assert needle in msg, f"{needle!r} not in {msg!r}"
    return messages[-1]


def chain() -> list[Tensor]:
    return [t(1, "x"), v(2, "a"), v(3, "b"), t(4, "y")]


def test_a_valid_ir_graph_passes() -> None:
    g = ir(chain(), [pw("abs", "n1", 1, 2), pw("neg", "n2", 2, 3), pw("exp", "n3", 3, 4)])
    assert check_graph(g) == [0, 1, 2]
    assert sigdnn.deserialize(g.serialize()) == g


def test_order_is_computed_not_trusted() -> None:
    """Nodes arrive last-first; the order runs them first-last, and the result is right."""
    g = ir(chain(), [pw("exp", "n3", 3, 4), pw("neg", "n2", 2, 3), pw("abs", "n1", 1, 2)])
    assert check_graph(g) == [2, 1, 0]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = sigdnn.Executor().run(g.serialize(), {"x": x})
    np.testing.assert_allclose(out["y"], np.exp(-np.abs(x)), rtol=1e-6)


# -- cycles -------------------------------------------------------------------


def test_two_node_cycle_names_both_nodes() -> None:
    g = ir([t(1, "x"), v(2, "a"), v(3, "b")], [pw("add", "left", 1, 2, in_1=3), pw("relu_fwd", "right", 2, 3)])
    msg = reject(g, "cycle", "left", "right")
    assert "left -> right" in msg or "right -> left" in msg


def test_cycle_behind_a_valid_prefix_names_only_the_loop() -> None:
    tensors = [t(1, "x"), v(2, "p"), v(3, "a"), v(4, "b"), v(5, "c")]
    nodes = [
        pw("abs", "prefix", 1, 2),
        pw("add", "c1", 2, 3, in_1=5),
        pw("neg", "c2", 3, 4),
        pw("exp", "c3", 4, 5),
    ]
    msg = reject(ir(tensors, nodes), "cycle", "c1", "c2", "c3")
    assert "prefix" not in msg


def test_self_loop_is_read_and_written() -> None:
    reject(ir([t(1, "x"), v(2, "a")], [pw("add", "selfie", 1, 2, in_1=2)]), "'selfie'", "'a'", "both read and written")


# -- uids ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("port", "node"), [("in_0", pw("abs", "dangler", 99, 2)), ("out_0", pw("abs", "dangler", 1, 99))]
)
def test_dangling_uid_names_node_port_and_uid(port: str, node: Node) -> None:
    reject(ir([t(1, "x"), t(2, "y")], [node]), "'dangler'", f"'{port}'", "uid 99", "dangling")


def test_dangling_uid_in_matmul_and_conv_ports() -> None:
    reject(ir([t(1, "a"), t(2, "c")], [Node("mm", Matmul(1, 42, 2))]), "'mm'", "'b'", "uid 42")
    conv = ConvFprop(x=7, w=1, y=2, pre_padding=(0,), post_padding=(0,), stride=(1,), dilation=(1,))
    reject(ir([t(1, "w", (1, 1, 1)), t(2, "y", (1, 1, 1))], [Node("cv", conv)]), "'cv'", "'x'", "uid 7")


def test_duplicate_uid_on_the_wire_names_both_tensors() -> None:
    g = ir([t(1, "first")], [])
    g.tensors[2] = t(1, "second")  # two tensors that both say uid 1
    data = g.serialize()
    with pytest.raises(GraphError, match=r"duplicate tensor uid 1 \('first' and 'second'\)"):
        sigdnn.deserialize(data)
    with pytest.raises(GraphError, match=r"duplicate tensor uid 1 \('first' and 'second'\)"):
        sigdnn.deserialize(data, check=False)  # found while reading: a dict cannot hold both
    with pytest.raises(GraphError, match="'second' is stored under uid 2 but has uid 1"):
        check_graph(g)


def test_duplicate_uid_through_the_builder() -> None:
    g = sigdnn.Graph("dup", io_dtype="float32")
    g.tensor("a", (2,), uid=5)
    with pytest.raises(GraphError, match=r"duplicate tensor uid 5 \('b' and 'a'\)"):
        g.tensor("b", (2,), uid=5)


def test_duplicate_tensor_name() -> None:
    reject(ir([t(1, "same"), t(2, "same")], []), "duplicate tensor name 'same'", "uids 1 and 2")


def test_duplicate_node_name() -> None:
    g = ir([t(1, "x"), t(2, "y"), t(3, "z")], [pw("abs", "twin", 1, 2), pw("abs", "twin", 1, 3)])
    reject(g, "duplicate node name 'twin'")


def test_two_writers_name_both_nodes_and_the_tensor() -> None:
    g = ir([t(1, "x"), t(2, "y")], [pw("abs", "w1", 1, 2), pw("neg", "w2", 1, 2)])
    reject(g, "'y'", "'w1'", "'w2'", "written by both")


def test_virtual_tensor_nobody_writes_names_its_readers() -> None:
    g = ir([v(1, "ghost"), t(2, "y")], [pw("abs", "reader", 1, 2)])
    reject(g, "virtual tensor 'ghost'", "uid 1", "reader", "no node writes it")


# -- pass-by-value scalars -----------------------------------------------------


def scalar(uid: int, name: str, value: bytes, **kw: object) -> Tensor:
    return t(uid, name, (1,), value=value, **kw)


def test_scalar_cannot_be_virtual() -> None:
    reject(ir([scalar(1, "s", bytes(4), is_virtual=True)], []), "'s'", "cannot be virtual")


def test_scalar_cannot_be_written() -> None:
    reject(ir([t(1, "x"), scalar(2, "s", bytes(4))], [pw("abs", "writer", 1, 2)]), "'writer'", "'s'", "pass-by-value")


@pytest.mark.parametrize("value", [b"", bytes(2), bytes(8)])
def test_scalar_value_must_be_one_element(value: bytes) -> None:
    reject(ir([scalar(1, "s", value)], []), "'s'", "pass-by-value value must be one float32")


def test_scalar_dims_must_be_ones() -> None:
    reject(ir([t(1, "s", (2,), value=bytes(4))], []), "'s'", "all dims 1")


def test_scalar_needs_its_own_dtype() -> None:
    """Executing reads the value in the tensor's dtype; a graph default would be a guess."""
    reject(ir([scalar(1, "alpha", bytes(4), dtype=None)], []), "'alpha'", "own data type", wire=False)


# -- tensor rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("tensor", "needle"),
    [
        (Tensor(1, "scalarish", (), (), F32), "rank 0"),
        (Tensor(1, "deep", (1,) * 9, (1,) * 9, F32), "rank 9"),
        (Tensor(1, "mismatch", (2, 3), (1,), F32), "1 strides for 2 dims"),
        (Tensor(1, "empty", (2, 0), (1, 1), F32), "must all be >= 1"),
        (Tensor(1, "neg", (-1, 3), (3, 1), F32), "must all be >= 1"),
        (Tensor(1, "zero_stride", (2, 3), (0, 1), F32), "must be >= 1"),
        (Tensor(1, "neg_stride", (2, 3), (-3, 1), F32), "must be >= 1"),
        (Tensor(1, "n" * 5000, (1,), (1,), F32), "name longer"),
    ],
    ids=lambda x: x.name[:12] if isinstance(x, Tensor) else "",
)
def test_tensor_rules(tensor: Tensor, needle: str) -> None:
    # rank 9 and the long name are refused while reading (SchemaError): check the IR only.
    wire = tensor.name not in ("deep",) and len(tensor.name) < 100
    reject(ir([tensor], []), f"'{tensor.name}'", needle, wire=wire)


def test_stride_zero_on_a_unit_dim_is_fine() -> None:
    check_graph(ir([Tensor(1, "bcast", (1, 3), (0, 1), F32)], []))


def test_tensor_without_any_dtype() -> None:
    g = ir([Tensor(1, "untyped", (2,), (1,))], [])
    g.io_dtype = None
    with pytest.raises(GraphError, match=r"'untyped'.*no data type"):
        check_graph(g)


def test_uid_key_mismatch_in_memory() -> None:
    g = Graph("g", io_dtype=F32)
    g.tensors[5] = t(6, "moved")
    with pytest.raises(GraphError, match="'moved' is stored under uid 5 but has uid 6"):
        check_graph(g)


# -- shape rules -------------------------------------------------------------------


def test_pointwise_inputs_must_broadcast() -> None:
    g = ir([t(1, "a", (2, 3)), t(2, "b", (4,)), t(3, "c", (2, 3))], [pw("add", "adder", 1, 3, in_1=2)])
    reject(g, "'adder'", "do not broadcast", "[2, 3]", "[4]")


def test_pointwise_output_dims_must_match_the_rule() -> None:
    g = ir([t(1, "a", (2, 3)), t(2, "b", (1, 3)), t(3, "c", (3, 2))], [pw("add", "adder", 1, 3, in_1=2)])
    reject(g, "'adder'", "output 'c' has dims [3, 2]", "[2, 3]")


def test_pointwise_arity() -> None:
    reject(ir([t(1, "a"), t(2, "c")], [pw("add", "lonely_add", 1, 2)]), "'lonely_add'", "takes 2 input(s)")
    reject(ir([t(1, "a"), t(2, "c")], [pw("abs", "busy_abs", 1, 2, in_1=1)]), "'busy_abs'", "takes 1 input(s)")


def test_pointwise_gap_in_ports() -> None:
    node = Node("gappy", Pointwise(mode="add", in_0=1, out_0=3, in_2=2))
    reject(ir([t(1, "a"), t(2, "b"), t(3, "c")], [node]), "'gappy'", "ports in_0..in_1")


@pytest.mark.parametrize("axis", [None, -1, 2])
def test_gen_index_axis_out_of_range(axis: int | None) -> None:
    node = Node("idx", Pointwise(mode="gen_index", in_0=1, out_0=2, axis=axis))
    reject(ir([t(1, "a"), t(2, "c")], [node]), "'idx'", f"axis {axis} out of range")


def test_parameter_the_mode_does_not_take() -> None:
    reject(ir([t(1, "a"), t(2, "c")], [pw("abs", "abs1", 1, 2, swish_beta=1.0)]), "'abs1'", "swish_beta")


def test_negative_relu_slope() -> None:
    g = ir([t(1, "a"), t(2, "c")], [pw("relu_fwd", "leaky", 1, 2, relu_lower_clip_slope=-0.5)])
    reject(g, "'leaky'", "relu_lower_clip_slope")


def test_output_strides_must_not_overlap() -> None:
    g = ir([t(1, "a"), t(2, "c", strides=(1, 1))], [pw("abs", "squash", 1, 2)])
    reject(g, "'squash'", "'c'", "overlap")


def test_matmul_inner_dims_must_agree() -> None:
    g = ir([t(1, "a", (2, 3)), t(2, "b", (4, 5)), t(3, "c", (2, 5))], [Node("mm", Matmul(1, 2, 3))])
    reject(g, "'mm'", "'a'", "'b'", "disagree on K")


def test_matmul_needs_rank_two() -> None:
    g = ir([t(1, "a", (3,)), t(2, "b", (3, 5)), t(3, "c", (5,))], [Node("mm", Matmul(1, 2, 3))])
    reject(g, "'mm'", "rank >= 2")


def test_matmul_batch_dims_must_broadcast() -> None:
    g = ir([t(1, "a", (2, 2, 3)), t(2, "b", (3, 3, 4)), t(3, "c", (2, 2, 4))], [Node("mm", Matmul(1, 2, 3))])
    reject(g, "'mm'", "do not broadcast")


def conv(name: str, x_dims: tuple[int, ...], w_dims: tuple[int, ...], y_dims: tuple[int, ...], **kw: object) -> Graph:
    s = len(x_dims) - 2
    attrs_ = {"pre_padding": (0,) * s, "post_padding": (0,) * s, "stride": (1,) * s, "dilation": (1,) * s, **kw}
    op = ConvFprop(1, 2, 3, **attrs_)  # type: ignore[arg-type]
    return ir([t(1, "x", x_dims), t(2, "w", w_dims), t(3, "y", y_dims)], [Node(name, op)])


@pytest.mark.parametrize(
    ("graph", "needle"),
    [
        (conv("cv", (1, 4, 5, 5), (2, 3, 3, 3), (1, 2, 3, 3)), "channel count 3 does not divide x's 4"),
        (conv("cv", (1, 4, 5, 5), (3, 2, 3, 3), (1, 3, 3, 3)), "2 groups do not divide"),
        (conv("cv", (1, 1, 2, 2), (1, 1, 3, 3), (1, 1, 1, 1)), "smaller than the dilated kernel"),
        (conv("cv", (1, 1, 5, 5), (1, 1, 3), (1, 1, 3, 3)), "rank"),
        (conv("cv", (1, 1, 5, 5), (1, 1, 3, 3), (1, 1, 3, 3), stride=(0, 1)), "must be >= 1"),
        (conv("cv", (1, 1, 5, 5), (1, 1, 3, 3), (1, 1, 3, 3), dilation=(1, -1)), "must be >= 1"),
        (conv("cv", (1, 1, 5, 5), (1, 1, 3, 3), (1, 1, 3, 3), pre_padding=(-1, 0)), "padding must be >= 0"),
        (conv("cv", (1, 1, 5, 5), (1, 1, 3, 3), (1, 1, 3, 3), post_padding=(0,)), "post_padding has 1 entries"),
        (
            conv("cv", (1, 1, 5), (1, 1, 3), (1, 1, 3), stride=(), pre_padding=(), post_padding=(), dilation=()),
            "stride",
        ),
        (conv("cv", (1, 1, 5, 5), (1, 1, 3, 3), (1, 1, 4, 4)), "output 'y' has dims [1, 1, 4, 4]"),
    ],
    ids=lambda x: "" if isinstance(x, Graph) else x[:24],
)
def test_conv_shape_rules(graph: Graph, needle: str) -> None:
    reject(graph, "'cv'", needle)


def test_conv_needs_floats() -> None:
    g = conv("cv", (1, 1, 3, 3), (1, 1, 1, 1), (1, 1, 3, 3))
    g.tensors[2] = attrs.evolve(g.tensors[2], dtype=DataType.INT8)
    reject(g, "'cv'", "'w'", "floating point")


def test_rules_judge_the_resolved_dtype() -> None:
    """A builder graph leaves its conv output's dtype unset; the wire spells out the (integer) default.

    check_graph must give the same answer for both forms, or a graph passes in
    memory and fails once serialized.
    """
    g = sigdnn.Graph("intconv", io_dtype="int8")
    x = g.tensor("x", (1, 1, 3, 3), dtype="float32")
    w = g.tensor("w", (1, 1, 1, 1), dtype="float32")
    y = g.conv_fprop(x, w)  # virtual, dtype unset: falls back to io int8
    assert y.dtype is None
    with pytest.raises(GraphError, match="floating point"):
        check_graph(g)
    with pytest.raises(GraphError, match="floating point"):
        sigdnn.deserialize(g.serialize())


# -- limits as graph rules -----------------------------------------------------------


def test_limits_on_counts() -> None:
    g = ir(chain(), [pw("abs", "n1", 1, 2), pw("neg", "n2", 2, 3), pw("exp", "n3", 3, 4)])
    with pytest.raises(GraphError, match="4 tensors and 3 nodes"):
        check_graph(g, sigdnn.Limits(max_nodes=2))
    with pytest.raises(GraphError, match="declares 3 nodes"):
        sigdnn.deserialize(g.serialize(), limits=sigdnn.Limits(max_nodes=2))


def test_max_elements_names_the_tensor() -> None:
    g = ir([t(1, "big", (1000, 1000))], [])
    reject_limits = sigdnn.Limits(max_elements=999_999)
    with pytest.raises(GraphError, match=r"'big'.*exceed 999999 elements"):
        check_graph(g, reject_limits)
    check_graph(g, sigdnn.Limits(max_elements=1_000_000))


def test_strided_span_counts_toward_elements() -> None:
    """A padded layout's span, not its logical size, is what gets allocated."""
    g = ir([t(1, "padded", (2, 2), strides=(1000, 1))], [])
    with pytest.raises(GraphError, match="'padded'"):
        check_graph(g, sigdnn.Limits(max_elements=1000))
    check_graph(g, sigdnn.Limits(max_elements=1002))


def test_max_total_bytes_counts_every_tensor() -> None:
    g = ir([t(1, "a", (256,)), t(2, "b", (256,))], [])  # 1 KiB each
    check_graph(g, sigdnn.Limits(max_total_bytes=2048))
    with pytest.raises(GraphError, match=r"2048 bytes.*limit 2047.*'a'"):
        check_graph(g, sigdnn.Limits(max_total_bytes=2047))


# -- the builder API raises at the call that is wrong --------------------------------


def test_builder_refuses_at_the_call() -> None:
    g = sigdnn.Graph("api", io_dtype="float32")
    a = g.tensor("a", (2, 3))
    b = g.tensor("b", (4,))
    with pytest.raises(GraphError, match=r"'add_0'.*do not broadcast"):
        g.pointwise("add", a, b)
    with pytest.raises(GraphError, match="unknown pointwise mode 'frobnicate'"):
        g.pointwise("frobnicate", a)
    with pytest.raises(GraphError, match="not a tensor of graph"):
        g.pointwise("abs", sigdnn.Graph("other", io_dtype="float32").tensor("z", (2, 3)))
    with pytest.raises(GraphError, match=r"'mm'.*disagree on K"):
        g.matmul(a, g.tensor("c", (2, 3)), name="mm")
    with pytest.raises(GraphError, match=r"'a'.*dims"):
        g.tensor("a", (0, 3))
