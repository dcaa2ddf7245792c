"""Sliding-window geometry shared by the convolutions and pooling.

One place for the rules every windowed op states the same way: 1 to 3
spatial dims, one entry per spatial dim in each attribute vector, strides
and dilations >= 1, paddings >= 0, the output length of a window sweep, the
padded float64 copy a reference makes, and a bound on kernel taps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.tensor import Tensor


def spatial_rank(where: str, port: str, t: Tensor) -> int:
    """Spatial dims of an [N, C, spatial...] tensor; GraphError outside 1..3."""
    s = t.rank - 2
    if not 1 <= s <= 3:
        raise GraphError(f"{where}: {port} has rank {t.rank} ({s} spatial dims); 1 to 3 spatial dims are supported")
    return s


def check_lengths(where: str, spatial: int, vectors: dict[str, Sequence[int]]) -> None:
    for name, values in vectors.items():
        if len(values) != spatial:
            raise GraphError(f"{where}: {name} has {len(values)} entries for {spatial} spatial dims")


def check_conv_attributes(
    where: str,
    spatial: int,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> None:
    """Lengths match the spatial rank, stride and dilation >= 1, padding >= 0."""
    vectors = {"stride": stride, "dilation": dilation, "pre_padding": pre_padding, "post_padding": post_padding}
    check_lengths(where, spatial, vectors)
    if min(stride) < 1 or min(dilation) < 1:
        raise GraphError(f"{where}: stride {list(stride)} and dilation {list(dilation)} must be >= 1")
    if min(pre_padding) < 0 or min(post_padding) < 0:
        raise GraphError(f"{where}: padding must be >= 0, got pre {list(pre_padding)} post {list(post_padding)}")


def window_outputs(
    where: str,
    size: Sequence[int],
    kernel: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> tuple[int, ...]:
    """Output length per spatial dim of a window sweep (a partial last window is dropped, as in cuDNN)."""
    out = []
    for i in range(len(size)):
        span = dilation[i] * (kernel[i] - 1) + 1
        padded = size[i] + pre_padding[i] + post_padding[i]
        if padded < span:
            raise GraphError(
                f"{where}: spatial dim {i}: padded input {padded} is smaller than the dilated kernel {span}"
            )
        out.append((padded - span) // stride[i] + 1)
    return tuple(out)


def padded_bytes(dims: Sequence[int], pre_padding: Sequence[int], post_padding: Sequence[int]) -> int:
    """Bytes of a float64 [N, C, spatial...] array of ``dims`` with the padding added (attributes can make it huge)."""
    elements = dims[0] * dims[1]
    for i, d in enumerate(dims[2:]):
        elements *= d + pre_padding[i] + post_padding[i]
    return elements * 8


def check_taps(what: str, kernel: Sequence[int], limits: Limits) -> None:
    """Taps bound time where memory does not: each tap is one pass over the output."""
    taps = math.prod(kernel)
    if taps > limits.max_kernel_taps:
        raise GraphError(f"{what} {list(kernel)} has {taps} taps (limit {limits.max_kernel_taps})")
