"""Shape rules of matmul and conv_fprop: broken at the builder call, or on the wire.

Each violation must be a GraphError raised by the call that makes it, and
its message must name the node and the tensors involved, so a user can find
the line. A buffer whose stored dims contradict the rule (a hand-edited or
hostile graph) must be rejected by deserialize, not trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

import sigdnn
from sigdnn import GraphError
from sigdnn.graph.layout import packed_strides


def matmul(a_dims: Sequence[int], b_dims: Sequence[int]) -> Callable[[], Any]:
    g = sigdnn.Graph("rules", io_dtype="float16")
    a, b = g.tensor("a_in", dims=a_dims), g.tensor("b_in", dims=b_dims)
    return lambda: g.matmul(a, b, name="mm")


def conv(x_dims: Sequence[int], w_dims: Sequence[int], dtype: str = "float16", **kw: Any) -> Callable[[], Any]:
    g = sigdnn.Graph("rules", io_dtype=dtype)
    x, w = g.tensor("x_in", dims=x_dims), g.tensor("w_in", dims=w_dims)
    return lambda: g.conv_fprop(x, w, name="cv", **kw)


# -- matmul --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ((2, 3), (4, 5), r"disagree on K \(3 != 4\)"),
        ((5, 2, 3, 7), (2, 4, 7), r"\(7 != 4\)"),  # K is a's last dim, b's second to last
        ((2, 2, 3), (3, 3, 5), "do not broadcast"),
        ((2, 1, 4, 3), (5, 3, 3, 2), "do not broadcast"),
        ((3,), (3, 5), "rank >= 2"),
        ((2, 3), (3,), "rank >= 2"),
    ],
)
def test_matmul_rule_violations(a: tuple[int, ...], b: tuple[int, ...], why: str) -> None:
    with pytest.raises(GraphError, match=why) as err:
        matmul(a, b)()
    assert "node 'mm'" in str(err.value)
    assert "'a_in'" in str(err.value) and "'b_in'" in str(err.value)


@pytest.mark.parametrize(
    ("a", "b", "c"),
    [
        ((2, 3), (3, 5), (2, 5)),
        ((2, 1, 4, 3), (1, 5, 3, 2), (2, 5, 4, 2)),
        ((4, 3), (7, 3, 1), (7, 4, 1)),
        ((6, 1, 1, 2), (2, 9), (6, 1, 1, 9)),
    ],
)
def test_matmul_inferred_dims(a: tuple[int, ...], b: tuple[int, ...], c: tuple[int, ...]) -> None:
    assert matmul(a, b)().dims == c


# -- conv_fprop ----------------------------------------------------------------

X2, W2 = (1, 4, 6, 6), (6, 2, 3, 3)  # a valid 2-group 2D conv, varied below

CONV_VIOLATIONS: list[tuple[str, Callable[[], Any], str]] = [
    ("w rank < x rank", conv(X2, (6, 2, 3)), "w has rank 3, x has rank 4"),
    ("w rank > x rank", conv((1, 4, 6), W2), "w has rank 4, x has rank 3"),
    ("no spatial dims", conv((1, 4), (6, 2)), "0 spatial dims"),
    ("4 spatial dims", conv((1, 4, 3, 3, 3, 3), (6, 2, 1, 1, 1, 1)), "4 spatial dims"),
    ("C not divisible by w's C", conv((1, 5, 6, 6), W2), "channel count 2 does not divide x's 5"),
    ("K not divisible by groups", conv(X2, (5, 2, 3, 3)), "2 groups do not divide w's output channels 5"),
    ("padding length", conv(X2, W2, padding=(1,)), "pre_padding has 1 entries for 2 spatial dims"),
    ("pre_padding length", conv(X2, W2, pre_padding=(1, 1, 1)), "pre_padding has 3 entries"),
    ("post_padding length", conv(X2, W2, post_padding=(1,)), "post_padding has 1 entries"),
    ("stride length short", conv(X2, W2, stride=(1,)), "stride has 1 entries for 2 spatial dims"),
    ("stride length long", conv(X2, W2, stride=(1, 1, 1)), "stride has 3 entries"),
    ("dilation length", conv(X2, W2, dilation=(2,)), "dilation has 1 entries"),
    ("stride 0", conv(X2, W2, stride=(1, 0)), r"stride \[1, 0\].*must be >= 1"),
    ("negative stride", conv(X2, W2, stride=(-1, 1)), r"stride \[-1, 1\].*must be >= 1"),
    ("dilation 0", conv(X2, W2, dilation=(0, 1)), r"dilation \[0, 1\] must be >= 1"),
    ("negative padding", conv(X2, W2, padding=(0, -1)), "padding must be >= 0"),
    ("negative post_padding", conv(X2, W2, pre_padding=(2, 2), post_padding=(-1, 0)), "padding must be >= 0"),
    ("kernel > input", conv(X2, (6, 2, 7, 3)), "padded input 6 is smaller than the dilated kernel 7"),
    ("dilated kernel > input", conv(X2, W2, dilation=(1, 3)), "spatial dim 1: padded input 6 .* kernel 7"),
    ("kernel > padded input", conv(X2, (6, 2, 3, 9), padding=(0, 1)), "padded input 8 .* kernel 9"),
    ("3D kernel > input", conv((1, 4, 2, 6, 6), (6, 2, 3, 3, 3)), "spatial dim 0: padded input 2"),
]


@pytest.mark.parametrize(("make", "why"), [c[1:] for c in CONV_VIOLATIONS], ids=[c[0] for c in CONV_VIOLATIONS])
def test_conv_rule_violations(make: Callable[[], Any], why: str) -> None:
    with pytest.raises(GraphError, match=why) as err:
        make()
    assert "node 'cv'" in str(err.value)
    assert "x='x_in'" in str(err.value) and "w='w_in'" in str(err.value)


@pytest.mark.parametrize(
    ("x", "w", "kw", "y"),
    [
        (X2, W2, {}, (1, 6, 4, 4)),
        (X2, (6, 2, 7, 3), {"padding": (1, 0)}, (1, 6, 2, 4)),  # padding rescues a too-large kernel
        (X2, W2, {"pre_padding": (2, 0), "post_padding": (0, 3), "stride": (2, 3), "dilation": (1, 2)}, (1, 6, 3, 2)),
        ((2, 3, 10), (3, 1, 4), {"stride": (3,), "dilation": (2,)}, (2, 3, 2)),
        ((1, 2, 4, 5, 6), (4, 2, 2, 2, 2), {"padding": (1, 0, 2), "stride": (2, 1, 3)}, (1, 4, 3, 4, 3)),
    ],
)
def test_conv_inferred_dims(x: tuple[int, ...], w: tuple[int, ...], kw: dict[str, Any], y: tuple[int, ...]) -> None:
    assert conv(x, w, **kw)().dims == y


@pytest.mark.parametrize(
    ("layout", "x"),
    [
        ("NCHW", (8, 3, 9, 9)),
        ("NHWC", (8, 3, 9, 9)),
        ("NHWC", (8, 1, 28, 28)),  # C = 1: C and W both have stride 1
        ("NCHW", (8, 1, 28, 28)),
        ("NHWC", (8, 3, 1, 1)),
        ("NCHW", (8, 3, 1, 1)),
        ("NDHWC", (2, 1, 4, 4, 4)),
        ("NCDHW", (2, 1, 4, 4, 4)),
        ("NWC", (1, 1, 7)),
    ],
)
def test_conv_output_follows_x_layout(layout: str, x: tuple[int, ...]) -> None:
    """y's default strides are packed in x's layout, also where a size-1 dim makes x's ambiguous."""
    g = sigdnn.Graph("rules", io_dtype="float16")
    xt = g.tensor("x_in", dims=x, layout=layout)
    wt = g.tensor("w_in", dims=(16, x[1]) + (1,) * (len(x) - 2), layout=layout)
    y = g.conv_fprop(xt, wt, padding=(1,) * (len(x) - 2), name="cv")
    assert y.strides == g.tensor("like", dims=y.dims, layout=layout).strides


