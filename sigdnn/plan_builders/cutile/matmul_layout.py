"""How a matmul's tensors are seen by the cuTile GEMM kernel: 2-D or 3-D strided views (pure Python).

The kernel computes C[z, m, n] = sum_k A[z, m, k] B[z, k, n] tile by tile.
Each matrix tensor becomes one view of its own memory (no copies):

- batch dims broadcast as in the reference (a dim of extent 1, or a missing
  leading dim, repeats); they must collapse to one strided dim per tensor,
  and a tensor that does not vary along it is passed without one (2-D);
- a matrix whose columns are not contiguous but whose rows are is viewed
  transposed (its last view dim is then the contiguous one, which is what
  tile loads want); one contiguous along neither is viewed as it is, and
  loads gather it;
- when B is shared by the whole batch and A, C (and every full-size
  epilogue input) step through it as taller matrices (``x @ W`` with x of
  shape [..., M, K]), the batch is folded into M: one 2-D GEMM.

A ``ValueError`` says why a view cannot be made.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

INT32_MAX = 2**31 - 1


@attrs.frozen
class MatrixView:
    """One tensor as the kernel reads it: view shape and element strides, outermost first."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    transposed: bool  # the view holds the matrix transposed: (cols, rows)
    batched: bool  # the view has a leading batch dim (3-D)


@attrs.frozen
class GemmViews:
    m: int
    n: int
    k: int
    batch: int
    a: MatrixView
    b: MatrixView
    c: MatrixView
    extras: tuple[MatrixView, ...]  # full-size epilogue inputs (residuals), laid out like C's tiles


Operand = tuple[Sequence[int], Sequence[int]]  # (dims, element strides)


def batch_strides(c_batch: Sequence[int], operands: Sequence[Operand]) -> tuple[int, list[int]]:
    """Collapse the batch dims to (extent, one stride per operand; 0 where it broadcasts), or ValueError."""
    rank = len(c_batch)
    rows = []
    for dims, strides in operands:
        pad = rank - len(dims)
        if pad < 0:
            raise ValueError(f"batch dims {list(dims)} have more dims than the output's {list(c_batch)}")
        row = [0] * pad
        for d, s, full in zip(dims, strides, c_batch[pad:], strict=True):
            if d not in (full, 1):
                raise ValueError(f"batch dims {list(dims)} do not broadcast to {list(c_batch)}")
            row.append(0 if d == 1 else int(s))
        rows.append(row)
    keep = [i for i, d in enumerate(c_batch) if d != 1]
    dims = [int(c_batch[i]) for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    j = len(dims) - 2
    while j >= 0:
        if all(row[j] == row[j + 1] * dims[j + 1] for row in rows):
            dims[j + 1] *= dims[j]
            del dims[j]
            for row in rows:
                del row[j]
        j -= 1
    if len(dims) > 1:
        raise ValueError(f"batch dims {list(c_batch)} do not collapse to one strided dim for every operand")
    if not dims:
        return 1, [0] * len(operands)
    return dims[0], [row[0] for row in rows]


def matrix_view(rows: int, cols: int, s_rows: int, s_cols: int, batch: int, s_batch: int) -> MatrixView:
    """The view of a rows x cols matrix (batched when it varies along a batch of ``batch``)."""
    s_cols = 1 if cols == 1 else s_cols
    s_rows = 1 if rows == 1 else s_rows
    transposed = s_cols != 1 and s_rows == 1
    shape, strides = ((cols, rows), (s_cols, s_rows)) if transposed else ((rows, cols), (s_rows, s_cols))
    batched = batch > 1 and s_batch != 0
    if batched:
        shape, strides = (batch, *shape), (s_batch, *strides)
    return MatrixView(tuple(shape), tuple(strides), transposed, batched)


def plan_views(a: Operand, b: Operand, c: Operand, extras: Sequence[Operand] = ()) -> GemmViews:
    """The kernel's views of ``c = a @ b`` (and of full-size epilogue inputs shaped like c), or ValueError."""
    (a_dims, a_st), (b_dims, b_st), (c_dims, _) = a, b, c
    if min(len(a_dims), len(b_dims), len(c_dims)) < 2:
        raise ValueError("matmul operands need rank >= 2")
    m, k = int(a_dims[-2]), int(a_dims[-1])
    n = int(b_dims[-1])
    if int(b_dims[-2]) != k or tuple(c_dims[-2:]) != (m, n):
        raise ValueError(f"dims {list(a_dims)} @ {list(b_dims)} -> {list(c_dims)} are inconsistent")
    if min(m, n, k) == 0:
        raise ValueError(f"empty problem (M, N, K) = ({m}, {n}, {k})")
    everything = [a, b, c, *extras]
    if any(s < 0 for _, st in everything for s in st):
        raise ValueError("negative strides")
    for dims, _ in extras:
        if tuple(dims[-2:]) != (m, n):
            raise ValueError(f"epilogue input dims {list(dims)} are not [..., {m}, {n}]")
    batch, (bsa, bsb, bsc, *bse) = batch_strides(tuple(c_dims[:-2]), [(dims[:-2], st[:-2]) for dims, st in everything])
    if batch > 1 and bsc == 0:
        raise ValueError("the output repeats along the batch (stride 0)")
    sam, sak = int(a_st[-2]), int(a_st[-1])
    sbk, sbn = int(b_st[-2]), int(b_st[-1])
    full = [(int(st[-2]), int(st[-1])) for _, st in (c, *extras)]
    # x @ W: fold the batch into M when B is shared and A, C and the extras step through it as taller matrices.
    folds = bsb == 0 and bsa == m * sam and all(bs == m * sm and bs for bs, (sm, _) in zip((bsc, *bse), full))
    if batch > 1 and folds:
        m, batch, bsa, bsc, bse = m * batch, 1, 0, 0, [0] * len(bse)
    if max(m, n, k, batch) > INT32_MAX:
        raise ValueError("extents past 2^31 - 1")
    c_view, *extra_views = (
        matrix_view(m, n, sm, sn, batch, bs) for (sm, sn), bs in zip(full, (bsc, *bse), strict=True)
    )
    return GemmViews(
        m,
        n,
        k,
        batch,
        matrix_view(m, k, sam, sak, batch, bsa),
        matrix_view(k, n, sbk, sbn, batch, bsb),
        c_view,
        tuple(extra_views),
    )
