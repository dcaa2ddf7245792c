"""conv_forward / conv_dgrad / conv_wgrad against torch autograd, brute-force loops, hand-worked
cases and central differences of conv_forward.

Exact sums: with small-integer inputs every float64 sum is exact whatever
its order, so the result must equal torch's and the loops' bit for bit;
that checks every index and every layout with no tolerance at all. With
random real inputs both sides round: each is within gamma_n * S of the
truth (n terms per output, S = sum |terms|, the same conv of |inputs|), so
they agree within (n + 2) * EPS * S.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import LAYOUTS, assert_within, check_gradient, import_torch, in_layout

from sigdnn.plan_builders.reference.math import conv_dgrad, conv_forward, conv_wgrad
from sigdnn.plan_builders.reference.math import windows as win

torch = import_torch()
F = torch.nn.functional


@attrs.frozen
class Conv:
    x: tuple[int, ...]
    w: tuple[int, ...]
    pre: tuple[int, ...]
    post: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def args(self) -> tuple[tuple[int, ...], ...]:
        return self.pre, self.post, self.stride, self.dilation

    @property
    def y(self) -> tuple[int, ...]:
        out = [
            (s + a + b - d * (r - 1) - 1) // st + 1
            for s, a, b, r, st, d in zip(self.x[2:], self.pre, self.post, self.w[2:], self.stride, self.dilation)
        ]
        return (self.x[0], self.w[0], *out)


def conv(x, w, pre=0, post=None, stride=1, dilation=1) -> Conv:
    s = len(x) - 2

    def vec(v: int | Sequence[int]) -> tuple[int, ...]:
        return (v,) * s if isinstance(v, int) else tuple(v)

    return Conv(tuple(x), tuple(w), vec(pre), vec(pre if post is None else post), vec(stride), vec(dilation))


def torch_conv(c: Conv, x: np.ndarray, w: np.ndarray, dy: np.ndarray | None = None):
    """y, and with dy also dx, dw: float64 autograd through F.pad + conv{1,2,3}d."""
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    pad: list[int] = []
    for p, q in reversed(list(zip(c.pre, c.post))):
        pad += [p, q]
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(c.pre)]
    y = fn(F.pad(xt, pad), wt, stride=c.stride, dilation=c.dilation, groups=c.x[1] // c.w[1])
    if dy is None:
        return y.detach().numpy()
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


def brute(c: Conv, x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """y, dx, dw one product at a time: every (output, tap, input channel) triple visited once."""
    y = np.zeros(c.y)
    dx = np.zeros(c.x)
    dw = np.zeros(c.w)
    kg = c.w[0] // (c.x[1] // c.w[1])
    for idx in itertools.product(*(range(d) for d in c.y)):
        n, k, *o = idx
        for ci in range(c.w[1]):
            ch = (k // kg) * c.w[1] + ci
            for r in itertools.product(*(range(e) for e in c.w[2:])):
                pos = [oi * st + ri * d - p for oi, ri, st, d, p in zip(o, r, c.stride, c.dilation, c.pre)]
                if all(0 <= p < s for p, s in zip(pos, c.x[2:])):
                    xi, wi = (n, ch, *pos), (k, ci, *r)
                    y[idx] += x[xi] * w[wi]
                    dx[xi] += dy[idx] * w[wi]
                    dw[wi] += dy[idx] * x[xi]
    return y, dx, dw


def run_all(c: Conv, x, w, dy, x_dims=None):
    y = conv_forward(x, w, *c.args)
    dx = conv_dgrad(dy, w, *c.args, x_dims or c.x)
    dw = conv_wgrad(x, dy, *c.args, c.w)
    return y, dx, dw


CASES = [
    conv((1, 2, 5), (3, 2, 2), pre=1, post=0, stride=2),
    conv((2, 4, 6), (4, 2, 3), post=2, dilation=2),  # 2 groups
    conv((1, 3, 4, 5), (3, 1, 2, 3), pre=(1, 0), post=(0, 2), stride=(2, 1)),  # depthwise
    conv((2, 2, 5, 4), (2, 2, 3, 2), pre=1, stride=(1, 2), dilation=(2, 1)),
    conv((1, 4, 3, 4), (6, 2, 1, 2), post=1, stride=3),  # stride > kernel: inputs no window reaches
    conv((2, 3, 7, 7), (5, 3, 1, 1), stride=2),  # strided 1x1
    conv((3, 5, 4, 3), (7, 5, 1, 1)),  # pointwise
    # 1x1 with one axis strided or padded (on one side): not a GEMM on x itself (64+ positions, as one would be)
    conv((1, 2, 8, 9), (3, 2, 1, 1), stride=(1, 2)),
    conv((1, 2, 8, 9), (3, 2, 1, 1), pre=(1, 0), post=(0, 0)),
    conv((1, 2, 8, 9), (3, 2, 1, 1), pre=(0, 0), post=(0, 1)),
    conv((2, 4, 6), (6, 2, 1), pre=2, post=1),  # padding beyond the kernel: outputs that see only padding
    conv((1, 2, 5, 4), (2, 2, 2, 3), pre=(3, 0), post=(0, 3), dilation=(1, 2)),
    conv((1, 3, 11, 11), (4, 3, 7, 7), pre=3, stride=2),  # a small stem
    conv((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), pre=(1, 0, 1), stride=(2, 1, 1)),
    conv((1, 4, 4, 3, 5), (4, 2, 2, 1, 3), post=(1, 1, 0), stride=(1, 2, 1), dilation=(1, 1, 2)),
]


def integers(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-8, 9, size=shape).astype(np.float64)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("c", CASES, ids=str)
def test_exact_sums_match_torch_and_loops(c: Conv, layout: str) -> None:
    rng = np.random.default_rng(len(str(c)))
    x, w, dy = integers(rng, c.x), integers(rng, c.w), integers(rng, c.y)
    want = torch_conv(c, x, w, dy)
    loops = brute(c, x, w, dy)
    got = run_all(c, in_layout(x, layout, 1), in_layout(w, layout, 2), in_layout(dy, layout, 3))
    for name, g, t, b in zip(("y", "dx", "dw"), got, want, loops):
        np.testing.assert_array_equal(g, t, err_msg=f"{name} vs torch")
        np.testing.assert_array_equal(g, b, err_msg=f"{name} vs loops")


def test_hand_worked_1d() -> None:
    """x = [1, 2, 3, 4, 5], w = [1, 10], stride 2: y = [21, 43]; dx of dy = [1, 2] is
    [1, 10, 2, 20, 0] (x[4] is in no window); dw = [1*1 + 2*3, 1*2 + 2*4] = [7, 10]."""
    c = conv((1, 1, 5), (1, 1, 2), stride=2)
    x = np.arange(1.0, 6.0).reshape(c.x)
    w = np.array([1.0, 10.0]).reshape(c.w)
    dy = np.array([1.0, 2.0]).reshape(c.y)
    y, dx, dw = run_all(c, x, w, dy)
    assert y.ravel().tolist() == [21.0, 43.0]
    assert dx.ravel().tolist() == [1.0, 10.0, 2.0, 20.0, 0.0]
    assert dw.ravel().tolist() == [7.0, 10.0]


def test_hand_worked_grouped_padding() -> None:
    """2 groups of one channel, pad 1: each output channel sees only its own input channel."""
    c = conv((1, 2, 2), (2, 1, 3), pre=1)
    x = np.array([[1.0, 2.0], [3.0, 4.0]]).reshape(c.x)
    w = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]).reshape(c.w)
    dy = np.array([[1.0, 0.0], [0.0, 1.0]]).reshape(c.y)
    y, dx, dw = run_all(c, x, w, dy)
    # channel 0: sums of neighbours [0+1+2, 1+2+0]; channel 1: 0*x[-1] + 1*x[0] + 2*x[1]
    assert y.reshape(2, 2).tolist() == [[3.0, 3.0], [11.0, 4.0]]
    # dy picks y[0,0] (taps at x[-1], x[0], x[1]) and y[1,1] (taps x[0], x[1], x[2]=pad)
    assert dx.reshape(2, 2).tolist() == [[1.0, 1.0], [0.0, 1.0]]
    assert dw.reshape(2, 3).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]]


@pytest.mark.parametrize("extra", [0, 1])
def test_dgrad_caller_given_dims_beyond_the_last_window(extra: int) -> None:
    """x 9 and 10 wide give the same 4-wide y with kernel 3 stride 2 (the floor drops the rest):
    dx is the caller's size, the columns past 8 0 (like conv_transpose's output_padding)."""
    base = conv((2, 3, 5, 9), (4, 3, 3, 3), pre=(1, 0), stride=2)
    c = attrs.evolve(base, x=(2, 3, 5, 9 + extra))
    assert c.y == base.y
    rng = np.random.default_rng(extra)
    x, w, dy = integers(rng, c.x), integers(rng, c.w), integers(rng, c.y)
    _, dx_t, dw_t = torch_conv(c, x, w, dy)
    dx = conv_dgrad(dy, w, *c.args, c.x)
    np.testing.assert_array_equal(dx, dx_t)
    assert not dx[..., 9:].any()
    assert dx[..., 8].any()
    np.testing.assert_array_equal(conv_wgrad(x, dy, *c.args, c.w), dw_t)


def test_inconsistent_dims_are_refused() -> None:
    c = CASES[3]
    dy = np.zeros((c.y[0], c.y[1], c.y[2] + 1, c.y[3]))
    with pytest.raises(ValueError, match="not the conv output"):
        conv_dgrad(dy, np.zeros(c.w), *c.args, c.x)
    with pytest.raises(ValueError, match="not the conv output"):
        conv_wgrad(np.zeros(c.x), dy, *c.args, c.w)


# -- real-valued inputs: both sides round, within (n + 2) * EPS * sum|terms| --------------------


@pytest.mark.parametrize("c", CASES, ids=str)
def test_real_values_within_summation_bound(c: Conv) -> None:
    rng = np.random.default_rng(7)
    x, w, dy = rng.standard_normal(c.x), rng.standard_normal(c.w), rng.standard_normal(c.y)
    y_t, dx_t, dw_t = torch_conv(c, x, w, dy)
    sy, sdx, sdw = (
        torch_conv(c, np.abs(x), np.abs(w), np.abs(dy))[0],
        *torch_conv(c, np.abs(x), np.abs(w), np.abs(dy))[1:],
    )
    y, dx, dw = run_all(c, in_layout(x, "permuted", 4), w, in_layout(dy, "channels_last"))
    taps = int(np.prod(c.w[2:]))
    assert_within(y, y_t, sy, c.w[1] * taps + 2, "y")
    assert_within(dx, dx_t, sdx, c.w[0] * taps + 2, "dx")
    assert_within(dw, dw_t, sdw, int(np.prod(c.y[::2])) * c.y[0] + 2, "dw")
    assert sdx.shape == dx.shape and sy.shape == y.shape


@pytest.mark.parametrize("c", [CASES[1], CASES[3], CASES[7], CASES[9]], ids=str)
def test_gradients_are_central_differences_of_the_forward(c: Conv) -> None:
    """<dy, conv_forward(x, w)> is bilinear: its gradients in x and w are dgrad and wgrad."""
    rng = np.random.default_rng(11)
    x, w, dy = rng.standard_normal(c.x), rng.standard_normal(c.w), rng.standard_normal(c.y)
    dx = conv_dgrad(dy, w, *c.args, c.x)
    dw = conv_wgrad(x, dy, *c.args, c.w)
    check_gradient(lambda v: float(np.sum(dy * conv_forward(v, w, *c.args))), x, dx, rng)
    check_gradient(lambda v: float(np.sum(dy * conv_forward(x, v, *c.args))), w, dw, rng)


# -- chunks: tiny chunk sizes force several chunks per sample and several samples per chunk -----


@pytest.mark.parametrize("chunk_bytes", [1, 600, 5000])
@pytest.mark.parametrize("c", [CASES[3], CASES[5], CASES[7], CASES[8]], ids=str)
def test_chunked_equals_unchunked(c: Conv, chunk_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    x, w, dy = integers(rng, c.x), integers(rng, c.w), integers(rng, c.y)
    want = torch_conv(c, x, w, dy)
    monkeypatch.setattr(win, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(win, "MIN_CHUNK_POSITIONS", 1)
    monkeypatch.setattr(win, "MAX_CHUNK_BYTES", chunk_bytes)
    for layout in ("contiguous", "channels_last"):
        got = run_all(c, in_layout(x, layout), w, in_layout(dy, layout))
        for name, g, t in zip(("y", "dx", "dw"), got, want):
            np.testing.assert_array_equal(g, t, err_msg=f"{name} {layout} chunk {chunk_bytes}")


def test_row_chunks_cover_every_position_once() -> None:
    for n, out, row, target in [(3, [5, 4], 8, 50), (2, [7], 16, 16), (4, [3, 2, 2], 8, 10_000), (1, [1], 8, 1)]:
        hits = np.zeros((n, out[0]), dtype=int)
        for batch, rows in win.row_chunks(n, out, row, target):
            hits[batch, rows] += 1
        assert (hits == 1).all()


def test_merge_axes() -> None:
    a = np.zeros((2, 3, 4))
    assert win.merge_axes(a, 1, 3).shape == (2, 12)
    assert win.merge_axes(a.transpose(0, 2, 1), 1, 3) is None
    odd = np.lib.stride_tricks.as_strided(np.zeros(8), (2, 1, 4), (32, 999 * 8, 8))
    assert win.merge_axes(odd, 0, 3).shape == (8,)  # a size-1 axis's stride never blocks a merge
    assert win.merge_axes(a[:, :1, :], 0, 3) is None  # rows 3 apart: not one run
    assert win.merge_axes(a[:, :, ::2], 1, 3) is not None  # strided inner axis, outer stride still a multiple
    assert win.merge_axes(a[:, :2, :3], 1, 3) is None


# -- generated cases ---------------------------------------------------------------------------------


@st.composite
def convs(draw: st.DrawFn) -> Conv:
    s = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel, size, pre, post, stride, dil = [], [], [], [], [], []
    for _ in range(s):
        r, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        p, q = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        span = d * (r - 1) + 1
        lo = max(1, span - p - q)
        kernel.append(r), dil.append(d), pre.append(p), post.append(q)
        stride.append(draw(st.integers(1, 3)))
        size.append(draw(st.integers(lo, lo + 4)))
    n = draw(st.integers(1, 3))
    return Conv((n, groups * cg, *size), (groups * kg, cg, *kernel), tuple(pre), tuple(post), tuple(stride), tuple(dil))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=convs(), layouts=st.tuples(*[st.sampled_from(LAYOUTS)] * 3), seed=st.integers(0, 2**31))
def test_generated_exact_sums(c: Conv, layouts: tuple[str, str, str], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, w, dy = integers(rng, c.x), integers(rng, c.w), integers(rng, c.y)
    want = torch_conv(c, x, w, dy)
    got = run_all(c, in_layout(x, layouts[0], seed), in_layout(w, layouts[1], seed), in_layout(dy, layouts[2], seed))
    for name, g, t in zip(("y", "dx", "dw"), got, want):
        np.testing.assert_array_equal(g, t, err_msg=f"{name} {c} {layouts}")


@pytest.mark.parametrize(
    "c",
    [
        # stride 2, dilation 3 along H: the odd rows' one tap reads dy before its start, the even rows' is
        # past its end only for W's odd class; W has a class with no rows at all (x_len 2 < stride 3)
        conv((1, 2, 2, 2), (2, 2, 2, 1), pre=(0, 0), post=(2, 0), stride=(2, 3), dilation=(3, 1)),
        conv((1, 2, 2, 4), (2, 2, 2, 1), pre=(0, 0), post=(2, 0), stride=(2, 2), dilation=(3, 1)),
        conv((1, 2, 4, 2), (2, 2, 1, 2), pre=(0, 0), post=(0, 2), stride=(2, 2), dilation=(1, 3)),
    ],
    ids=str,
)
def test_dgrad_classes_that_only_read_padding_are_written_as_zeros(c: Conv) -> None:
    """dx rows (residue classes of the stride) whose taps all land on dy's padding get 0, every one of
    them: dx goes into a NaN-filled Sink, so an element left unwritten shows."""
    from sigdnn.plan_builders.reference.math.sink import Sink

    rng = np.random.default_rng(12)
    x, w, dy = integers(rng, c.x), integers(rng, c.w), integers(rng, c.y)
    _, want, _ = torch_conv(c, x, w, dy)
    loops = brute(c, x, w, dy)[1]
    sink = Sink(np.full(c.x, np.nan), lambda out, v: np.copyto(out, v), True)
    assert conv_dgrad(dy, w, *c.args, c.x, sink) is None
    np.testing.assert_array_equal(sink.array, want)
    np.testing.assert_array_equal(sink.array, loops)
    assert np.any(want == 0)
