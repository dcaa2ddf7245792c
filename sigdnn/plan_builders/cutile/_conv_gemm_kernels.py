"""The implicit-GEMM conv kernels, written against the cuTile API: fprop (described here), dgrad and wgrad
(described at each: the same tiles and gathers with their own index maps).

Never imported as a module: ``conv_gemm.py`` hands the text below the
marker line to the backend (cuda.tile, or in CPU tests ``emulator``'s NumPy
stand-in, binds ``ct``) with one line naming the kernel. Per group g (the
grid's third axis) the conv is the GEMM

    y[p, k] = sum over j of A[p, j] * W[j, k]

with p a flat output pixel (n, od, oh, ow), k one of the group's K/G output
channels and j a flat reduction index over (c, a, b, e): the group's C/G
input channels and the filter's taps. A block computes a (TM, TN) tile of
y; each K step gathers a (TM, TK) tile of A straight from x (nothing is
written to memory first) and a (TK, TN) tile of the filter, and
multiplies them with ``ct.mma`` into a float32 accumulator. j runs taps
fastest where x's channels are not innermost (NCHW: neighbouring j read
neighbouring x elements) and channels fastest where they are (NHWC).

x arrives as a flat view of its whole span: an A element's offset is a
per-pixel part (TM, 1) plus a per-j part (1, TK), whatever the layout.
Taps in the padding and j past the reduction get offset -1, which the
gather reads as 0; the filter's j past the reduction fall outside w's C or
D dim and read 0 too. w and y are 5-D strided views over (K or N, C, D, H,
W): a 1-D or 2-D conv sees size-1 D (and H). Rows past the last pixel load
from the last real one and their scatter is dropped (an N coordinate past
the end), as are columns past the group's K/G channels (channel index K).
Sizes and strides are scalar arguments; only the tile, the j order,
whether the operands widen to float32, whether the widened operands go
to the MMA as TF32 and the split count are compile-time.

Where the filter is dense in the j order (x's layout: KCRS for taps
fastest, KRSC for channels fastest), fprop reads its (TK, TN) tile with one
tile load (W_TILES) from a (groups, K/G, reduction) view instead of
gathering it element by element; rows past the group's channels and j past
the reduction load as zeros.

Split-K (fprop, SPLITS > 1: a batch-1 conv has too few output tiles to fill
the SMs): the grid's third axis runs groups x SPLITS blocks per tile, each
multiplying one slice of the K steps; ``out`` is then not y but a float32
(groups x SPLITS, pixels, K/G) workspace of partial sums, which
``conv_gemm_sum`` adds in split order before the scatter into y.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----


def scatter_pixels(y, acc, p, k_local, g, k_per_group, k_total, od, oh, ow):
    """The (TM, TN) tile of output pixels p and the group's channels k_local into y, as its dtype; rows past the
    last pixel and columns past the group's channels are dropped (indices outside y). dgrad's dx alike."""
    o_n = p // (ow * oh * od)
    o_d = (p // (ow * oh)) % od
    o_h = (p // ow) % oh
    o_w = p % ow
    o_k = ct.where(k_local < k_per_group, g * k_per_group + k_local, k_total)
    ct.scatter(y, (o_n, o_k, o_d, o_h, o_w), ct.astype(acc, y.dtype))


def x_tile(x, j, pixel_at, d0, h0, w0, xd, xh, xw, c_per_group, reduction,
           c_stride, d_stride, h_stride, w_stride, kd, kh, kw, dd, dh, dw, TK, CHANNELS_FASTEST):  # fmt: skip
    """The (TM, TK) tile of A for reduction indices j (TK,) and the pixels whose offsets pixel_at and window
    corners d0 / h0 / w0 (TM, 1) give, gathered from x (taps in the padding and j past the reduction read 0);
    with j's channel c and tap coordinates a, b, e, which the filter's gather reuses."""
    if CHANNELS_FASTEST:  # a constant: cuTile compiles only the branch taken
        c = j % c_per_group
        t = j // c_per_group
    else:
        c = j // (kd * kh * kw)
        t = j % (kd * kh * kw)
    a = t // (kh * kw)
    b = (t // kw) % kh
    e = t % kw
    i_d = d0 + ct.reshape(a * dd, (1, TK))
    i_h = h0 + ct.reshape(b * dh, (1, TK))
    i_w = w0 + ct.reshape(e * dw, (1, TK))
    inside = (i_d >= 0) & (i_d < xd) & (i_h >= 0) & (i_h < xh) & (i_w >= 0) & (i_w < xw)
    inside = inside & (ct.reshape(j, (1, TK)) < reduction)
    at = pixel_at + ct.reshape(c * c_stride + a * dd * d_stride + b * dh * h_stride + e * dw * w_stride, (1, TK))
    return ct.gather(x, ct.where(inside, at, -1)), c, a, b, e


def window_corners(p, pixels, od, oh, ow, sd, sh, sw, pd, ph, pw, n_stride, d_stride, h_stride, w_stride):
    """Per output pixel p (TM, 1): its window's first input position (d0, h0, w0) and that position's offset in
    x past the channel (rows past the last pixel take the last pixel's)."""
    real_p = ct.minimum(p, pixels - 1)
    d0 = (real_p // (ow * oh)) % od * sd - pd
    h0 = (real_p // ow) % oh * sh - ph
    w0 = real_p % ow * sw - pw
    return real_p // (ow * oh * od) * n_stride + d0 * d_stride + h0 * h_stride + w0 * w_stride, d0, h0, w0


@ct.kernel
def conv_gemm(
    x, w, out,
    pixels, od, oh, ow,
    xd, xh, xw,
    k_total, k_per_group, c_per_group, reduction,
    n_stride, c_stride, d_stride, h_stride, w_stride,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    dd, dh, dw,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TK: ct.Constant[int],
    CHANNELS_FASTEST: ct.Constant[bool],
    WIDEN: ct.Constant[bool],
    TF32: ct.Constant[bool],
    SPLITS: ct.Constant[int],
    W_TILES: ct.Constant[bool],
):  # fmt: skip
    g = ct.bid(2) // SPLITS
    s = ct.bid(2) % SPLITS
    p = ct.reshape(ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    k_local = ct.reshape(ct.bid(1) * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
    pixel_at, d0, h0, w0 = window_corners(p, pixels, od, oh, ow, sd, sh, sw, pd, ph, pw,
                                          n_stride, d_stride, h_stride, w_stride)  # fmt: skip
    pixel_at = pixel_at + g * c_per_group * c_stride
    k = g * k_per_group + ct.minimum(k_local, k_per_group - 1)
    steps = ct.cdiv(reduction, TK)
    per = ct.cdiv(steps, SPLITS)
    acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
    for kt in range(s * per, min(s * per + per, steps)):
        j = kt * TK + ct.arange(TK, dtype=ct.int32)
        xa, c, a, b, e = x_tile(x, j, pixel_at, d0, h0, w0, xd, xh, xw, c_per_group, reduction,
                                c_stride, d_stride, h_stride, w_stride, kd, kh, kw, dd, dh, dw, TK, CHANNELS_FASTEST)  # fmt: skip
        if W_TILES:  # a constant: w is the (groups, K/G, reduction) view
            wb = ct.load(w, index=(g, ct.bid(1), kt), shape=(1, TN, TK), padding_mode=ct.PaddingMode.ZERO)
            wb = ct.transpose(ct.reshape(wb, (TN, TK)))
        else:
            wb = ct.gather(
                w, (k, ct.reshape(c, (TK, 1)), ct.reshape(a, (TK, 1)), ct.reshape(b, (TK, 1)), ct.reshape(e, (TK, 1)))
            )
        if WIDEN:
            xa = ct.astype(xa, ct.float32)
            wb = ct.astype(wb, ct.float32)
        if TF32:
            xa = ct.astype(xa, ct.tfloat32)
            wb = ct.astype(wb, ct.tfloat32)
        acc = ct.mma(xa, wb, acc)
    if SPLITS > 1:  # a constant: the partial sums go to the workspace, in tiles
        ct.store(out, index=(ct.bid(2), ct.bid(0), ct.bid(1)), tile=ct.reshape(acc, (1, TM, TN)))
    else:
        scatter_pixels(out, acc, p, k_local, g, k_per_group, k_total, od, oh, ow)


@ct.kernel
def conv_gemm_sum(
    partials, y,
    od, oh, ow,
    k_total, k_per_group,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    SPLITS: ct.Constant[int],
):  # fmt: skip
    # Split-K's second kernel: one block per output tile adds the SPLITS partial tiles in order, then scatters.
    g = ct.bid(2)
    acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
    for s in range(SPLITS):
        part = ct.load(partials, index=(g * SPLITS + s, ct.bid(0), ct.bid(1)), shape=(1, TM, TN),
                       padding_mode=ct.PaddingMode.ZERO)  # fmt: skip
        acc = acc + ct.reshape(part, (TM, TN))
    p = ct.reshape(ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    k_local = ct.reshape(ct.bid(1) * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
    scatter_pixels(y, acc, p, k_local, g, k_per_group, k_total, od, oh, ow)


@ct.kernel
def conv_im2col(
    x, a_out,
    pixels, od, oh, ow,
    xd, xh, xw,
    c_per_group, reduction,
    n_stride, c_stride, d_stride, h_stride, w_stride,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    dd, dh, dw,
    TM: ct.Constant[int],
    TK: ct.Constant[int],
    CHANNELS_FASTEST: ct.Constant[bool],
):  # fmt: skip
    # The whole A of one ungrouped conv, (pixels, reduction) in x's dtype, for a GEMM with tile loads: block
    # (i, kt) gathers A's (TM, TK) tile as conv_gemm's K step does and stores it (the array's edges clip it).
    p = ct.reshape(ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    pixel_at, d0, h0, w0 = window_corners(p, pixels, od, oh, ow, sd, sh, sw, pd, ph, pw,
                                          n_stride, d_stride, h_stride, w_stride)  # fmt: skip
    j = ct.bid(1) * TK + ct.arange(TK, dtype=ct.int32)
    xa, _, _, _, _ = x_tile(x, j, pixel_at, d0, h0, w0, xd, xh, xw, c_per_group, reduction,
                            c_stride, d_stride, h_stride, w_stride, kd, kh, kw, dd, dh, dw, TK, CHANNELS_FASTEST)  # fmt: skip
    ct.store(a_out, index=(ct.bid(0), ct.bid(1)), tile=xa)


@ct.kernel
def conv_dgrad_gemm(
    dy, w, dx,
    pixels, xd, xh, xw,
    od, oh, ow,
    c_total, c_per_group, k_per_group, reduction,
    n_stride, k_stride, d_stride, h_stride, w_stride,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    dd, dh, dw,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TK: ct.Constant[int],
    CHANNELS_FASTEST: ct.Constant[bool],
    WIDEN: ct.Constant[bool],
    TF32: ct.Constant[bool],
):  # fmt: skip
    # dx[p, c] = sum over j of dy[p's window, j] * w[j, c]: j over the group's K/G dy channels and the taps; the
    # dy position a dx pixel meets through tap t is (position + pre_padding - t * dilation) / stride, where that
    # divides exactly and falls inside dy.
    g = ct.bid(2)
    p = ct.reshape(ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    c_local = ct.reshape(ct.bid(1) * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
    real_p = ct.minimum(p, pixels - 1)
    i_d = (real_p // (xw * xh)) % xd + pd
    i_h = (real_p // xw) % xh + ph
    i_w = real_p % xw + pw
    image_at = real_p // (xw * xh * xd) * n_stride + g * k_per_group * k_stride
    c = ct.minimum(c_local, c_per_group - 1)
    k_total = k_per_group * (c_total // c_per_group)
    taps = kd * kh * kw
    acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
    for kt in range(ct.cdiv(reduction, TK)):
        j = kt * TK + ct.arange(TK, dtype=ct.int32)
        if CHANNELS_FASTEST:  # a constant: cuTile compiles only the branch taken
            k = j % k_per_group
            t = j // k_per_group
        else:
            k = j // taps
            t = j % taps
        a = t // (kh * kw)
        b = (t // kw) % kh
        e = t % kw
        q_d = i_d - ct.reshape(a * dd, (1, TK))
        q_h = i_h - ct.reshape(b * dh, (1, TK))
        q_w = i_w - ct.reshape(e * dw, (1, TK))
        inside = (q_d >= 0) & (q_d % sd == 0) & (q_d // sd < od)
        inside = inside & (q_h >= 0) & (q_h % sh == 0) & (q_h // sh < oh)
        inside = inside & (q_w >= 0) & (q_w % sw == 0) & (q_w // sw < ow)
        inside = inside & (ct.reshape(j, (1, TK)) < reduction)
        at = image_at + ct.reshape(k * k_stride, (1, TK))
        at = at + q_d // sd * d_stride + q_h // sh * h_stride + q_w // sw * w_stride
        ya = ct.gather(dy, ct.where(inside, at, -1))
        filter_k = ct.where(j < reduction, g * k_per_group + k, k_total)  # past the reduction: outside w, read as 0
        wb = ct.gather(
            w,
            (ct.reshape(filter_k, (TK, 1)), c, ct.reshape(a, (TK, 1)), ct.reshape(b, (TK, 1)), ct.reshape(e, (TK, 1))),
        )
        if WIDEN:
            ya = ct.astype(ya, ct.float32)
            wb = ct.astype(wb, ct.float32)
        if TF32:
            ya = ct.astype(ya, ct.tfloat32)
            wb = ct.astype(wb, ct.tfloat32)
        acc = ct.mma(ya, wb, acc)
    scatter_pixels(dx, acc, p, c_local, g, c_per_group, c_total, xd, xh, xw)


@ct.kernel
def conv_wgrad_gemm(
    x, dy, dw,
    pixels, od, oh, ow,
    xd, xh, xw,
    k_total, k_per_group, c_per_group,
    xn_stride, xc_stride, xd_stride, xh_stride, xw_stride,
    yn_stride, yk_stride, yd_stride, yh_stride, yw_stride,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    dd, dh, dw_,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TK: ct.Constant[int],
    WIDEN: ct.Constant[bool],
    TF32: ct.Constant[bool],
):  # fmt: skip
    # dw[k, q] = sum over r of dy[r, k] * x[r's window, q]: k one of the group's K/G output channels, q a flat
    # (channel, tap) of the filter, r a flat dy pixel (n, od, oh, ow); the K loop runs over every dy pixel.
    g = ct.bid(2)
    k_local = ct.reshape(ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    q = ct.reshape(ct.bid(1) * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
    taps = kd * kh * kw
    c = q // taps
    a = (q % taps) // (kh * kw)
    b = (q // kw) % kh
    e = q % kw
    k = g * k_per_group + ct.minimum(k_local, k_per_group - 1)
    row_at = k * yk_stride
    column_at = (g * c_per_group + ct.minimum(c, c_per_group - 1)) * xc_stride
    acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
    for kt in range(ct.cdiv(pixels, TK)):
        r = kt * TK + ct.arange(TK, dtype=ct.int32)
        real_r = ct.minimum(r, pixels - 1)
        n = real_r // (ow * oh * od)
        o_d = (real_r // (ow * oh)) % od
        o_h = (real_r // ow) % oh
        o_w = real_r % ow
        y_at = ct.reshape(n * yn_stride + o_d * yd_stride + o_h * yh_stride + o_w * yw_stride, (1, TK))
        ya = ct.gather(dy, ct.where(ct.reshape(r, (1, TK)) < pixels, row_at + y_at, -1))
        i_d = ct.reshape(o_d * sd - pd, (TK, 1)) + a * dd
        i_h = ct.reshape(o_h * sh - ph, (TK, 1)) + b * dh
        i_w = ct.reshape(o_w * sw - pw, (TK, 1)) + e * dw_
        inside = (i_d >= 0) & (i_d < xd) & (i_h >= 0) & (i_h < xh) & (i_w >= 0) & (i_w < xw)
        inside = inside & (ct.reshape(r, (TK, 1)) < pixels) & (c < c_per_group)
        at = ct.reshape(n * xn_stride, (TK, 1)) + column_at + i_d * xd_stride + i_h * xh_stride + i_w * xw_stride
        xb = ct.gather(x, ct.where(inside, at, -1))
        if WIDEN:
            ya = ct.astype(ya, ct.float32)
            xb = ct.astype(xb, ct.float32)
        if TF32:
            ya = ct.astype(ya, ct.tfloat32)
            xb = ct.astype(xb, ct.tfloat32)
        acc = ct.mma(ya, xb, acc)
    o_k = ct.where(k_local < k_per_group, g * k_per_group + k_local, k_total)
    ct.scatter(dw, (o_k, c, a, b, e), ct.astype(acc, dw.dtype))
