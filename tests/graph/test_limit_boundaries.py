"""check_graph at each limit: exactly at the limit passes, one past it is a GraphError naming what broke."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.graph import check_graph
from sigdnn.graph.limits import Limits
from sigdnn.graph.tensor import Tensor


def negs(n: int, size: int = 10) -> sigdnn.Graph:
    """x -> neg -> ... (n nodes); 2 + n tensors' worth of (size,) float32; each node's work is 2 * size."""
    g = sigdnn.Graph("chain", io_dtype="float32", intermediate_dtype="float32")
    t = g.tensor("x", (size,))
    for i in range(n):
        t = g.pointwise("neg", t, name=f"n{i}")
    t.set_output(True)
    return g


def loose(**kw: int) -> Limits:
    return Limits(**kw)


def test_tensor_and_node_counts() -> None:
    g = negs(3)  # 4 tensors, 3 nodes
    check_graph(g, loose(max_tensors=4, max_nodes=3))
    with pytest.raises(GraphError, match="has 4 tensors and 3 nodes"):
        check_graph(g, loose(max_tensors=3))
    with pytest.raises(GraphError, match="has 4 tensors and 3 nodes"):
        check_graph(g, loose(max_nodes=2))


def test_name_length_and_rank() -> None:
    g = sigdnn.Graph("n", io_dtype="float32")
    g.pointwise("neg", g.tensor("abcde", (1, 1, 2)), name="n").set_output(True).set_name("y")
    check_graph(g, loose(max_name_length=5, max_rank=3))
    with pytest.raises(GraphError, match=r"tensor 'abcde'.*name longer than 4"):
        check_graph(g, loose(max_name_length=4))
    with pytest.raises(GraphError, match=r"rank 3 outside 1\.\.2"):
        check_graph(g, loose(max_rank=2))


def test_a_stride_past_the_element_limit_even_on_a_dim_of_one() -> None:
    g = sigdnn.Graph("s", io_dtype="float32")
    g.tensors[1] = Tensor(1, "x", (1, 4), (100, 1))
    g.pointwise("neg", g.tensors[1], name="n").set_output(True)
    check_graph(g, loose(max_elements=100))
    with pytest.raises(GraphError, match=r"tensor 'x' .*stride 100 exceeds 99 elements"):
        check_graph(g, loose(max_elements=99))


def test_a_negative_stride_on_a_dim_of_one_is_refused() -> None:
    g = sigdnn.Graph("s", io_dtype="float32")
    g.tensors[1] = Tensor(1, "x", (1, 3), (-1, 1))
    g.pointwise("neg", g.tensors[1], name="n").set_output(True)
    with pytest.raises(GraphError, match=r"strides \[-1, 1\] must be >= 1"):
        check_graph(g)


def test_a_scalar_must_have_all_dims_one() -> None:
    g = sigdnn.Graph("v", io_dtype="float32")
    s = g.scalar("s", 2.0, "float32")
    g.pointwise("mul", g.tensor("x", (2,)), s, name="m").set_output(True)
    check_graph(g)
    s.dims, s.strides = (1, 2), (2, 1)
    with pytest.raises(GraphError, match=r"tensor 's'.*one float32 \(4 bytes\) with all dims 1"):
        check_graph(g)


def test_total_work_counts_every_node() -> None:
    g = negs(3, size=10)  # 3 nodes x 20 element operations
    check_graph(g, loose(max_work=60))
    with pytest.raises(
        GraphError, match=r"node 'n2': the graph's work reaches 60 element operations here \(limit 59\)"
    ):
        check_graph(g, loose(max_work=59))


def conv_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("c", io_dtype="float32")
    g.conv_fprop(g.tensor("x", (1, 2, 4, 4)), g.tensor("w", (2, 2, 3, 3)), padding=[1, 1], name="conv").set_output(True)
    return g


def test_convolution_scratch_counts_on_top_of_the_tensors() -> None:
    g = conv_graph()
    tensors = (32 + 36 + 32) * 4  # x, w, y in float32
    scratch = 2 * 6 * 6 * 8 + 8 * (32 + 36 + 32)  # the padded float64 copy of x, and x, w, y widened to float64
    check_graph(g, loose(max_total_bytes=tensors + scratch))
    with pytest.raises(GraphError, match=f"node 'conv': needs {scratch} bytes of scratch.*makes {tensors + scratch}"):
        check_graph(g, loose(max_total_bytes=tensors + scratch - 1))


def test_an_op_rule_raised_while_sizing_scratch_names_the_node() -> None:
    g = conv_graph()
    check_graph(g, loose(max_kernel_taps=9))
    with pytest.raises(GraphError, match=r"^node 'conv': kernel 'w' \[3, 3\] has 9 taps \(limit 8\)"):
        check_graph(g, loose(max_kernel_taps=8))


def test_an_elementwise_node_holds_no_scratch() -> None:
    """Pointwise nodes run block by block: their tensors alone must fit, to the byte."""
    g = sigdnn.Graph("pw", io_dtype="float32")
    g.pointwise("add", g.tensor("a", (4, 8)), g.tensor("b", (4, 8)), name="add").set_output(True)
    check_graph(g, loose(max_total_bytes=3 * 32 * 4))
    with pytest.raises(GraphError, match="tensors take 384 bytes"):
        check_graph(g, loose(max_total_bytes=3 * 32 * 4 - 1))
