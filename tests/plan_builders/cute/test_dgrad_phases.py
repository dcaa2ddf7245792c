"""The stride-phase geometry of the CuTe strided dgrad, run on the CPU as the GPU runs it.

Every case emulates the plan's three steps in NumPy from the module's
outputs alone: the gather kernel's table into a flat workspace, each
running phase as the implicit-GEMM fprop the TMA im2col walk computes from
its geometry (stride 1, the phase's paddings and dilation), and the
interleave kernel's table into dx. The result must match a brute-force
loop dgrad (an independent oracle) and sigdnn's reference dgrad.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from sigdnn.plan_builders.cute.dgrad_phases import ALIGN, axis_phase, phase_layout, stride_phases
from sigdnn.plan_builders.reference.math.conv_backward import conv_dgrad


def out_size(size: int, pre: int, post: int, kernel: int, stride: int, dilation: int) -> int:
    return (size + pre + post - (kernel - 1) * dilation - 1) // stride + 1


def brute_dgrad(dy: np.ndarray, w: np.ndarray, dx_hw, pre, stride, dilation) -> np.ndarray:
    """dx (N, H, W, C) from dy (N, P, Q, K) and w (K, R, S, C) by the forward rule, scattered loop by loop."""
    n, p, q, _ = dy.shape
    _, r, s, c = w.shape
    dx = np.zeros((n, *dx_hw, c))
    for o_h, o_w, rr, ss in itertools.product(range(p), range(q), range(r), range(s)):
        h = o_h * stride[0] - pre[0] + rr * dilation[0]
        x = o_w * stride[1] - pre[1] + ss * dilation[1]
        if 0 <= h < dx_hw[0] and 0 <= x < dx_hw[1]:
            dx[:, h, x, :] += dy[:, o_h, o_w, :] @ w[:, rr, ss, :]
    return dx


def implicit_fprop(x: np.ndarray, wf: np.ndarray, out_hw, pre, dilation) -> np.ndarray:
    """y[n, i, j, c] = sum over (t, u, k) of x[n, i - pre_h + t*dh, j - pre_w + u*dw, k] * wf[c, t, u, k]
    (0 outside x): what the TMA im2col fprop computes for a stride-1 geometry."""
    n, h, wd, _ = x.shape
    c, rp, sp, _ = wf.shape
    y = np.zeros((n, *out_hw, c))
    for i, j, t, u in itertools.product(range(out_hw[0]), range(out_hw[1]), range(rp), range(sp)):
        a, b = i - pre[0] + t * dilation[0], j - pre[1] + u * dilation[1]
        if 0 <= a < h and 0 <= b < wd:
            y[:, i, j, :] += x[:, a, b, :] @ wf[:, t, u, :].T
    return y


def phased_dgrad(dy: np.ndarray, w: np.ndarray, dx_hw, pre, stride, dilation) -> np.ndarray:
    """The plan's gather, per-phase fprops and interleave, from the tables and offsets alone."""
    n, p, q, k = dy.shape
    _, r, s, c = w.shape
    phases = stride_phases(dx_hw, (p, q), (r, s), pre, stride, dilation)
    layout = phase_layout(phases, n, c, k, s, 1, 1)  # itemsize 1: byte offsets are element offsets
    work = np.full(layout.workspace_bytes, np.nan)
    flat_w = w.reshape(-1)
    gather = np.array(layout.gather).reshape(-1, 3)
    for src, dst, c_stride in gather:
        for cc in range(c):
            values = 0.0 if src < 0 else flat_w[np.arange(k) * r * s * c + src * c + cc]
            work[dst + cc * c_stride : dst + cc * c_stride + k] = values
    for ph, f_off, y_off in zip(phases, layout.filters, layout.outputs, strict=True):
        assert (f_off is None) == (y_off is None) == (not ph.runs)
        if not ph.runs:
            continue
        rp, sp = len(ph.h.taps), len(ph.w.taps)
        # The fprop's geometry as the TMA walk sees it: out = in + pre + post - (taps - 1) * dilation.
        for a in (ph.h, ph.w):
            assert a.pre >= 0 and a.post >= 0
        assert ph.h.out == p + ph.h.pre + ph.h.post - (rp - 1) * ph.h.dilation
        assert ph.w.out == q + ph.w.pre + ph.w.post - (sp - 1) * ph.w.dilation
        wf = work[f_off : f_off + c * rp * sp * k].reshape(c, rp, sp, k)
        y = implicit_fprop(dy, wf, (ph.h.out, ph.w.out), (ph.h.pre, ph.w.pre), (ph.h.dilation, ph.w.dilation))
        work[y_off : y_off + y.size] = y.reshape(-1)
    table = np.array(layout.interleave).reshape(stride[0], stride[1], 3)
    dx = np.full((n, *dx_hw, c), np.nan)
    for nn, h, x in itertools.product(range(n), range(dx_hw[0]), range(dx_hw[1])):
        base, hp, wp = table[h % stride[0], x % stride[1]]
        i, j = h // stride[0], x // stride[1]
        assert i < hp and j < wp
        dx[nn, h, x] = (
            0.0 if base < 0 else work[base + ((nn * hp + i) * wp + j) * c : base + ((nn * hp + i) * wp + j + 1) * c]
        )
    return dx


