"""Window kernels written against the cuTile API: pooling forward, the max's argmax, pooling backward by
gathering, resample forward and backward (by gathering too).

Never imported as a module: ``pooling.py`` and ``resample.py`` hand the text below the marker
line to the backend (cuda.tile, or in CPU tests ``emulator``'s NumPy stand-in,
binds ``ct``) with one line naming the kernel to run. The flat kernels take
every tensor as a 5-D strided view over logical (N, C, D, H, W) (1-D and 2-D pooling see
size-1 D and H), so one kernel serves NCHW and NHWC, 1 to 3 spatial dims and
any strides: coordinates come from a flat index walked in the written
tensor's memory order (``*_div``: the elements of the axes inside each axis),
and N-D gathers read outside the input as 0 (which the max masks to -inf).
Lanes past the last element get an N coordinate of n: out of bounds, so
their scatter is dropped. The pooling row kernels (``*_rows``, below) take
channels-innermost tensors as 2-D (pixels, channels) views instead. Sizes
are scalar arguments; only the mode and the tile are compile-time constants.

Max follows torch's CPU rule (docs/ops.md): the forward propagates NaN; the
backward sends dy to the window's first maximum in row-major tap order,
scanning from its first real element and moving on a greater value or a
NaN. The backward gathers, per dx element, from every output whose window
covers it (no atomics, deterministic); the max's argmax is one int32 per
output, written by the forward kernel in its ARGMAX mode before the
backward reads it.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----

INF_BITS = 0x7F800000
MAX = 0
AVERAGE_INCLUDE_PAD = 1
AVERAGE_EXCLUDE_PAD = 2
ARGMAX = 3  # the forward writing each window's first-maximum tap instead (max pooling's backward reads it)


def real_taps(o_d, o_h, o_w, xd, xh, xw, kd, kh, kw, sd, sh, sw, pd, ph, pw):
    """How many of window (o_d, o_h, o_w)'s taps fall inside x: the average excluding padding divides by it."""
    return (
        (ct.minimum(o_d * sd - pd + kd, xd) - ct.maximum(o_d * sd - pd, 0))
        * (ct.minimum(o_h * sh - ph + kh, xh) - ct.maximum(o_h * sh - ph, 0))
        * (ct.minimum(o_w * sw - pw + kw, xw) - ct.maximum(o_w * sw - pw, 0))
    )


def window_start(MODE, shape):
    """(acc, best_tap) before a window's first tap: acc -inf for the max, else 0; best_tap none yet (ARGMAX's acc
    holds the best value once a real tap set it)."""
    if MODE == MAX:  # (statements: cuTile folds an if on a constant; a conditional expression it may not)
        acc = -ct.bitcast(ct.full(shape, INF_BITS, dtype=ct.int32), ct.float32)
    else:
        acc = ct.full(shape, 0.0, dtype=ct.float32)
    return acc, ct.full(shape, -1, dtype=ct.int32)


def window_tap(MODE, acc, best_tap, v, real, tap):
    """(acc, best_tap) after one tap of a window: v its values (float32), real where it falls inside x, tap its
    row-major index in the window. The max propagates NaN; ARGMAX keeps the first maximum, moving on a greater
    value or a NaN."""
    if MODE == MAX:
        neg_inf = -ct.bitcast(ct.full(acc.shape, INF_BITS, dtype=ct.int32), ct.float32)
        acc = ct.maximum(acc, ct.where(real, v, neg_inf), propagate_nan=True)
    elif MODE == ARGMAX:
        take = real & ((best_tap < 0) | (v > acc) | (v != v))
        acc = ct.where(take, v, acc)
        best_tap = ct.where(take, tap, best_tap)
    else:
        acc = acc + ct.where(real, v, 0.0)
    return acc, best_tap


def window_result(MODE, acc, taps, real):
    """A window's value from its accumulator: an average divided by all its taps, or by the real ones inside x."""
    if MODE == AVERAGE_INCLUDE_PAD:
        acc = acc / ct.astype(ct.full(acc.shape, taps, dtype=ct.int32), ct.float32)
    if MODE == AVERAGE_EXCLUDE_PAD:
        acc = acc / ct.astype(ct.maximum(real, 1), ct.float32)
    return acc


