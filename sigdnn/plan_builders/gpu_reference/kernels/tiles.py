import cuda.tile as ct

# The GPU reference's kernels: a handful of obvious float64 (or int64) tile programs over flat arrays.
# Every op of the library is host code composing these: read (gather + widen), elementwise, GEMM,
# row reduction, write (round once + scatter). This file is the library's device code (beside dmma_gemm.py's
# tensor-core GEMM, used instead of `gemm` where CuTe DSL is installed);
# the emulator runs the same text with ``ct`` bound to NumPy (gpu_reference.backend).

# How `gather` turns a source element into the working dtype.
DECODE_CAST = 0  # float / integer source: convert exactly (float64 holds every narrower float and int32)
DECODE_E4M3 = 1  # fp8 bytes
DECODE_E5M2 = 2
DECODE_BOOL = 3  # bool bytes: nonzero is 1
DECODE_RAW = 4  # same dtype: a copy of the bits

# How `scatter` rounds a working value into the destination.
ENCODE_CAST = 0  # float64 -> float64 / float32 / float16: one IEEE round-to-nearest-even cast; raw int64 copy
ENCODE_BF16 = 1  # float64 -> float32 rounded to odd -> bfloat16 (round to nearest even): one exact rounding
ENCODE_E4M3 = 2  # the same into fp8 bytes; past 464 NaN (e4m3fn has no inf)
ENCODE_E5M2 = 3  # past 61440 +-inf
ENCODE_INT = 4  # float64 -> integer: truncate, NaN -> 0 (the caller clips to the type's range)
ENCODE_BOOL = 5  # nonzero -> 1 byte
ENCODE_RAW = 6  # same dtype
ENCODE_INT_WRAP = 7  # int64 -> narrower integer (two's complement wrap, as a C cast)

# Elementwise modes.
ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, FMOD, POW = 0, 1, 2, 3, 4, 5, 6, 7
EQ, NE, GT, GE, LT, LE, AND, OR = 8, 9, 10, 11, 12, 13, 14, 15
NOT, ABS, NEG, CEIL, FLOOR, SQRT, EXP, LOG = 16, 17, 18, 19, 20, 21, 22, 23
SIN, COS, TAN, TANH, WHERE, FLOORDIV, PYMOD, NEXT_UP = 24, 25, 26, 27, 28, 29, 30, 31
NEXT_DOWN, ISNAN, COPY, INDEX = 32, 33, 34, 35
FINITE, MAGNITUDE, FINITE_OR_ZERO, FMAX = 36, 37, 38, 39  # validation's bookkeeping, one pass each
ABS_ERROR, FAILING = 40, 41  # a comparison of got (x) with want (y) within a bound (z)
ADD_MOD, SQUARE_ADD_MOD, PARITY_SIGN = 42, 43, 44  # the random draws' counter hash (int64), one pass a step

# How `elementwise` reads an operand.
OPERAND_ARRAY, OPERAND_SCALAR, OPERAND_ELEMENT = 0, 1, 2  # its array, the scalar argument, its array's one element

# Row reductions.
R_SUM, R_MAX, R_MIN, R_PROD = 0, 1, 2, 3


