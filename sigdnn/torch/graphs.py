"""The sigdnn graphs behind the torch ops, one builder per op, from the shapes, strides and dtypes of its tensors.

Statistics (sdpa's logsumexp, layernorm's mean and inverse deviation) are
kept in float64 when the inputs are float64 and in float32 otherwise, so a
float64 model's backward is as exact as its forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import layout_order, packed_strides
from sigdnn.graph.ops.ragged import token_major
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.tf32 import TF32_COMPUTE

BAND = ("diagonal_bottom_right", "left_bound", "right_bound")  # sdpa's band attributes, in the torch ops' order


@attrs.frozen
class Spec:
    """What a graph is built for about one torch tensor: dims, strides (elements) and dtype."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DataType

    @classmethod
    def of(cls, t: object) -> Spec:
        return cls(tuple(t.shape), tuple(t.stride()), as_data_type(t.dtype))  # type: ignore[attr-defined]


def stats_dtype(dtype: DataType) -> DataType:
    return DataType.FLOAT64 if dtype is DataType.FLOAT64 else DataType.FLOAT32


def _graph(name: str, first: Spec) -> Graph:
    compute = DataType.FLOAT64 if first.dtype is DataType.FLOAT64 else DataType.FLOAT32
    return Graph(name, io_dtype=first.dtype, intermediate_dtype=compute, compute_dtype=compute)


def _inputs(g: Graph, names: Sequence[str], specs: Sequence[Spec]) -> list[Tensor]:
    return [g.tensor(n, s.dims, s.strides, dtype=s.dtype) for n, s in zip(names, specs)]


def strides_like(like: Spec, dims: Sequence[int]) -> tuple[int, ...]:
    """Packed strides for ``dims``: channels-last where ``like`` is a channels-last 4-D / 5-D tensor (torch's
    convolutions keep their input's memory format, and the GPU's convs read and write channels-last), else
    row-major."""
    rank = len(like.dims)
    if rank in (4, 5) and len(dims) == rank and like.strides != packed_strides(like.dims):
        last = layout_order("NHWC" if rank == 4 else "NDHWC", rank)
        if like.strides == packed_strides(like.dims, last):
            return packed_strides(dims, last)
    return packed_strides(dims)


def _outputs(*pairs: tuple[Tensor | None, str], like: Spec | None = None) -> None:
    """Mark the outputs, row-major (or in ``like``'s memory format, ``strides_like``): what the ops allocate and
    their fakes describe."""
    for t, name in pairs:
        assert t is not None
        strides = packed_strides(t.dims) if like is None else strides_like(like, t.dims)
        t.set_output(True).set_name(name).set_stride(strides)


def sdpa(
    q: Spec,
    k: Spec,
    v: Spec,
    scale: float,
    causal: bool,
    bottom_right: bool,
    left: int | None,
    right: int | None,
) -> Graph:
    g = _graph("sdpa", q)
    band = dict(zip(BAND, (bottom_right, left, right)))
    o, stats = g.sdpa(*_inputs(g, ("q", "k", "v"), (q, k, v)), scale, None, causal, True, **band)  # type: ignore[arg-type]
    assert stats is not None
    stats.set_data_type(stats_dtype(q.dtype))
    _outputs((o, "o"), (stats, "stats"))
    return g


def sdpa_backward(
    q: Spec,
    k: Spec,
    v: Spec,
    o: Spec,
    d_o: Spec,
    stats: Spec,
    scale: float,
    causal: bool,
    bottom_right: bool,
    left: int | None,
    right: int | None,
) -> Graph:
    g = _graph("sdpa_backward", q)
    ins = _inputs(g, ("q", "k", "v", "o", "d_o", "stats"), (q, k, v, o, d_o, stats))
    band = dict(zip(BAND, (bottom_right, left, right)))
    dq, dk, dv = g.sdpa_backward(*ins, scale, None, causal, **band)  # type: ignore[arg-type]
    _outputs((dq, "dq"), (dk, "dk"), (dv, "dv"))
    return g


VARLEN_PORTS = ("q", "k", "v", "seq_len_q", "seq_len_kv", "offsets_q", "offsets_k", "offsets_v", "offsets_o")


def _varlen(g: Graph, specs: Sequence[Spec]) -> tuple[list[Tensor], dict[str, object]]:
    """q, k, v and the keywords of a token-packed attention node (lengths, one ragged offset per tensor)."""
    q, k, v, lq, lkv, *offsets = _inputs(g, VARLEN_PORTS, specs)
    ragged = dict(zip(("q", "k", "v", "o"), offsets))
    return [q, k, v], {"seq_len_q": lq, "seq_len_kv": lkv, "ragged_offsets": ragged}


def sdpa_varlen(*specs_and_attributes: object) -> Graph:
    """Attention over token-packed sequences: q, k, v, lengths and offsets (VARLEN_PORTS), then scale, causal and
    the band (BAND)."""
    *specs, scale, causal, bottom_right, left, right = specs_and_attributes
    g = _graph("sdpa_varlen", specs[0])  # type: ignore[arg-type]
    (q, k, v), varlen = _varlen(g, specs)  # type: ignore[arg-type]
    varlen.update(zip(BAND, (bottom_right, left, right)))
    o, stats = g.sdpa(q, k, v, scale, None, causal, True, **varlen)  # type: ignore[arg-type]
    assert stats is not None
    stats.set_data_type(stats_dtype(q.dtype))
    _outputs((stats, "stats"))
    o.set_output(True).set_name("o").set_stride(token_major(o.dims))
    return g


