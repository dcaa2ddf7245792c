"""pygraph's surface as cuDNN-frontend code meets it: every call made too early names itself, every keyword and
method sigdnn lacks raises NotImplementedError naming it, and the plan calls answer consistently."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import sigdnn
import sigdnn.cudnn as cudnn
from sigdnn.cudnn.graph import pygraph
from tests.cudnn.conftest import F64

MISSING = ("genstats", "adalayernorm", "adalayernorm_backward", "instancenorm", "instancenorm_backward",
           "block_scale_quantize", "block_scale_dequantize", "tensor_scalar", "moe_grouped_matmul",
           "moe_grouped_matmul_bwd", "sdpa_fp8", "sdpa_fp8_backward", "sdpa_mxfp8", "sdpa_mxfp8_backward",
           "create_execution_plan", "get_knobs_for_engine", "get_behavior_notes",
           "get_behavior_notes_for_plan_at_index", "deselect_numeric_notes", "deselect_behavior_notes",
           "select_numeric_notes", "select_behavior_notes", "deselect_workspace_greater_than",
           "populate_cuda_graph", "update_cuda_graph")  # fmt: skip


@pytest.mark.parametrize("method", MISSING)
def test_each_method_sigdnn_lacks_names_itself(graph: Any, method: str) -> None:
    assert getattr(pygraph, method).__name__ == method
    with pytest.raises(NotImplementedError, match=rf"^pygraph\.{method}\(\): not implemented by sigdnn"):
        getattr(graph, method)(1, key=2)


@pytest.mark.parametrize("keyword", ["sm_count", "sm_version", "kernel_cache", "device_property",
                                     "is_dynamic_shape_enabled", "is_override_shape_enabled"])  # fmt: skip
def test_each_keyword_sigdnn_lacks_names_itself(keyword: str) -> None:
    with pytest.raises(NotImplementedError, match=rf"pygraph\({keyword}=\.\.\.\): sigdnn does not support {keyword}"):
        cudnn.pygraph(**{keyword: 1})


def test_a_bad_data_type_names_the_keyword() -> None:
    for keyword in ("io_data_type", "intermediate_data_type", "compute_data_type"):
        with pytest.raises(sigdnn.SigdnnError, match=f"pygraph {keyword}"):
            cudnn.pygraph(**{keyword: 12345})


def test_the_default_name_and_a_handle_that_is_none(handle: Any) -> None:
    g = cudnn.pygraph(handle=None)
    assert repr(g) == "pygraph('test_graph', 0 ops, open)"
    with pytest.raises(sigdnn.UsageError, match=r"expected a handle from cudnn\.create_handle"):
        cudnn.pygraph(handle="cpu")


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda g: g.check_support(), "check_support()"),
        (lambda g: g.build_plans(), "build_plans()"),
        (lambda g: g.select_plan(0), "select_plan()"),
        (lambda g: g.deselect_engines([]), "deselect_engines()"),
        (lambda g: g.get_execution_plan_count(), "get_execution_plan_count()"),
        (lambda g: g.get_engine_count(), "get_execution_plan_count()"),
        (lambda g: g.get_plan_name_at_index(0), "get_plan_name_at_index()"),
        (lambda g: g.build_plan_at_index(0), "build_plan_at_index()"),
        (lambda g: g.get_workspace_size(), "get_workspace_size()"),
        (lambda g: g.get_workspace_size_plan_at_index(0), "get_workspace_size_plan_at_index()"),
        (lambda g: g.execute({}, None), "execute()"),
        (lambda g: g.execute_plan_at_index({}, None, 0), "execute_plan_at_index()"),
    ],
)
def test_a_plan_call_before_the_plans_exist_names_itself(graph: Any, call: Any, name: str) -> None:
    with pytest.raises(
        sigdnn.UsageError,
        match=re.escape(f"pygraph 'test_graph': {name}: call create_execution_plans() first"),
    ):
        call(graph)


def relu_graph(graph: Any) -> tuple[Any, Any]:
    x = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    y = graph.relu(x)
    assert y.get_is_virtual() and not x.get_is_virtual()  # an op's output is virtual until set_output
    return x, y.set_output(True).set_name("y")


def test_calls_before_a_plan_is_built_name_themselves(graph: Any) -> None:
    relu_graph(graph)
    graph.create_execution_plans()  # plans the graph itself
    assert graph.get_engine_count() == graph.get_execution_plan_count() >= 1
    for call, name in ((graph.get_workspace_size, "get_workspace_size()"), (lambda: graph.execute({}), "execute()")):
        with pytest.raises(sigdnn.UsageError, match=rf"^{name[:-2]}\(\): build_plans\(\)"):
            call()
    with pytest.raises(sigdnn.UsageError, match=r"get_plan_name_at_index\(5\)"):
        graph.get_plan_name_at_index(5)


def test_build_plan_at_index_selects_the_first_built(graph: Any) -> None:
    x, y = relu_graph(graph)
    graph.create_execution_plans()
    graph.build_plan_at_index(0)
    out = torch.empty(2, 3, dtype=torch.float64)
    graph.execute({x: -torch.ones(2, 3, dtype=torch.float64), y: out})
    assert out.tolist() == [[0.0] * 3] * 2
    assert graph._plans.selected == 0
    graph._plans.selected = 7  # another index already selected stays selected
    graph.build_plan_at_index(0)
    assert graph._plans.selected == 7


def test_build_runs_every_step_and_freezes_every_tensor(graph: Any) -> None:
    x, _ = relu_graph(graph)
    graph.build()
    assert repr(graph) == "pygraph('test_graph', 1 ops, planned)"
    with pytest.raises(sigdnn.GraphFrozenError, match="belongs to a planned graph"):
        x.set_name("z")
    with pytest.raises(sigdnn.GraphFrozenError, match="changing a tensor"):
        graph._changed()


def test_a_graph_without_outputs_and_one_that_does_not_check_are_refused(graph: Any) -> None:
    x = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    graph.relu(x)
    with pytest.raises(sigdnn.GraphError, match="no tensor is marked set_output"):
        graph.validate()
    with pytest.raises(sigdnn.UsageError, match="call validate"):
        graph.graph  # noqa: B018


def test_a_new_tensor_drops_what_validate_made(graph: Any) -> None:
    relu_graph(graph)
    graph.validate()
    made = graph.graph
    graph.tensor(name="w", dim=[1], stride=[1], data_type=F64)
    with pytest.raises(sigdnn.UsageError, match="call validate"):
        graph.graph  # noqa: B018
    graph.validate()
    assert graph.graph is not made


def test_query_tensor_attributes_of_uid(graph: Any) -> None:
    x, _ = relu_graph(graph)
    graph.validate()
    assert graph.query_tensor_attributes_of_uid(x.get_uid()) is x
    with pytest.raises(sigdnn.UsageError, match="no tensor has uid 999"):
        graph.query_tensor_attributes_of_uid(999)


def test_a_tensor_of_another_graph_is_refused(handle: Any) -> None:
    one = cudnn.pygraph(io_data_type=F64, handle=handle)
    two = cudnn.pygraph(io_data_type=F64, handle=handle)
    x = one.tensor(name="x", dim=[2], stride=[1], data_type=F64)
    with pytest.raises(sigdnn.GraphError, match=r"pygraph\.relu: tensor 'x' belongs to another graph"):
        two.relu(x)


def test_tensor_keywords_reach_the_tensor(graph: Any) -> None:
    offsets = graph.tensor(name="offsets", dim=[3, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    t = graph.tensor(name="q", dim=[2, 1, 4, 8], stride=[32, 32, 8, 1], data_type=F64, ragged_offset=offsets,
                     reordering_type=cudnn.tensor_reordering.NONE)  # fmt: skip
    assert t.get_ragged_offset() is offsets and not t.get_is_pass_by_value() and not t.get_is_virtual()
    with pytest.raises(NotImplementedError, match="set_reordering_type"):
        graph.tensor(name="r", dim=[1], stride=[1], reordering_type=cudnn.tensor_reordering.F16x16)


def test_tensor_like_of_a_cudnn_tensor_and_of_arrays(graph: Any) -> None:
    x = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    copy = graph.tensor_like(x, name="copy")
    assert (copy.get_dim(), copy.get_stride(), copy.get_name(), copy._owner) == ([2, 3], [3, 1], "copy", graph)
    assert not copy.get_is_virtual() and copy._uid == -1
    one = graph.tensor_like(torch.ones(1, dtype=torch.float64))
    many = graph.tensor_like(torch.ones(2, dtype=torch.float64))
    assert one.get_is_pass_by_value() and not many.get_is_pass_by_value()  # a CPU handle: one element is by value
    assert one._value == 1.0 and many._value is None and one.get_data_type() == F64
    assert not one.get_is_virtual() and not many.get_is_virtual()
    from sigdnn.cudnn.handle import Handle

    on_gpu = cudnn.pygraph(handle=Handle("gpu"))  # made directly: tensor_like needs no GPU
    assert on_gpu.tensor_like(torch.ones(1, dtype=torch.float64)).get_is_pass_by_value()  # a host tensor: by value
    with pytest.raises(sigdnn.UsageError, match=r"on a GPU handle is pass-by-value .* not dims \[2\]"):
        on_gpu.tensor_like(torch.ones(2, dtype=torch.float64))  # an IndexError before (#32)


def test_execute_on_another_backend_and_deserialize_arguments(graph: Any) -> None:
    relu_graph(graph)
    graph.build()
    from sigdnn.cudnn.handle import Handle

    with pytest.raises(sigdnn.UsageError, match="planned on the cpu handle"):
        graph.execute({}, None, handle=Handle("gpu"))  # made directly: a GPU handle needs no GPU to be refused
    for args in ((), (1, 2, 3)):
        with pytest.raises(TypeError, match=r"takes \(data\) or \(handle, data\)"):
            cudnn.pygraph().deserialize(*args)
    data = graph.serialize()
    loaded = cudnn.pygraph()
    loaded.deserialize(graph.handle, data)
    assert loaded.handle is graph.handle and loaded.get_execution_plan_count() >= 1


def test_the_key_is_63_bits(graph: Any) -> None:
    relu_graph(graph)
    graph.validate()
    import hashlib

    digest = hashlib.blake2b(graph.graph.serialize(), digest_size=8).digest()
    assert graph.key() == int.from_bytes(digest, "little") >> 1


def test_serialize_names_every_value_given_at_execute(graph: Any) -> None:
    x = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    a = graph.tensor(name="a", dim=[1, 1], stride=[1, 1], data_type=F64, is_pass_by_value=True)
    b = graph.tensor(name="b", dim=[1, 1], stride=[1, 1], data_type=F64, is_pass_by_value=True)
    graph.scale(graph.scale(x, a), b).set_output(True)
    with pytest.raises(NotImplementedError, match="pass-by-value 'a', 'b' get their value"):
        graph.serialize()


def test_an_output_without_a_data_type_reads_as_the_graph_gives_it_once_built() -> None:
    """As cuDNN-frontend's validate infers it: an output takes the io data type, a virtual one the intermediate."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)  # fmt: skip
    a = g.tensor(name="a", dim=[2, 3], stride=[3, 1], data_type=cudnn.data_type.BFLOAT16)
    b = g.tensor(name="b", dim=[2, 3], stride=[3, 1], data_type=cudnn.data_type.BFLOAT16)
    inner = g.add(a, b)
    out = g.relu(inner)
    out.set_output(True)
    assert out.get_data_type() is cudnn.data_type.NOT_SET
    g.build([cudnn.heur_mode.A])
    assert out.get_data_type() is cudnn.data_type.BFLOAT16
    assert inner.get_data_type() is cudnn.data_type.FLOAT
