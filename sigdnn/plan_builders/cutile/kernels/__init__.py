"""cuTile kernels for pointwise ops; every one computes in float32.

This module imports ``cuda.tile`` at the top, so only import it lazily (at
build / launch time): :mod:`.pointwise` does. cuTile compiles each kernel once
per specialization (argument dtypes, rank, alignment and the ``Constant``
parameters) and caches it, so a plan that reuses its kernel and constants
never compiles twice.

Two shapes of kernel:
- ``*_dense``: all operands walk one flat, packed index space; a block loads
  one tile of ``tile`` elements per operand (the last tile is partial: cuTile
  bounds-checks the load and drops the out-of-range part of the store).
- ``*_strided``: the output is packed, inputs are any non-negative strided
  view of at most 4 collapsed dims (stride 0 broadcasts); each block derives
  every input's element offsets from the flat output index and gathers.
"""

from __future__ import annotations

import cuda.tile as ct

# Op codes (the kernels' ``op`` constant).
ADD = 0
MUL = 1
RELU = 2
TANH = 3

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]
ConstBool = ct.Constant[bool]


@ct.function
def _binary(op, x, y):
    # Statement-form branches on constants: cuTile folds them at compile time.
    if op == ADD:  # noqa: SIM108
        r = x + y
    else:
        r = x * y
    return r


@ct.function
def _unary(op, x, lo, slope, has_hi, hi):
    if op == RELU:
        # OPS.md relu_fwd: x <= L -> L + s(x - L); x >= U -> U; else x (the lower
        # clip wins, as in the reference). NaN fails both comparisons and stays
        # NaN; with s = 0, -inf gives L (not 0 * -inf).
        r = x
        if has_hi:
            r = ct.where(x >= hi, hi, r)
        if slope == 0.0:  # noqa: SIM108
            r = ct.where(x <= lo, lo, r)
        else:
            r = ct.where(x <= lo, lo + slope * (x - lo), r)
    else:
        r = ct.tanh(x, rounding_mode=ct.RoundingMode.FULL)
    return r


@ct.kernel
def binary_dense(a, b, out, op: ConstInt, tile: ConstInt):
    bid = ct.bid(0)
    x = ct.astype(ct.load(a, index=(bid,), shape=(tile,)), ct.float32)
    y = ct.astype(ct.load(b, index=(bid,), shape=(tile,)), ct.float32)
    ct.store(out, index=(bid,), tile=ct.astype(_binary(op, x, y), out.dtype))


@ct.kernel
def unary_dense(
    a,
    out,
    op: ConstInt,
    lo: ConstFloat,
    slope: ConstFloat,
    has_hi: ConstBool,
    hi: ConstFloat,
    tile: ConstInt,
):
    bid = ct.bid(0)
    x = ct.astype(ct.load(a, index=(bid,), shape=(tile,)), ct.float32)
    r = _unary(op, x, lo, slope, has_hi, hi)
    ct.store(out, index=(bid,), tile=ct.astype(r, out.dtype))


@ct.function
def _offsets(i, d1, d2, d3, s0, s1, s2, s3):
    """Element offsets of flat output index ``i`` in a view of strides s0..s3."""
    i3 = i % d3
    q = i // d3
    i2 = q % d2
    q = q // d2
    i1 = q % d1
    i0 = q // d1
    return i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3


@ct.kernel
def binary_strided(
    a,
    b,
    out,
    d1: ConstInt,
    d2: ConstInt,
    d3: ConstInt,
    a0: ConstInt,
    a1: ConstInt,
    a2: ConstInt,
    a3: ConstInt,
    b0: ConstInt,
    b1: ConstInt,
    b2: ConstInt,
    b3: ConstInt,
    op: ConstInt,
    tile: ConstInt,
):
    bid = ct.bid(0)
    i = bid * tile + ct.arange(tile, dtype=ct.int32)
    # Lanes past the end compute in-range or bounds-checked offsets; their
    # results are dropped by the bounds-checked store.
    x = ct.astype(ct.gather(a, _offsets(i, d1, d2, d3, a0, a1, a2, a3)), ct.float32)
    y = ct.astype(ct.gather(b, _offsets(i, d1, d2, d3, b0, b1, b2, b3)), ct.float32)
    ct.store(out, index=(bid,), tile=ct.astype(_binary(op, x, y), out.dtype))


@ct.kernel
def unary_strided(
    a,
    out,
    d1: ConstInt,
    d2: ConstInt,
    d3: ConstInt,
    a0: ConstInt,
    a1: ConstInt,
    a2: ConstInt,
    a3: ConstInt,
    op: ConstInt,
    lo: ConstFloat,
    slope: ConstFloat,
    has_hi: ConstBool,
    hi: ConstFloat,
    tile: ConstInt,
):
    bid = ct.bid(0)
    i = bid * tile + ct.arange(tile, dtype=ct.int32)
    x = ct.astype(ct.gather(a, _offsets(i, d1, d2, d3, a0, a1, a2, a3)), ct.float32)
    r = _unary(op, x, lo, slope, has_hi, hi)
    ct.store(out, index=(bid,), tile=ct.astype(r, out.dtype))


launch = ct.launch
