"""Shape rules several ops state alike, each failure a GraphError naming the port and its tensor.

Per-channel parameters (batchnorm), normalized axes given by a scale's dims
(layernorm, rmsnorm), axis lists (softmax, reduction), ports that must
agree on dims, and the float32 default of statistics outputs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.graph.layout import packed_strides
from sigdnn.graph.tensor import Tensor

STATS_DTYPE = DataType.FLOAT32  # cuDNN keeps statistics (mean, inv_variance, softmax / sdpa stats) in float32


def described(port: str, t: Tensor) -> str:
    return f"port '{port}' (tensor '{t.name}')"


def same_dims(where: str, ports: Mapping[str, Tensor]) -> None:
    """All the given ports have one set of dims."""
    (first, ref), *rest = ports.items()
    for port, t in rest:
        if t.dims != ref.dims:
            raise GraphError(
                f"{where}: {described(port, t)} has dims {list(t.dims)}, {described(first, ref)} has "
                f"{list(ref.dims)}; they must match"
            )


def require_dims(where: str, port: str, t: Tensor, dims: Sequence[int], why: str) -> None:
    if t.dims != tuple(dims):
        raise GraphError(f"{where}: {described(port, t)} has dims {list(t.dims)}, expected {list(dims)} ({why})")


def channel_dims(x: Tensor) -> tuple[int, ...]:
    """[1, C, 1, ...]: the dims of a per-channel tensor of [N, C, spatial...] x (cuDNN's batchnorm parameters)."""
    return (1, x.dims[1], *(1,) * (x.rank - 2))


def per_channel(where: str, x_port: str, x: Tensor, params: Mapping[str, Tensor]) -> None:
    if x.rank < 2:
        raise GraphError(f"{where}: {described(x_port, x)} has rank {x.rank}; it needs [N, C, ...] dims")
    want = channel_dims(x)
    for port, t in params.items():
        require_dims(where, port, t, want, f"per channel of {x_port} {list(x.dims)}")


def normalized_axes(where: str, x_port: str, x: Tensor, scale_port: str, scale: Tensor) -> tuple[int, ...]:
    """Axes layernorm / rmsnorm normalize: those where the scale's dim equals x's (the others are batch dims).

    A scale of lower rank aligns with x's trailing dims (a [D] scale for x [..., D]), the rule matmul and
    pointwise broadcasting follow; x's leading dims it does not reach are batch dims.
    """
    lead = x.rank - scale.rank
    if lead < 0 or any(s not in (1, d) for s, d in zip(scale.dims, x.dims[lead:])):
        raise GraphError(
            f"{where}: {described(scale_port, scale)} has dims {list(scale.dims)}; for "
            f"{described(x_port, x)} {list(x.dims)} each dim must be x's (normalized) or 1 (batch), "
            "aligned with x's trailing dims"
        )
    return tuple(lead + i for i, (s, d) in enumerate(zip(scale.dims, x.dims[lead:])) if s == d)


def batch_dims(x: Tensor, axes: Sequence[int]) -> tuple[int, ...]:
    """x's dims with a 1 at each of ``axes``: the dims of one statistic per batch entry."""
    return tuple(1 if i in axes else d for i, d in enumerate(x.dims))


def check_axes(where: str, name: str, axes: Sequence[int], rank: int) -> None:
    """A non-empty list of distinct axes of a rank-``rank`` tensor, in increasing order."""
    if not axes:
        raise GraphError(f"{where}: {name} is empty; give at least one axis")
    if any(not 0 <= a < rank for a in axes):
        raise GraphError(f"{where}: {name} {list(axes)} out of range for rank {rank}")
    if list(axes) != sorted(set(axes)):
        raise GraphError(f"{where}: {name} {list(axes)} must be distinct and increasing")


def require_positive(where: str, name: str, value: float) -> None:
    if not value > 0 or value == float("inf"):
        raise GraphError(f"{where}: {name} must be positive and finite, got {value}")


def require_fraction(where: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise GraphError(f"{where}: {name} must be in [0, 1], got {value}")


def packed_in_order_of(t: Tensor, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Strides for ``dims`` packed in ``t``'s axis order (NHWC stays NHWC).

    A size-1 axis of ``t`` may carry any stride, so it can tie with a real
    one: NHWC with C = 1 has stride 1 on both C and W. At equal strides the
    size-1 axis counts as the inner one, else an output with C > 1 would come
    out N,H,C,W instead of NHWC.
    """
    order = sorted(range(t.rank), key=lambda a: (-t.strides[a], t.dims[a] == 1, a))
    return packed_strides(dims, order)


def check_choice(where: str, name: str, value: str, choices: Sequence[str]) -> None:
    """An enum attribute names one of its choices (the wire reader already refuses unknown values)."""
    if value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise GraphError(f"{where}: unknown {name} {value!r}; {hint}expected one of {', '.join(choices)}")
