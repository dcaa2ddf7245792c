"""How the row, channel and reduction kernels (cuTile's, CuTe's batchnorm) see a node's tensors, or why they cannot.

* rows: x packed with the reduced axes innermost in memory is an (M, N)
  matrix of rows (softmax, layernorm, rmsnorm); per-row statistics and the
  per-column parameters (scale, bias) are then 1-D views with a stride.
* channels: x packed in any order is (A, C, B) around its channel axis
  (batchnorm: NCHW gives (N, C, HW), NHWC gives (NHW, C, 1)).
* reductions: any strides; kept and reduced index spaces with their dims
  merged where memory allows (the reduction kernel gathers).

Every refusal is a ValueError saying why; builders turn it into NotSupported
naming the node. Pure Python, decided at build time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sigdnn.graph.tensor import Tensor

INT32_MAX = 2**31 - 1  # the kernels index with 32-bit integers


def packed_order(dims: Sequence[int], strides: Sequence[int]) -> list[int] | None:
    """Dims of size > 1, outermost first, if the view is packed in some order; else None."""
    axes = sorted((i for i, d in enumerate(dims) if d != 1), key=lambda i: -strides[i])
    expected = 1
    for i in reversed(axes):
        if strides[i] != expected:
            return None
        expected *= dims[i]
    return axes


def _packed(t: Tensor) -> list[int]:
    order = packed_order(t.dims, t.strides)
    if order is None:
        raise ValueError(f"tensor '{t.name}' strides {list(t.strides)} are not packed")
    if t.size > INT32_MAX:
        raise ValueError(f"tensor '{t.name}' has {t.size} elements, over the kernels' 32-bit index")
    return order


def same_layout(x: Tensor, others: Sequence[Tensor]) -> None:
    """Tensors read or written element for element with x must be laid out as x is."""
    for t in others:
        if t.dims != x.dims or any(s != u for d, s, u in zip(x.dims, x.strides, t.strides) if d > 1):
            raise ValueError(f"tensor '{t.name}' is laid out differently from '{x.name}'")


def rows(x: Tensor, axes: Sequence[int]) -> tuple[int, int]:
    """(M, N): x as M rows of the N elements of ``axes``, each row contiguous."""
    order = _packed(x)
    reduced = [a for a in order if a in axes]
    n = math.prod(x.dims[a] for a in axes)
    if order[len(order) - len(reduced) :] != reduced:
        raise ValueError(f"axes {list(axes)} of '{x.name}' are not its innermost in memory (strides {list(x.strides)})")
    return x.size // n if n else 0, n


def vector_stride(t: Tensor, x: Tensor, axes: Sequence[int], unit: int) -> int:
    """The element stride of ``t`` seen as a vector that follows x's elements over ``axes``, x's offsets divided by unit.

    A scale over the normalized axes (unit 1) or a statistic per row (unit
    N) is such a vector when its strides are proportional to x's.
    """
    live = [a for a in axes if t.dims[a] > 1]
    if not live:
        return 1
    inner = min(live, key=lambda a: x.strides[a])
    stride = t.strides[inner] * unit // x.strides[inner]
    if stride < 1 or any(t.strides[a] * unit != stride * x.strides[a] for a in live):
        raise ValueError(f"tensor '{t.name}' (strides {list(t.strides)}) does not follow '{x.name}''s element order")
    return stride


def channels(x: Tensor) -> tuple[int, int, int]:
    """(A, C, B): x around its channel axis 1, A the axes outside it in memory, B those inside."""
    order = _packed(x)
    if x.dims[1] > 1:
        at = order.index(1)
        outer, inner = order[:at], order[at + 1 :]
    else:
        outer, inner = order, []
    return math.prod(x.dims[a] for a in outer), x.dims[1], math.prod(x.dims[a] for a in inner)


def channel_stride(t: Tensor) -> int:
    """The element stride of a per-channel [1, C, 1, ...] tensor."""
    return t.strides[1] if t.dims[1] > 1 else 1


def merged(dims: Sequence[int], *strides: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Dims (outermost first) with each stride list, adjacent dims merged where every list steps through them as one."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    ds = [dims[i] for i in keep]
    ss = [[s[i] for i in keep] for s in strides]
    k = len(ds) - 2
    while k >= 0:
        if all(row[k] == row[k + 1] * ds[k + 1] for row in ss):
            ds[k + 1] *= ds[k]
            del ds[k]
            for row in ss:
                del row[k]
        k -= 1
    return tuple(ds), tuple(tuple(row) for row in ss)


def reduction(
    x: Tensor, y: Tensor
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(kept dims, their x strides, their y strides, reduced dims, their x strides), each merged.

    Kept axes are those where y's dim equals x's (and is not 1), reduced
    those where y's is 1; both are walked in y's memory order so that
    consecutive kept indices are near in the output.
    """
    if any(s < 0 for s in (*x.strides, *y.strides)):
        raise ValueError("negative strides")
    span = sum((d - 1) * s for d, s in zip(x.dims, x.strides)) + 1
    if max(span, y.size, x.size) > INT32_MAX:
        raise ValueError("a tensor spans more than the kernels' 32-bit index")
    kept = sorted((a for a in range(x.rank) if y.dims[a] == x.dims[a] and x.dims[a] > 1), key=lambda a: -y.strides[a])
    cut = sorted((a for a in range(x.rank) if y.dims[a] == 1 and x.dims[a] > 1), key=lambda a: -x.strides[a])
    kd, (kx, ky) = merged([x.dims[a] for a in kept], [x.strides[a] for a in kept], [y.strides[a] for a in kept])
    rd, (rx,) = merged([x.dims[a] for a in cut], [x.strides[a] for a in cut])
    return kd, kx, ky, rd, rx
