"""The attention kernels, written against the cuTile API: the forward (scores, an online softmax and P V per
tile, described here), dq and dk / dv (described at each), over dense, padded or ragged (token-packed) tensors.

Never imported as a module: ``attention.py`` hands the text below the
marker line to the backend (cuda.tile, or in CPU tests ``emulator``'s NumPy
stand-in, binds ``ct``) with one line naming the kernel. A block owns TM
query rows of one (batch, query head); it walks the keys TN at a time:

    s = scale * q k^T (float32 sums), masked to -inf past the keys (and, causal, past the row: top-left)
    m' = max(m, rowmax(s)); p = exp(s - m'); l = l exp(m - m') + rowsum(p); acc = acc exp(m - m') + p v

and writes o = acc / l and, if asked, stats = m + log(l) (the rows' logsumexp). Query head h reads kv
head h // groups. q and k go to the first MMA in their dtype where they share a 16-bit one (the tensor
cores' products are exact in float32 sums; float32 operands make a float32 MMA, many times slower), else
widened to float32; p goes to the second in v's dtype where that is 16-bit (as flash attention rounds it),
else as float32. With sequence lengths the key loop stops at the sequence's last key tile and a query tile
past its last row walks none; rows and keys past the lengths take no part, whatever they hold.

Where a tensor's rows lie (``place``): a dense one arrives as its 4-D strided view, its rows i TM ... the
tile (b, h, i, 0) (a tile past its extent reads 0, a store past it is dropped). A ragged one (RAGGED_Q,
_K, _V, _O: q, k, v, o and the gradients and d_o they place) arrives as a [rows, width] view of its buffer,
width its head dim (elements side by side: the builder unpacks other layouts), with its ragged offsets:
batch entry b's sequence starts offsets[b] elements in, and position (h, s) is view row
offsets[b] // width + h row_h + s row_s. A tile of such rows is one load_advanced_indexing (the rows by a
sparse index tile, the head dim by a Slice, zero past the width); a row outside the view reads view row 0
instead (no load then lies wholly outside the view, which cuTile leaves undefined) and, like a row past the
sequence, is masked where it could reach a result. A store writes only the rows before the sequence's
length that lie inside the view, so a caller's buffer keeps what it holds outside the sequences: one
store_advanced_indexing where every row of the tile does, else (a sequence's last tile) a masked scatter,
bounds-checked element by element (cuTile documents no behaviour for a sparse index outside the view on a
store). An offset that is not a multiple of the width splits each of its sequence's rows over two view
rows; such blocks are served by a second launch of the same kernel (SHIFTED, a constant): a block per
(batch, head) walking its tiles, reading by element gathers and writing by the scatter, both
bounds-checked, while the first launch (a block per tile) skips them. Two launches, not a branch: one
kernel holding both bodies takes the registers and shared memory of both. So any offset table is served,
and none makes a block read or write outside a buffer. Row indices are int32: the builder keeps every
tensor's span below 2^31 elements.
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


def key_tiles(i, rows_end, keys_end, TM, TN, CAUSAL):
    """How many key tiles query tile i walks: those up to the sequence's last key (and, causal, its diagonal);
    none when the tile lies wholly past the sequence's last row (its rows keep o = 0, stats = -inf)."""
    tiles = ct.cdiv(keys_end, TN)
    if CAUSAL:  # a constant: cuTile compiles only the branch taken
        tiles = ct.minimum(tiles, ct.cdiv((i + 1) * TM, TN))
    return ct.where(i * TM < rows_end, tiles, 0)


def place(x, offsets, b, row_h, row_s, RAGGED):
    """Where batch entry b's rows of a tensor lie: (view, RAGGED, first, shift, row_h, row_s). Ragged (a constant):
    the sequence starts ``first`` whole rows plus ``shift`` elements into the [rows, width] view (floor division
    and its remainder, 0 <= shift < width), position (h, s) at row first + h row_h + s row_s; dense: first is b,
    the 4-D tile index."""
    if RAGGED:
        start = ct.reshape(ct.astype(ct.gather(offsets, ct.full((1,), b, dtype=ct.int32)), ct.int32), ())
        return x, RAGGED, start // x.shape[1], start % x.shape[1], row_h, row_s
    return x, RAGGED, b, 0, 0, 0


