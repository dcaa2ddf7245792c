"""pooling, pooling_backward and resample nodes end to end.

Oracles: torch float64 (max_pool / avg_pool with count_include_pad, their
autograd, F.interpolate) where torch has the configuration, and a brute-force
loop over windows for asymmetric padding (which torch lacks).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from graph_runs import close, normal, outputs, run, torch64

import sigdnn

torch = pytest.importorskip("torch")
F = torch.nn.functional

MODES = ("max", "average_count_include_pad", "average_count_exclude_pad")


def torch_pool(x, mode: str, window, stride, padding):
    spatial = x.ndim - 2
    if mode == "max":
        f = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[spatial]
        return f(x, window, stride, padding)
    f = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[spatial]
    return f(x, window, stride, padding, count_include_pad=mode == "average_count_include_pad")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("dims", "window", "stride", "padding", "last"),
    [
        ((2, 3, 7, 6), (3, 2), (2, 1), (1, 1), True),
        ((1, 2, 9), (4,), (3,), (2,), False),
        ((1, 2, 4, 5, 5), (2, 3, 2), (2, 2, 1), (1, 0, 1), True),
    ],
)
def test_pooling_and_backward_match_torch(mode: str, dims, window, stride, padding, last: bool) -> None:
    rng = np.random.default_rng(len(dims) + len(mode))
    x = normal(rng, dims, last)
    g = sigdnn.Graph("pool", io_dtype="float64")
    xt = g.tensor("x", dims)
    y = g.pooling(xt, mode, window, stride, padding, name="pool")
    dyt = g.tensor("dy", y.dims)
    dx = g.pooling_backward(dyt, xt, mode, window, stride, padding, name="pool_bwd")
    outputs(g, {"y": y, "dx": dx})
    dy = rng.standard_normal(y.dims)
    got = run(g, {"x": x, "dy": dy})
    xw = torch64(x, True)
    want = torch_pool(xw, mode, window, stride, padding)
    close(got["y"], want)
    want.backward(torch64(dy))
    close(got["dx"], xw.grad)


def loop_pool(x: np.ndarray, mode: str, window, pre, post, stride) -> np.ndarray:
    """Brute force: every output element from its window's real elements."""
    n, c, *size = x.shape
    out = [(s + a + b - r) // st + 1 for s, a, b, r, st in zip(size, pre, post, window, stride)]
    y = np.empty((n, c, *out))
    for o in itertools.product(*(range(e) for e in out)):
        taps = [
            tuple(oi * st + ri - a for oi, st, ri, a in zip(o, stride, r, pre))
            for r in itertools.product(*(range(w) for w in window))
        ]
        real = [t for t in taps if all(0 <= ti < s for ti, s in zip(t, size))]
        values = np.stack([x[(slice(None), slice(None), *t)] for t in real], axis=-1)
        if mode == "max":
            y[(slice(None), slice(None), *o)] = values.max(axis=-1)
        else:
            count = len(taps) if mode == "average_count_include_pad" else len(real)
            y[(slice(None), slice(None), *o)] = values.sum(axis=-1) / count
    return y


@pytest.mark.parametrize("mode", MODES)
def test_pooling_asymmetric_padding_against_loops(mode: str) -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 6, 5))
    kw = {"pre_padding": (2, 0), "post_padding": (0, 1)}
    g = sigdnn.Graph("pool", io_dtype="float64")
    outputs(g, {"y": g.pooling(g.tensor("x", x.shape), mode, (3, 2), (2, 2), **kw, name="pool")})
    got = run(g, {"x": x})
    close(got["y"], loop_pool(x, mode, (3, 2), (2, 0), (0, 1), (2, 2)))


@pytest.mark.parametrize("mode", MODES)
def test_a_stride_no_window_takes_is_never_multiplied_out(mode: str) -> None:
    """A stride along an axis of one output is never applied (the fuzzer's case 19,710,794: a stride of 2^62
    overflowed the reference's window view); forward against the loops, backward equal to the same pooling's
    with that stride 1, which the op's definition makes the same pooling."""
    rng = np.random.default_rng(62)
    x = rng.standard_normal((2, 3, 1, 5))
    dy = rng.standard_normal((2, 3, 1, 2))
    got = []
    for stride in ((2**62, 2), (1, 2)):
        g = sigdnn.Graph("pool", io_dtype="float64")
        xt = g.tensor("x", x.shape)
        y = g.pooling(xt, mode, (1, 2), stride, (0, 0), name="pool")
        dx = g.pooling_backward(g.tensor("dy", y.dims), xt, mode, (1, 2), stride, (0, 0), name="pool_bwd")
        outputs(g, {"y": y, "dx": dx})
        got.append(run(g, {"x": x, "dy": dy}))
    close(got[0]["y"], loop_pool(x, mode, (1, 2), (0, 0), (0, 0), (1, 2)))
    np.testing.assert_array_equal(got[0]["dx"], got[1]["dx"])


@pytest.mark.parametrize(
    ("mode", "coordinates", "torch_kw"),
    [
        ("nearest", "asymmetric", {"mode": "nearest"}),
        ("nearest", "half_pixel", {"mode": "nearest-exact"}),
        ("bilinear", "half_pixel", {"mode": "bilinear", "align_corners": False}),
        ("bilinear", "align_corners", {"mode": "bilinear", "align_corners": True}),
    ],
)
@pytest.mark.parametrize("size", [(9, 4), (3, 11)])
def test_resample_to_dims_matches_interpolate(mode: str, coordinates: str, torch_kw: dict, size) -> None:
    rng = np.random.default_rng(2)
    x = normal(rng, (2, 3, 5, 6), channels_last=True)
    g = sigdnn.Graph("rs", io_dtype="float64")
    y = g.resample(g.tensor("x", x.shape), mode, dims=(2, 3, *size), coordinates=coordinates, name="rs")
    outputs(g, {"y": y})
    got = run(g, {"x": x})
    close(got["y"], F.interpolate(torch64(x), size=size, **torch_kw))


def test_resample_by_scales_matches_interpolate() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 4, 5, 3))
    g = sigdnn.Graph("rs", io_dtype="float64")
    y = g.resample(g.tensor("x", x.shape), "bilinear", scales=(2.0, 1.5, 0.7), name="rs")
    assert y.dims == (1, 2, 8, 7, 2)
    outputs(g, {"y": y})
    got = run(g, {"x": x})
    want = F.interpolate(torch64(x), scale_factor=(2.0, 1.5, 0.7), mode="trilinear", align_corners=False)
    close(got["y"], want)