def sdpa_varlen_backward(*specs_and_attributes: object) -> Graph:
    """The gradients of sdpa_varlen: VARLEN_PORTS' specs, then o, d_o, stats, then scale, causal and the band."""
    *specs, scale, causal, bottom_right, left, right = specs_and_attributes
    g = _graph("sdpa_varlen_backward", specs[0])  # type: ignore[arg-type]
    (q, k, v), varlen = _varlen(g, specs[: len(VARLEN_PORTS)])  # type: ignore[arg-type]
    varlen.update(zip(BAND, (bottom_right, left, right)))
    o, d_o, stats = _inputs(g, ("o", "d_o", "stats"), specs[len(VARLEN_PORTS) :])  # type: ignore[arg-type]
    grads = g.sdpa_backward(q, k, v, o, d_o, stats, scale, None, causal, **varlen)  # type: ignore[arg-type]
    for t, name in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(name).set_stride(token_major(t.dims))
    return g


def layer_norm(x: Spec, weight: Spec, bias: Spec, eps: float) -> Graph:
    g = _graph("layer_norm", x)
    y, mean, inv = g.layernorm("training", *_inputs(g, ("x", "weight", "bias"), (x, weight, bias)), eps)
    for t in (mean, inv):
        t.set_data_type(stats_dtype(x.dtype))  # type: ignore[union-attr]
    _outputs((y, "y"), (mean, "mean"), (inv, "rstd"))
    return g


def layer_norm_backward(dy: Spec, x: Spec, weight: Spec, mean: Spec, rstd: Spec) -> Graph:
    g = _graph("layer_norm_backward", x)
    dx, dw, db = g.layernorm_backward(*_inputs(g, ("dy", "x", "weight", "mean", "rstd"), (dy, x, weight, mean, rstd)))
    _outputs((dx, "dx"), (dw, "dweight"), (db, "dbias"))
    return g


def conv(x: Spec, w: Spec, stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...]) -> Graph:
    g = _graph("conv", x)
    y = g.conv_fprop(*_inputs(g, ("x", "w"), (x, w)), padding, stride, dilation)
    _outputs((y, "y"), like=x)
    return g


def conv_dgrad(dy: Spec, w: Spec, x_dims: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
               dilation: tuple[int, ...]) -> Graph:  # fmt: skip
    g = _graph("conv_dgrad", dy)
    dx = g.conv_dgrad(*_inputs(g, ("dy", "w"), (dy, w)), padding, stride, dilation, dims=x_dims)
    _outputs((dx, "dx"), like=dy)
    return g


def conv_wgrad(x: Spec, dy: Spec, w_dims: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
               dilation: tuple[int, ...]) -> Graph:  # fmt: skip
    g = _graph("conv_wgrad", x)
    dw = g.conv_wgrad(*_inputs(g, ("x", "dy"), (x, dy)), padding, stride, dilation, dims=w_dims)
    _outputs((dw, "dw"), like=x)
    return g


PRODUCTS_COMPUTE = {"high": TF32_COMPUTE, "medium": DataType.BFLOAT16}  # by torch's float32 matmul precision


def products_compute(precision: object) -> DataType | None:
    """The delta rule node's compute dtype at torch's float32 matmul ``precision``: float16 (its products as
    TF32) at "high", bfloat16 (bf16 operands) at "medium", the graph's at "highest"."""
    return PRODUCTS_COMPUTE.get(precision)  # type: ignore[call-overload]


def delta_rule(kind: str, *specs_and_attributes: object) -> Graph:
    """gdn / kda forward from the specs of the ports named in ``ports`` (forward's inputs, in port order), then
    ``ports, scale, use_qk_l2norm, output_final_state, precision``. A final state without an initial one is float64
    for float64 inputs (float32 otherwise, flash-linear-attention's)."""
    *specs, ports, scale, l2norm, output_final_state, precision = specs_and_attributes
    named = dict(zip(ports, specs))  # type: ignore[call-overload]
    g = _graph(kind, named["q"])
    ins = dict(zip(ports, _inputs(g, ports, specs)))  # type: ignore[arg-type]
    o, final = getattr(g, kind)(**ins, scale=scale, use_qk_l2norm=l2norm, output_final_state=output_final_state,
                                compute_dtype=products_compute(precision))  # fmt: skip
    _outputs((o, "o"))
    if final is not None:
        initial = named.get("initial_state")
        final.set_data_type(stats_dtype(named["q"].dtype) if initial is None else initial.dtype)
        _outputs((final, "final_state"))
    return g


def delta_rule_bwd(kind: str, *specs_and_attributes: object) -> Graph:
    """gdn_bwd / kda_bwd from the specs of the ports named in ``ports``, then ``ports, scale, use_qk_l2norm,
    precision``; each gradient takes its forward tensor's dtype."""
    *specs, ports, scale, l2norm, precision = specs_and_attributes
    g = _graph(f"{kind}_bwd", dict(zip(ports, specs))["q"])  # type: ignore[call-overload]
    ins = dict(zip(ports, _inputs(g, ports, specs)))  # type: ignore[arg-type]
    grads = getattr(g, f"{kind}_bwd")(
        **ins, scale=scale, use_qk_l2norm=l2norm, compute_dtype=products_compute(precision)
    )
    _outputs(
        *((t, name) for t, name in zip(grads, ("dq", "dk", "dv", "dg", "dbeta", "d_initial_state")) if t is not None)
    )
    return g
