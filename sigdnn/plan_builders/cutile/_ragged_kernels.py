"""Ragged (token-packed) attention tensors to and from a padded [B, H, S, E] layout, written against the cuTile API.

Never imported as a module: ``attention.py`` hands the text below the
marker line to the backend with one line naming the kernel. A ragged
tensor's element (b, h, s, e) lives at offsets[b] + h * stride_h + s *
stride_s + e * stride_e of its buffer (docs/ops.md, "Variable lengths");
only rows s < lengths[b] belong to the sequence. A block moves TS rows of
one (batch, head):

    unpack: padded[b, h, s, e] = buffer[offsets[b] + ...] for s < min(lengths[b], S), else 0
    pack:   buffer[offsets[b] + ...] = padded[b, h, s, e] for s < min(lengths[b], S); nothing else is written

so the attention kernels run on the padded copy with the padding masks, and
an output's buffer keeps what it held outside the sequences. An element
offset outside the buffer reads 0 and is not written (gather and scatter
check bounds): a hostile offset table cannot fault, whatever it makes of the
result.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----


def sequence_tile(offsets, lengths, heads, seq, dim, stride_h, stride_s, stride_e, TS, TE):
    """(b, h, i, where): the block's (batch, head) and row tile, and the buffer offsets of its TS x TE elements,
    -1 (outside every array: read as 0, never written) past the sequence's length, S or the head dim."""
    i = ct.bid(0)
    b = ct.bid(1) // heads
    h = ct.bid(1) % heads
    batch = ct.full((1,), b, dtype=ct.int32)
    start = ct.reshape(ct.astype(ct.gather(offsets, batch), ct.int32), (1, 1))
    end = ct.minimum(ct.reshape(ct.astype(ct.gather(lengths, batch), ct.int32), (1, 1)), seq)
    rows = ct.reshape(i * TS + ct.arange(TS, dtype=ct.int32), (TS, 1))
    cols = ct.reshape(ct.arange(TE, dtype=ct.int32), (1, TE))
    at = start + h * stride_h + rows * stride_s + cols * stride_e
    return b, h, i, ct.where((rows < end) & (cols < dim), at, -1)


@ct.kernel
def ragged_unpack(
    packed, offsets, lengths, padded,
    heads, seq, dim, stride_h, stride_s, stride_e,
    TS: ct.Constant[int],
    TE: ct.Constant[int],
):  # fmt: skip
    b, h, i, where = sequence_tile(offsets, lengths, heads, seq, dim, stride_h, stride_s, stride_e, TS, TE)
    ct.store(padded, index=(b, h, i, 0), tile=ct.reshape(ct.gather(packed, where), (1, 1, TS, TE)))


@ct.kernel
def ragged_pack(
    padded, offsets, lengths, packed,
    heads, seq, dim, stride_h, stride_s, stride_e,
    TS: ct.Constant[int],
    TE: ct.Constant[int],
):  # fmt: skip
    b, h, i, where = sequence_tile(offsets, lengths, heads, seq, dim, stride_h, stride_s, stride_e, TS, TE)
    tile = ct.load(padded, index=(b, h, i, 0), shape=(1, 1, TS, TE), padding_mode=ct.PaddingMode.ZERO)
    ct.scatter(packed, where, ct.reshape(tile, (TS, TE)))