def serves(qp, kp, vp, op, SHIFTED):
    """Whether this launch serves the block: SHIFTED (a constant) serves the blocks where some ragged tensor's
    sequence (q, k, v, o; the gradients and d_o share their offsets) starts inside a view row, the other launch
    the rest. A dense tensor's shift is the constant 0, so with no ragged tensor this is a constant."""
    if SHIFTED:
        return qp[3] + kp[3] + vp[3] + op[3] != 0
    return qp[3] + kp[3] + vp[3] + op[3] == 0


def positions(i, ROWS):
    """Sequence positions i ROWS ... (i + 1) ROWS - 1, a (ROWS,) int32 tile."""
    return i * ROWS + ct.arange(ROWS, dtype=ct.int32)


def view_rows(where, h, i, ROWS):
    """The view rows of positions i ROWS ... of head h of a ragged tensor's sequence."""
    _, _, first, _, row_h, row_s = where
    return first + h * row_h + positions(i, ROWS) * row_s


def elements(x, rows, shift, ROWS, COLS):
    """(view row, column) index tiles of a ROWS x COLS tile whose row r holds the elements from ``shift`` into view
    row rows[r] on (running into the next view row), and where a column is one of the head dim's."""
    cols = ct.reshape(ct.arange(COLS, dtype=ct.int32), (1, COLS)) + shift
    width = x.shape[1]
    return (ct.reshape(rows, (ROWS, 1)) + cols // width, cols % width), cols < shift + width


def tile_2d(where, h, i, ROWS, COLS, SHIFTED):
    """Positions i ROWS ... of head h as a ROWS x COLS tile in the array's dtype: zero past the head dim and outside
    the array; rows past the sequence (or outside a ragged view) hold whatever lies there, for the callers to mask.
    SHIFTED (a constant): a ragged sequence may start inside a view row, so its tile is read element by element."""
    x, RAGGED, first, shift, _, _ = where
    if not RAGGED:
        tile = ct.load(x, index=(first, h, i, 0), shape=(1, 1, ROWS, COLS), padding_mode=ct.PaddingMode.ZERO)
        return ct.reshape(tile, (ROWS, COLS))
    rows = view_rows(where, h, i, ROWS)
    if SHIFTED:
        at, head_dim = elements(x, rows, shift, ROWS, COLS)
        return ct.gather(x, at, mask=head_dim)
    rows = ct.where((rows >= 0) & (rows < x.shape[0]), rows, 0)  # not a load wholly outside: undefined
    return ct.load_advanced_indexing(x, (rows, ct.Slice(0, COLS)), padding_mode=ct.PaddingMode.ZERO)


def scatter_rows(x, rows, shift, keep, tile, ROWS, COLS):
    """Store the head dim's columns of the rows ``keep`` holds, element by element (bounds-checked)."""
    at, head_dim = elements(x, rows, shift, ROWS, COLS)
    ct.scatter(x, at, tile, mask=ct.reshape(keep, (ROWS, 1)) & head_dim)


def store_2d(where, h, i, end, tile, ROWS, COLS, SHIFTED):
    """Store a ROWS x COLS tile at positions i ROWS ... of head h. Dense: the tile (rows past the sequence are the
    output's padding, unspecified). Ragged: only rows before ``end`` that lie inside the view, only the head dim."""
    x, RAGGED, first, shift, _, _ = where
    if not RAGGED:
        ct.store(x, index=(first, h, i, 0), tile=ct.reshape(tile, (1, 1, ROWS, COLS)))
    else:
        rows = view_rows(where, h, i, ROWS)
        keep = (positions(i, ROWS) < end) & (rows >= 0) & (rows < x.shape[0])
        if SHIFTED:
            scatter_rows(x, rows, shift, keep, tile, ROWS, COLS)
        elif ct.min(ct.astype(keep, ct.int32)) == 1:  # every row stored: whole view rows at once
            ct.store_advanced_indexing(x, (rows, ct.Slice(0, COLS)), tile)
        else:
            scatter_rows(x, rows, shift, keep, tile, ROWS, COLS)


def tile_f32(where, h, i, ROWS, COLS, SHIFTED):
    """The same tile in float32."""
    return ct.astype(tile_2d(where, h, i, ROWS, COLS, SHIFTED), ct.float32)


def operand(tile, WIDE, dtype):
    """A float32 tile as an MMA operand: as it is where WIDE (a constant), else in the 16-bit ``dtype``: exact for
    values read from such a tensor, one rounding for an intermediate (p, ds), which the tolerance of attention's
    gradients allows (flash attention rounds them so)."""
    if WIDE:
        return tile
    return ct.astype(tile, dtype)


def mma_tile(where, h, i, ROWS, COLS, WIDE, SHIFTED):
    """The tile as an MMA operand: widened to float32 where WIDE (a constant), else in the array's own 16-bit
    dtype, which the tensor cores multiply exactly into float32 sums."""
    if WIDE:
        return tile_f32(where, h, i, ROWS, COLS, SHIFTED)
    return tile_2d(where, h, i, ROWS, COLS, SHIFTED)


def masked(tile, keep):
    """The tile with the rows outside ``keep`` read as 0 (padding may hold anything, NaN included), in its dtype."""
    return ct.astype(ct.where(keep, tile, 0.0), tile.dtype)


@ct.kernel
def attention(
    q, k, v, o, stats, len_q, len_kv, q_off, k_off, v_off, o_off,
    heads, groups, sq, skv, scale, q_row_h, q_row_s, k_row_h, k_row_s, v_row_h, v_row_s, o_row_h, o_row_s,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TD: ct.Constant[int],
    TV: ct.Constant[int],
    CAUSAL: ct.Constant[bool],
    STATS: ct.Constant[bool],
    NARROW_P: ct.Constant[bool],
    LENGTHS: ct.Constant[bool],
    WIDE_QK: ct.Constant[bool],
    RAGGED_Q: ct.Constant[bool],
    RAGGED_K: ct.Constant[bool],
    RAGGED_V: ct.Constant[bool],
    RAGGED_O: ct.Constant[bool],
    SHIFTED: ct.Constant[bool],
):  # fmt: skip
    b = ct.bid(1) // heads
    qp = place(q, q_off, b, q_row_h, q_row_s, RAGGED_Q)
    kp = place(k, k_off, b, k_row_h, k_row_s, RAGGED_K)
    vp = place(v, v_off, b, v_row_h, v_row_s, RAGGED_V)
    op = place(o, o_off, b, o_row_h, o_row_s, RAGGED_O)
    ends = sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS)
    tiles = (TM, TN, TD, TV, CAUSAL, STATS, NARROW_P, WIDE_QK)
    if serves(qp, kp, vp, op, SHIFTED):
        if SHIFTED:  # a block per (batch, head) walks its tiles
            for i in range(ct.cdiv(sq, TM)):
                attend(qp, kp, vp, op, stats, ends, heads, groups, scale, tiles, i, SHIFTED)
        else:
            attend(qp, kp, vp, op, stats, ends, heads, groups, scale, tiles, ct.bid(0), SHIFTED)