@pytest.mark.parametrize(
    ("dtypes", "port"),
    [({"x": "int8"}, "x"), ({"w": "int32"}, "w"), ({"x": "uint8", "w": "uint8"}, "x")],
)
def test_conv_integer_inputs(dtypes: dict[str, str], port: str) -> None:
    g = sigdnn.Graph("rules", io_dtype="float16")
    x = g.tensor("x_in", dims=X2, dtype=dtypes.get("x"))
    w = g.tensor("w_in", dims=W2, dtype=dtypes.get("w"))
    with pytest.raises(GraphError, match=f"port '{port}' \\(tensor '{port}_in'\\) must be floating point") as err:
        g.conv_fprop(x, w, name="cv")
    assert "node 'cv'" in str(err.value)


def test_conv_integer_io_dtype() -> None:
    with pytest.raises(GraphError, match=r"node 'cv'.*tensor 'x_in'.*must be floating point, is int8"):
        conv(X2, W2, dtype="int8")()


def test_conv_integer_output_rejected_on_the_wire() -> None:
    """An int32 y set after the call is caught when the graph is checked (deserialize)."""
    g = sigdnn.Graph("rules", io_dtype="float16")
    y = g.conv_fprop(g.tensor("x_in", dims=X2), g.tensor("w_in", dims=W2), name="cv")
    y.set_output(True).set_name("y_out").set_data_type("int32")
    with pytest.raises(GraphError, match=r"node 'cv'.*tensor 'y_out'.*must be floating point, is int32"):
        sigdnn.deserialize(g.serialize())


