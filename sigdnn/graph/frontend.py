"""The op methods of Graph, named and shaped as in the cuDNN frontend.

Each method documents its op's arguments and returns its output tensor(s);
the work is one call into ``Graph.add_node``, which every op shares.
Arrays and dims are logical (N, C, spatial...) whatever the memory layout.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sigdnn.errors import GraphError
from sigdnn.graph.arguments import DTypeLike, integer, ints, real
from sigdnn.graph.frontend_linear_attention import LinearAttentionFrontend
from sigdnn.graph.ops.batchnorm import Batchnorm
from sigdnn.graph.ops.batchnorm_backward import BatchnormBackward
from sigdnn.graph.ops.batchnorm_inference import BatchnormInference
from sigdnn.graph.ops.concatenate import Concatenate
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.graph.ops.layernorm import Layernorm
from sigdnn.graph.ops.layernorm_backward import LayernormBackward
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import MODES, PARAMS, Pointwise
from sigdnn.graph.ops.pooling import Pooling
from sigdnn.graph.ops.pooling_backward import PoolingBackward
from sigdnn.graph.ops.ragged import varlen_inputs
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.graph.ops.resample import Resample, scaled_size
from sigdnn.graph.ops.resample_backward import ResampleBackward
from sigdnn.graph.ops.reshape import Reshape
from sigdnn.graph.ops.rmsnorm import Rmsnorm
from sigdnn.graph.ops.rmsnorm_backward import RmsnormBackward
from sigdnn.graph.ops.sdpa import Sdpa
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.graph.ops.shapes import check_choice
from sigdnn.graph.ops.slice import Slice
from sigdnn.graph.ops.softmax import Softmax
from sigdnn.graph.ops.transpose import Transpose
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.node import Node
    from sigdnn.graph.ops.base import Op

Maybe = Tensor | None
Scalar = float | Tensor  # a value, or a pass-by-value scalar tensor whose value is taken (cuDNN passes tensors)

_ALIASES = {
    "relu": "relu_fwd",
    "tanh": "tanh_fwd",
    "sigmoid": "sigmoid_fwd",
    "gelu": "gelu_fwd",
    "elu": "elu_fwd",
    "swish": "swish_fwd",
    "softplus": "softplus_fwd",
}


def conv_arguments(
    where: str,
    spatial: int,
    padding: Sequence[int] | None,
    pre_padding: Sequence[int] | None,
    post_padding: Sequence[int] | None,
    stride: Sequence[int] | None,
    dilation: Sequence[int] | None,
) -> dict[str, tuple[int, ...]]:
    """cuDNN's convolution arguments: ``padding`` or (``pre_padding``, ``post_padding``), stride, dilation."""
    if padding is not None and (pre_padding is not None or post_padding is not None):
        raise GraphError(f"{where}: give padding or pre_padding/post_padding, not both")
    zeros, ones = (0,) * spatial, (1,) * spatial
    return {
        "pre_padding": ints(padding if padding is not None else pre_padding or zeros, f"{where} padding"),
        "post_padding": ints(padding if padding is not None else post_padding or zeros, f"{where} padding"),
        "stride": ints(stride or ones, f"{where} stride"),
        "dilation": ints(dilation or ones, f"{where} dilation"),
    }


def rank_of(t: Any) -> int:
    """A tensor argument's rank, 0 for anything else (add_node then names the bad argument)."""
    return len(t.dims) if isinstance(t, Tensor) else 0


def parameter_value(value: Any, what: str) -> float:
    """A float attribute from a number or a pass-by-value scalar tensor (cuDNN passes epsilon and friends as tensors)."""
    if isinstance(value, Tensor):
        if value.value is None or value.dtype is None:
            raise GraphError(
                f"{what}: tensor '{value.name}' is not a pass-by-value scalar; give a value or g.scalar(...)"
            )
        return real(value.scalar(), what)
    return real(value, what)


def window_arguments(
    where: str,
    spatial: int,
    window: Sequence[int],
    stride: Sequence[int] | None,
    padding: Sequence[int] | None,
    pre_padding: Sequence[int] | None,
    post_padding: Sequence[int] | None,
) -> dict[str, tuple[int, ...]]:
    """Pooling's arguments: the window, its stride (default: the window) and padding as in conv_arguments."""
    conv = conv_arguments(where, spatial, padding, pre_padding, post_padding, stride or window, None)
    del conv["dilation"]
    return {"window": ints(window, f"{where} window"), **conv}


