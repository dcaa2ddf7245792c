"""resample / resample_backward against torch.nn.functional.interpolate (float64 autograd),
loops with exact rational sample positions, the adjoint identity, hand-worked cases and
central differences.

Nearest is a gather: equality forward, and backward with integer dy. Linear
blends at most 2^s inputs with non-negative weights that sum to 1, each
weight within an ulp: within (2^s + 4) * EPS * S, S the same resampling of
|x| (backward: of |dy|, plus one ulp per added term, at most O/I + 2 of them
per axis); against torch the factor doubles, and since torch (and sigdnn
when given scales) computes sample positions in float64, off by ~EPS *
position, the weights move by as much: see bound().
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import LAYOUTS, assert_within, check_gradient, import_torch, in_layout

from sigdnn.plan_builders.reference.math import resample, resample_backward

torch = import_torch()
F = torch.nn.functional
LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}
# (mode, coordinates) -> torch (mode, align_corners); asymmetric linear has no torch equivalent
TORCH = {
    ("nearest", "half_pixel"): ("nearest-exact", None),
    ("nearest", "asymmetric"): ("nearest", None),
    ("bilinear", "half_pixel"): ("linear", False),
    ("bilinear", "align_corners"): ("linear", True),
}


def torch_resample(x, dy, mode, coordinates, out, scales=None):
    t_mode, align = TORCH[(mode, coordinates)]
    if t_mode == "linear":
        t_mode = LINEAR[x.ndim - 2]
    xt = torch.tensor(x, requires_grad=True)
    kw = {"scale_factor": tuple(scales)} if scales else {"size": tuple(out)}
    y = F.interpolate(xt, mode=t_mode, align_corners=align, **kw)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy()


def taps(i_size: int, o_size: int, o: int, mode: str, coordinates: str) -> list[tuple[int, Fraction]]:
    """(input index, weight) pairs of output o along one axis, in exact rationals."""
    f = Fraction(i_size, o_size)
    if mode == "nearest":
        pos = (o + Fraction(1, 2)) * f if coordinates == "half_pixel" else o * f
        return [(min(math.floor(pos), i_size - 1), Fraction(1))]
    if coordinates == "half_pixel":
        pos = max((o + Fraction(1, 2)) * f - Fraction(1, 2), Fraction(0))
    elif coordinates == "align_corners":
        pos = Fraction(o * (i_size - 1), o_size - 1) if o_size > 1 else Fraction(0)
    else:
        pos = o * f
    low = min(math.floor(pos), i_size - 1)
    t = pos - math.floor(pos)
    return [(low, 1 - t), (min(low + 1, i_size - 1), t)]


def loop_resample(x, dy, mode, coordinates, out):
    """y and dx, each output from the product of its per-axis taps, weights exact."""
    y = np.zeros((*x.shape[:2], *out))
    dx = np.zeros(x.shape)
    for n, c, *o in itertools.product(range(x.shape[0]), range(x.shape[1]), *(range(e) for e in out)):
        per_axis = [taps(x.shape[2 + a], out[a], o[a], mode, coordinates) for a in range(len(out))]
        terms = []
        for combo in itertools.product(*per_axis):
            pos = (n, c, *(i for i, _ in combo))
            w = math.prod(wt for _, wt in combo)
            terms.append(float(w) * x[pos])
            dx[pos] += float(w) * dy[(n, c, *o)]
        y[(n, c, *o)] = math.fsum(terms)
    return y, dx


CASES = [
    ((2, 3, 5, 7), (9, 4)),
    ((1, 2, 4, 4), (8, 8)),
    ((1, 2, 6), (13,)),
    ((1, 1, 3, 4, 5), (5, 7, 2)),
    ((1, 2, 7, 5), (3, 3)),
    ((1, 1, 1, 5), (4, 1)),
]


def bound(x, dy, mode, coordinates, out, factor=1, float_positions=False):
    """(k, S of y, S of dx). float_positions: sample positions computed in float64 (torch's, or
    sigdnn's with given scales) are off by ~EPS * position, and a weight by as much, which errs by
    that times the unweighted inputs: + 2 * max size in k, + max |x| (|dy| times the most terms
    an input gathers) in S."""
    s = len(out)
    per_axis = [-(-o // i) + 2 for o, i in zip(out, x.shape[2:])]
    k = factor * (2**s + 4 + sum(per_axis))
    s_y = resample(np.abs(x), mode, (*x.shape[:2], *out), coordinates=coordinates)
    s_dx = resample_backward(np.abs(dy), x.shape, mode, coordinates=coordinates)
    if float_positions:
        k += 2 * max(x.shape[2:])
        s_y = s_y + np.max(np.abs(x))
        s_dx = s_dx + np.max(np.abs(dy)) * math.prod(per_axis)
    return k, s_y, s_dx


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "reversed"])
@pytest.mark.parametrize(("mode", "coordinates"), list(TORCH), ids=str)
@pytest.mark.parametrize(("shape", "out"), CASES, ids=str)
def test_matches_torch(shape, out, mode: str, coordinates: str, layout: str) -> None:
    rng = np.random.default_rng(sum(shape) + sum(out))
    x = rng.standard_normal(shape)
    dy = np.round(rng.standard_normal((*shape[:2], *out)) * 8)
    y_t, dx_t = torch_resample(x, dy, mode, coordinates, out)
    y = resample(in_layout(x, layout, 1), mode, (*shape[:2], *out), coordinates=coordinates)
    dx = resample_backward(in_layout(dy, layout, 2), shape, mode, coordinates=coordinates)
    if mode == "nearest":
        np.testing.assert_array_equal(y, y_t)
        np.testing.assert_array_equal(dx, dx_t)  # integer dy: sums exact
    else:
        k, s_y, s_dx = bound(x, dy, mode, coordinates, out, factor=2, float_positions=True)
        assert_within(y, y_t, s_y, k, "y")
        assert_within(dx, dx_t, s_dx, k, "dx")


@pytest.mark.parametrize("coordinates", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize(("shape", "out"), CASES, ids=str)
def test_matches_exact_loops(shape, out, coordinates: str) -> None:
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal(shape), rng.standard_normal((*shape[:2], *out))
    for mode in ("nearest", "bilinear"):
        if mode == "nearest" and coordinates == "align_corners":
            continue
        y_l, dx_l = loop_resample(x, dy, mode, coordinates, out)
        y = resample(x, mode, (*shape[:2], *out), coordinates=coordinates)
        dx = resample_backward(dy, shape, mode, coordinates=coordinates)
        k, s_y, s_dx = bound(x, dy, mode, coordinates, out)
        assert_within(y, y_l, s_y, k, f"{mode} y")
        assert_within(dx, dx_l, s_dx, k, f"{mode} dx")


def test_backward_is_the_adjoint() -> None:
    """<resample(x), dy> == <x, resample_backward(dy)> for every mode: the backward is the transpose."""
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 7, 9))
    for mode, coordinates in [*TORCH, ("bilinear", "asymmetric")]:
        lhs = float(np.sum(resample(x, mode, dy.shape, coordinates=coordinates) * dy))
        rhs = float(np.sum(x * resample_backward(dy, x.shape, mode, coordinates=coordinates)))
        scale = float(np.sum(np.abs(resample(np.abs(x), mode, dy.shape, coordinates=coordinates)) * np.abs(dy)))
        assert abs(lhs - rhs) <= 64 * 2.2e-16 * scale, (mode, coordinates)


def test_hand_worked() -> None:
    """[0, 1] to 4, half-pixel: positions -0.25 (clamped to 0), 0.25, 0.75, 1.25 -> [0, .25, .75, 1];
    align_corners: 0, 1/3, 2/3, 1; nearest half-pixel: inputs 0, 0, 1, 1; asymmetric linear 0, .5, 1, 1."""
    x = np.array([[[0.0, 1.0]]])
    assert resample(x, "bilinear", (1, 1, 4)).ravel().tolist() == [0.0, 0.25, 0.75, 1.0]
    assert_within(
        resample(x, "bilinear", (1, 1, 4), coordinates="align_corners").ravel(), np.array([0, 1 / 3, 2 / 3, 1]), 1.0, 2
    )
    assert resample(x, "nearest", (1, 1, 4)).ravel().tolist() == [0.0, 0.0, 1.0, 1.0]
    assert resample(x, "bilinear", (1, 1, 4), coordinates="asymmetric").ravel().tolist() == [0.0, 0.5, 1.0, 1.0]
    dy = np.array([[[1.0, 1.0, 1.0, 1.0]]])
    assert resample_backward(dy, x.shape, "bilinear").ravel().tolist() == [2.0, 2.0]


def test_positions_past_the_input_clamp_to_its_last_element() -> None:
    """Scales that ask for more than the output holds (0.5 over 4 outputs from 4 inputs) sample
    positions 0, 2, 4, 6: the last two clamp to input 3, for nearest and linear alike."""
    x = np.array([[[0.0, 1.0, 2.0, 3.0]]])
    assert resample(x, "nearest", (1, 1, 4), scales=(0.5,), coordinates="asymmetric").ravel().tolist() == [
        0.0,
        2.0,
        3.0,
        3.0,
    ]
    assert resample(x, "bilinear", (1, 1, 4), scales=(0.5,), coordinates="asymmetric").ravel().tolist() == [
        0.0,
        2.0,
        3.0,
        3.0,
    ]


def test_scales_follow_torch_scale_factor() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 5, 6))
    for sc in [(2.0, 1.5), (0.5, 0.75), (1.7, 2.3)]:
        out = tuple(math.floor(d * s) for d, s in zip(x.shape[2:], sc))
        dy = np.round(rng.standard_normal((1, 2, *out)) * 8)
        for mode, coordinates in [("nearest", "half_pixel"), ("nearest", "asymmetric"), ("bilinear", "half_pixel")]:
            y_t, dx_t = torch_resample(x, dy, mode, coordinates, out, scales=sc)
            y = resample(x, mode, (1, 2, *out), scales=sc, coordinates=coordinates)
            dx = resample_backward(dy, x.shape, mode, scales=sc, coordinates=coordinates)
            k, s_y, s_dx = bound(x, dy, mode, coordinates, out, factor=2, float_positions=True)
            assert_within(y, y_t, s_y, k, f"{sc} {mode} y")
            assert_within(dx, dx_t, s_dx, k, f"{sc} {mode} dx")


def test_gradients_are_central_differences() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 4, 3))
    dy = rng.standard_normal((1, 2, 7, 5))
    for coordinates in ("half_pixel", "align_corners", "asymmetric"):
        dx = resample_backward(dy, x.shape, "bilinear", coordinates=coordinates)
        check_gradient(
            lambda v, c=coordinates: float(np.sum(dy * resample(v, "bilinear", dy.shape, coordinates=c))), x, dx, rng
        )


def test_bad_arguments_are_refused() -> None:
    x = np.zeros((1, 1, 4))
    with pytest.raises(ValueError, match="resample mode"):
        resample(x, "cubic", (1, 1, 8))
    with pytest.raises(ValueError, match="align_corners"):
        resample(x, "nearest", (1, 1, 8), coordinates="align_corners")
    with pytest.raises(ValueError, match="scales"):
        resample(x, "nearest", (1, 1, 8), scales=(0.0,))
    with pytest.raises(ValueError, match="keep x's N, C"):
        resample(x, "nearest", (1, 2, 8))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    mode=st.sampled_from(["nearest", "bilinear"]),
    coordinates=st.sampled_from(["half_pixel", "align_corners", "asymmetric"]),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**31),
)
def test_generated_against_loops(data, mode: str, coordinates: str, layout: str, seed: int) -> None:
    if mode == "nearest" and coordinates == "align_corners":
        coordinates = "half_pixel"
    s = data.draw(st.integers(1, 3))
    size = tuple(data.draw(st.integers(1, 6)) for _ in range(s))
    out = tuple(data.draw(st.integers(1, 7)) for _ in range(s))
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), *size)
    rng = np.random.default_rng(seed)
    x, dy = rng.standard_normal(shape), rng.standard_normal((*shape[:2], *out))
    y = resample(in_layout(x, layout, seed), mode, (*shape[:2], *out), coordinates=coordinates)
    dx = resample_backward(in_layout(dy, layout, seed), shape, mode, coordinates=coordinates)
    y_l, dx_l = loop_resample(x, dy, mode, coordinates, out)
    k, s_y, s_dx = bound(x, dy, mode, coordinates, out)
    assert_within(y, y_l, s_y, k, "y")
    assert_within(dx, dx_l, s_dx, k, "dx")