def attend(qp, kp, vp, op, stats, ends, heads, groups, scale, tiles, i, SHIFTED):
    """Query tile i's forward (module docstring)."""
    TM, TN, TD, TV, CAUSAL, STATS, NARROW_P, WIDE_QK = tiles
    rows_end, keys_end = ends
    b = ct.bid(1) // heads
    h = ct.bid(1) % heads
    kv = h // groups
    qt = mma_tile(qp, h, i, TM, TD, WIDE_QK, SHIFTED)
    rows = ct.reshape(positions(i, TM), (TM, 1))
    neg_inf = -ct.bitcast(ct.full((TM, TN), INF_BITS, dtype=ct.int32), ct.float32)
    m = ct.reshape(ct.max(neg_inf, axis=1), (TM, 1))
    total = ct.full((TM, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TM, TV), 0.0, dtype=ct.float32)
    for j in range(key_tiles(i, rows_end, keys_end, TM, TN, CAUSAL)):
        kt = mma_tile(kp, kv, j, TN, TD, WIDE_QK, SHIFTED)
        key_rows = ct.reshape(positions(j, TN), (TN, 1))
        vt = masked(tile_2d(vp, kv, j, TN, TV, SHIFTED), key_rows < keys_end)
        s = ct.mma(qt, ct.transpose(kt), ct.full((TM, TN), 0.0, dtype=ct.float32)) * scale
        cols = ct.reshape(positions(j, TN), (1, TN))
        keep = (cols < keys_end) & (rows < rows_end)
        if CAUSAL:
            keep = keep & (cols <= rows)
        s = ct.where(keep, s, neg_inf)
        top = ct.maximum(m, ct.max(s, axis=1, keepdims=True))
        shift = ct.maximum(top, -3.0e38)  # a row with no key yet: exp(-inf - shift) = 0, not NaN
        alpha = ct.exp(m - shift)
        p = ct.exp(s - shift)
        total = total * alpha + ct.sum(p, axis=1, keepdims=True)
        if NARROW_P:
            pv = ct.mma(ct.astype(p, vt.dtype), vt, ct.full((TM, TV), 0.0, dtype=ct.float32))
        else:
            pv = ct.mma(p, ct.astype(vt, ct.float32), ct.full((TM, TV), 0.0, dtype=ct.float32))
        acc = acc * alpha + pv
        m = top
    out = ct.astype(acc / ct.maximum(total, 1.0e-30), op[0].dtype)  # total >= 1, or 0: o = 0
    store_2d(op, h, i, rows_end, out, TM, TV, SHIFTED)
    if STATS:
        lse = ct.reshape(m + ct.log(total), (1, 1, TM, 1))
        ct.store(stats, index=(b, h, i, 0), tile=ct.astype(lse, stats.dtype))


