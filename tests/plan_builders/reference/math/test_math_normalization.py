"""batchnorm / layernorm / rmsnorm forward and backward against torch autograd (float64), an
mpmath oracle at 40 digits on tiny shapes, hand-worked cases and central differences.

Bounds, in EPS = 2^-52 times a magnitude S (math_oracles.assert_within):
each output is a short formula around reductions of M terms, so it is
within (M + 16) * EPS * S of the exact value, S being the sum of |terms| of
that formula (for y: (|x| + mean|x|) * inv * |scale| + |bias|; for dx the
same for its three terms). Against torch, whose own error is as large, the
factor doubles. The data is well conditioned (|mean| ~ std), except in the
test about the two-pass variance, which checks just that.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import LAYOUTS, assert_within, check_gradient, import_torch, in_layout, shapes

from sigdnn.plan_builders.reference.math import (
    batchnorm_backward,
    batchnorm_inference,
    batchnorm_train,
    layernorm,
    layernorm_backward,
    normalized_axes,
    rmsnorm,
    rmsnorm_backward,
)
from sigdnn.plan_builders.reference.math import normalization as norm

torch = import_torch()
mp = pytest.importorskip("mpmath")
F = torch.nn.functional
EPSILON = 1e-5


def channel_param(rng: np.random.Generator, x_shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal((1, x_shape[1]) + (1,) * (len(x_shape) - 2))


# -- oracles ---------------------------------------------------------------------------------------


def torch_batchnorm(x, scale, bias, dy, rmean, rvar, momentum):
    xt = torch.tensor(x, requires_grad=True)
    st_ = torch.tensor(scale.ravel(), requires_grad=True)
    bt = torch.tensor(bias.ravel(), requires_grad=True)
    rm, rv = torch.tensor(rmean.ravel()), torch.tensor(rvar.ravel())
    y = F.batch_norm(xt, rm, rv, st_, bt, training=True, momentum=momentum, eps=EPSILON)
    y.backward(torch.tensor(dy))
    return [t.detach().numpy() for t in (y, xt.grad, st_.grad, bt.grad, rm, rv)]


def torch_layer(x, scale, bias, dy, axes, rms=False):
    """torch layer_norm / rms_norm over ``axes`` (moved last), with autograd."""
    rest = [a for a in range(x.ndim) if a not in axes]
    perm = rest + list(axes)
    inv = np.argsort(perm)
    shape = tuple(x.shape[a] for a in axes)
    xt = torch.tensor(x.transpose(perm).copy(), requires_grad=True)
    st_ = torch.tensor(np.broadcast_to(scale, x.shape).transpose(perm)[(0,) * len(rest)].copy(), requires_grad=True)
    if rms:
        y = F.rms_norm(xt, shape, st_, EPSILON)
        bt = None
    else:
        bt = torch.tensor(np.broadcast_to(bias, x.shape).transpose(perm)[(0,) * len(rest)].copy(), requires_grad=True)
        y = F.layer_norm(xt, shape, st_, bt, EPSILON)
    y.backward(torch.tensor(dy.transpose(perm).copy()))
    back = lambda a: a.detach().numpy().transpose(inv)  # noqa: E731
    ds = st_.grad.numpy().reshape(np.shape(scale) if np.ndim(scale) == len(axes) else tuple(np.shape(scale)))
    return back(y), back(xt.grad), ds, (bt.grad.numpy().reshape(np.shape(bias)) if bt is not None else None)


def exact_norm(x, scale, bias, dy, reduced, center):
    """Forward and backward at 40 digits, straight from the definitions (object arrays of mpf)."""
    mp.mp.dps = 40
    X = np.vectorize(mp.mpf, otypes=[object])(x)
    S = np.broadcast_to(np.vectorize(mp.mpf, otypes=[object])(scale), x.shape)
    B = np.broadcast_to(np.vectorize(mp.mpf, otypes=[object])(bias), x.shape) if bias is not None else 0
    DY = np.vectorize(mp.mpf, otypes=[object])(dy)
    m = math.prod(x.shape[a] for a in reduced)

    def mean(a):
        return np.sum(a, axis=reduced, keepdims=True) / m

    mu = mean(X) if center else X * 0
    d = X - mu
    var = mean(d * d)
    inv = np.vectorize(lambda v: 1 / mp.sqrt(v + mp.mpf(EPSILON)), otypes=[object])(var)
    xh = d * inv
    y = xh * S + B
    g = DY * S
    dx = inv * (g - (mean(g) if center else 0) - xh * mean(g * xh))
    param_axes = tuple(i for i in range(x.ndim) if np.shape(scale)[i] == 1 and x.shape[i] != 1)
    ds = np.sum(DY * xh, axis=param_axes, keepdims=True)
    db = np.sum(DY, axis=param_axes, keepdims=True)
    as_float = np.vectorize(float, otypes=[np.float64])
    return {k: as_float(v) for k, v in dict(y=y, mean=mu, var=var, inv=inv, dx=dx, ds=ds, db=db, xh=xh).items()}


def magnitudes(x, scale, bias, dy, reduced, center):
    """S for y, dx, dscale, dbias: sums of |terms| of each formula (float64 is plenty for a bound)."""
    m = math.prod(x.shape[a] for a in reduced)
    mean_abs = np.sum(np.abs(x), axis=reduced, keepdims=True) / m
    mu = np.sum(x, axis=reduced, keepdims=True) / m if center else 0.0
    d = np.abs(x - mu) + (mean_abs if center else 0.0)
    inv = 1 / np.sqrt(np.sum((x - mu) ** 2, axis=reduced, keepdims=True) / m + EPSILON)
    s = np.abs(np.broadcast_to(scale, x.shape))
    xh = d * inv
    g = np.abs(dy) * s
    sy = xh * s + (np.abs(bias) if bias is not None else 0.0)
    sdx = inv * (g + np.sum(g, axis=reduced, keepdims=True) / m + xh * np.sum(g * xh, axis=reduced, keepdims=True) / m)
    param_axes = tuple(i for i in range(x.ndim) if np.shape(scale)[i] == 1 and x.shape[i] != 1)
    sds = np.sum(np.abs(dy) * xh, axis=param_axes, keepdims=True)
    sdb = np.sum(np.abs(dy), axis=param_axes, keepdims=True)
    return sy, sdx, sds, sdb, m, math.prod(x.shape[a] for a in param_axes)


# -- batchnorm ---------------------------------------------------------------------------------------

BN_SHAPES = [(4, 3, 5, 6), (2, 5, 7), (3, 4, 2, 3, 4), (1, 3, 1, 2), (5, 2), (2, 70, 3, 3), (2, 3, 70)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
def test_batchnorm_matches_torch(shape: tuple[int, ...], layout: str) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape) * 2 + rng.standard_normal()
    scale, bias = channel_param(rng, shape), channel_param(rng, shape)
    rmean, rvar = channel_param(rng, shape), np.abs(channel_param(rng, shape)) + 0.5
    dy = rng.standard_normal(shape)
    y_t, dx_t, ds_t, db_t, rm_t, rv_t = torch_batchnorm(x, scale, bias, dy, rmean, rvar, 0.1)
    xl, dyl = in_layout(x, layout, 1), in_layout(dy, layout, 2)
    y, mean, inv, rm, rv = batchnorm_train(xl, scale, bias, EPSILON, rmean, rvar, 0.1)
    dx, ds, db = batchnorm_backward(dyl, xl, scale, mean, inv)
    reduced = (0, *range(2, len(shape)))
    sy, sdx, sds, sdb, m, pm = magnitudes(x, scale, bias, dy, reduced, True)
    k = 2 * (m + 16)
    assert mean.shape == inv.shape == ds.shape == db.shape == rm.shape == scale.shape
    assert_within(y, y_t, sy, k, "y")
    assert_within(dx, dx_t, sdx, k, "dx")
    assert_within(ds.ravel(), ds_t, sds.ravel(), 2 * (pm + 16), "dscale")
    assert_within(db.ravel(), db_t, sdb.ravel(), 2 * (pm + 2), "dbias")
    assert_within(rm.ravel(), rm_t, np.abs(rmean).ravel() + np.abs(mean).ravel(), k, "running mean")
    assert_within(rv.ravel(), rv_t, rv_t, k, "running var")
    assert_within(batchnorm_inference(xl, mean, inv, scale, bias), y, sy, k, "inference")


@pytest.mark.parametrize("shape", [(3, 2, 2, 3), (2, 3, 5), (4, 1, 3)], ids=str)
def test_batchnorm_against_exact_values(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(5)
    x, dy = rng.standard_normal(shape) + 0.5, rng.standard_normal(shape)
    scale, bias = channel_param(rng, shape), channel_param(rng, shape)
    reduced = (0, *range(2, len(shape)))
    want = exact_norm(x, scale, bias, dy, reduced, center=True)
    sy, sdx, sds, sdb, m, pm = magnitudes(x, scale, bias, dy, reduced, True)
    y, mean, inv, _, _ = batchnorm_train(x, scale, bias, EPSILON)
    dx, ds, db = batchnorm_backward(dy, x, scale, mean, inv)
    assert_within(y, want["y"], sy, m + 16, "y")
    assert_within(mean, want["mean"], np.sum(np.abs(x), axis=reduced, keepdims=True) / m, m + 4, "mean")
    assert_within(inv, want["inv"], want["inv"], m + 16, "inv_variance")
    assert_within(dx, want["dx"], sdx, m + 16, "dx")
    assert_within(ds, want["ds"], sds, pm + 16, "dscale")
    assert_within(db, want["db"], sdb, pm + 2, "dbias")


def test_batchnorm_hand_worked() -> None:
    """One channel [0, 2], epsilon 0: mean 1, var 1 (unbiased 2), inv 1, y = [-1, 1] * 3 + 0.5;
    running stats with momentum 0.25 from (4, 6): mean 0.75*4 + 0.25*1, var 0.75*6 + 0.25*2."""
    x = np.array([0.0, 2.0]).reshape(2, 1)
    y, mean, inv, rm, rv = batchnorm_train(
        x, np.full((1, 1), 3.0), np.full((1, 1), 0.5), 0.0, np.full((1, 1), 4.0), np.full((1, 1), 6.0), 0.25
    )
    assert y.ravel().tolist() == [-2.5, 3.5]
    assert (mean.item(), inv.item(), rm.item(), rv.item()) == (1.0, 1.0, 3.25, 5.0)
    dx, ds, db = batchnorm_backward(np.array([1.0, 1.0]).reshape(2, 1), x, np.full((1, 1), 3.0), mean, inv)
    assert dx.ravel().tolist() == [0.0, 0.0] and ds.item() == 0.0 and db.item() == 2.0  # a shift of y


def test_batchnorm_single_element_channel() -> None:
    """M = 1: variance 0, inv = 1/sqrt(eps), y = bias; no unbiased variance, so NaN, not an error."""
    y, mean, inv, rm, rv = batchnorm_train(
        np.array([[[5.0]]]),
        np.ones((1, 1, 1)),
        np.full((1, 1, 1), 2.0),
        0.25,
        np.zeros((1, 1, 1)),
        np.ones((1, 1, 1)),
        0.5,
    )
    assert (y.item(), mean.item(), inv.item(), rm.item()) == (2.0, 5.0, 2.0, 2.5)
    assert math.isnan(rv.item())


def test_two_pass_variance_survives_a_large_mean() -> None:
    """x = 1e8 + [0, 1, 2, 3]: var 1.25 exactly; E[x^2] - E[x]^2 loses every digit in float64."""
    x = (1e8 + np.arange(4.0)).reshape(4, 1)
    naive = float(np.mean(x * x) - np.mean(x) ** 2)
    assert abs(naive - 1.25) > 0.1  # the trap is real
    _, _, inv, _, _ = batchnorm_train(x, np.ones((1, 1)), np.zeros((1, 1)), 0.0)
    assert abs(inv.item() - 1 / math.sqrt(1.25)) <= 4 * EPS_REL
    for fn in (lambda: layernorm(x.T, np.ones((1, 4)), np.zeros((1, 4)), 0.0, True)[2],):
        assert abs(fn().item() - 1 / math.sqrt(1.25)) <= 4 * EPS_REL


EPS_REL = float(np.finfo(np.float64).eps)


def test_batchnorm_gradients_are_central_differences() -> None:
    rng = np.random.default_rng(2)
    shape = (3, 2, 2, 3)
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    scale, bias = channel_param(rng, shape), channel_param(rng, shape)
    _, mean, inv, _, _ = batchnorm_train(x, scale, bias, EPSILON)
    dx, ds, db = batchnorm_backward(dy, x, scale, mean, inv)
    check_gradient(lambda v: float(np.sum(dy * batchnorm_train(v, scale, bias, EPSILON)[0])), x, dx, rng)
    check_gradient(lambda v: float(np.sum(dy * batchnorm_train(x, v, bias, EPSILON)[0])), scale, ds, rng)
    check_gradient(lambda v: float(np.sum(dy * batchnorm_train(x, scale, v, EPSILON)[0])), bias, db, rng)


# -- layernorm / rmsnorm -------------------------------------------------------------------------

# (x shape, scale shape): the normalized axes are where they agree
LN_CASES = [
    ((4, 6, 8), (1, 1, 8)),
    ((3, 4, 5, 6), (1, 4, 5, 6)),
    ((2, 64, 3), (1, 1, 3)),
    ((3, 5, 2, 2), (1, 5, 1, 1)),  # normalizes C only: batch axes on both sides
    ((2, 1, 3), (1, 1, 3)),  # a size-1 axis: normalized or batch, the same numbers
    ((5, 7), (7,)),  # lower-rank scale aligns right
    ((2, 3, 4), (2, 1, 4)),  # normalizes N and W, batch axis C in the middle
]


def _axes_of(x_shape, s_shape):
    return normalized_axes(x_shape, s_shape)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape", "s_shape"), LN_CASES, ids=str)
def test_layernorm_and_rmsnorm_match_torch(shape, s_shape, layout: str) -> None:
    rng = np.random.default_rng(sum(shape) + len(s_shape))
    x, dy = rng.standard_normal(shape) + 0.3, rng.standard_normal(shape)
    scale, bias = rng.standard_normal(s_shape), rng.standard_normal(s_shape)
    axes = _axes_of(shape, s_shape)
    full = (1,) * (len(shape) - len(s_shape)) + s_shape
    xl, dyl = in_layout(x, layout, 3), in_layout(dy, layout, 4)

    y, mean, inv = layernorm(xl, scale, bias, EPSILON, True)
    dx, ds, db = layernorm_backward(dyl, xl, scale, mean, inv)
    y_t, dx_t, ds_t, db_t = torch_layer(x, scale.reshape(full), bias.reshape(full), dy, axes)
    stat_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    assert mean.shape == inv.shape == stat_shape
    assert ds.shape == db.shape == s_shape
    sy, sdx, sds, sdb, m, pm = magnitudes(x, scale.reshape(full), bias.reshape(full), dy, axes, True)
    k = 2 * (m + 16)
    assert_within(y, y_t, sy, k, "layernorm y")
    assert_within(dx, dx_t, sdx, k, "layernorm dx")
    assert_within(ds, ds_t.reshape(s_shape), sds.reshape(s_shape), 2 * (pm + 16), "layernorm dscale")
    assert_within(db, db_t.reshape(s_shape), sdb.reshape(s_shape), 2 * (pm + 2), "layernorm dbias")

    y, inv = rmsnorm(xl, scale, None, EPSILON, True)
    dx, ds, db = rmsnorm_backward(dyl, xl, scale, inv, has_dbias=False)
    y_t, dx_t, ds_t, _ = torch_layer(x, scale.reshape(full), None, dy, axes, rms=True)
    assert inv.shape == stat_shape and db is None
    sy, sdx, sds, _, m, pm = magnitudes(x, scale.reshape(full), None, dy, axes, False)
    assert_within(y, y_t, sy, k, "rmsnorm y")
    assert_within(dx, dx_t, sdx, k, "rmsnorm dx")
    assert_within(ds, ds_t.reshape(s_shape), sds.reshape(s_shape), 2 * (pm + 16), "rmsnorm dscale")


@pytest.mark.parametrize(("shape", "s_shape"), [LN_CASES[0], LN_CASES[3], LN_CASES[6]], ids=str)
def test_layer_and_rms_against_exact_values(shape, s_shape) -> None:
    rng = np.random.default_rng(8)
    x, dy = rng.standard_normal(shape) - 0.4, rng.standard_normal(shape)
    scale, bias = rng.standard_normal(s_shape), rng.standard_normal(s_shape)
    axes = _axes_of(shape, s_shape)
    for center in (True, False):
        b = bias  # rmsnorm takes a bias too: y = x * inv * scale + bias
        want = exact_norm(x, scale, b, dy, axes, center)
        sy, sdx, sds, sdb, m, pm = magnitudes(x, scale, b, dy, axes, center)
        if center:
            y, mean, inv = layernorm(x, scale, b, EPSILON, True)
            dx, ds, db = layernorm_backward(dy, x, scale, mean, inv)
            assert_within(mean, want["mean"], np.sum(np.abs(x), axis=axes, keepdims=True) / m, m + 4, "mean")
        else:
            y, inv = rmsnorm(x, scale, b, EPSILON, True)
            dx, ds, db = rmsnorm_backward(dy, x, scale, inv, has_dbias=True)
        what = "layernorm" if center else "rmsnorm"
        assert_within(inv, want["inv"], want["inv"], m + 16, f"{what} inv_variance")
        assert_within(y, want["y"], sy, m + 16, f"{what} y")
        assert_within(dx, want["dx"], sdx, m + 16, f"{what} dx")
        assert_within(ds, want["ds"], sds, pm + 16, f"{what} dscale")
        assert_within(db, want["db"], sdb, pm + 2, f"{what} dbias")


def test_layernorm_inference_returns_no_stats_and_same_y() -> None:
    rng = np.random.default_rng(1)
    x, s, b = rng.standard_normal((3, 4)), rng.standard_normal((1, 4)), rng.standard_normal((1, 4))
    y, mean, inv = layernorm(x, s, b, EPSILON, False)
    assert mean is None and inv is None
    np.testing.assert_array_equal(y, layernorm(x, s, b, EPSILON, True)[0])
    y2, inv2 = rmsnorm(x, s, None, EPSILON, False)
    assert inv2 is None
    np.testing.assert_array_equal(y2, rmsnorm(x, s, None, EPSILON, True)[0])


def test_size_one_axes_normalized_or_not_give_the_same_numbers() -> None:
    """x (2, 1, 3), scale (1, 1, 3): axis 1 (size 1) counts as normalized; reading it as a batch
    axis (torch over the last axis only) gives the same y and the same stats shape (2, 1, 1)."""
    rng = np.random.default_rng(4)
    x, s, b = rng.standard_normal((2, 1, 3)), rng.standard_normal(3), rng.standard_normal(3)
    assert normalized_axes(x.shape, (1, 1, 3)) == normalized_axes(x.shape, (3,)) == (1, 2)
    y, mean, inv = layernorm(x, s.reshape(1, 1, 3), b.reshape(1, 1, 3), EPSILON, True)
    y_t = F.layer_norm(torch.tensor(x), (3,), torch.tensor(s), torch.tensor(b), EPSILON).numpy()
    assert mean.shape == inv.shape == (2, 1, 1)
    assert_within(y, y_t, np.abs(y_t) + np.abs(b) + 1, 16, "y")
    y2, _, inv2 = layernorm(x, s, b, EPSILON, True)  # a rank-1 scale aligns right
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(inv, inv2)


@pytest.mark.parametrize(("shape", "s_shape"), [LN_CASES[0], LN_CASES[3], LN_CASES[6]], ids=str)
def test_layer_and_rms_gradients_are_central_differences(shape, s_shape) -> None:
    rng = np.random.default_rng(6)
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    s, b = rng.standard_normal(s_shape), rng.standard_normal(s_shape)
    _, mean, inv = layernorm(x, s, b, EPSILON, True)
    dx, ds, db = layernorm_backward(dy, x, s, mean, inv)
    check_gradient(lambda v: float(np.sum(dy * layernorm(v, s, b, EPSILON, False)[0])), x, dx, rng)
    check_gradient(lambda v: float(np.sum(dy * layernorm(x, v, b, EPSILON, False)[0])), s, ds, rng)
    check_gradient(lambda v: float(np.sum(dy * layernorm(x, s, v, EPSILON, False)[0])), b, db, rng)
    _, inv = rmsnorm(x, s, b, EPSILON, True)
    dx, ds, db = rmsnorm_backward(dy, x, s, inv, has_dbias=True)
    check_gradient(lambda v: float(np.sum(dy * rmsnorm(v, s, b, EPSILON, False)[0])), x, dx, rng)
    check_gradient(lambda v: float(np.sum(dy * rmsnorm(x, v, b, EPSILON, False)[0])), s, ds, rng)
    check_gradient(lambda v: float(np.sum(dy * rmsnorm(x, s, v, EPSILON, False)[0])), b, db, rng)


# -- blocks: tiny blocks force many blocks, both strategies, on the worker pool -----------------


@pytest.mark.parametrize(("block", "inner"), [(4, 64), (7, 1), (50, 1000)])
def test_any_blocking_gives_the_same_results(block: int, inner: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    x, dy = rng.standard_normal((5, 6, 3, 4)), rng.standard_normal((5, 6, 3, 4))
    s, b = channel_param(rng, x.shape), channel_param(rng, x.shape)
    ls, lb = rng.standard_normal((1, 1, 3, 4)), rng.standard_normal((1, 1, 3, 4))

    def run(xv: np.ndarray, dv: np.ndarray) -> list[np.ndarray]:
        y, mean, inv, _, _ = batchnorm_train(xv, s, b, EPSILON)
        out = [y, mean, inv, *batchnorm_backward(dv, xv, s, mean, inv), batchnorm_inference(xv, mean, inv, s, b)]
        y, mean, inv = layernorm(xv, ls, lb, EPSILON, True)
        out += [y, mean, inv, *layernorm_backward(dv, xv, ls, mean, inv)]
        y, inv = rmsnorm(xv, ls, lb, EPSILON, True)
        out += [y, inv, *rmsnorm_backward(dv, xv, ls, inv, True)]
        return out

    want = run(x, dy)
    monkeypatch.setattr(norm, "_BLOCK_ELEMENTS", block)
    monkeypatch.setattr(norm, "_MIN_INNER", inner)
    for layout in ("contiguous", "channels_last", "permuted"):
        got = run(in_layout(x, layout, 5), in_layout(dy, layout, 6))
        for i, (g, w) in enumerate(zip(got, want)):
            assert_within(g, w, np.abs(w) + 1.0, 64, f"output {i} {layout} block {block}")


# -- generated cases -----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes([2, 3, 4, 5]), data=st.data(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_generated_layernorm_and_batchnorm(shape, data, layout: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    s_shape = tuple(d if keep else 1 for d, keep in zip(shape, mask))
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    scale, bias = rng.standard_normal(s_shape), rng.standard_normal(s_shape)
    axes = _axes_of(shape, s_shape)
    xl, dyl = in_layout(x, layout, seed), in_layout(dy, layout, seed + 1)
    y, mean, inv = layernorm(xl, scale, bias, EPSILON, True)
    dx, ds, db = layernorm_backward(dyl, xl, scale, mean, inv)
    y_t, dx_t, ds_t, db_t = torch_layer(x, scale, bias, dy, axes) if axes else (None,) * 4
    sy, sdx, sds, sdb, m, pm = magnitudes(x, scale, bias, dy, axes, True)
    if axes:
        assert_within(y, y_t, sy, 2 * (m + 16), "y")
        assert_within(dx, dx_t, sdx, 2 * (m + 16), "dx")
        assert_within(ds, ds_t.reshape(s_shape), sds, 2 * (pm + 16), "dscale")
        assert_within(db, db_t.reshape(s_shape), sdb, 2 * (pm + 2), "dbias")
    else:  # nothing normalized: each element is its own group, y = bias, dx = 0
        assert_within(y, np.broadcast_to(bias, shape), np.abs(bias) + 1, 4, "y")
        assert not dx.any()
    if len(shape) >= 2:
        cs, cb = channel_param(rng, shape), channel_param(rng, shape)
        y, mean, inv, _, _ = batchnorm_train(xl, cs, cb, EPSILON)
        dx, ds, db = batchnorm_backward(dyl, xl, cs, mean, inv)
        want = exact_norm(x, cs, cb, dy, (0, *range(2, len(shape))), True)
        sy, sdx, sds, sdb, m, pm = magnitudes(x, cs, cb, dy, (0, *range(2, len(shape))), True)
        assert_within(y, want["y"], sy, m + 16, "bn y")
        assert_within(dx, want["dx"], sdx, m + 16, "bn dx")
        assert_within(ds, want["ds"], sds, pm + 16, "bn dscale")


def test_parallel_map_keeps_order_and_nests_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Results in item order; a call from inside a block runs inline rather than waiting on the pool."""
    from sigdnn.plan_builders.reference.math import parallel
    from sigdnn.plan_builders.reference.math.parallel import parallel_map

    monkeypatch.setattr(parallel, "workers", lambda: 4)  # four runs of items even on two cores
    assert parallel_map(lambda i: i * i, range(11)) == [i * i for i in range(11)]
    inner = parallel_map(lambda i: parallel_map(lambda j: (i, j), range(3)), range(7))
    assert inner == [[(i, j) for j in range(3)] for i in range(7)]
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):  # the caller's error state reaches the workers
        parallel_map(lambda v: np.float64(1.0) / v, [np.float64(1.0), np.float64(0.0)])