def check(dx_hw, dy_hw, rs, pre, stride, dilation, n=2, c=3, k=2, seed=0) -> None:
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((n, *dy_hw, k))
    w = rng.standard_normal((k, *rs, c))
    got = phased_dgrad(dy, w, dx_hw, pre, stride, dilation)
    want = brute_dgrad(dy, w, dx_hw, pre, stride, dilation)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    post = [0, 0]  # the reference wants dy's dims to be the forward output: any post padding that gives them
    for a in range(2):
        post[a] = next(b for b in range(-rs[a] * dilation[a], 64)
                       if out_size(dx_hw[a], pre[a], b, rs[a], stride[a], dilation[a]) == dy_hw[a])  # fmt: skip
    ref = conv_dgrad(dy.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), pre, post, stride, dilation, (n, c, *dx_hw))
    np.testing.assert_allclose(got, np.asarray(ref).transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)


AWKWARD = {
    # name: (dx H, W), (dy P, Q), (R, S), pre padding, stride, dilation
    "resnet_3x3_s2": ((8, 8), (4, 4), (3, 3), (1, 1), (2, 2), (1, 1)),
    "odd_extent_3x3_s2": ((7, 9), (4, 5), (3, 3), (1, 1), (2, 2), (1, 1)),
    "1x1_s2_three_zero_phases": ((8, 6), (4, 3), (1, 1), (0, 0), (2, 2), (1, 1)),
    "1x1_s2_odd": ((7, 5), (4, 3), (1, 1), (0, 0), (2, 2), (1, 1)),
    "r_below_stride": ((9, 10), (3, 4), (2, 1), (0, 0), (3, 3), (1, 1)),
    "stride3x2_dilated_asymmetric": ((17, 16), (6, 8), (3, 2), (2, 0), (3, 2), (2, 1)),
    "dilation_sharing_stride": ((12, 11), (5, 5), (3, 3), (2, 2), (2, 2), (2, 2)),
    "even_filter_pad1": ((8, 8), (5, 5), (2, 2), (1, 1), (2, 2), (1, 1)),
    "large_pad": ((6, 6), (5, 4), (3, 3), (2, 2), (2, 2), (1, 1)),
    "stride_above_extent": ((2, 3), (1, 1), (1, 3), (0, 1), (4, 4), (1, 1)),
    "5x5_s3": ((10, 11), (4, 4), (5, 5), (2, 2), (3, 3), (1, 1)),
    "rows_no_window_reaches": ((9, 9), (3, 3), (3, 3), (0, 0), (3, 3), (1, 1)),
}