@ct.kernel
def pool_forward(
    x, y, count,
    n_div, c_div, d_div, h_div, w_div,
    n, c, od, oh, ow,
    xd, xh, xw,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    MODE: ct.Constant[int],
    TILE: ct.Constant[int],
):  # fmt: skip
    flat = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    i_n = ct.where(flat < count, (flat // n_div) % n, n)
    i_c = (flat // c_div) % c
    o_d = (flat // d_div) % od
    o_h = (flat // h_div) % oh
    o_w = (flat // w_div) % ow
    acc, best_tap = window_start(MODE, (TILE,))
    for a in range(kd):
        i_d = o_d * sd - pd + a
        for b in range(kh):
            i_h = o_h * sh - ph + b
            for e in range(kw):
                i_w = o_w * sw - pw + e
                v = ct.astype(ct.gather(x, (i_n, i_c, i_d, i_h, i_w)), ct.float32)
                real = (i_d >= 0) & (i_d < xd) & (i_h >= 0) & (i_h < xh) & (i_w >= 0) & (i_w < xw)
                acc, best_tap = window_tap(MODE, acc, best_tap, v, real, (a * kh + b) * kw + e)
    real = real_taps(o_d, o_h, o_w, xd, xh, xw, kd, kh, kw, sd, sh, sw, pd, ph, pw)
    acc = window_result(MODE, acc, kd * kh * kw, real)
    if MODE == ARGMAX:  # y is the int32 argmax, laid out as dy
        ct.scatter(y, (i_n, i_c, o_d, o_h, o_w), best_tap)
    else:
        ct.scatter(y, (i_n, i_c, o_d, o_h, o_w), ct.astype(acc, y.dtype))


@ct.kernel
def pool_backward(
    dy, argmax, dx, count,
    n_div, c_div, d_div, h_div, w_div,
    n, c, xd, xh, xw,
    od, oh, ow,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    jd, jh, jw,
    MODE: ct.Constant[int],
    TILE: ct.Constant[int],
):  # fmt: skip
    flat = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    i_n = ct.where(flat < count, (flat // n_div) % n, n)
    i_c = (flat // c_div) % c
    i_d = (flat // d_div) % xd
    i_h = (flat // h_div) % xh
    i_w = (flat // w_div) % xw
    # per axis the last output whose window starts at or before the element (clamped to the outputs); the j-th
    # candidate is j before it (j < jd = min(ceil(k / s), outputs): only those windows can cover it)
    last_d = ct.minimum((i_d + pd) // sd, od - 1)
    last_h = ct.minimum((i_h + ph) // sh, oh - 1)
    last_w = ct.minimum((i_w + pw) // sw, ow - 1)
    acc = ct.full((TILE,), 0.0, dtype=ct.float32)
    none = ct.full((TILE,), -1, dtype=ct.int32)  # no tap: an argmax read outside dy (a tile of its dtype)
    for j_d in range(jd):
        a = i_d + pd - (last_d - j_d) * sd  # the element's tap in that window
        o_d = ct.where((last_d >= j_d) & (a < kd), last_d - j_d, -1)
        for j_h in range(jh):
            b = i_h + ph - (last_h - j_h) * sh
            o_h = ct.where((last_h >= j_h) & (b < kh), last_h - j_h, -1)
            for j_w in range(jw):
                e = i_w + pw - (last_w - j_w) * sw
                o_w = ct.where((last_w >= j_w) & (e < kw), last_w - j_w, -1)
                g = ct.astype(ct.gather(dy, (i_n, i_c, o_d, o_h, o_w)), ct.float32)
                if MODE == MAX:
                    won = ct.gather(argmax, (i_n, i_c, o_d, o_h, o_w), padding_value=none) == (a * kh + b) * kw + e
                    acc = acc + ct.where(won, g, 0.0)
                elif MODE == AVERAGE_INCLUDE_PAD:
                    acc = acc + g / ct.astype(ct.full((TILE,), kd * kh * kw, dtype=ct.int32), ct.float32)
                else:
                    real = real_taps(o_d, o_h, o_w, xd, xh, xw, kd, kh, kw, sd, sh, sw, pd, ph, pw)
                    acc = acc + g / ct.astype(ct.maximum(real, 1), ct.float32)
    ct.scatter(dx, (i_n, i_c, i_d, i_h, i_w), ct.astype(acc, dx.dtype))


# ---- pixel rows: channels innermost, the other axes collapsing into one row stride (NHWC, NDHWC, NWC) ----
# Every tensor arrives as a 2-D (pixels, channels) view whose channels are contiguous. A block writes PIXELS
# rows by CHANNELS channels of its output, and reads each tap's PIXELS source rows with one row load
# (``ct.load_advanced_indexing``: a row index per pixel, a run of channels), never element by element. A row
# outside the source (padding, or a window that does not cover the pixel) is read as row 0 and masked out;
# the output tile is stored whole (rows past the last pixel and channels past the last one drop).


def row_coordinates(PIXELS, pixels, od, oh, ow):
    """(n, d, h, w) of the block's PIXELS rows, of a tensor with (od, oh, ow) pixels an image (rows past the last
    are the last one's: their store drops)."""
    row = ct.minimum(ct.bid(0) * PIXELS + ct.arange(PIXELS, dtype=ct.int32), pixels - 1)
    return row // (ow * oh * od), (row // (ow * oh)) % od, (row // ow) % oh, row % ow


def column(tile, PIXELS):
    """A per-row tile of PIXELS as a [PIXELS, 1] column (what broadcasts against a [PIXELS, CHANNELS] tile)."""
    return ct.reshape(tile, (PIXELS, 1))


@ct.kernel
def pool_forward_rows(
    x, y, pixels,
    od, oh, ow,
    xd, xh, xw,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    MODE: ct.Constant[int],
    PIXELS: ct.Constant[int],
    CHANNELS: ct.Constant[int],
):  # fmt: skip
    o_n, o_d, o_h, o_w = row_coordinates(PIXELS, pixels, od, oh, ow)
    channels = ct.Slice(ct.bid(1) * CHANNELS, CHANNELS)
    acc, best_tap = window_start(MODE, (PIXELS, CHANNELS))
    for a in range(kd):
        i_d = o_d * sd - pd + a
        for b in range(kh):
            i_h = o_h * sh - ph + b
            for e in range(kw):
                i_w = o_w * sw - pw + e
                inside = (i_d >= 0) & (i_d < xd) & (i_h >= 0) & (i_h < xh) & (i_w >= 0) & (i_w < xw)
                source = ct.where(inside, ((o_n * xd + i_d) * xh + i_h) * xw + i_w, 0)
                loaded = ct.load_advanced_indexing(x, (source, channels), padding_mode=ct.PaddingMode.ZERO)
                v = ct.astype(loaded, ct.float32)
                acc, best_tap = window_tap(MODE, acc, best_tap, v, column(inside, PIXELS), (a * kh + b) * kw + e)
    real = column(real_taps(o_d, o_h, o_w, xd, xh, xw, kd, kh, kw, sd, sh, sw, pd, ph, pw), PIXELS)
    acc = window_result(MODE, acc, kd * kh * kw, real)
    if MODE == ARGMAX:  # y is the int32 argmax, one per output element
        ct.store(y, (ct.bid(0), ct.bid(1)), best_tap)
    else:
        ct.store(y, (ct.bid(0), ct.bid(1)), ct.astype(acc, y.dtype))


@ct.kernel
def pool_backward_rows(
    dy, argmax, dx, pixels,
    xd, xh, xw,
    od, oh, ow,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    jd, jh, jw,
    MODE: ct.Constant[int],
    PIXELS: ct.Constant[int],
    CHANNELS: ct.Constant[int],
):  # fmt: skip
    i_n, i_d, i_h, i_w = row_coordinates(PIXELS, pixels, xd, xh, xw)
    channels = ct.Slice(ct.bid(1) * CHANNELS, CHANNELS)
    last_d = ct.minimum((i_d + pd) // sd, od - 1)
    last_h = ct.minimum((i_h + ph) // sh, oh - 1)
    last_w = ct.minimum((i_w + pw) // sw, ow - 1)
    acc = ct.full((PIXELS, CHANNELS), 0.0, dtype=ct.float32)
    for j_d in range(jd):
        a = i_d + pd - (last_d - j_d) * sd
        o_d = last_d - j_d
        in_d = (last_d >= j_d) & (a < kd)
        for j_h in range(jh):
            b = i_h + ph - (last_h - j_h) * sh
            o_h = last_h - j_h
            in_h = in_d & (last_h >= j_h) & (b < kh)
            for j_w in range(jw):
                e = i_w + pw - (last_w - j_w) * sw
                o_w = last_w - j_w
                covers = in_h & (last_w >= j_w) & (e < kw)
                row = ct.where(covers, ((i_n * od + o_d) * oh + o_h) * ow + o_w, 0)
                g = ct.astype(ct.load_advanced_indexing(dy, (row, channels), padding_mode=ct.PaddingMode.ZERO),
                              ct.float32)  # fmt: skip
                if MODE == MAX:
                    tap = ct.load_advanced_indexing(argmax, (row, channels), padding_mode=ct.PaddingMode.ZERO)
                    won = column(covers, PIXELS) & (tap == column((a * kh + b) * kw + e, PIXELS))
                    acc = acc + ct.where(won, g, 0.0)
                elif MODE == AVERAGE_INCLUDE_PAD:
                    count = ct.astype(ct.full((PIXELS, CHANNELS), kd * kh * kw, dtype=ct.int32), ct.float32)
                    acc = acc + ct.where(column(covers, PIXELS), g / count, 0.0)
                else:
                    real = real_taps(o_d, o_h, o_w, xd, xh, xw, kd, kh, kw, sd, sh, sw, pd, ph, pw)
                    count = column(ct.astype(ct.maximum(real, 1), ct.float32), PIXELS)
                    acc = acc + ct.where(column(covers, PIXELS), g / count, 0.0)
    ct.store(dx, (ct.bid(0), ct.bid(1)), ct.astype(acc, dx.dtype))


# The phase kernel: a block takes one row of dx (n, d, h), the dx pixels w = phase + sw * t of one t-block and
# one channel block. The windows covering its pixels then form a run along dy's ow for each candidate (j_d, j_h, j_w),
# each tap (a, b, e) one value for the whole block, so dy's (and the argmax's) rows come as one tile of a slice at
# that run's start; a run starting before ow's first window (the first t-block's) is gathered row by row.


def phase_rows(array, row, start, o_w, PIXELS, CHANNELS):
    """[PIXELS, CHANNELS] of ``array`` (rows of windows, ow, channels) at windows o_w = start .. start + PIXELS - 1 of
    row ``row``, channel block bid(2): a slice's tile where the run starts inside the row, else gathered; windows
    past the row's last read as zero."""
    if (start >= 0) & (start < array.shape[1]):
        run = array.slice(1, start, ct.minimum(start + PIXELS, array.shape[1]))
        tile = ct.load(run, (row, 0, ct.bid(2)), (1, PIXELS, CHANNELS), padding_mode=ct.PaddingMode.ZERO)
    else:
        inside = (o_w >= 0) & (o_w < array.shape[1])
        columns = ct.Slice(ct.bid(2) * CHANNELS, CHANNELS)
        tile = ct.load_advanced_indexing(array, (ct.Slice(row, 1), ct.where(inside, o_w, 0), columns),
                                         padding_mode=ct.PaddingMode.ZERO)  # fmt: skip
    return ct.reshape(tile, (PIXELS, CHANNELS))


@ct.kernel
def pool_backward_phases(
    dy, argmax, dx, phase,
    xd, xh, xw,
    od, oh, ow,
    kd, kh, kw,
    sd, sh, sw,
    pd, ph, pw,
    jd, jh, jw,
    MODE: ct.Constant[int],
    PIXELS: ct.Constant[int],
    CHANNELS: ct.Constant[int],
):  # fmt: skip
    i_n = ct.bid(0) // (xd * xh)
    i_d = (ct.bid(0) // xh) % xd
    i_h = ct.bid(0) % xh
    first = (phase + pw) // sw + ct.bid(1) * PIXELS  # the last window covering the block's first pixel
    acc = ct.full((PIXELS, CHANNELS), 0.0, dtype=ct.float32)
    for j_d in range(jd):
        o_d = ct.minimum((i_d + pd) // sd, od - 1) - j_d
        a = i_d + pd - o_d * sd
        for j_h in range(jh):
            o_h = ct.minimum((i_h + ph) // sh, oh - 1) - j_h
            b = i_h + ph - o_h * sh
            rows_cover = (o_d >= 0) & (a < kd) & (o_h >= 0) & (b < kh)
            row = ct.maximum((i_n * od + o_d) * oh + o_h, 0)  # a row no window covers: read, then masked
            for j_w in range(jw):
                e = (phase + pw) % sw + j_w * sw
                start = first - j_w
                o_w = start + ct.arange(PIXELS, dtype=ct.int32)
                covers = rows_cover & (e < kw) & (o_w >= 0) & (o_w < ow)  # pixels past the phase's last: dropped
                g = ct.astype(phase_rows(dy, row, start, o_w, PIXELS, CHANNELS), ct.float32)
                if MODE == MAX:
                    tap = phase_rows(argmax, row, start, o_w, PIXELS, CHANNELS)
                    won = column(covers, PIXELS) & (tap == (a * kh + b) * kw + e)
                    acc = acc + ct.where(won, g, 0.0)
                elif MODE == AVERAGE_INCLUDE_PAD:
                    taps = ct.astype(ct.full((PIXELS, CHANNELS), kd * kh * kw, dtype=ct.int32), ct.float32)
                    acc = acc + ct.where(column(covers, PIXELS), g / taps, 0.0)
                else:
                    real = real_taps(o_d, o_h, o_w, xd, xh, xw, kd, kh, kw, sd, sh, sw, pd, ph, pw)
                    taps = column(ct.astype(ct.maximum(real, 1), ct.float32), PIXELS)
                    acc = acc + ct.where(column(covers, PIXELS), g / taps, 0.0)
    ct.store(dx, (ct.bid(0), ct.bid(1), ct.bid(2)), ct.reshape(ct.astype(acc, dx.dtype), (1, PIXELS, CHANNELS)))


NEAREST = 0
LINEAR = 1


def resample_source(o, scale, bias, den, size):
    """(low, high, low's weight, high's weight) of output positions o along one axis: the input positions
    blended and their weights, in exact integer steps: the source position is (scale o + bias) / den, floored
    at 0 (``resample.positions`` gives scale, bias, den for each coordinate convention and mode). Each weight
    is one rounded division of integers (den - r and r by den): 1 - t from a rounded t would carry t's
    rounding, an ulp of 1, into a weight near 0."""
    num = ct.maximum(o * scale + bias, 0)
    low = num // den
    rest = num - low * den
    whole = ct.astype(ct.full(o.shape, den, dtype=ct.int32), ct.float32)
    low_weight = ct.astype(den - rest, ct.float32) / whole
    high_weight = ct.astype(rest, ct.float32) / whole
    low = ct.minimum(low, size - 1)
    return low, ct.minimum(low + 1, size - 1), low_weight, high_weight


def corner(high, low_index, high_index, low_weight, high_weight):
    """(index, weight) of one end of a linear blend."""
    if high:
        return high_index, high_weight
    return low_index, low_weight


@ct.kernel
def resample_forward(
    x, y, count,
    n_div, c_div, d_div, h_div, w_div,
    n, c, od, oh, ow,
    xd, xh, xw,
    d_scale, d_bias, d_den,
    h_scale, h_bias, h_den,
    w_scale, w_bias, w_den,
    MODE: ct.Constant[int],
    TILE: ct.Constant[int],
):  # fmt: skip
    flat = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    i_n = ct.where(flat < count, (flat // n_div) % n, n)
    i_c = (flat // c_div) % c
    o_d = (flat // d_div) % od
    o_h = (flat // h_div) % oh
    o_w = (flat // w_div) % ow
    d_lo, d_hi, d_lw, d_hw = resample_source(o_d, d_scale, d_bias, d_den, xd)
    h_lo, h_hi, h_lw, h_hw = resample_source(o_h, h_scale, h_bias, h_den, xh)
    w_lo, w_hi, w_lw, w_hw = resample_source(o_w, w_scale, w_bias, w_den, xw)
    if MODE == NEAREST:
        acc = ct.astype(ct.gather(x, (i_n, i_c, d_lo, h_lo, w_lo)), ct.float32)
    else:
        acc = ct.full((TILE,), 0.0, dtype=ct.float32)
        for a in ct.static_iter(range(2)):  # the 8 corners, unrolled at compile time (a, b, e are constants)
            i_d, w_d = corner(a, d_lo, d_hi, d_lw, d_hw)
            for b in ct.static_iter(range(2)):
                i_h, w_h = corner(b, h_lo, h_hi, h_lw, h_hw)
                for e in ct.static_iter(range(2)):
                    i_w, w_w = corner(e, w_lo, w_hi, w_lw, w_hw)
                    v = ct.astype(ct.gather(x, (i_n, i_c, i_d, i_h, i_w)), ct.float32)
                    acc = acc + w_d * w_h * w_w * v
    ct.scatter(y, (i_n, i_c, o_d, o_h, o_w), ct.astype(acc, y.dtype))


def resample_weight(i, o, out, scale, bias, den, size, mode):
    """How much output o (along one axis) takes from input i: its blend's weights where its ends are i."""
    low, high, low_weight, high_weight = resample_source(o, scale, bias, den, size)
    inside = o < out
    if mode == NEAREST:
        return ct.astype(inside & (low == i), ct.float32)
    return ct.where(inside & (low == i), low_weight, 0.0) + ct.where(inside & (high == i), high_weight, 0.0)


def first_output(i, scale, bias, den, mode):
    """The first output whose source position's floor reaches i - 1 (linear) or i (nearest): none before it
    takes from input i (positions never decrease along the axis)."""
    reach = (i - mode) * den - bias
    return ct.where(reach > 0, (reach + scale - 1) // scale, 0)


@ct.kernel
def resample_backward(
    dy, dx, count,
    n_div, c_div, d_div, h_div, w_div,
    n, c, xd, xh, xw,
    od, oh, ow,
    d_scale, d_bias, d_den, d_step, d_span,
    h_scale, h_bias, h_den, h_step, h_span,
    w_scale, w_bias, w_den, w_step, w_span,
    MODE: ct.Constant[int],
    TILE: ct.Constant[int],
):  # fmt: skip
    flat = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    i_n = ct.where(flat < count, (flat // n_div) % n, n)
    i_c = (flat // c_div) % c
    i_d = (flat // d_div) % xd
    i_h = (flat // h_div) % xh
    i_w = (flat // w_div) % xw
    d_first = first_output(i_d, d_step, d_bias, d_den, MODE)
    h_first = first_output(i_h, h_step, h_bias, h_den, MODE)
    w_first = first_output(i_w, w_step, w_bias, w_den, MODE)
    acc = ct.full((TILE,), 0.0, dtype=ct.float32)
    for a in range(d_span):
        o_d = d_first + a
        g_d = resample_weight(i_d, o_d, od, d_scale, d_bias, d_den, xd, MODE)
        for b in range(h_span):
            o_h = h_first + b
            g_h = resample_weight(i_h, o_h, oh, h_scale, h_bias, h_den, xh, MODE)
            for e in range(w_span):
                o_w = w_first + e
                g_w = resample_weight(i_w, o_w, ow, w_scale, w_bias, w_den, xw, MODE)
                g = ct.astype(ct.gather(dy, (i_n, i_c, o_d, o_h, o_w)), ct.float32)
                acc = acc + g_d * g_h * g_w * g
    ct.scatter(dx, (i_n, i_c, i_d, i_h, i_w), ct.astype(acc, dx.dtype))