@pytest.mark.parametrize("order", ["C", "F"])
def test_layernorm_hand_worked_with_a_scale_along_two_normalized_elements(order: str) -> None:
    """Rows [1, 3], [0, 2], [4, 6], epsilon 0: d = [-1, 1], var 1, inv 1, so every row's y is
    [-1, 1] * [2, 5] + [0.5, -0.5] = [-1.5, 4.5]: the scale varies along the normalized axis, each element
    takes its own, also when that axis is the outer one in memory (order F)."""
    x = np.array([[1.0, 3.0], [0.0, 2.0], [4.0, 6.0]], order=order)
    y, mean, inv = layernorm(x, np.array([[2.0, 5.0]]), np.array([[0.5, -0.5]]), 0.0, True)
    assert y.tolist() == [[-1.5, 4.5]] * 3
    assert mean.ravel().tolist() == [2.0, 1.0, 5.0] and inv.ravel().tolist() == [1.0] * 3


@pytest.mark.parametrize("given", [(True, False, True), (False, True, True), (True, True, False)])
def test_batchnorm_running_stats_need_all_three_inputs(given: tuple[bool, bool, bool]) -> None:
    """The running outputs are None unless running mean, running variance and momentum are all given."""
    x = np.array([0.0, 2.0]).reshape(2, 1)
    rm, rv, momentum = (v if on else None for v, on in zip((np.full((1, 1), 4.0), np.full((1, 1), 6.0), 0.25), given))
    y, _, _, next_mean, next_var = batchnorm_train(x, np.ones((1, 1)), np.zeros((1, 1)), 0.0, rm, rv, momentum)
    assert y.ravel().tolist() == [-1.0, 1.0] and next_mean is None and next_var is None
