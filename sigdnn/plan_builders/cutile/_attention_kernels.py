"""The attention kernels, written against the cuTile API: the forward (scores, an online softmax and P V per
tile, described here), dq and dk / dv (described at each).

Never imported as a module: ``attention.py`` hands the text below the
marker line to the backend (cuda.tile, or in CPU tests ``emulator``'s NumPy
stand-in, binds ``ct``) with one line naming the kernel. A block owns TM
query rows of one (batch, query head); it walks the keys TN at a time:

    s = scale * q k^T (float32 sums), masked to -inf past the keys and outside the diagonal band
    m' = max(m, rowmax(s)); p = exp(s - m'); l = l exp(m - m') + rowsum(p); acc = acc exp(m - m') + p v

and writes o = acc / l and, if asked, stats = m + log(l) (the rows' logsumexp). Query head h reads kv
head h // groups. q, k, v, o and stats arrive as 4-D strided views; a tile past their extent reads 0 (a
head dim below the tile's power of two included) and a store past it is dropped. q and k go to the first
MMA in their dtype where they share a 16-bit one (the tensor cores' products are exact in float32 sums;
float32 operands make a float32 MMA, many times slower), else widened to float32; p goes to the second in
v's dtype where that is 16-bit (as flash attention rounds it), else as float32. With sequence lengths the
key loop stops at the sequence's last key tile and a query tile past its last row walks none.

The diagonal band (docs/ops.md, sdpa): with alignment a = 0, or keys_end - rows_end where BOTTOM_RIGHT, key j is
visible to row i when i + a - left < j (LEFT) and j <= i + a + right (RIGHT); the causal mask is RIGHT with
right 0. LEFT and RIGHT are constants (a kernel without a bound compiles none of its arithmetic); left and right
arrive clamped to +-(Sq + Skv), past which a bound hides all or nothing, so no sum here leaves int32. Each loop
walks only the tiles the band reaches: the keys of a query tile from its first row's lowest visible key to its
last row's highest, the query tiles of a key tile likewise.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----

INF_BITS = 0x7F800000  # float32 +inf's bits (a float literal inf is not a constant cuTile takes)


def sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS):
    """(rows_end, keys_end) of batch entry b as scalars: its sequence lengths where the node has them, clamped to
    [0, sq] and [0, skv] (rows and keys past them take no part, and the loops stop at them, so a hostile length
    bounds the work; LENGTHS is a constant, so cuTile compiles only the branch taken), else sq and skv."""
    if LENGTHS:
        batch = ct.full((1,), b, dtype=ct.int32)
        rows_end = ct.reshape(ct.astype(ct.gather(len_q, batch), ct.int32), ())
        keys_end = ct.reshape(ct.astype(ct.gather(len_kv, batch), ct.int32), ())
        return ct.maximum(ct.minimum(rows_end, sq), 0), ct.maximum(ct.minimum(keys_end, skv), 0)
    return sq, skv


def alignment(rows_end, keys_end, BOTTOM_RIGHT):
    """The band's alignment a: 0 (top-left), or keys_end - rows_end (bottom-right: the last row faces the last key)."""
    if BOTTOM_RIGHT:  # a constant: cuTile compiles only the branch taken
        return keys_end - rows_end
    return 0


def key_span(i, rows_end, keys_end, align, left, right, TM, TN, LEFT, RIGHT):
    """(first, end): the key tiles query tile i walks, those up to the sequence's last key that the band reaches
    from the tile's rows; none when the tile lies wholly past the sequence's last row (its rows keep o = 0,
    stats = -inf), or where the band leaves its rows no key (first >= end)."""
    end = ct.cdiv(keys_end, TN)
    if RIGHT:  # the last row's highest key: (i + 1) TM - 1 + a + right
        end = ct.minimum(end, ct.cdiv(ct.maximum((i + 1) * TM + align + right, 0), TN))
    first = 0
    if LEFT:  # the first row's lowest key: i TM + a - left + 1
        first = ct.maximum(i * TM + align - left + 1, 0) // TN
    return first, ct.where(i * TM < rows_end, end, 0)


