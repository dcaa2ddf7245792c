"""A strided conv dgrad as one stride-1 conv per stride phase: the geometry, the workspace and two tables.

Along one axis, with stride s, pre padding pad, dilation d and g = gcd(s, d),

    dx[phase + s*i] = sum over taps r with s | (phase + pad - d*r) of dy[i + (phase + pad - d*r) / s] * w[r]

The taps of one phase are every (s/g)-th r, reading dy at offsets that step
by d/g as r falls: a stride-1 conv of dy with those taps reversed, dilation
d/g, over ceil((H - phase) / s) outputs. Each tap belongs to exactly one
phase. A phase no tap reaches is zero. The GPU conv's TMA im2col walk wants
both paddings >= 0; where a phase's first tap reads past dy's start (or its
last stops short of dy's end: odd paddings) zero taps go in front (or
behind) until they are, costing MACs on those rare shapes only.

In 2-D a phase (p, q) pairs an H phase and a W phase. The plan's
workspace holds every running phase's sub-filter (C, Rp, Sp, K) -- the
fprop's KRSC filter with dx's channels as K -- then its output
(N, Hp, Wp, C), each 256-byte aligned. Two int32 tables drive the helper
kernels (kernels/phase_dgrad.py): per sub-filter tap, where the gather
reads and writes; per phase, where the interleave into dx reads. The
reference (plan_builders/reference/math/conv_backward.py) decomposes the
same way but may crop dy in NumPy; the TMA cannot, hence the zero taps.
"""

from __future__ import annotations

import math

import attrs

ALIGN = 256  # workspace regions start on 256-byte boundaries


@attrs.frozen
class AxisPhase:
    """dx[phase + stride*i], i < out, along one axis: tap t of the stride-1 conv reads
    dy[i - pre + t*dilation] through filter tap taps[t] (None: a zero tap)."""

    phase: int
    out: int
    taps: tuple[int | None, ...]
    pre: int
    post: int
    dilation: int

    @property
    def reached(self) -> bool:
        """Some filter tap reaches this phase."""
        return any(t is not None for t in self.taps)


def axis_phase(phase: int, size: int, dy_size: int, kernel: int, pad: int, stride: int, dilation: int) -> AxisPhase:
    """One axis's phase ``phase`` of a dgrad with dx extent ``size`` and dy extent ``dy_size``."""
    out = max(0, -(-(size - phase) // stride))
    real = [r for r in range(kernel) if (phase + pad - dilation * r) % stride == 0]
    if not real or out == 0:
        return AxisPhase(phase, out, (), 0, 0, 1)
    gap = dilation // math.gcd(stride, dilation)
    lo = (phase + pad - dilation * real[-1]) // stride  # the offset the last tap reads dy at: the lowest
    hi = (phase + pad - dilation * real[0]) // stride
    before = max(0, -(-lo // gap))
    after = max(0, -(-(dy_size - out - hi) // gap))
    taps = (None,) * before + tuple(reversed(real)) + (None,) * after
    pre = before * gap - lo
    post = out - dy_size + hi + after * gap
    return AxisPhase(phase, out, taps, pre, post, gap)


@attrs.frozen
class Phase:
    """dx[n, sh*i + h.phase, sw*j + w.phase, c]: runs as a stride-1 conv when both axes have taps (an axis
    phase of no outputs has none)."""

    h: AxisPhase
    w: AxisPhase

    @property
    def runs(self) -> bool:
        return self.h.reached and self.w.reached


def stride_phases(
    dx_hw: tuple[int, int],
    dy_hw: tuple[int, int],
    taps: tuple[int, int],
    pre: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
) -> tuple[Phase, ...]:
    """Every phase (p, q), p < sh and q < sw, row-major."""
    axes = [
        [axis_phase(p, *args) for p in range(args[4])]
        for args in zip(dx_hw, dy_hw, taps, pre, stride, dilation, strict=True)
    ]
    return tuple(Phase(h, w) for h in axes[0] for w in axes[1])


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


@attrs.frozen
class PhaseLayout:
    """Where each running phase's sub-filter and output live in the workspace (byte offsets, None: the phase
    does not run), and the two tables (flat int32 lists).

    ``gather``: per sub-filter tap, (source tap r*S + s or -1 for a zero tap, destination element offset,
    destination stride between output channels). ``interleave``: per phase, (source element offset of its
    output or -1 for a zero phase, Hp, Wp).
    """

    filters: tuple[int | None, ...]
    outputs: tuple[int | None, ...]
    workspace_bytes: int
    gather: tuple[int, ...]
    interleave: tuple[int, ...]


def phase_layout(
    phases: tuple[Phase, ...], n: int, c: int, k: int, s: int, in_itemsize: int, out_itemsize: int
) -> PhaseLayout:
    """The workspace of ``phases`` for N images, C dx channels, K dy channels and S filter columns."""
    filters: list[int | None] = []
    outputs: list[int | None] = []
    gather: list[int] = []
    interleave: list[int] = []
    offset = 0
    for ph in phases:
        if not ph.runs:
            filters.append(None)
            continue
        filters.append(offset)
        rp, sp = len(ph.h.taps), len(ph.w.taps)
        base = offset // in_itemsize
        for t, r in enumerate(ph.h.taps):
            for u, col in enumerate(ph.w.taps):
                src = -1 if r is None or col is None else r * s + col
                gather += [src, base + (t * sp + u) * k, rp * sp * k]
        offset += _aligned(c * rp * sp * k * in_itemsize)
    for ph in phases:
        if not ph.runs:
            outputs.append(None)
            interleave += [-1, ph.h.out, ph.w.out]
            continue
        outputs.append(offset)
        interleave += [offset // out_itemsize, ph.h.out, ph.w.out]
        offset += _aligned(n * ph.h.out * ph.w.out * c * out_itemsize)
    return PhaseLayout(tuple(filters), tuple(outputs), offset, tuple(gather), tuple(interleave))