# -- tampered buffers ------------------------------------------------------------


def conv_graph() -> tuple[sigdnn.Graph, sigdnn.Tensor]:
    g = sigdnn.Graph("tamper_conv", io_dtype="float16", compute_dtype="float32")
    x = g.tensor("x_in", dims=(2, 4, 9, 9), layout="NHWC")
    w = g.tensor("w_in", dims=(6, 2, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(2, 2), name="cv")
    y.set_output(True).set_name("y_out")
    return g, y


def matmul_graph() -> tuple[sigdnn.Graph, sigdnn.Tensor]:
    g = sigdnn.Graph("tamper_mm", io_dtype="bfloat16", compute_dtype="float32")
    c = g.matmul(g.tensor("a_in", dims=(2, 1, 5, 7)), g.tensor("b_in", dims=(3, 7, 4)), name="mm")
    c.set_output(True).set_name("c_out")
    return g, c


def test_untampered_graphs_deserialize() -> None:
    for make in (conv_graph, matmul_graph):
        g, _ = make()
        assert sigdnn.deserialize(g.serialize()) == g


@pytest.mark.parametrize(
    ("make", "dims", "node", "out"),
    [
        (conv_graph, (2, 6, 4, 4), "cv", "y_out"),  # the rule gives 5x5
        (conv_graph, (2, 5, 5, 5), "cv", "y_out"),  # wrong K
        (conv_graph, (1, 6, 5, 5), "cv", "y_out"),  # wrong N
        (matmul_graph, (2, 3, 5, 5), "mm", "c_out"),  # wrong N
        (matmul_graph, (2, 1, 5, 4), "mm", "c_out"),  # batch not broadcast
        (matmul_graph, (3, 5, 4), "mm", "c_out"),  # batch rank dropped
    ],
)
def test_tampered_output_dims_rejected(
    make: Callable[[], tuple[sigdnn.Graph, sigdnn.Tensor]], dims: tuple[int, ...], node: str, out: str
) -> None:
    g, t = make()
    # Keep dims and strides consistent, so the one thing wrong is the shape rule.
    g.tensors[t.uid].set_dim(dims).set_stride(packed_strides(dims))
    data = g.serialize()
    assert sigdnn.deserialize(data, check=False).tensors[t.uid].dims == dims  # it parses; the rule rejects it
    with pytest.raises(GraphError, match=f"node '{node}'.*output '{out}' has dims") as err:
        sigdnn.deserialize(data)
    assert str(list(dims)) in str(err.value)
    with pytest.raises(GraphError, match=f"node '{node}'"):
        sigdnn.Executor().prepare(data)


@pytest.mark.parametrize(
    ("make", "port", "dims", "why"),
    [
        (conv_graph, "x_in", (2, 5, 9, 9), "does not divide"),
        (conv_graph, "w_in", (6, 2, 12, 3), "padded input 11 is smaller than the dilated kernel 12"),
        (conv_graph, "w_in", (6, 2, 3), "w has rank 3"),
        (matmul_graph, "b_in", (3, 6, 4), "disagree on K"),
        (matmul_graph, "a_in", (2, 2, 5, 7), "do not broadcast"),
    ],
)
def test_tampered_input_dims_rejected(
    make: Callable[[], tuple[sigdnn.Graph, sigdnn.Tensor]], port: str, dims: tuple[int, ...], why: str
) -> None:
    g, _ = make()
    g.tensor_by_name(port).set_dim(dims).set_stride(packed_strides(dims))
    with pytest.raises(GraphError, match=why):
        sigdnn.deserialize(g.serialize())


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"stride": (0, 2)}, "must be >= 1"),
        ({"dilation": (1, -1)}, "must be >= 1"),
        ({"pre_padding": (-1, 1)}, "padding must be >= 0"),
        ({"post_padding": (1,)}, "post_padding has 1 entries"),
        ({"stride": (2, 2, 2)}, "stride has 3 entries"),
    ],
)
def test_tampered_conv_attributes_rejected(change: dict[str, Any], why: str) -> None:
    g, _ = conv_graph()
    node = g.node_by_name("cv")
    node.op = attrs.evolve(node.op, **change)
    with pytest.raises(GraphError, match=f"node 'cv'.*{why}"):
        sigdnn.deserialize(g.serialize())
