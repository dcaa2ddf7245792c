"""How a pygraph's recorded calls become sigdnn's graph (sigdnn/cudnn/materialize.py): names, uids, dims, strides
and data types set on cuDNN tensors, pass-by-value ports, and the errors that name what is wrong."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import sigdnn
import sigdnn.cudnn as cudnn
from tests.cudnn.conftest import F64


def matrix(graph: Any, name: str, dims: tuple[int, int] = (2, 3), **kwargs: Any) -> Any:
    return graph.tensor(name=name, dim=list(dims), stride=[dims[1], 1], data_type=F64, **kwargs)


def test_an_op_name_names_its_node(graph: Any) -> None:
    graph.relu(matrix(graph, "x"), name="my_relu").set_output(True)
    graph.validate()
    assert [n.name for n in graph.graph.nodes] == ["my_relu"]


def test_a_uid_set_is_kept_and_the_tensor_holding_it_moves_past_the_top(graph: Any) -> None:
    """The uid set on y is the one sigdnn gave x: x moves to one past the highest uid (#32: the tensor was stored
    under the uid it moved to twice, so the graph did not check)."""
    x = matrix(graph, "x")
    y = graph.relu(x).set_output(True).set_name("y")
    graph.validate()
    taken, top = x.get_uid(), max(graph.graph.tensors)
    y.set_uid(taken)
    graph.validate()
    assert y.get_uid() == taken and x.get_uid() == top + 1
    assert graph.graph.nodes[0].op.in_0 == top + 1 and graph.graph.nodes[0].op.out_0 == taken
    out = sigdnn.Executor().run(graph.graph, {top + 1: np.full((2, 3), -1.0)})
    assert out["y"].tolist() == [[0.0] * 3] * 2


def test_uid_zero_is_a_uid(graph: Any) -> None:
    x = matrix(graph, "x", uid=5)
    graph.relu(x).set_output(True).set_uid(0)
    graph.validate()
    assert sorted(graph.graph.tensors) == [0, 5]


def test_two_tensors_given_one_uid_are_refused(graph: Any) -> None:
    x = matrix(graph, "x", uid=3)
    graph.relu(x).set_output(True).set_uid(3)
    with pytest.raises(sigdnn.GraphError, match="one uid is set on several tensors"):
        graph.validate()


def test_two_tensors_given_one_name_are_refused_naming_it(graph: Any) -> None:
    a, b = matrix(graph, "a"), matrix(graph, "b")
    graph.add(a, b).set_output(True).set_name("a")  # an output named after an input
    with pytest.raises(sigdnn.GraphError, match=r"tensor names \['a'\] are given to several tensors"):
        graph.validate()


def test_an_input_without_dims_is_refused(graph: Any) -> None:
    graph.relu(graph.tensor(name="x", dim=[], stride=[], data_type=F64)).set_output(True)
    with pytest.raises(sigdnn.GraphError, match="tensor 'x': no dims"):
        graph.validate()


def test_an_output_set_dim_must_match_and_set_stride_lays_it_out(graph: Any) -> None:
    x = matrix(graph, "x")
    y = graph.relu(x).set_output(True).set_dim([3, 2])
    with pytest.raises(sigdnn.GraphError, match=r"set_dim \[3, 2\] but the op gives \[2, 3\]"):
        graph.validate()
    y.set_dim([2, 3]).set_stride([1, 2, 3])
    with pytest.raises(sigdnn.GraphError, match="relu 'relu_fwd_0::out_0' output: 3 strides for 2 dims"):
        graph.validate()
    y.set_stride([1, 2])  # column-major
    graph.validate()
    assert y.get_stride() == [1, 2]
    graph.build()
    data = torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2
    out = torch.empty_strided((2, 3), (1, 2), dtype=torch.float64)
    graph.execute({x: data, y: out}, None)
    torch.testing.assert_close(out, data.clamp(min=0))


def test_a_pass_by_value_port_keeps_its_dims_and_takes_a_dtype(handle: Any) -> None:
    graph = cudnn.pygraph(io_data_type=F64, handle=handle)  # no compute data type: the io one
    x = matrix(graph, "x")
    s = graph.tensor(name="s", dim=[1, 1], stride=[], is_pass_by_value=True)
    y = graph.scale(x, s).set_output(True)
    graph.validate()
    made = graph.graph.tensor_by_name("s")
    assert (made.dims, made.strides, made.dtype) == ((1, 1), (1, 1), sigdnn.DataType.FLOAT64)
    graph.build()
    out = torch.empty(2, 3, dtype=torch.float64)
    graph.execute({x: torch.ones(2, 3, dtype=torch.float64), y: out, s: torch.full((1, 1), 2.5, dtype=torch.float64)})
    assert out.tolist() == [[2.5] * 3] * 2


def test_what_is_read_must_be_a_tensor_of_this_graph(graph: Any) -> None:
    with pytest.raises(sigdnn.GraphError, match="expected a cudnn tensor, got Tensor"):
        graph.relu(torch.ones(2, 3)).set_output(True)
        graph.validate()


def test_an_output_an_op_did_not_make_cannot_be_read(graph: Any) -> None:
    x = graph.tensor(name="x", dim=[2, 3, 2, 2], stride=[12, 4, 2, 1], data_type=F64)
    s = graph.tensor(name="s", dim=[1, 3, 1, 1], stride=[3, 1, 1, 1], data_type=F64)
    outputs = graph.batchnorm(x, s, s, None, None, 1e-5, None, name="bn")  # no running statistics: none out
    graph.relu(outputs[3], name="after").set_output(True)
    with pytest.raises(sigdnn.GraphError, match="op 'after': tensor '' is not a tensor of this graph"):
        graph.validate()


def test_tensors_without_a_uid_set_keep_theirs_when_another_moves(graph: Any) -> None:
    x, z = matrix(graph, "x"), matrix(graph, "z")
    y = graph.add(x, z).set_output(True)
    graph.validate()
    kept = z.get_uid()
    y.set_uid(x.get_uid())
    graph.validate()
    assert z.get_uid() == kept