@ct.kernel
def attention_dq(
    q, k, v, o, d_o, stats, len_q, len_kv, q_off, k_off, v_off, o_off, dq,
    heads, groups, sq, skv, scale, q_row_h, q_row_s, k_row_h, k_row_s, v_row_h, v_row_s, o_row_h, o_row_s,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TD: ct.Constant[int],
    TV: ct.Constant[int],
    CAUSAL: ct.Constant[bool],
    LENGTHS: ct.Constant[bool],
    WIDE: ct.Constant[bool],
    RAGGED_Q: ct.Constant[bool],
    RAGGED_K: ct.Constant[bool],
    RAGGED_V: ct.Constant[bool],
    RAGGED_O: ct.Constant[bool],
    SHIFTED: ct.Constant[bool],
):  # fmt: skip
    # dq = scale * ds k over the keys, ds = p * (do v^T - rowsum(do * o)), p = exp(s - stats): a block owns TM
    # query rows of one (batch, query head), as the forward does. Rows and keys past the sequence lengths are
    # read as 0 (their p is 0, and whatever the padding holds must not meet it as 0 * NaN).
    b = ct.bid(1) // heads
    qp = place(q, q_off, b, q_row_h, q_row_s, RAGGED_Q)
    dqp = place(dq, q_off, b, q_row_h, q_row_s, RAGGED_Q)
    kp = place(k, k_off, b, k_row_h, k_row_s, RAGGED_K)
    vp = place(v, v_off, b, v_row_h, v_row_s, RAGGED_V)
    op = place(o, o_off, b, o_row_h, o_row_s, RAGGED_O)
    dop = place(d_o, o_off, b, o_row_h, o_row_s, RAGGED_O)
    statp = place(stats, len_q, b, 0, 0, False)
    ends = sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS)
    tiles = (TM, TN, TD, TV, CAUSAL, WIDE)
    if serves(qp, kp, vp, op, SHIFTED):
        if SHIFTED:  # a block per (batch, head) walks its tiles
            for i in range(ct.cdiv(sq, TM)):
                query_gradients(qp, kp, vp, op, dop, statp, dqp, ends, heads, groups, scale, tiles, i, SHIFTED)
        else:
            query_gradients(qp, kp, vp, op, dop, statp, dqp, ends, heads, groups, scale, tiles, ct.bid(0), SHIFTED)


