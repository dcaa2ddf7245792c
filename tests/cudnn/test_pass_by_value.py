"""Pass-by-value parameters given at execute time (cuDNN-frontend's ``graph.tensor(..., is_pass_by_value=True)``
as epsilon and momentum, their values in the variant pack): the same built graph run with two values gives each
value's result, checked against torch's float64 CPU kernels; a value that is not one element of the tensor's data
type is refused naming the tensor (#32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sigdnn
import sigdnn.cudnn as cudnn
from sigdnn.cudnn.runtime_values import PassByValueError
from tests.cudnn.conftest import F64, close

F32 = cudnn.data_type.FLOAT


def scalar(graph: Any, name: str, data_type: Any = F64, uid: int = -1) -> Any:
    return graph.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=data_type,
                        is_pass_by_value=True, uid=uid)  # fmt: skip


def layernorm_graph(graph: Any, eps_type: Any = F64, uid: int = -1) -> tuple[Any, ...]:
    x = graph.tensor(name="x", dim=[4, 6, 1, 1], stride=[6, 1, 1, 1], data_type=F64)
    s = graph.tensor(name="s", dim=[1, 6, 1, 1], stride=[6, 1, 1, 1], data_type=F64)
    b = graph.tensor(name="b", dim=[1, 6, 1, 1], stride=[6, 1, 1, 1], data_type=F64)
    eps = scalar(graph, "eps", eps_type, uid)
    y, _, _ = graph.layernorm(cudnn.norm_forward_phase.INFERENCE, x, s, b, eps)
    y.set_output(True)
    graph.build()
    return x, s, b, eps, y


def data(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 6, 1, 1, dtype=torch.float64, generator=g) * 0.01  # variance ~1e-4: epsilon matters
    return (
        x,
        torch.randn(1, 6, 1, 1, dtype=torch.float64, generator=g),
        torch.randn(1, 6, 1, 1, dtype=torch.float64, generator=g),
    )


def test_one_layernorm_graph_runs_with_each_epsilon_it_is_given(graph: Any) -> None:
    X, S, B, EPS, Y = layernorm_graph(graph)
    x, s, b = data()
    results = []
    for eps in (1e-1, 1e-5, 1e-1):
        y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
        graph.execute({X: x, S: s, B: b, Y: y, EPS: torch.full((1, 1, 1, 1), eps, dtype=torch.float64)}, None)
        expect = F.layer_norm(x.reshape(4, 6), (6,), s.reshape(6), b.reshape(6), eps=eps)
        close(y.reshape(4, 6), expect)
        results.append(y)
    assert not torch.allclose(results[0], results[1], rtol=1e-3)  # the value changed the result
    assert torch.equal(results[0], results[2])


def test_batchnorm_epsilon_and_momentum_come_with_execute(graph: Any) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64, generator=g) * 0.02
    scale, bias = (torch.randn(1, 3, 1, 1, dtype=torch.float64, generator=g) for _ in range(2))
    rm, rv = torch.randn(1, 3, 1, 1, dtype=torch.float64, generator=g), torch.rand(1, 3, 1, 1, dtype=torch.float64)
    X, SC, BI, RM, RV = (graph.tensor_like(t) for t in (x, scale, bias, rm, rv))
    EPS, MOM = scalar(graph, "eps"), scalar(graph, "momentum")
    Y, MEAN, INV, NRM, NRV = graph.batchnorm(input=X, scale=SC, bias=BI, in_running_mean=RM, in_running_var=RV,
                                             epsilon=EPS, momentum=MOM)  # fmt: skip
    outputs = [Y, MEAN, INV, NRM, NRV]
    for t in outputs:
        t.set_output(True).set_data_type(F64)
    graph.build()
    for eps, momentum in ((1e-2, 0.25), (1e-6, 0.9)):
        made = [torch.empty(t.get_dim(), dtype=torch.float64) for t in outputs]
        pack = {X: x, SC: scale, BI: bias, RM: rm, RV: rv, EPS: np.full((1, 1, 1, 1), eps), MOM: momentum}
        graph.execute({**pack, **dict(zip(outputs, made))}, None)
        y, _, inv, nrm, nrv = made
        rm_t, rv_t = rm.reshape(-1).clone(), rv.reshape(-1).clone()
        expect = F.batch_norm(x, rm_t, rv_t, scale.reshape(-1), bias.reshape(-1), training=True, momentum=momentum,
                              eps=eps)  # fmt: skip
        close(y, expect)
        close(inv, 1 / torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False, keepdim=True) + eps))
        close(nrm, rm_t.reshape(1, 3, 1, 1))
        close(nrv, rv_t.reshape(1, 3, 1, 1))


@pytest.mark.parametrize("value", [np.float64(1e-3), np.full((), 1e-3), np.full((1,), 1e-3), 1e-3,
                                   torch.tensor(1e-3, dtype=torch.float64)])  # fmt: skip
def test_a_value_may_be_any_one_element_form_of_its_dtype(graph: Any, value: Any) -> None:
    X, S, B, _, Y = layernorm_graph(graph, uid=42)
    x, s, b = data()
    y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
    graph.execute({X: x, S: s, B: b, Y: y, 42: value}, None)  # keyed by the uid set on it
    close(y.reshape(4, 6), F.layer_norm(x.reshape(4, 6), (6,), s.reshape(6), b.reshape(6), eps=1e-3))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.full((1, 1, 1, 1), 1e-3, dtype=torch.float32), "gives a torch.float32 value, not float64"),
        (np.full((1, 2), 1e-3), r"takes one value \(shape \(\) or every dim 1\), got shape \[1, 2\]"),
        (torch.empty(0, dtype=torch.float64), r"got shape \[0\]"),
        ("0.001", "expected a number, a torch tensor or a NumPy array, got str"),
        (True, "expected a number"),
        (None, "got NoneType"),
    ],
)
def test_a_value_that_is_not_one_element_of_its_dtype_is_refused_naming_it(graph: Any, value: Any,
                                                                            message: str) -> None:  # fmt: skip
    X, S, B, EPS, Y = layernorm_graph(graph)
    x, s, b = data()
    y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
    with pytest.raises(PassByValueError, match=f"pass-by-value tensor 'eps' \\(float64\\).*{message}"):
        graph.execute({X: x, S: s, B: b, Y: y, EPS: value}, None)
    assert issubclass(PassByValueError, sigdnn.SigdnnError)


def test_a_float32_parameter_takes_float32_values(graph: Any) -> None:
    X, S, B, EPS, Y = layernorm_graph(graph, eps_type=F32)
    x, s, b = data()
    y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
    with pytest.raises(PassByValueError, match=r"'eps' \(float32\).*torch\.float64"):
        graph.execute({X: x, S: s, B: b, Y: y, EPS: torch.full((1,), 0.1, dtype=torch.float64)}, None)
    with pytest.raises(PassByValueError, match=r"'eps' \(float32\): 1e\+300 overflows float32"):
        graph.execute({X: x, S: s, B: b, Y: y, EPS: 1e300}, None)
    graph.execute({X: x, S: s, B: b, Y: y, EPS: torch.full((1,), 0.1, dtype=torch.float32)}, None)
    eps = float(np.float32(0.1))  # the value as the float32 the pack holds
    close(y.reshape(4, 6), F.layer_norm(x.reshape(4, 6), (6,), s.reshape(6), b.reshape(6), eps=eps))


def test_a_missing_or_doubled_value_is_refused_naming_the_tensor(graph: Any) -> None:
    X, S, B, EPS, Y = layernorm_graph(graph, uid=42)
    x, s, b = data()
    y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
    with pytest.raises(PassByValueError, match="'eps' need a value in the variant pack"):
        graph.execute({X: x, S: s, B: b, Y: y}, None)
    with pytest.raises(PassByValueError, match="gives pass-by-value 'eps' twice"):
        graph.execute({X: x, S: s, B: b, Y: y, EPS: 0.1, 42: 0.1}, None)
    with pytest.raises(sigdnn.VariantPackError, match="must be a dict"):
        graph.execute([(X, x)], None)


def test_each_plan_index_runs_with_the_values(graph: Any) -> None:
    X, S, B, EPS, Y = layernorm_graph(graph)
    x, s, b = data()
    for index in range(graph.get_execution_plan_count()):
        y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
        graph.execute_plan_at_index({X: x, S: s, B: b, Y: y, EPS: 0.05}, None, index)
        close(y.reshape(4, 6), F.layer_norm(x.reshape(4, 6), (6,), s.reshape(6), b.reshape(6), eps=0.05))


def test_values_met_again_reuse_their_plan_and_only_the_last_few_are_kept(graph: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from sigdnn.cudnn import graph as graph_module
    from sigdnn.cudnn.plans import Plans

    X, S, B, EPS, Y = layernorm_graph(graph)
    x, s, b = data()
    made = []
    real = Plans.realized
    monkeypatch.setattr(Plans, "realized", lambda self, g, i: made.append(i) or real(self, g, i))
    monkeypatch.setattr(graph_module, "VALUED_PLANS", 2)
    for eps in (0.1, 0.2, 0.1, 0.3, 0.1, 0.2):
        y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
        graph.execute({X: x, S: s, B: b, Y: y, EPS: eps}, None)
        close(y.reshape(4, 6), F.layer_norm(x.reshape(4, 6), (6,), s.reshape(6), b.reshape(6), eps=eps))
    assert len(made) == 4  # 0.1, 0.2, 0.3 made; 0.2 again after 0.3 and 0.1 pushed it out


def test_what_cannot_take_a_value_at_execute_says_so(graph: Any) -> None:
    x = graph.tensor(name="x", dim=[2, 4], stride=[4, 1], data_type=F64)
    s = graph.tensor(name="s", dim=[1, 4], stride=[4, 1], data_type=F64)
    untyped = graph.tensor(name="untyped", dim=[1, 1], stride=[1, 1], is_pass_by_value=True)
    graph.layernorm(cudnn.norm_forward_phase.INFERENCE, x, s, s, untyped)[0].set_output(True)
    with pytest.raises(sigdnn.GraphError, match="pass-by-value epsilon 'untyped' needs a data_type"):
        graph.validate()


def test_a_device_tensor_epsilon_is_not_honoured(graph: Any) -> None:
    x = graph.tensor(name="x", dim=[2, 4], stride=[4, 1], data_type=F64)
    s = graph.tensor(name="s", dim=[1, 4], stride=[4, 1], data_type=F64)
    device = graph.tensor(name="device", dim=[1, 1], stride=[1, 1], data_type=F64)
    graph.layernorm(cudnn.norm_forward_phase.INFERENCE, x, s, s, device)[0].set_output(True)
    with pytest.raises(NotImplementedError, match="epsilon 'device' is a device tensor"):
        graph.validate()


def test_serialize_refuses_a_value_given_at_execute(graph: Any) -> None:
    layernorm_graph(graph)
    with pytest.raises(NotImplementedError, match="pass-by-value 'eps' get their value at execute"):
        graph.serialize()


def test_rmsnorm_epsilon_and_sdpa_attn_scale_come_with_execute(graph: Any) -> None:
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=g) for _ in range(3))
    x, w = (
        torch.randn(3, 8, dtype=torch.float64, generator=g) * 0.01,
        torch.randn(1, 8, dtype=torch.float64, generator=g),
    )
    Q, K, V, X, W = (graph.tensor_like(t) for t in (q, k, v, x, w))
    SCALE, EPS = scalar(graph, "attn_scale"), graph.tensor(name="eps", dim=[1, 1], stride=[1, 1], data_type=F64,
                                                           is_pass_by_value=True)  # fmt: skip
    O_, _ = graph.sdpa(q=Q, k=K, v=V, attn_scale=SCALE, is_inference=True)
    Y, _ = graph.rmsnorm(cudnn.norm_forward_phase.INFERENCE, X, W, epsilon=EPS)
    for t in (O_, Y):
        t.set_output(True)
    graph.build()
    for scale, eps in ((0.1, 1e-2), (2.0, 1e-6)):
        o, y = torch.empty(1, 2, 5, 4, dtype=torch.float64), torch.empty(3, 8, dtype=torch.float64)
        graph.execute({Q: q, K: k, V: v, X: x, W: w, O_: o, Y: y, SCALE: scale, EPS: np.full((1, 1), eps)}, None)
        close(o, F.scaled_dot_product_attention(q, k, v, scale=scale))
        close(y, x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + eps) * w)


def test_a_parameter_that_is_also_a_port_reaches_both(graph: Any) -> None:
    """One pass-by-value tensor as layernorm's epsilon and as scale's factor: each execute's value feeds both."""
    x_t = graph.tensor(name="x", dim=[4, 6], stride=[6, 1], data_type=F64)
    s_t = graph.tensor(name="s", dim=[1, 6], stride=[6, 1], data_type=F64)
    eps = graph.tensor(name="eps", dim=[1, 1], stride=[1, 1], data_type=F64, is_pass_by_value=True, uid=0)
    y, _, _ = graph.layernorm(cudnn.norm_forward_phase.INFERENCE, x_t, s_t, s_t, eps)
    scaled = graph.scale(x_t, eps)
    for t in (y, scaled):
        t.set_output(True)
    graph.build()
    x, s = data()[0].reshape(4, 6), data()[1].reshape(1, 6)
    for key in (eps, 0):  # the tensor, or the uid set on it (0 is a uid)
        for value in (0.5, 1e-4):
            got_y, got_scaled = torch.empty(4, 6, dtype=torch.float64), torch.empty(4, 6, dtype=torch.float64)
            graph.execute({x_t: x, s_t: s, y: got_y, scaled: got_scaled, key: value}, None)
            close(got_y, F.layer_norm(x, (6,), s.reshape(6), s.reshape(6), eps=value))
            close(got_scaled, x * value)


