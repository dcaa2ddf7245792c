"""Freeze after planning (pygraph and sigdnn's Graph), handles, deserialize, and what raises NotImplementedError."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sigdnn
import sigdnn.cudnn as cudnn

F64 = cudnn.data_type.DOUBLE


def planned(graph):
    x = torch.randn(2, 3, dtype=torch.float64)
    X = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    Y = graph.relu(X).set_output(True).set_name("y")
    graph.build_operation_graph()
    return X, Y, x


def test_a_planned_pygraph_refuses_every_change_and_stays_readable(graph):
    X, Y, _ = planned(graph)
    changes = [lambda: graph.relu(X), lambda: graph.tensor(dim=[1], stride=[1]), lambda: Y.set_name("z"),
               lambda: Y.set_dim([4, 4]), lambda: Y.set_stride([1, 2]), lambda: X.set_data_type(F64),
               lambda: Y.set_output(False), lambda: Y.set_uid(99), lambda: graph.tensor_like(X)]  # fmt: skip
    for change in changes:
        with pytest.raises(sigdnn.GraphFrozenError):
            change()
    assert (Y.get_name(), Y.get_dim(), Y.get_stride(), Y.get_is_virtual()) == ("y", [2, 3], [3, 1], False)
    with pytest.raises(sigdnn.GraphFrozenError):
        graph.graph.relu(graph.graph.tensors[X.get_uid()])
    with pytest.raises(sigdnn.GraphFrozenError, match="already planned"):
        graph.build_operation_graph()


def test_a_change_before_planning_drops_what_validate_inferred(graph):
    X = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    Y = graph.relu(X).set_output(True)
    graph.validate()
    assert Y.get_dim() == [2, 3]
    X.set_dim([4, 3]).set_stride([3, 1])
    graph.validate()
    assert Y.get_dim() == [4, 3]


def test_second_create_execution_plans_raises(graph):
    planned(graph)
    graph.create_execution_plans([cudnn.heur_mode.A])
    with pytest.raises(sigdnn.GraphFrozenError):
        graph.create_execution_plans([cudnn.heur_mode.A])


def test_sigdnn_graph_freezes_when_prepared_and_prepares_again_to_the_same_plan():
    g = sigdnn.Graph("g", io_dtype="float32")
    x = g.tensor("x", (2, 3))
    y = g.relu(x).set_output(True).set_name("y")
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    assert g.frozen and ex.prepare(g) is plan
    for change in (lambda: g.relu(x), lambda: y.set_name("z"), lambda: setattr(x, "dims", (4, 3)),
                   lambda: g.nodes.append(g.nodes[0]), lambda: g.tensors.pop(x.uid),
                   lambda: setattr(g.nodes[0], "compute_dtype", None), lambda: g.scalar("s", 1.0),
                   lambda: setattr(g, "io_dtype", "float16")):  # fmt: skip
        with pytest.raises(sigdnn.GraphFrozenError):
            change()
    assert [t.name for t in g.outputs] == ["y"] and len(g.nodes) == 1
    copy = sigdnn.deserialize(g.serialize())  # an open copy to change
    copy.relu(copy.tensor_by_name("y"))
    out = ex.execute(plan, {"x": np.ones((2, 3), np.float32)})
    assert out["y"].tolist() == [[1.0] * 3] * 2


def test_variant_pack_by_uid_and_pass_by_value_at_execute(graph):
    x = torch.randn(2, 3, dtype=torch.float64)
    X = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64, uid=7)
    S = graph.tensor(name="s", dim=[1, 1], stride=[1, 1], data_type=F64, is_pass_by_value=True)
    Y = graph.scale(X, S).set_output(True).set_uid(11)
    graph.build()
    assert (X.get_uid(), Y.get_uid()) == (7, 11)
    y = torch.empty(2, 3, dtype=torch.float64)
    with pytest.raises(sigdnn.VariantPackError, match="'s'"):
        graph.execute({7: x, 11: y}, None)
    graph.execute({7: x, 11: y, S: torch.full((1, 1), 3.0, dtype=torch.float64)}, None)
    torch.testing.assert_close(y, 3 * x)


def test_a_baked_parameter_may_not_change_at_execute(graph):
    x, s, b = (torch.randn(4, 5, dtype=torch.float64) for _ in range(3))
    X = graph.tensor_like(x)
    SC, BI = graph.tensor_like(s[:1]), graph.tensor_like(b[:1])
    eps = graph.tensor_like(torch.full((1, 1), 1e-3, dtype=torch.float64))
    Y, _, _ = graph.layernorm(cudnn.norm_forward_phase.INFERENCE, X, SC, BI, eps)
    Y.set_output(True)
    graph.build()
    y = torch.empty(4, 5, dtype=torch.float64)
    graph.execute({X: x, SC: s[:1], BI: b[:1], Y: y, eps: torch.full((1, 1), 1e-3, dtype=torch.float64)}, None)
    with pytest.raises(sigdnn.VariantPackError, match="built into graph"):
        graph.execute({X: x, SC: s[:1], BI: b[:1], Y: y, eps: torch.full((1, 1), 0.1, dtype=torch.float64)}, None)


def test_handles():
    assert cudnn.create_handle(device="cpu").backend == "reference"
    with pytest.raises(sigdnn.UsageError):
        cudnn.create_handle(device="tpu")
    with pytest.raises(NotImplementedError, match="set_stream"):
        cudnn.set_stream(cudnn.create_handle(device="cpu"), 0)
    with pytest.warns(RuntimeWarning, match="CPU reference"):
        fallback = cudnn.create_handle()  # no GPU on CI: falls back, saying why
    assert fallback.device == "cpu" and fallback.fell_back


@pytest.mark.gpu
def test_a_gpu_handle_runs_the_gpu_builders():
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    if gpu_unavailable_reason():
        pytest.skip(gpu_unavailable_reason())
    handle = cudnn.create_handle(device="gpu")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    x = torch.randn(64, 128, dtype=torch.float16, device="cuda")
    X = g.tensor_like(x)
    Y = g.relu(X).set_output(True)
    g.build([cudnn.heur_mode.A])
    y = torch.empty_like(x)
    g.execute({X: x, Y: y}, torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda"), handle=handle)
    torch.testing.assert_close(y, torch.relu(x))


def test_deserialize_cudnn_json_runs_by_uid(graph):
    doc = {
        "json_version": "2.0",
        "context": {"name": "j", "io_data_type": "DOUBLE", "intermediate_data_type": "DOUBLE",
                    "compute_data_type": "DOUBLE"},
        "tensors": [
            {"uid": 1, "name": "x", "data_type": "DOUBLE", "dim": [2, 2], "stride": [2, 1], "is_virtual": False},
            {"uid": 2, "name": "y", "data_type": "DOUBLE", "dim": [2, 2], "stride": [2, 1], "is_virtual": False},
        ],
        "nodes": [{"tag": "POINTWISE", "name": "r", "mode": "RELU_FWD", "inputs": {"IN_0": 1},
                   "outputs": {"OUT_0": 2}}],
    }  # fmt: skip
    g = cudnn.pygraph(handle=cudnn.create_handle(device="cpu"))
    g.deserialize(json.dumps(doc).encode())
    x, y = torch.tensor([[-1.0, 2.0], [3.0, -4.0]], dtype=torch.float64), torch.empty(2, 2, dtype=torch.float64)
    g.execute({1: x, 2: y}, None)
    torch.testing.assert_close(y, x.relu())
    assert g.query_tensor_attributes_of_uid(2).get_name() == "y"


@pytest.mark.parametrize(
    "call",
    [
        lambda g, t: g.sdpa(t, t, t, dropout=(0.1, 1, 2)),
        lambda g, t: g.sdpa(t, t, t, use_alibi_mask=True),
        lambda g, t: g.sdpa_backward(t, t, t, t, t, t, use_alibi_mask=True),
        lambda g, t: g.conv_fprop(t, t, convolution_mode=cudnn.convolution_mode.CONVOLUTION),
        lambda g, t: g.matmul(t, t, padding=1.0),
        lambda g, t: g.batchnorm(t, t, t, None, None, 1e-5, 0.1, peer_stats=[t]),
        lambda g, t: g.instancenorm(cudnn.norm_forward_phase.TRAINING, t, t, t, 1e-5),
        lambda g, t: g.populate_cuda_graph(None, {}, None, None),
        lambda g, t: t.set_alignment(16),
        lambda g, t: cudnn.pygraph(sm_count=8),
    ],
)
def test_what_sigdnn_cannot_honour_names_itself(graph, call):
    t = graph.tensor(name="t", dim=[1, 1, 4, 4], stride=[16, 16, 4, 1], data_type=F64)
    with pytest.raises(NotImplementedError) as e:
        call(graph, t)
    assert any(word in str(e.value) for word in ("pygraph", "tensor."))


def test_key_is_stable_and_tells_graphs_apart(handle):
    def made(dims):
        g = cudnn.pygraph(io_data_type=F64, compute_data_type=F64, handle=handle)
        g.relu(g.tensor(name="x", dim=dims, stride=[dims[1], 1], data_type=F64)).set_output(True)
        g.validate()
        return g.key()

    assert made([2, 3]) == made([2, 3]) != made([3, 3])
    code = "import sigdnn.cudnn as c; g = c.pygraph(io_data_type=c.data_type.DOUBLE, handle=c.create_handle(device='cpu'));"
    code += "g.relu(g.tensor(name='x', dim=[2, 3], stride=[3, 1])).set_output(True); g.validate(); print(g.key())"
    import subprocess
    import sys

    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert here == there and 0 <= int(here) < 2**63  # two processes, two string-hash seeds, one key