def query_gradients(qp, kp, vp, op, dop, statp, dqp, ends, heads, groups, scale, tiles, i, SHIFTED):
    """Query tile i's dq (attention_dq)."""
    TM, TN, TD, TV, CAUSAL, WIDE = tiles
    rows_end, keys_end = ends
    h = ct.bid(1) % heads
    kv = h // groups
    rows = ct.reshape(positions(i, TM), (TM, 1))
    real = rows < rows_end
    qm = mma_tile(qp, h, i, TM, TD, WIDE, SHIFTED)
    dot = tile_f32(dop, h, i, TM, TV, SHIFTED)
    ot = tile_f32(op, h, i, TM, TV, SHIFTED)
    lse = tile_f32(statp, h, i, TM, 1, SHIFTED)
    dot = ct.where(real, dot, 0.0)
    delta = ct.sum(dot * ct.where(real, ot, 0.0), axis=1, keepdims=True)
    dom = operand(dot, WIDE, dop[0].dtype)
    acc = ct.full((TM, TD), 0.0, dtype=ct.float32)
    for j in range(key_tiles(i, rows_end, keys_end, TM, TN, CAUSAL)):
        key_rows = ct.reshape(positions(j, TN), (TN, 1))
        km = masked(mma_tile(kp, kv, j, TN, TD, WIDE, SHIFTED), key_rows < keys_end)
        vm = masked(mma_tile(vp, kv, j, TN, TV, WIDE, SHIFTED), key_rows < keys_end)
        s = ct.mma(qm, ct.transpose(km), ct.full((TM, TN), 0.0, dtype=ct.float32)) * scale
        cols = ct.reshape(positions(j, TN), (1, TN))
        keep = (cols < keys_end) & real
        if CAUSAL:
            keep = keep & (cols <= rows)
        p = ct.where(keep, ct.exp(s - lse), 0.0)
        dp = ct.mma(dom, ct.transpose(vm), ct.full((TM, TN), 0.0, dtype=ct.float32))
        acc = ct.mma(operand(p * (dp - delta), WIDE, km.dtype), km, acc)
    store_2d(dqp, h, i, rows_end, ct.astype(acc * scale, dqp[0].dtype), TM, TD, SHIFTED)


@ct.kernel
def attention_dkdv(
    q, k, v, o, d_o, stats, len_q, len_kv, q_off, k_off, v_off, o_off, dk, dv,
    heads, groups, sq, skv, scale, q_row_h, q_row_s, k_row_h, k_row_s, v_row_h, v_row_s, o_row_h, o_row_s,
    TM: ct.Constant[int],
    TN: ct.Constant[int],
    TD: ct.Constant[int],
    TV: ct.Constant[int],
    CAUSAL: ct.Constant[bool],
    LENGTHS: ct.Constant[bool],
    WIDE: ct.Constant[bool],
    RAGGED_Q: ct.Constant[bool],
    RAGGED_K: ct.Constant[bool],
    RAGGED_V: ct.Constant[bool],
    RAGGED_O: ct.Constant[bool],
    SHIFTED: ct.Constant[bool],
):  # fmt: skip
    # dv = p^T do and dk = scale * ds^T q, summed over the group's query heads and every query row: a block owns
    # TN keys of one (batch, kv head) and walks the query tiles that can see them; padding read as 0, as in dq.
    b = ct.bid(1) // (heads // groups)
    qp = place(q, q_off, b, q_row_h, q_row_s, RAGGED_Q)
    kp = place(k, k_off, b, k_row_h, k_row_s, RAGGED_K)
    dkp = place(dk, k_off, b, k_row_h, k_row_s, RAGGED_K)
    vp = place(v, v_off, b, v_row_h, v_row_s, RAGGED_V)
    dvp = place(dv, v_off, b, v_row_h, v_row_s, RAGGED_V)
    op = place(o, o_off, b, o_row_h, o_row_s, RAGGED_O)
    dop = place(d_o, o_off, b, o_row_h, o_row_s, RAGGED_O)
    statp = place(stats, len_q, b, 0, 0, False)
    ends = sequence_ends(len_q, len_kv, b, sq, skv, LENGTHS)
    tiles = (TM, TN, TD, TV, CAUSAL, WIDE)
    if serves(qp, kp, vp, op, SHIFTED):
        if SHIFTED:  # a block per (batch, kv head) walks its tiles
            for j in range(ct.cdiv(skv, TN)):
                key_gradients(qp, kp, vp, op, dop, statp, dkp, dvp, ends, heads, groups, scale, tiles, j, SHIFTED)
        else:
            key_gradients(qp, kp, vp, op, dop, statp, dkp, dvp, ends, heads, groups, scale, tiles, ct.bid(0), SHIFTED)


