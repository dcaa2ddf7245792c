"""Frontend edges a new user hit (#32): numbers as pointwise operands, one rank rule for norm scales, and
"did you mean" for a misspelled mode. Oracles: torch in float64 and hand-worked values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sigdnn
from sigdnn.errors import GraphError


def _run(g: sigdnn.Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return sigdnn.Executor("reference").run(g, inputs)


def test_a_plain_number_becomes_a_pass_by_value_scalar_of_the_compute_dtype():
    g = sigdnn.Graph("scale", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (2, 3))
    g.pointwise("mul", x, 0.5, name="half").set_output(True).set_name("y")
    g.pointwise("sub", 1, x).set_output(True).set_name("z")
    scalar = g.tensor_by_name("half_in_1")
    assert scalar.is_pass_by_value and scalar.dims == (1,) and str(scalar.dtype) == "float32"
    assert scalar.scalar() == 0.5
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = _run(sigdnn.deserialize(g.serialize()), {"x": xs})
    np.testing.assert_array_equal(out["y"], xs * np.float32(0.5))
    np.testing.assert_array_equal(out["z"], 1 - xs)


def test_a_number_in_integer_compute_is_an_integer_scalar():
    g = sigdnn.Graph("int", io_dtype="int32", compute_dtype="int32")
    g.pointwise("div", g.tensor("x", (4,)), 3).set_output(True).set_name("y")
    out = _run(g, {"x": np.array([7, -7, 9, 2], np.int32)})
    np.testing.assert_array_equal(out["y"], [2, -2, 3, 0])  # C division truncates toward zero


def test_a_number_the_scalar_dtype_cannot_hold_is_refused_naming_it():
    g = sigdnn.Graph("int", io_dtype="int8", compute_dtype="int8")
    with pytest.raises(GraphError, match="add_in_1"):
        g.pointwise("add", g.tensor("x", (4,)), 1000, name="add")


@pytest.mark.parametrize(
    ("build", "wrong", "right"),
    [
        (lambda g, x: g.pointwise("relu", x), "relu", "relu_fwd"),
        (lambda g, x: g.pointwise("sigmoid_fw", x), "sigmoid_fw", "sigmoid_fwd"),
        (lambda g, x: g.reduction(x, "ad", (1, 4, 1, 1)), "ad", "add"),
        (lambda g, x: g.reduction(x, "nrom2", (1, 4, 1, 1)), "nrom2", "norm2"),
        (lambda g, x: g.pooling(x, "maxx", window=(2, 2)), "maxx", "max"),
        (
            lambda g, x: g.pooling(x, "average_count_exclude", window=(2, 2)),
            "average_count_exclude",
            "average_count_exclude_pad",
        ),
    ],
)
def test_a_misspelled_mode_gets_did_you_mean(build, wrong, right):
    g = sigdnn.Graph("modes", io_dtype="float32")
    x = g.tensor("x", (2, 4, 6, 6))
    with pytest.raises(GraphError, match=rf"unknown (pointwise )?mode '{wrong}'; did you mean '{right}'\?"):
        build(g, x)


def test_a_mode_like_nothing_lists_the_choices_without_a_guess():
    g = sigdnn.Graph("modes", io_dtype="float32")
    with pytest.raises(GraphError, match=r"unknown pointwise mode 'zzzzzz'; expected one of add, sub") as caught:
        g.pointwise("zzzzzz", g.tensor("x", (2,)))
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize("rms", [False, True])
def test_a_scale_of_the_last_dim_normalizes_it_as_torch(rms):
    """x [B, S, D] with scale [D]: torch's layer_norm / rms_norm over the last dim, in float64."""
    rng = np.random.default_rng(3)
    xs, scale, bias = rng.standard_normal((2, 5, 8)), rng.standard_normal(8), rng.standard_normal(8)
    g = sigdnn.Graph("norm", io_dtype="float64", compute_dtype="float64")
    x, s, b = g.tensor("x", (2, 5, 8)), g.tensor("scale", (8,)), g.tensor("bias", (8,))
    if rms:
        y, stats = g.rmsnorm("training", x, s, b, epsilon=1e-5)
        want = torch.nn.functional.rms_norm(torch.from_numpy(xs), (8,), torch.from_numpy(scale), eps=1e-5)
        want = want + torch.from_numpy(bias)
    else:
        y, _, stats = g.layernorm("training", x, s, b, epsilon=1e-5)
        want = torch.nn.functional.layer_norm(
            torch.from_numpy(xs), (8,), torch.from_numpy(scale), torch.from_numpy(bias), 1e-5
        )
    y.set_output(True).set_name("y")
    stats.set_output(True).set_name("inv_variance")
    assert stats.dims == (2, 5, 1)
    out = _run(g, {"x": xs, "scale": scale, "bias": bias})
    np.testing.assert_allclose(out["y"], want.numpy(), rtol=1e-12, atol=1e-12)


def test_layernorm_backward_with_a_last_dim_scale_matches_torch_autograd():
    rng = np.random.default_rng(4)
    xs, scale, bias, dys = (rng.standard_normal(s) for s in ((3, 4, 6), (6,), (6,), (3, 4, 6)))
    xt = torch.from_numpy(xs).requires_grad_()
    st, bt = torch.from_numpy(scale).requires_grad_(), torch.from_numpy(bias).requires_grad_()
    torch.nn.functional.layer_norm(xt, (6,), st, bt, 1e-5).backward(torch.from_numpy(dys))
    mean = xs.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(xs.var(-1, keepdims=True) + 1e-5)
    g = sigdnn.Graph("lnb", io_dtype="float64", compute_dtype="float64")
    t = {
        n: g.tensor(n, d)
        for n, d in (("dy", (3, 4, 6)), ("x", (3, 4, 6)), ("scale", (6,)), ("m", (3, 4, 1)), ("i", (3, 4, 1)))
    }
    dx, dscale, dbias = g.layernorm_backward(t["dy"], t["x"], t["scale"], t["m"], t["i"])
    for name, out in (("dx", dx), ("dscale", dscale), ("dbias", dbias)):
        out.set_output(True).set_name(name)
    assert dscale.dims == (6,)
    got = _run(g, {"dy": dys, "x": xs, "scale": scale, "m": mean, "i": inv})
    np.testing.assert_allclose(got["dx"], xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["dscale"], st.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["dbias"], bt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("scale", "why"), [((4, 8), "trailing"), ((2, 5, 8, 1), "trailing"), ((3,), "trailing")])
def test_a_scale_that_does_not_align_with_x_s_trailing_dims_is_refused(scale, why):
    g = sigdnn.Graph("norm", io_dtype="float32")
    with pytest.raises(GraphError, match=rf"port 'scale' \(tensor 's'\) has dims .*aligned with x's {why} dims"):
        g.layernorm("training", g.tensor("x", (2, 5, 8)), g.tensor("s", scale), g.tensor("b", scale))