def slice_bounds(where: str, x: Any, slices: Sequence[slice]) -> dict[str, tuple[int, ...]]:
    """Python slices (one per leading axis; missing ones take the whole axis), normalized as Python does."""
    dims = x.dims if isinstance(x, Tensor) else ()
    if isinstance(slices, slice) or len(slices) > len(dims):
        raise GraphError(f"{where}: give a list of at most {len(dims)} slices (one per axis), got {slices!r}")
    bounds = []
    for axis, d in enumerate(dims):
        item = slices[axis] if axis < len(slices) else slice(None)
        if not isinstance(item, slice):
            raise GraphError(f"{where}: axis {axis}: {item!r} is not a slice")
        try:
            bounds.append(item.indices(d))
        except (TypeError, ValueError) as e:
            raise GraphError(f"{where}: axis {axis}: bad slice {item!r}: {e}") from None
    start, limit, step = zip(*bounds) if bounds else ((), (), ())
    return {"start_indices": start, "limit_indices": limit, "strides": step}


def axis_list(where: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Axes in increasing order, negative ones counted from the end (duplicates are left for the op to refuse)."""
    if isinstance(axes, int):
        axes = (axes,)
    values = ints(axes, f"{where} axes")
    return tuple(sorted(a + rank if a < 0 else a for a in values))


class Frontend(LinearAttentionFrontend):
    """Mixed into Graph: one method per op, each a documented call into ``add_node``."""

    __slots__ = ()

    if TYPE_CHECKING:

        def add_node(
            self,
            op_class: type[Op],
            inputs: Mapping[str, Tensor | None],
            attributes: Mapping[str, Any] | None = None,
            *,
            name: str | None = None,
            compute_dtype: DTypeLike = None,
        ) -> Node: ...

        def outputs_of(self, node: Node, ports: Sequence[str] | None = None) -> tuple[Tensor | None, ...]: ...

        nodes: list[Node]
        tensors: dict[int, Tensor]

    def _single(self, node: Node) -> Tensor:
        (out,) = self.outputs_of(node)
        assert out is not None
        return out

    def pointwise(
        self,
        mode: str,
        a: Tensor | float,
        b: Tensor | float | None = None,
        c: Tensor | float | None = None,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
        **params: float | int,
    ) -> Tensor:
        """One pointwise mode over up to three broadcast inputs (cuDNN's X, B, T).

        Modes (docs/ops.md has each formula): arithmetic ``add sub mul div
        add_square max min mod pow``; comparisons ``cmp_eq cmp_neq cmp_gt
        cmp_ge cmp_lt cmp_le``; logical ``logical_and logical_or
        logical_not``; math ``abs neg ceil floor sqrt rsqrt reciprocal exp
        log sin cos tan erf identity``; activations ``relu_fwd tanh_fwd
        sigmoid_fwd elu_fwd gelu_fwd gelu_approx_tanh_fwd softplus_fwd
        swish_fwd``; their gradients, inputs (dy, x): ``relu_bwd tanh_bwd
        sigmoid_bwd elu_bwd gelu_bwd gelu_approx_tanh_bwd softplus_bwd
        swish_bwd``; ``gen_index``; ``binary_select`` (a, b, mask: mask ?
        a : b).

        Parameters: ``relu_lower_clip``, ``relu_upper_clip``,
        ``relu_lower_clip_slope`` (relu), ``elu_alpha``, ``softplus_beta``,
        ``swish_beta``, ``axis`` (gen_index).
        """
        name = name or f"{mode}_{len(self.nodes)}"
        check_choice(f"node '{name}'", "pointwise mode", mode, tuple(MODES))
        unknown = set(params) - set(PARAMS)
        if unknown:
            raise GraphError(f"pointwise[{mode}]: unknown parameter(s) {sorted(unknown)}; known: {', '.join(PARAMS)}")
        typed: dict[str, Any] = {
            k: (integer(v, f"pointwise[{mode}] {k}") if k == "axis" else real(v, f"pointwise[{mode}] {k}"))
            for k, v in params.items()
            if v is not None
        }
        given = [t for t in (a, b, c) if t is not None]
        inputs = {
            port: self._operand(t, f"{name}_{port}", compute_dtype) for port, t in zip(("in_0", "in_1", "in_2"), given)
        }
        node = self.add_node(Pointwise, inputs, {"mode": mode, **typed}, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def _operand(self, value: Tensor | float, name: str, compute_dtype: DTypeLike) -> Tensor:
        """A pointwise input: a tensor as given, a plain number as a pass-by-value scalar of the compute dtype
        (as cuDNN-frontend turns ``mul(x, 0.5)``'s number into one)."""
        if isinstance(value, numbers.Number):
            return self.scalar(name, value, compute_dtype)
        return value

    def matmul(self, a: Tensor, b: Tensor, *, name: str | None = None, compute_dtype: DTypeLike = None) -> Tensor:
        """c = a @ b over the last two dims, batched over leading dims that broadcast."""
        return self._single(self.add_node(Matmul, {"a": a, "b": b}, name=name, compute_dtype=compute_dtype))

    def conv_fprop(
        self,
        x: Tensor,
        w: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Forward convolution (cross-correlation): x [N, C, *S], w [K, C/groups, *R] -> y [N, K, *out]."""
        spatial = max(len(x.dims) - 2, 0)
        where = f"node '{name or 'conv_fprop'}'"
        arguments = conv_arguments(where, spatial, padding, pre_padding, post_padding, stride, dilation)
        return self._single(
            self.add_node(ConvFprop, {"x": x, "w": w}, arguments, name=name, compute_dtype=compute_dtype)
        )

    def conv_dgrad(
        self,
        dy: Tensor,
        w: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        dims: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Data gradient of conv_fprop: dy [N, K, *out], w [K, C/groups, *R] -> dx [N, C, *S].

        dx's dims are inferred for an ungrouped convolution with every
        stride 1; otherwise give them (``dims``, what cuDNN sets with
        set_dim on the output). They are checked to produce dy.
        """
        where = f"node '{name or 'conv_dgrad'}'"
        arguments = conv_arguments(where, max(rank_of(dy) - 2, 0), padding, pre_padding, post_padding, stride, dilation)
        arguments["dims"] = ints(dims or (), f"{where} dims")
        node = self.add_node(ConvDgrad, {"dy": dy, "w": w}, arguments, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def conv_wgrad(
        self,
        x: Tensor,
        dy: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        dims: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Weight gradient of conv_fprop: x [N, C, *S], dy [N, K, *out] -> dw [K, C/groups, *R].

        dw's dims are inferred for an ungrouped convolution with every
        stride 1; otherwise give them (``dims``). They are checked to produce dy.
        """
        where = f"node '{name or 'conv_wgrad'}'"
        arguments = conv_arguments(where, max(rank_of(x) - 2, 0), padding, pre_padding, post_padding, stride, dilation)
        arguments["dims"] = ints(dims or (), f"{where} dims")
        node = self.add_node(ConvWgrad, {"x": x, "dy": dy}, arguments, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def batchnorm_inference(
        self,
        x: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
        scale: Tensor,
        bias: Tensor,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """y = (x - mean) * inv_variance * scale + bias; the parameters are [1, C, 1, ...]."""
        inputs = {"x": x, "mean": mean, "inv_variance": inv_variance, "scale": scale, "bias": bias}
        return self._single(self.add_node(BatchnormInference, inputs, name=name, compute_dtype=compute_dtype))

    def batchnorm(
        self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        in_running_mean: Maybe = None,
        in_running_var: Maybe = None,
        epsilon: Scalar = 1e-5,
        momentum: Scalar = 0.1,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor, Maybe, Maybe]:
        """Training batchnorm -> (y, mean, inv_variance, next_running_mean, next_running_var).

        Statistics are per channel ([1, C, 1, ...], float32 unless set) over
        N and the spatial dims. The running outputs exist when both running
        inputs are given (None otherwise); ``momentum`` applies to them only.
        epsilon and momentum are numbers or pass-by-value scalar tensors.
        """
        where = f"node '{name or 'batchnorm'}'"
        attributes = {"epsilon": parameter_value(epsilon, f"{where} epsilon")}
        if in_running_mean is not None or in_running_var is not None:
            attributes["momentum"] = parameter_value(momentum, f"{where} momentum")
        inputs = {"x": x, "scale": scale, "bias": bias, "in_running_mean": in_running_mean}
        inputs["in_running_var"] = in_running_var
        node = self.add_node(Batchnorm, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def batchnorm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Batchnorm gradients from the saved statistics -> (dx, dscale, dbias)."""
        inputs = {"dy": dy, "x": x, "scale": scale, "mean": mean, "inv_variance": inv_variance}
        node = self.add_node(BatchnormBackward, inputs, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def layernorm(
        self,
        phase: str,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        epsilon: Scalar = 1e-5,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe, Maybe]:
        """Layer normalization over the axes the scale spans -> (y, mean, inv_variance).

        ``phase`` is "training" (statistics written, a 1 in every normalized
        dim, float32 unless set) or "inference" (they are None). Normalized
        axes are those where scale's dim equals x's; the others are batch dims.
        """
        where = f"node '{name or 'layernorm'}'"
        attributes = {"phase": phase, "epsilon": parameter_value(epsilon, f"{where} epsilon")}
        inputs = {"x": x, "scale": scale, "bias": bias}
        node = self.add_node(Layernorm, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def layernorm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Layernorm gradients from the saved statistics -> (dx, dscale, dbias)."""
        inputs = {"dy": dy, "x": x, "scale": scale, "mean": mean, "inv_variance": inv_variance}
        node = self.add_node(LayernormBackward, inputs, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def rmsnorm(
        self,
        phase: str,
        x: Tensor,
        scale: Tensor,
        bias: Maybe = None,
        epsilon: Scalar = 1e-5,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:
        """RMS normalization over the axes the scale spans -> (y, inv_variance); bias optional.

        inv_variance is written in the "training" phase only (None in "inference").
        """
        where = f"node '{name or 'rmsnorm'}'"
        attributes = {"phase": phase, "epsilon": parameter_value(epsilon, f"{where} epsilon")}
        inputs = {"x": x, "scale": scale, "bias": bias}
        node = self.add_node(Rmsnorm, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def rmsnorm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        inv_variance: Tensor,
        has_dbias: bool = False,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Maybe]:
        """RMSnorm gradients from the saved inv_variance -> (dx, dscale, dbias); dbias only with has_dbias."""
        inputs = {"dy": dy, "x": x, "scale": scale, "inv_variance": inv_variance}
        attributes = {"has_dbias": bool(has_dbias)}
        node = self.add_node(RmsnormBackward, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def softmax(
        self,
        x: Tensor,
        axes: Sequence[int] | int | None = None,
        log: bool = False,
        generate_stats: bool = False,
        *,
        seq_len_q: Maybe = None,
        seq_len_kv: Maybe = None,
        ragged_offsets: Mapping[str, Tensor] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:
        """Softmax (log-softmax with ``log``) over ``axes`` (default: the last) -> (y, stats).

        stats = max + log(sum(exp(x - max))), x's dims with a 1 at each
        softmax axis, float32 unless set; None unless ``generate_stats``.
        """
        where = f"node '{name or 'softmax'}'"
        rank = rank_of(x)
        attributes = {
            "axes": axis_list(where, (rank - 1,) if axes is None else axes, rank),
            "log": bool(log),
            "generate_stats": bool(generate_stats),
        }
        node = self.add_node(Softmax, {"x": x}, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def reduction(
        self,
        x: Tensor,
        mode: str,
        dims: Sequence[int] | None = None,
        *,
        axes: Sequence[int] | int | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Reduce x by ``mode`` (add mul min max amax avg norm1 norm2 mul_no_zeros).

        As cuDNN, the reduced axes are those where the output's ``dims``
        are 1 (every other dim must be x's); or give ``axes`` instead.
        """
        where = f"node '{name or 'reduction'}'"
        x_dims = x.dims if isinstance(x, Tensor) else ()
        if (dims is None) == (axes is None):
            raise GraphError(f"{where}: give the output's dims or the reduced axes, one of them")
        if dims is not None:
            y_dims = ints(dims, f"{where} dims")
            if len(y_dims) != len(x_dims) or any(e not in (1, d) for e, d in zip(y_dims, x_dims)):
                raise GraphError(
                    f"{where}: dims {list(y_dims)} are no reduction of port 'x' {list(x_dims)}: each must be 1 or x's"
                )
            reduced = tuple(i for i, (e, d) in enumerate(zip(y_dims, x_dims)) if e == 1 and d != 1)
        else:
            reduced = axis_list(where, axes, len(x_dims))  # type: ignore[arg-type]
        attributes = {"mode": mode, "axes": reduced}
        return self._single(self.add_node(Reduction, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def sdpa(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_scale: Scalar | None = None,
        bias: Maybe = None,
        use_causal_mask: bool = False,
        generate_stats: bool = False,
        *,
        seq_len_q: Maybe = None,
        seq_len_kv: Maybe = None,
        ragged_offsets: Mapping[str, Tensor] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:
        """Scaled dot-product attention -> (o, stats).

        q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv], Hq a
        multiple of Hkv. Scores are attn_scale * q k^T (unscaled when None,
        as cuDNN) plus ``bias`` (broadcast to [B, Hq, Sq, Skv]); the causal
        mask keeps key j for query i when j <= i. stats [B, Hq, Sq, 1] (each
        row's logsumexp, float32 unless set) only with ``generate_stats``.
        ``seq_len_q`` / ``seq_len_kv`` ([B] int32 / int64) mask padding;
        ``ragged_offsets`` ({"q" | "k" | "v" | "o": [B + 1] offsets}) pack
        those tensors by token (docs/ops.md, "Variable-length attention").
        """
        where = f"node '{name or 'sdpa'}'"
        attributes = {
            "attn_scale": 1.0 if attn_scale is None else parameter_value(attn_scale, f"{where} attn_scale"),
            "use_causal_mask": bool(use_causal_mask),
            "generate_stats": bool(generate_stats),
        }
        inputs = {"q": q, "k": k, "v": v, "bias": bias, **varlen_inputs(seq_len_q, seq_len_kv, ragged_offsets)}
        node = self.add_node(Sdpa, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def sdpa_backward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        d_o: Tensor,
        stats: Tensor,
        attn_scale: Scalar | None = None,
        bias: Maybe = None,
        use_causal_mask: bool = False,
        *,
        seq_len_q: Maybe = None,
        seq_len_kv: Maybe = None,
        ragged_offsets: Mapping[str, Tensor] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Attention gradients from the forward's o and stats and the incoming d_o (cuDNN's dO) -> (dq, dk, dv).

        Variable lengths as ``sdpa``'s; dq, dk, dv and d_o follow q, k, v and o's ragged offsets.
        """
        where = f"node '{name or 'sdpa_backward'}'"
        attributes = {
            "attn_scale": 1.0 if attn_scale is None else parameter_value(attn_scale, f"{where} attn_scale"),
            "use_causal_mask": bool(use_causal_mask),
        }
        inputs = {"q": q, "k": k, "v": v, "o": o, "d_o": d_o, "stats": stats, "bias": bias}
        inputs.update(varlen_inputs(seq_len_q, seq_len_kv, ragged_offsets))
        node = self.add_node(SdpaBackward, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def pooling(
        self,
        x: Tensor,
        mode: str,
        window: Sequence[int],
        stride: Sequence[int] | None = None,
        padding: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Pool x [N, C, *S] -> y [N, C, *out]: mode "max", "average_count_include_pad" or "average_count_exclude_pad".

        stride defaults to the window; padding as in conv_fprop, each below the window.
        """
        where = f"node '{name or 'pooling'}'"
        spatial = max(rank_of(x) - 2, 0)
        arguments = window_arguments(where, spatial, window, stride, padding, pre_padding, post_padding)
        node = self.add_node(Pooling, {"x": x}, {"mode": mode, **arguments}, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def pooling_backward(
        self,
        dy: Tensor,
        x: Tensor,
        mode: str,
        window: Sequence[int],
        stride: Sequence[int] | None = None,
        padding: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Gradient of pooling with the same mode and window: dy (pooled dims of x), x -> dx."""
        where = f"node '{name or 'pooling_backward'}'"
        spatial = max(rank_of(x) - 2, 0)
        arguments = window_arguments(where, spatial, window, stride, padding, pre_padding, post_padding)
        inputs = {"dy": dy, "x": x}
        node = self.add_node(
            PoolingBackward, inputs, {"mode": mode, **arguments}, name=name, compute_dtype=compute_dtype
        )
        return self._single(node)

    def resample(
        self,
        x: Tensor,
        mode: str,
        dims: Sequence[int] | None = None,
        scales: Sequence[float] | None = None,
        coordinates: str = "half_pixel",
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Resample x [N, C, *S] -> y [N, C, *out] by "nearest" or "bilinear" (linear per spatial dim).

        Give y's ``dims`` (as cuDNN's set_dim) or ``scales`` (out = floor(S *
        scale), samples placed by the scale as torch's scale_factor).
        ``coordinates``: "half_pixel" (torch's align_corners=False; nearest:
        "nearest-exact"), "align_corners" (linear only) or "asymmetric"
        (torch's legacy "nearest").
        """
        where = f"node '{name or 'resample'}'"
        factors = tuple(real(c, f"{where} scales", finite=True) for c in scales) if scales is not None else ()
        if dims is None:
            if not factors:
                raise GraphError(f"{where}: give y's dims or the scales")
            x_dims = x.dims if isinstance(x, Tensor) else ()
            dims = (*x_dims[:2], *(scaled_size(d, c) for d, c in zip(x_dims[2:], factors)))
        attributes = {"mode": mode, "coordinates": coordinates, "dims": ints(dims, f"{where} dims"), "scales": factors}
        return self._single(self.add_node(Resample, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def resample_backward(
        self,
        dy: Tensor,
        mode: str,
        dims: Sequence[int],
        scales: Sequence[float] | None = None,
        coordinates: str = "half_pixel",
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Gradient of resample with the same mode, coordinates and scales: dy [N, C, *out] -> dx.

        ``dims`` are dx's [N, C, *S] (x's dims; as cuDNN's set_dim on dx):
        several input sizes resample to one output size. With ``scales``,
        dy's spatial dims must be floor(S * scale).
        """
        where = f"node '{name or 'resample_backward'}'"
        factors = tuple(real(c, f"{where} scales", finite=True) for c in scales) if scales is not None else ()
        attributes = {"mode": mode, "coordinates": coordinates, "dims": ints(dims, f"{where} dims"), "scales": factors}
        node = self.add_node(ResampleBackward, {"dy": dy}, attributes, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def reshape(
        self, x: Tensor, dims: Sequence[int], *, name: str | None = None, compute_dtype: DTypeLike = None
    ) -> Tensor:
        """x's elements in logical row-major order under ``dims`` (what cuDNN sets on the output)."""
        attributes = {"dims": ints(dims, f"node '{name or 'reshape'}' dims")}
        return self._single(self.add_node(Reshape, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def transpose(
        self, x: Tensor, permutation: Sequence[int], *, name: str | None = None, compute_dtype: DTypeLike = None
    ) -> Tensor:
        """Output axis i is x's axis ``permutation[i]``."""
        attributes = {"permutation": ints(permutation, f"node '{name or 'transpose'}' permutation")}
        return self._single(self.add_node(Transpose, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def slice(
        self, x: Tensor, slices: Sequence[slice], *, name: str | None = None, compute_dtype: DTypeLike = None
    ) -> Tensor:
        """x[slices]: one Python slice per leading axis (``[slice(0, 2), slice(1, 8, 2)]``), normalized as
        Python does; the rank is kept, and an empty result is an error."""
        attributes = slice_bounds(f"node '{name or 'slice'}'", x, slices)
        return self._single(self.add_node(Slice, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def concatenate(
        self,
        inputs: Sequence[Tensor],
        axis: int,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Join ``inputs`` along ``axis`` (negative counts from the end); other dims must match."""
        where = f"node '{name or 'concatenate'}'"
        first = inputs[0] if isinstance(inputs, Sequence) and inputs else None
        a = integer(axis, f"{where} axis")
        if a < 0:
            a += rank_of(first)
        node = self.add_node(Concatenate, {"x": inputs}, {"axis": a}, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def __getattr__(self, mode: str) -> Any:
        """Per-mode conveniences: ``g.add(a, b)``, ``g.relu_fwd(x)``, ``g.relu(x)``."""
        alias = _ALIASES.get(mode, mode)
        if alias in MODES:
            return lambda *args, **kw: self.pointwise(alias, *args, **kw)
        raise AttributeError(mode)