def query_span(j, rows_end, keys_end, align, left, right, TM, TN, LEFT, RIGHT):
    """(first, end): the query tiles whose rows see any of key tile j's keys (key c is seen by the rows
    c - a - right <= i < c - a + left); none when the tile lies wholly past the sequence's last key."""
    end = ct.cdiv(rows_end, TM)
    if LEFT:  # the last key's highest row: (j + 1) TN - 1 - a + left - 1
        end = ct.minimum(end, ct.cdiv(ct.maximum((j + 1) * TN - 1 - align + left, 0), TM))
    first = 0
    if RIGHT:  # the first key's lowest row: j TN - a - right
        first = ct.maximum(j * TN - align - right, 0) // TM
    return first, ct.where(j * TN < keys_end, end, 0)


def band_kept(keep, rows, cols, align, left, right, LEFT, RIGHT):
    """keep, narrowed to the band: cols <= rows + a + right, cols > rows + a - left (each where given)."""
    if RIGHT:
        keep = keep & (cols <= rows + (align + right))
    if LEFT:
        keep = keep & (cols > rows + (align - left))
    return keep


def tile_2d(array, index, rows, cols):
    """The rows x cols tile of a 4-D view at ``index`` (zero past its extent), 2-D, in the array's dtype."""
    tile = ct.load(array, index=index, shape=(1, 1, rows, cols), padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(tile, (rows, cols))


def tile_f32(array, index, rows, cols):
    """The same tile in float32."""
    return ct.astype(tile_2d(array, index, rows, cols), ct.float32)


def operand(tile, WIDE, dtype):
    """A float32 tile as an MMA operand: as it is where WIDE (a constant), else in the 16-bit ``dtype``: exact for
    values read from such a tensor, one rounding for an intermediate (p, ds), which the tolerance of attention's
    gradients allows (flash attention rounds them so)."""
    if WIDE:
        return tile
    return ct.astype(tile, dtype)


def mma_tile(array, index, rows, cols, WIDE):
    """The tile as an MMA operand: widened to float32 where WIDE (a constant), else in the array's own 16-bit
    dtype, which the tensor cores multiply exactly into float32 sums."""
    if WIDE:
        return tile_f32(array, index, rows, cols)
    return tile_2d(array, index, rows, cols)


def masked(tile, keep):
    """The tile with the rows outside ``keep`` read as 0 (padding may hold anything, NaN included), in its dtype."""
    return ct.astype(ct.where(keep, tile, 0.0), tile.dtype)


@ct.kernel
def attention(
    q, k, v, o, stats, len_q, len_kv,
    heads, groups, sq, skv, scale, left, right,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TD: ct.Constant[int],
    TV: ct.Constant[int],
    LEFT: ct.Constant[bool],
    RIGHT: ct.Constant[bool],
    BOTTOM_RIGHT: ct.Constant[bool],
    STATS: ct.Constant[bool],
    NARROW_P: ct.Constant[bool],
    LENGTHS: ct.Constant[bool],
    WIDE_QK: ct.Constant[bool],
):  # fmt: skip
    i = ct.bid(0)
    b = ct.bid(1) // heads
    h = ct.bid(1) % heads
    kv = h // groups
    rows_end, keys_end = sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS)
    align = alignment(rows_end, keys_end, BOTTOM_RIGHT)
    qt = mma_tile(q, (b, h, i, 0), TM, TD, WIDE_QK)
    rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    neg_inf = -ct.bitcast(ct.full((TM, TN), INF_BITS, dtype=ct.int32), ct.float32)
    m = ct.reshape(ct.max(neg_inf, axis=1), (TM, 1))
    total = ct.full((TM, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TM, TV), 0.0, dtype=ct.float32)
    first, end = key_span(i, rows_end, keys_end, align, left, right, TM, TN, LEFT, RIGHT)
    for j in range(first, end):
        kt = mma_tile(k, (b, kv, j, 0), TN, TD, WIDE_QK)
        key_rows = ct.reshape(j * TN + ct.arange(TN, dtype=ct.int32), (TN, 1))
        vt = masked(tile_2d(v, (b, kv, j, 0), TN, TV), key_rows < keys_end)
        s = ct.mma(qt, ct.transpose(kt), ct.full((TM, TN), 0.0, dtype=ct.float32)) * scale
        cols = ct.reshape(j * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
        keep = band_kept((cols < keys_end) & (rows < rows_end), rows, cols, align, left, right, LEFT, RIGHT)
        s = ct.where(keep, s, neg_inf)
        top = ct.maximum(m, ct.max(s, axis=1, keepdims=True))
        shift = ct.maximum(top, -3.0e38)  # a row with no key yet: exp(-inf - shift) = 0, not NaN
        alpha = ct.exp(m - shift)
        p = ct.exp(s - shift)
        total = total * alpha + ct.sum(p, axis=1, keepdims=True)
        if NARROW_P:
            pv = ct.mma(ct.astype(p, v.dtype), vt, ct.full((TM, TV), 0.0, dtype=ct.float32))
        else:
            pv = ct.mma(p, ct.astype(vt, ct.float32), ct.full((TM, TV), 0.0, dtype=ct.float32))
        acc = acc * alpha + pv
        m = top
    out = ct.reshape(ct.astype(acc / ct.maximum(total, 1.0e-30), o.dtype), (1, 1, TM, TV))  # total >= 1, or 0: o = 0
    ct.store(o, index=(b, h, i, 0), tile=out)
    if STATS:
        lse = ct.reshape(m + ct.log(total), (1, 1, TM, 1))
        ct.store(stats, index=(b, h, i, 0), tile=ct.astype(lse, stats.dtype))


@ct.kernel
def attention_dq(
    q, k, v, o, d_o, stats, len_q, len_kv, dq,
    heads, groups, sq, skv, scale, left, right,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TD: ct.Constant[int],
    TV: ct.Constant[int],
    LEFT: ct.Constant[bool],
    RIGHT: ct.Constant[bool],
    BOTTOM_RIGHT: ct.Constant[bool],
    LENGTHS: ct.Constant[bool],
    WIDE: ct.Constant[bool],
):  # fmt: skip
    # dq = scale * ds k over the keys, ds = p * (do v^T - rowsum(do * o)), p = exp(s - stats): a block owns TM
    # query rows of one (batch, query head), as the forward does. Rows and keys past the sequence lengths are
    # read as 0 (their p is 0, and whatever the padding holds must not meet it as 0 * NaN).
    i = ct.bid(0)
    b = ct.bid(1) // heads
    h = ct.bid(1) % heads
    kv = h // groups
    rows_end, keys_end = sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS)
    align = alignment(rows_end, keys_end, BOTTOM_RIGHT)
    rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    real = rows < rows_end
    qm = mma_tile(q, (b, h, i, 0), TM, TD, WIDE)
    dot = tile_f32(d_o, (b, h, i, 0), TM, TV)
    ot = tile_f32(o, (b, h, i, 0), TM, TV)
    lse = tile_f32(stats, (b, h, i, 0), TM, 1)
    dot = ct.where(real, dot, 0.0)
    delta = ct.sum(dot * ct.where(real, ot, 0.0), axis=1, keepdims=True)
    dom = operand(dot, WIDE, d_o.dtype)
    acc = ct.full((TM, TD), 0.0, dtype=ct.float32)
    first, end = key_span(i, rows_end, keys_end, align, left, right, TM, TN, LEFT, RIGHT)
    for j in range(first, end):
        key_rows = ct.reshape(j * TN + ct.arange(TN, dtype=ct.int32), (TN, 1))
        km = masked(mma_tile(k, (b, kv, j, 0), TN, TD, WIDE), key_rows < keys_end)
        vm = masked(mma_tile(v, (b, kv, j, 0), TN, TV, WIDE), key_rows < keys_end)
        s = ct.mma(qm, ct.transpose(km), ct.full((TM, TN), 0.0, dtype=ct.float32)) * scale
        cols = ct.reshape(j * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
        keep = band_kept((cols < keys_end) & real, rows, cols, align, left, right, LEFT, RIGHT)
        p = ct.where(keep, ct.exp(s - lse), 0.0)
        dp = ct.mma(dom, ct.transpose(vm), ct.full((TM, TN), 0.0, dtype=ct.float32))
        acc = ct.mma(operand(p * (dp - delta), WIDE, k.dtype), km, acc)
    ct.store(dq, index=(b, h, i, 0), tile=ct.reshape(ct.astype(acc * scale, dq.dtype), (1, 1, TM, TD)))


@ct.kernel
def attention_dkdv(
    q, k, v, o, d_o, stats, len_q, len_kv, dk, dv,
    heads, groups, sq, skv, scale, left, right,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TD: ct.Constant[int],
    TV: ct.Constant[int],
    LEFT: ct.Constant[bool],
    RIGHT: ct.Constant[bool],
    BOTTOM_RIGHT: ct.Constant[bool],
    LENGTHS: ct.Constant[bool],
    WIDE: ct.Constant[bool],
):  # fmt: skip
    # dv = p^T do and dk = scale * ds^T q, summed over the group's query heads and every query row: a block owns
    # TN keys of one (batch, kv head) and walks the query tiles that can see them; padding read as 0, as in dq.
    j = ct.bid(0)
    b = ct.bid(1) // (heads // groups)
    kv = ct.bid(1) % (heads // groups)
    rows_end, keys_end = sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS)
    align = alignment(rows_end, keys_end, BOTTOM_RIGHT)
    key_rows = ct.reshape(j * TN + ct.arange(TN, dtype=ct.int32), (TN, 1))
    km = masked(mma_tile(k, (b, kv, j, 0), TN, TD, WIDE), key_rows < keys_end)
    vm = masked(mma_tile(v, (b, kv, j, 0), TN, TV, WIDE), key_rows < keys_end)
    cols = ct.reshape(j * TN + ct.arange(TN, dtype=ct.int32), (1, TN))
    dk_acc = ct.full((TN, TD), 0.0, dtype=ct.float32)
    dv_acc = ct.full((TN, TV), 0.0, dtype=ct.float32)
    first, end = query_span(j, rows_end, keys_end, align, left, right, TM, TN, LEFT, RIGHT)
    for g in range(groups):
        h = kv * groups + g
        for i in range(first, end):
            rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
            real = rows < rows_end
            qm = masked(mma_tile(q, (b, h, i, 0), TM, TD, WIDE), real)
            dot = ct.where(real, tile_f32(d_o, (b, h, i, 0), TM, TV), 0.0)
            ot = ct.where(real, tile_f32(o, (b, h, i, 0), TM, TV), 0.0)
            lse = tile_f32(stats, (b, h, i, 0), TM, 1)
            dom = operand(dot, WIDE, d_o.dtype)
            s = ct.mma(qm, ct.transpose(km), ct.full((TM, TN), 0.0, dtype=ct.float32)) * scale
            keep = band_kept((cols < keys_end) & real, rows, cols, align, left, right, LEFT, RIGHT)
            p = ct.where(keep, ct.exp(s - lse), 0.0)
            dv_acc = ct.mma(operand(ct.transpose(p), WIDE, d_o.dtype), dom, dv_acc)
            dp = ct.mma(dom, ct.transpose(vm), ct.full((TM, TN), 0.0, dtype=ct.float32))
            ds = p * (dp - ct.sum(dot * ot, axis=1, keepdims=True))
            dk_acc = ct.mma(operand(ct.transpose(ds), WIDE, q.dtype), qm, dk_acc)
    ct.store(dk, index=(b, kv, j, 0), tile=ct.reshape(ct.astype(dk_acc * scale, dk.dtype), (1, 1, TN, TD)))
    ct.store(dv, index=(b, kv, j, 0), tile=ct.reshape(ct.astype(dv_acc, dv.dtype), (1, 1, TN, TV)))