def test_a_key_of_minus_one_names_no_parameter(graph: Any) -> None:
    X, S, B, _, Y = layernorm_graph(graph)  # eps has no uid set: get_uid() is -1 until it is bound
    x, s, b = data()
    y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
    with pytest.raises(sigdnn.VariantPackError, match="'eps' need a value"):
        graph.execute({X: x, S: s, B: b, Y: y, -1: 0.1}, None)


def test_serialize_refuses_a_port_whose_value_comes_with_execute(graph: Any) -> None:
    """cuDNN JSON holds a pass-by-value tensor's value: one given only at execute has none to write (#32: 0 was)."""
    x = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    s = graph.tensor(name="s", dim=[1, 1], stride=[1, 1], data_type=F64, is_pass_by_value=True)
    graph.scale(x, s).set_output(True)
    with pytest.raises(NotImplementedError, match="pass-by-value 's' get their value at execute"):
        graph.serialize()
    other = cudnn.pygraph(io_data_type=F64, compute_data_type=F64, handle=graph.handle)
    y = other.tensor(name="y", dim=[2, 3], stride=[3, 1], data_type=F64)
    other.scale(y, other.tensor_like(torch.full((1, 1), 2.0, dtype=torch.float64))).set_output(True)
    assert b'"pass_by_value"' in other.serialize()  # a value known when it was made is written