def key_gradients(qp, kp, vp, op, dop, statp, dkp, dvp, ends, heads, groups, scale, tiles, j, SHIFTED):
    """Key tile j's dk and dv (attention_dkdv)."""
    TM, TN, TD, TV, CAUSAL, WIDE = tiles
    rows_end, keys_end = ends
    kv = ct.bid(1) % (heads // groups)
    key_rows = ct.reshape(positions(j, TN), (TN, 1))
    km = masked(mma_tile(kp, kv, j, TN, TD, WIDE, SHIFTED), key_rows < keys_end)
    vm = masked(mma_tile(vp, kv, j, TN, TV, WIDE, SHIFTED), key_rows < keys_end)
    cols = ct.reshape(positions(j, TN), (1, TN))
    dk_acc = ct.full((TN, TD), 0.0, dtype=ct.float32)
    dv_acc = ct.full((TN, TV), 0.0, dtype=ct.float32)
    first = 0
    if CAUSAL:  # query tiles wholly above the diagonal see none of these keys
        first = j * TN // TM
    last = ct.where(j * TN < keys_end, ct.cdiv(rows_end, TM), 0)  # keys wholly past the sequence: no query tile
    for g in range(groups):
        h = kv * groups + g
        for i in range(first, last):
            rows = ct.reshape(positions(i, TM), (TM, 1))
            real = rows < rows_end
            qm = masked(mma_tile(qp, h, i, TM, TD, WIDE, SHIFTED), real)
            dot = ct.where(real, tile_f32(dop, h, i, TM, TV, SHIFTED), 0.0)
            ot = ct.where(real, tile_f32(op, h, i, TM, TV, SHIFTED), 0.0)
            lse = tile_f32(statp, h, i, TM, 1, SHIFTED)
            dom = operand(dot, WIDE, dop[0].dtype)
            s = ct.mma(qm, ct.transpose(km), ct.full((TM, TN), 0.0, dtype=ct.float32)) * scale
            keep = (cols < keys_end) & real
            if CAUSAL:
                keep = keep & (cols <= rows)
            p = ct.where(keep, ct.exp(s - lse), 0.0)
            dv_acc = ct.mma(operand(ct.transpose(p), WIDE, dop[0].dtype), dom, dv_acc)
            dp = ct.mma(dom, ct.transpose(vm), ct.full((TM, TN), 0.0, dtype=ct.float32))
            ds = p * (dp - ct.sum(dot * ot, axis=1, keepdims=True))
            dk_acc = ct.mma(operand(ct.transpose(ds), WIDE, qm.dtype), qm, dk_acc)
    store_2d(dkp, kv, j, keys_end, ct.astype(dk_acc * scale, dkp[0].dtype), TN, TD, SHIFTED)
    store_2d(dvp, kv, j, keys_end, ct.astype(dv_acc, dvp[0].dtype), TN, TV, SHIFTED)