@pytest.mark.parametrize("name", list(AWKWARD))
def test_awkward_shapes_match_the_loops_and_the_reference(name: str) -> None:
    check(*AWKWARD[name])


def random_case(rng: random.Random):
    while True:
        stride = (rng.randint(1, 4), rng.randint(1, 4))
        rs = (rng.randint(1, 5), rng.randint(1, 5))
        dilation = (rng.randint(1, 3), rng.randint(1, 3))
        dx_hw = (rng.randint(1, 11), rng.randint(1, 11))
        pre = tuple(rng.randint(0, (r - 1) * d + 1) for r, d in zip(rs, dilation))
        post = tuple(rng.randint(0, (r - 1) * d + 1) for r, d in zip(rs, dilation))
        dy_hw = tuple(out_size(*a) for a in zip(dx_hw, pre, post, rs, stride, dilation))
        if min(dy_hw) >= 1 and stride != (1, 1):
            return dx_hw, dy_hw, rs, pre, stride, dilation


def test_random_shapes_match_the_loops_and_the_reference() -> None:
    rng = random.Random(8)
    for i in range(150):
        check(*random_case(rng), n=1, c=2, k=2, seed=i)


def test_every_tap_reaches_exactly_one_phase_and_the_extents_tile_dx() -> None:
    rng = random.Random(3)
    for _ in range(500):
        dx_hw, dy_hw, rs, pre, stride, dilation = random_case(rng)
        for a in range(2):
            phases = [axis_phase(p, dx_hw[a], dy_hw[a], rs[a], pre[a], stride[a], dilation[a])
                      for p in range(stride[a])]  # fmt: skip
            taps = [t for ph in phases if ph.out for t in ph.taps if t is not None]
            assert sum(ph.out for ph in phases) == dx_hw[a]
            assert len(taps) == len(set(taps))
            for ph in phases:
                # Zero taps only where a padding would otherwise be negative: each stays below one step.
                real = [t for t, r in enumerate(ph.taps) if r is not None]
                if real:
                    assert real[0] == 0 or ph.pre < ph.dilation
                    assert real[-1] == len(ph.taps) - 1 or ph.post < ph.dilation


def test_resnet_stride2_phases_need_no_zero_taps() -> None:
    """3x3 pad 1 and 1x1 pad 0 at stride 2 (ResNet-50): 1 + 2 + 2 + 4 real taps, one of four phases, none padded."""
    three = stride_phases((56, 56), (28, 28), (3, 3), (1, 1), (2, 2), (1, 1))
    assert [(len(p.h.taps), len(p.w.taps)) for p in three] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(None not in p.h.taps + p.w.taps for p in three)
    assert [(p.h.pre, p.h.post, p.h.out) for p in three] == [(0, 0, 28)] * 2 + [(0, 1, 28)] * 2
    assert three[3].w.taps == (2, 0)
    one = stride_phases((56, 56), (28, 28), (1, 1), (0, 0), (2, 2), (1, 1))
    assert [p.runs for p in one] == [True, False, False, False]


def test_layout_aligns_regions_and_counts_bytes() -> None:
    phases = stride_phases((7, 9), (4, 5), (3, 3), (1, 1), (2, 2), (1, 1))
    layout = phase_layout(phases, 3, 24, 16, 3, 2, 4)
    offsets = [o for o in layout.filters + layout.outputs if o is not None]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert all(o % ALIGN == 0 for o in offsets)
    assert len(layout.gather) == 9 * 3  # every tap once: no zero taps here
    last = phases[-1]
    assert layout.workspace_bytes == layout.outputs[-1] + -(-3 * last.h.out * last.w.out * 24 * 4 // ALIGN) * ALIGN
    assert layout.interleave[-3:] == (layout.outputs[-1] // 4, 3, 4)