def test_a_builder_that_declines_a_value_given_at_execute_raises_the_cudnn_error() -> None:
    """The plan built is rebuilt with each value; a builder declining that value is cuDNN's not-supported error."""
    from sigdnn.cudnn.plans import cudnnGraphNotSupportedError
    from sigdnn.errors import NotSupported
    from sigdnn.registry.contracts import PlanBuilder
    from sigdnn.registry.registry import Registry

    registry = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    reference = registry.find("reference.layernorm")

    class Picky(PlanBuilder):
        name, engine_id, library, ops, priority = "test.picky_layernorm", 30201, "test", ("layernorm",), 9

        def build(self, node: Any, graph: Any, context: Any) -> Any:
            if node.op.epsilon > 0.6:
                raise NotSupported("epsilon above 0.6")
            return reference.build(node, graph, context)

    registry.register(Picky())
    handle = cudnn.create_handle(executor=sigdnn.Executor("reference", registry=registry))
    graph = cudnn.pygraph(io_data_type=F64, compute_data_type=F64, handle=handle)
    X, S, B, EPS, Y = layernorm_graph(graph)
    assert graph.get_plan_name_at_index(0) == "test.picky_layernorm"
    x, s, b = data()
    y = torch.empty(4, 6, 1, 1, dtype=torch.float64)
    graph.execute({X: x, S: s, B: b, Y: y, EPS: 0.25}, None)
    close(y.reshape(4, 6), F.layer_norm(x.reshape(4, 6), (6,), s.reshape(6), b.reshape(6), eps=0.25))
    with pytest.raises(cudnnGraphNotSupportedError, match=r"plan 0 \(test.picky_layernorm\) declined: epsilon above"):
        graph.execute({X: x, S: s, B: b, Y: y, EPS: 0.75}, None)