@ct.kernel
def gather(src, rows, cols, C, out, pad, T: ct.Constant[int], DECODE: ct.Constant[int], DENSE: ct.Constant[int]):
    """out[i] = decode(src[rows[i // C] + cols[i % C]]), or ``pad`` where that index < 0 (an explicit map is
    rows with cols = [0], C = 1; a strided tensor's is the outer sum of its leading and trailing axes' offsets);
    DENSE: the index is i (no map is read)."""
    lin = ct.bid(0) * T + ct.arange(T, dtype=ct.int64)
    if DENSE == 1:  # noqa: SIM108 (a constant branch, folded by cuTile)
        i = lin
    else:
        i = ct.gather(rows, lin // C) + ct.gather(cols, lin % C)
    inside = i >= 0
    v = ct.gather(src, i, mask=inside, padding_value=0)
    if DECODE == DECODE_E4M3:
        v = ct.astype(ct.bitcast(v, ct.float8_e4m3fn), ct.float32)
    if DECODE == DECODE_E5M2:
        v = ct.astype(ct.bitcast(v, ct.float8_e5m2), ct.float32)
    if DECODE == DECODE_BOOL:
        v = v != 0
    if DECODE != DECODE_RAW:
        v = ct.astype(v, out.dtype)
    ct.store(out, (ct.bid(0),), ct.where(inside, v, ct.full((T,), pad, out.dtype)))


@ct.kernel
def gather_outer(src, rows, window, image, NP, P, out, pad, TR: ct.Constant[int], TC: ct.Constant[int]):
    """out[i, j] = src[rows[i] + col(j)], ``pad`` where col(j) < 0: an im2col matrix or a strided view from small
    maps. Column j is (t, n, p) of (taps, N, P) (NP = N * P): col(j) = n * image + window[t * P + p], or -1 where
    that window entry is (padding). A plain column map is the window of one tap with image 0 (NP = P = its
    length). Column blocks are on grid x, which is not bounded to 65,535."""
    r = ct.load(rows, (ct.bid(1),), (TR,), padding_mode=ct.PaddingMode.ZERO)
    j = ct.bid(0) * TC + ct.arange(TC, dtype=ct.int64)
    w = ct.gather(window, (j // NP) * P + j % P)
    c = ct.where(w >= 0, w + (j % NP) // P * image, -1)
    cc = ct.broadcast_to(ct.reshape(c, (1, TC)), (TR, TC))
    index = ct.broadcast_to(ct.reshape(r, (TR, 1)), (TR, TC)) + cc
    v = ct.astype(ct.gather(src, index, mask=cc >= 0, padding_value=0), out.dtype)
    ct.store(out, (ct.bid(1), ct.bid(0)), ct.where(cc >= 0, v, ct.full((TR, TC), pad, out.dtype)))


@ct.kernel
def gather_rows(src, window, channels, image, P, T, CG, out, pad, TR: ct.Constant[int], TC: ct.Constant[int]):
    """out[g, i, t, c] = src[i // P * image + window[(i % P) * T + t] + channels[g * CG + c]], ``pad`` where that
    window entry < 0: an im2col matrix with a row per output position i = (n, p) and columns (tap t, channel c of
    group g), out shaped (G, N * P, T, CG). A row's channels are read one after another, so a source stored
    channels-last is read in runs. Grid: (row blocks, T * channel blocks, G)."""
    g, t, cb = ct.bid(2), ct.bid(1) % T, ct.bid(1) // T
    i = ct.bid(0) * TR + ct.arange(TR, dtype=ct.int64)
    c = cb * TC + ct.arange(TC, dtype=ct.int64)
    w = ct.gather(window, (i % P) * T + t)
    base = ct.where(w >= 0, w + (i // P) * image, -1)
    rows = ct.broadcast_to(ct.reshape(base, (TR, 1)), (TR, TC))
    index = rows + ct.broadcast_to(ct.reshape(ct.gather(channels, g * CG + c), (1, TC)), (TR, TC))
    v = ct.astype(ct.gather(src, index, mask=rows >= 0, padding_value=0), out.dtype)
    tile = ct.where(rows >= 0, v, ct.full((TR, TC), pad, out.dtype))
    ct.store(out, (g, ct.bid(0), t, cb), ct.reshape(tile, (1, TR, 1, TC)))


@ct.function
def _f32_round_to_odd(x):
    """float64 -> float32 truncated toward zero, the last bit set when inexact: a later narrower
    round-to-nearest-even then rounds x exactly once (sigdnn.dtypes' rounding)."""
    nearest = ct.astype(x, ct.float32)
    back = ct.astype(nearest, ct.float64)
    bits = ct.bitcast(nearest, ct.int32)
    overshoot = ct.abs(back) > ct.abs(x)  # nearest rounded away from zero (or overflowed to inf)
    bits = ct.where(overshoot, bits - 1, bits)  # one float32 step toward zero, either sign
    truncated = ct.astype(ct.bitcast(bits, ct.float32), ct.float64)
    inexact = (truncated != x) & ((x - x) == 0)  # finite x only: inf and NaN are exact
    return ct.bitcast(ct.where(inexact, bits | 1, bits), ct.float32)


@ct.kernel
def scatter(value, rows, cols, C, out, n, T: ct.Constant[int], ENCODE: ct.Constant[int], DENSE: ct.Constant[int]):
    """out[rows[i // C] + cols[i % C]] = encode(value[i]) for i < n (the maps as ``gather``'s); DENSE: out[i]."""
    b = ct.bid(0)
    lin = b * T + ct.arange(T, dtype=ct.int64)
    if DENSE == 1:  # noqa: SIM108 (a constant branch, folded by cuTile)
        i = lin
    else:
        i = ct.gather(rows, lin // C) + ct.gather(cols, lin % C)
    v = ct.load(value, (b,), (T,), padding_mode=ct.PaddingMode.ZERO)
    live = lin < n
    if ENCODE == ENCODE_CAST or ENCODE == ENCODE_RAW or ENCODE == ENCODE_INT_WRAP:  # noqa: SIM109 (constant ==, folded by cuTile)
        r = ct.astype(v, out.dtype)
    if ENCODE == ENCODE_BF16:
        r = ct.astype(_f32_round_to_odd(v), ct.bfloat16)
    if ENCODE == ENCODE_E4M3:
        f = _f32_round_to_odd(v)
        f = ct.where(ct.abs(f) > 464.0, ct.astype(ct.full((T,), float("nan"), ct.float64), ct.float32), f)
        r = ct.bitcast(ct.astype(f, ct.float8_e4m3fn), ct.uint8)
    if ENCODE == ENCODE_E5M2:
        f = _f32_round_to_odd(v)
        r = ct.bitcast(ct.astype(f, ct.float8_e5m2), ct.uint8)  # saturating: overflow is set by its bits
        r = ct.where(
            f >= 61440.0, ct.full((T,), 0x7C, ct.uint8), ct.where(f <= -61440.0, ct.full((T,), 0xFC, ct.uint8), r)
        )
    if ENCODE == ENCODE_INT:
        t = ct.where((v - v) == 0, v, 0.0)  # NaN and inf store 0
        t = ct.where(t >= 0, ct.floor(t), ct.ceil(t))
        r = ct.astype(t, out.dtype)
    if ENCODE == ENCODE_BOOL:
        r = ct.astype(v != 0, ct.uint8)
    ct.scatter(out, i, r, mask=live)


@ct.kernel
def elementwise(
    a,
    b,
    c,
    sa,
    sb,
    sc,
    out,
    T: ct.Constant[int],
    MODE: ct.Constant[int],
    KA: ct.Constant[int],
    KB: ct.Constant[int],
    KC: ct.Constant[int],
):
    """out = MODE(a, b, c) over flat tiles; each operand as its K* says (OPERAND_*): its array, the scalar s*, or
    its array's one element (a constant, read in place of a broadcast copy)."""
    blk = ct.bid(0)
    first = ct.full((T,), 0, ct.int64)
    # (statements: cuTile folds an if on a constant; a conditional expression it may not)
    if KA == OPERAND_ARRAY:
        x = ct.load(a, (blk,), (T,), padding_mode=ct.PaddingMode.ZERO)
    if KA == OPERAND_SCALAR:
        x = ct.full((T,), sa, out.dtype)
    if KA == OPERAND_ELEMENT:
        x = ct.gather(a, first)
    if KB == OPERAND_ARRAY:
        y = ct.load(b, (blk,), (T,), padding_mode=ct.PaddingMode.ZERO)
    if KB == OPERAND_SCALAR:
        y = ct.full((T,), sb, out.dtype)
    if KB == OPERAND_ELEMENT:
        y = ct.gather(b, first)
    if KC == OPERAND_ARRAY:
        z = ct.load(c, (blk,), (T,), padding_mode=ct.PaddingMode.ZERO)
    if KC == OPERAND_SCALAR:
        z = ct.full((T,), sc, out.dtype)
    if KC == OPERAND_ELEMENT:
        z = ct.gather(c, first)
    one = ct.full((T,), 1, out.dtype)
    zero = ct.full((T,), 0, out.dtype)
    if MODE == ADD:
        r = x + y
    if MODE == SUB:
        r = x - y
    if MODE == MUL:
        r = x * y
    if MODE == DIV:
        r = x / y  # IEEE round to nearest (cuTile's default for division)
    if MODE == MAXIMUM:
        r = ct.maximum(x, y, propagate_nan=True)
    if MODE == MINIMUM:
        r = ct.minimum(x, y, propagate_nan=True)
    if MODE == FMOD:  # C fmod (the sign of x), exact: Python's % of magnitudes is fmod's magnitude
        m = ct.abs(x) % ct.abs(y)
        r = ct.where(x < 0, -m, m)
    if MODE == POW:
        r = ct.pow(x, y)
    if MODE == EQ:
        r = ct.where(x == y, one, zero)
    if MODE == NE:
        r = ct.where(x != y, one, zero)
    if MODE == GT:
        r = ct.where(x > y, one, zero)
    if MODE == GE:
        r = ct.where(x >= y, one, zero)
    if MODE == LT:
        r = ct.where(x < y, one, zero)
    if MODE == LE:
        r = ct.where(x <= y, one, zero)
    if MODE == AND:
        r = ct.where((x != 0) & (y != 0), one, zero)
    if MODE == OR:
        r = ct.where((x != 0) | (y != 0), one, zero)
    if MODE == NOT:
        r = ct.where(x == 0, one, zero)
    if MODE == ABS:
        r = ct.abs(x)
    if MODE == NEG:
        r = -x
    if MODE == CEIL:
        r = ct.ceil(x)
    if MODE == FLOOR:
        r = ct.floor(x)
    if MODE == SQRT:
        r = ct.sqrt(x)
    if MODE == EXP:
        r = ct.exp(x)
    if MODE == LOG:
        r = ct.log(x)
    if MODE == SIN:
        r = ct.sin(x)
    if MODE == COS:
        r = ct.cos(x)
    if MODE == TAN:
        r = ct.tan(x)
    if MODE == TANH:
        r = ct.tanh(x)
    if MODE == WHERE:
        r = ct.where(x != 0, y, z)
    if MODE == FLOORDIV:
        r = x // y
    if MODE == PYMOD:
        r = x % y
    if MODE == NEXT_UP:  # one float64 ulp toward +inf (finite x)
        bits = ct.bitcast(x, ct.int64)
        up = ct.where(
            x > 0, bits + 1, ct.where(x < 0, bits - 1, ct.bitcast(ct.full((T,), 5e-324, ct.float64), ct.int64))
        )
        r = ct.bitcast(up, ct.float64)
    if MODE == NEXT_DOWN:
        bits = ct.bitcast(x, ct.int64)
        down = ct.where(
            x > 0, bits - 1, ct.where(x < 0, bits + 1, ct.bitcast(ct.full((T,), -5e-324, ct.float64), ct.int64))
        )
        r = ct.bitcast(down, ct.float64)
    if MODE == ISNAN:
        r = ct.where(x != x, one, zero)
    if MODE == COPY:
        r = x
    if MODE == INDEX:  # each element's flat index (no operand is read)
        r = blk * T + ct.arange(T, dtype=ct.int64)
    if MODE == FINITE:  # x - x is 0 at a finite x, NaN at an Inf or NaN
        r = ct.where(x - x == 0, one, zero)
    if MODE == MAGNITUDE:  # |x| where finite, else 0
        r = ct.where(x - x == 0, ct.abs(x), zero)
    if MODE == FINITE_OR_ZERO:
        r = ct.where(x - x == 0, x, zero)
    if MODE == FMAX:  # the larger; a NaN on one side gives the other (C's fmax)
        r = ct.where(x != x, y, ct.where(y != y, x, ct.maximum(x, y)))
    if MODE == ABS_ERROR:  # |x - y| where both are finite, else 0
        r = ct.where((x - x == 0) & (y - y == 0), ct.abs(x - y), zero)
    if MODE == FAILING:  # both finite and |x - y| > z, or not the same special value (NaN and NaN, Inf and Inf)
        both = (x - x == 0) & (y - y == 0)
        same = (x == y) | ((x != x) & (y != y))
        r = ct.where(both, ct.where(ct.abs(x - y) > z, one, zero), ct.where(same, zero, one))
    if MODE == ADD_MOD:  # (x + y) mod z, for x + y >= 0
        r = (x + y) % z
    if MODE == SQUARE_ADD_MOD:  # (x^2 + y) mod z, for x^2 + y below 2^63
        r = (x * x + y) % z
    if MODE == PARITY_SIGN:  # 1 for an even x, -1 for an odd one
        r = 1 - 2 * (x % 2)
    ct.store(out, (blk,), ct.astype(r, out.dtype))


@ct.kernel
def gemm(a, b, out, K, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    """out[p] = a[p] @ b[p] for each batch p in float64: per K tile, TK rank-1 updates acc + x[:, k] * y[k, :],
    which compile to DFMA (one rounding per product and sum, as a BLAS dgemm); a float64 ct.mma would compile to
    DMUL + DADD on sm_90 and spill (docs/experiments.md)."""
    i, j, p = ct.bid(0), ct.bid(1), ct.bid(2)
    acc = ct.full((TM, TN), 0.0, ct.float64)
    for k in range(ct.cdiv(K, TK)):
        x = ct.reshape(ct.load(a, (p, i, k), (1, TM, TK), padding_mode=ct.PaddingMode.ZERO), (TM, TK))
        y = ct.reshape(ct.load(b, (p, k, j), (1, TK, TN), padding_mode=ct.PaddingMode.ZERO), (TK, TN))
        for kk in ct.static_iter(range(TK)):
            acc = acc + ct.extract(x, (0, kk), (TM, 1)) * ct.extract(y, (kk, 0), (1, TN))
    ct.store(out, (p, i, j), ct.reshape(acc, (1, TM, TN)))


@ct.kernel
def integer_gemm(a, b, out, K, TM: ct.Constant[int], TN: ct.Constant[int]):
    """out[p] = a[p] @ b[p] in int64 (wrapping): one rank-1 update per k, every product a[m, k] b[k, n] formed."""
    i, j, p = ct.bid(0), ct.bid(1), ct.bid(2)
    acc = ct.full((TM, TN), 0, ct.int64)
    for k in range(K):
        x = ct.reshape(ct.load(a, (p, i, k), (1, TM, 1), padding_mode=ct.PaddingMode.ZERO), (TM, 1))
        y = ct.reshape(ct.load(b, (p, k, j), (1, 1, TN), padding_mode=ct.PaddingMode.ZERO), (1, TN))
        acc = acc + x * y
    ct.store(out, (p, i, j), ct.reshape(acc, (1, TM, TN)))


@ct.kernel
def sum_rows_in_order(x, out, N, TR: ct.Constant[int]):
    """out[r] = ((0 + x[r, 0]) + x[r, 1]) + ... + x[r, N - 1], left to right: TR rows a block, one column a step."""
    acc = ct.full((TR, 1), 0, x.dtype)
    for j in range(N):
        acc = acc + ct.load(x, (ct.bid(0), j), (TR, 1), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, (ct.bid(0), 0), acc)


@ct.kernel
def reduce_rows(x, out, N, identity: ct.Constant, T: ct.Constant[int], MODE: ct.Constant[int]):
    """out[r] = MODE over x[r, :N] (x is rows x N): sum, max, min or product; a NaN in a max / min row gives NaN.

    ``identity`` (0, -inf, inf, 1, or an integer type's extreme) fills the lanes past the row: a compile-time
    constant, since a launch argument arrives as an int32 / float32 and int64's extremes do not fit."""
    r = ct.bid(0)
    ident = ct.full((1, T), identity, x.dtype)
    acc = ident
    nans = ct.full((1, T), 0, ct.int32)
    for j in range(ct.cdiv(N, T)):
        v = ct.load(x, (r, j), (1, T), padding_mode=ct.PaddingMode.ZERO)
        live = (j * T + ct.arange(T, dtype=ct.int64)) < N
        v = ct.where(ct.reshape(live, (1, T)), v, ident)  # past the row: the identity
        nans = nans + ct.astype(v != v, ct.int32)
        if MODE == R_SUM:
            acc = acc + v
        if MODE == R_MAX:
            acc = ct.maximum(acc, v)
        if MODE == R_MIN:
            acc = ct.minimum(acc, v)
        if MODE == R_PROD:
            acc = acc * v
    if MODE == R_SUM:
        total = ct.sum(acc, axis=1)
    if MODE == R_MAX:
        total = ct.max(acc, axis=1)
    if MODE == R_MIN:
        total = ct.min(acc, axis=1)
    if MODE == R_PROD:
        total = ct.prod(acc, axis=1)
    if MODE == R_MAX or MODE == R_MIN:  # noqa: SIM109 (constant ==, folded by cuTile)
        total = ct.where(ct.sum(nans, axis=1) > 0, ct.astype(ct.full((1,), float("nan"), ct.float64), x.dtype), total)
    ct.store(out, (r,), total)
