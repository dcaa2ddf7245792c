"""Ragged (token-packed) attention tensors to and from a padded [B, H, S, E] layout, written against the cuTile API.

Never imported as a module: ``attention.py`` hands the text below the
marker line to the backend with one line naming the kernel. A ragged
tensor's element (b, h, s, e) lives at offsets[b] + h * stride_h + s *
stride_s + e * stride_e of its buffer (docs/ops.md, "Variable lengths");
only rows s < lengths[b] belong to the sequence. A block moves TS rows of
one (batch, head):

    unpack: padded[b, h, s, e] = buffer[offsets[b] + ...] for s < min(lengths[b], S); tiles wholly past
            that are not written (the attention kernels mask every row and key past the lengths)
    pack:   buffer[offsets[b] + ...] = padded[b, h, s, e] for s < min(lengths[b], S); nothing else is written

so the attention kernels run on the padded copy with the padding masks, and
an output's buffer keeps what it held outside the sequences. Where a
sequence's offset falls on a row of the buffer (every token-packed layout),
its rows are moved as tiles of a slice of the buffer's (1, H, rows, E) view;
elsewhere element by element. An element offset outside the buffer reads 0
and is not written (gather and scatter check bounds; a slice is taken only
where every row of the sequence lies inside the view): a hostile offset
table cannot fault, whatever it makes of the result.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----


def sequence_tile(offsets, lengths, heads, seq):
    """(b, h, i, start, end): the block's (batch, head) and row tile, its sequence's offset and rows (clamped
    to S)."""
    i = ct.bid(0)
    b = ct.bid(1) // heads
    h = ct.bid(1) % heads
    batch = ct.full((1,), b, dtype=ct.int32)
    start = ct.reshape(ct.astype(ct.gather(offsets, batch), ct.int32), ())
    end = ct.minimum(ct.reshape(ct.astype(ct.gather(lengths, batch), ct.int32), ()), seq)
    return b, h, i, start, end


def element_places(start, end, h, i, dim, stride_h, stride_s, stride_e, TS, TE):
    """The buffer offsets of row tile i's TS x TE elements of head h, -1 (outside every array: read as 0, never
    written) past the sequence's length, S or the head dim: what a sequence off every row moves by."""
    rows = ct.reshape(i * TS + ct.arange(TS, dtype=ct.int32), (TS, 1))
    cols = ct.reshape(ct.arange(TE, dtype=ct.int32), (1, TE))
    at = start + h * stride_h + rows * stride_s + cols * stride_e
    return ct.where((rows < end) & (cols < dim), at, -1)


def whole_rows(start, end, step, rows):
    """(first, whole): the row of ``rows`` (1, H, R, E over the buffer, R rows ``step`` apart) the sequence starts
    at, and whether its ``end`` rows are one slice of it: its offset on a row, every row inside (asked as first <=
    R - end: first + end could wrap int32 for a hostile offset)."""
    first = start // step
    return first, (first * step == start) & (first >= 0) & (end > 0) & (first <= rows.shape[2] - end)


@ct.kernel
def ragged_unpack(
    packed, rows, offsets, lengths, padded,
    heads, seq, dim, stride_h, stride_s, stride_e, step,
    TS: ct.Constant[int],
    TE: ct.Constant[int],
):  # fmt: skip
    b, h, i, start, end = sequence_tile(offsets, lengths, heads, seq)
    if i * TS < end:  # rows past the sequence are left as they are: the attention kernels mask past each length
        first, whole = whole_rows(start, end, step, rows)
        if whole:  # a tile of the sequence's rows, read as a dense tensor's
            run = rows.slice(2, first, first + end)
            tile = ct.load(run, index=(0, h, i, 0), shape=(1, 1, TS, TE), padding_mode=ct.PaddingMode.ZERO)
        else:
            where = element_places(start, end, h, i, dim, stride_h, stride_s, stride_e, TS, TE)
            tile = ct.reshape(ct.gather(packed, where), (1, 1, TS, TE))
        ct.store(padded, index=(b, h, i, 0), tile=tile)


@ct.kernel
def ragged_pack(
    padded, offsets, lengths, packed, rows,
    heads, seq, dim, stride_h, stride_s, stride_e, step,
    TS: ct.Constant[int],
    TE: ct.Constant[int],
):  # fmt: skip
    b, h, i, start, end = sequence_tile(offsets, lengths, heads, seq)
    if i * TS < end:
        tile = ct.load(padded, index=(b, h, i, 0), shape=(1, 1, TS, TE), padding_mode=ct.PaddingMode.ZERO)
        first, whole = whole_rows(start, end, step, rows)
        if whole:  # the slice's extent drops the rows past the sequence
            ct.store(rows.slice(2, first, first + end), index=(0, h, i, 0), tile=tile)
        else:
            where = element_places(start, end, h, i, dim, stride_h, stride_s, stride_e, TS, TE)
            ct.scatter(packed, where, ct.reshape(tile, (TS, TE)))
