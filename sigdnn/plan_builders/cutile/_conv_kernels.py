"""The grouped / depthwise conv fprop kernel, written against the cuTile API: a direct convolution.

Never imported as a module: ``conv_grouped.py`` hands the text below the
marker line to the backend (cuda.tile, or in CPU tests ``emulator``'s NumPy
stand-in, binds ``ct``) with one line naming the kernel. A block computes a
(PIXELS, CHANNELS) tile of y: PIXELS output pixels (a flat index over
(n, od, oh, ow)) by CHANNELS output channels. Each output channel k reads its
group's input channels (k // (K/G)) * C/G + c; every one of its C/G x taps
products is summed in float32 and y is rounded once.

x arrives as a flat view of its whole span, so a tap's element offset is a
per-pixel part (n and the window position, computed on PIXELS lanes) plus a
per-channel part (computed on CHANNELS lanes): one add per element and tap,
whatever the layout. Taps in the padding get offset -1, which the gather
reads as 0. w and y are 5-D strided views over (K or N, C, D, H, W): a
1-D or 2-D conv sees size-1 D (and H). Lanes past the last pixel or channel
load from the last real one and their scatter is dropped (an N or K
coordinate past the end). Sizes and strides are scalar arguments; only the
tile is compile-time.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----


@ct.kernel
def conv_grouped(
    x, w, y,
    pixels, od, oh, ow,
    xd, xh, xw,
    k_total, k_per_group, c_per_group,
    n_stride, c_stride, d_stride, h_stride, w_stride,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    dd, dh, dw,
    PIXELS: ct.Constant[int],
    CHANNELS: ct.Constant[int],
):  # fmt: skip
    p = ct.reshape(ct.bid(0) * PIXELS + ct.arange(PIXELS, dtype=ct.int32), (PIXELS, 1))
    k = ct.reshape(ct.bid(1) * CHANNELS + ct.arange(CHANNELS, dtype=ct.int32), (1, CHANNELS))
    real_p = ct.minimum(p, pixels - 1)
    d0 = (real_p // (ow * oh)) % od * sd - pd
    h0 = (real_p // ow) % oh * sh - ph
    w0 = real_p % ow * sw - pw
    pixel_at = real_p // (ow * oh * od) * n_stride + d0 * d_stride + h0 * h_stride + w0 * w_stride
    real_k = ct.minimum(k, k_total - 1)
    first_channel = real_k // k_per_group * c_per_group
    acc = ct.full((PIXELS, CHANNELS), 0.0, dtype=ct.float32)
    for c in range(c_per_group):
        at = pixel_at + (first_channel + c) * c_stride
        for a in range(kd):
            i_d = d0 + a * dd
            for b in range(kh):
                i_h = h0 + b * dh
                for e in range(kw):
                    i_w = w0 + e * dw
                    inside = (i_d >= 0) & (i_d < xd) & (i_h >= 0) & (i_h < xh) & (i_w >= 0) & (i_w < xw)
                    tap = a * dd * d_stride + b * dh * h_stride + e * dw * w_stride
                    v = ct.astype(ct.gather(x, ct.where(inside, at + tap, -1)), ct.float32)
                    f = ct.astype(ct.gather(w, (real_k, c, a, b, e)), ct.float32)
                    acc = acc + v * f
    o_n = p // (ow * oh * od)
    o_d = (p // (ow * oh)) % od
    o_h = (p // ow) % oh
    o_w = p % ow
    ct.scatter(y, (o_n, k, o_d, o_h, o_w), ct.astype(acc, y.dtype))
