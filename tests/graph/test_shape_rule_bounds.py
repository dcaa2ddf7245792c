"""The shared shape rules (sigdnn.graph.ops.shapes) at their bounds, through the ops that state them.

Oracles: what the frameworks accept. torch's BatchNorm1d normalizes an [N, C]
input per channel (so rank 2 is the least batchnorm takes); batchnorm's
momentum is the weight of the new statistic, so 0 (keep the running value)
and 1 (replace it) are both meaningful and anything outside [0, 1] is not;
softmax over axis 0 is torch.softmax(x, dim=0).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sigdnn
from sigdnn import GraphError


def graph() -> sigdnn.Graph:
    return sigdnn.Graph("bounds", io_dtype="float32", compute_dtype="float32")


def test_batchnorm_takes_an_n_by_c_input_as_batchnorm1d_does() -> None:
    g = graph()
    x = g.tensor("x", (4, 3))
    params = [g.tensor(n, (1, 3)) for n in ("scale", "bias", "rm", "rv")]
    y, mean, inv_var, next_mean, next_var = g.batchnorm(x, *params, momentum=0.1)
    assert [t.dims for t in (y, mean, inv_var, next_mean, next_var)] == [(4, 3), (1, 3), (1, 3), (1, 3), (1, 3)]
    g2 = graph()
    x2 = g2.tensor("x", (4, 3))
    stats = [g2.tensor(n, (1, 3)) for n in ("mean", "inv_variance", "scale", "bias")]
    assert g2.batchnorm_inference(x2, *stats).dims == (4, 3)
    g3 = graph()
    dy, x3 = g3.tensor("dy", (4, 3)), g3.tensor("x", (4, 3))
    dx, dscale, dbias = g3.batchnorm_backward(dy, x3, *(g3.tensor(n, (1, 3)) for n in ("scale", "mean", "inv_var")))
    assert (dx.dims, dscale.dims, dbias.dims) == ((4, 3), (1, 3), (1, 3))


def test_batchnorm_of_rank_1_is_refused() -> None:
    g = graph()
    with pytest.raises(GraphError, match=r"has rank 1; it needs \[N, C, \.\.\.\] dims"):
        g.batchnorm(g.tensor("x", (4,)), g.tensor("scale", (1,)), g.tensor("bias", (1,)))


def test_rank_2_batchnorm_runs_as_torch_batchnorm1d() -> None:
    rng = np.random.default_rng(5)
    x, scale, bias = (rng.standard_normal(shape).astype(np.float32) for shape in ((6, 3), (1, 3), (1, 3)))
    g = graph()
    y, *_ = g.batchnorm(g.tensor("x", (6, 3)), g.tensor("scale", (1, 3)), g.tensor("bias", (1, 3)), epsilon=1e-5)
    y.set_output(True).set_name("y")
    got = sigdnn.Executor().run(g, {"x": x, "scale": scale, "bias": bias})["y"]
    want = torch.nn.functional.batch_norm(
        torch.from_numpy(x).double(), None, None, torch.from_numpy(scale[0]).double(),
        torch.from_numpy(bias[0]).double(), training=True, eps=1e-5,
    ).float()  # fmt: skip
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("momentum", [0.0, 1.0])
def test_momentum_may_be_0_or_1(momentum: float) -> None:
    g = graph()
    x = g.tensor("x", (2, 3, 4))
    params = [g.tensor(n, (1, 3, 1)) for n in ("scale", "bias", "rm", "rv")]
    assert g.batchnorm(x, *params, momentum=momentum)[3].dims == (1, 3, 1)


@pytest.mark.parametrize("momentum", [-0.001, 1.001])
def test_momentum_outside_0_to_1_is_refused(momentum: float) -> None:
    g = graph()
    x = g.tensor("x", (2, 3, 4))
    params = [g.tensor(n, (1, 3, 1)) for n in ("scale", "bias", "rm", "rv")]
    with pytest.raises(GraphError, match=r"momentum must be in \[0, 1\]"):
        g.batchnorm(x, *params, momentum=momentum)


def test_softmax_over_axis_0_is_torch_softmax_dim_0() -> None:
    x = np.random.default_rng(6).standard_normal((4, 3)).astype(np.float32)
    g = graph()
    y, _ = g.softmax(g.tensor("x", (4, 3)), axes=[0])
    y.set_output(True).set_name("y")
    got = sigdnn.Executor().run(g, {"x": x})["y"]
    want = torch.softmax(torch.from_numpy(x).double(), dim=0).float().numpy()
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-7)


def test_softmax_over_no_axis_is_refused() -> None:
    g = graph()
    with pytest.raises(GraphError, match="axes is empty; give at least one axis"):
        g.softmax(g.tensor("x", (4, 3)), axes=[])
