"""The op methods of pygraph other than pointwise: cuDNN-frontend's names and keywords, recorded for planning.

Each method records what to add to the sigdnn graph and returns new tensors
(virtual until ``set_output(True)``), as cuDNN's do. The recorded call runs
when the graph is validated: by then the outputs' ``set_dim`` (which
reduction, reshape and the strided conv_dgrad / conv_wgrad need) are known.
A keyword cuDNN documents that sigdnn cannot honour raises
NotImplementedError naming the method and the keyword when it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sigdnn.cudnn.enums import convolution_mode, diagonal_alignment, norm_forward_phase, reduction_mode
from sigdnn.errors import GraphError

if TYPE_CHECKING:
    from sigdnn.cudnn.materialize import Resolver
    from sigdnn.cudnn.tensor import tensor
    from sigdnn.graph.graph import Graph

Build = Callable[["Graph", "Resolver"], Sequence[Any]]


def unsupported(method: str, **given: Any) -> None:
    """NotImplementedError naming the first keyword given a value sigdnn cannot honour (None / False are unset)."""
    for keyword, value in given.items():
        if value is not None and value is not False and value != [] and value != ():
            raise NotImplementedError(f"pygraph.{method}({keyword}=...): sigdnn does not support {keyword}")


def _phase(method: str, phase: Any) -> str:
    if phase is norm_forward_phase.TRAINING:
        return "training"
    if phase is norm_forward_phase.INFERENCE:
        return "inference"
    raise GraphError(f"pygraph.{method}: norm_forward_phase must be TRAINING or INFERENCE, got {phase!r}")


def _conv_padding(method: str, padding: Any, pre_padding: Any, post_padding: Any) -> dict[str, Any]:
    if padding is not None and (pre_padding is not None or post_padding is not None):
        raise GraphError(f"pygraph.{method}: give padding or pre_padding/post_padding, not both")
    if padding is not None:
        return {"padding": padding}
    return {"pre_padding": pre_padding, "post_padding": post_padding}


class Ops:
    """Mixed into pygraph: every op method but the pointwise ones (those come from ``pointwise.METHODS``)."""

    if TYPE_CHECKING:

        def _record(self, method: str, name: str, inputs: Sequence[Any], count: int, build: Build) -> list[tensor]: ...

    # -- convolution, matmul --------------------------------------------------
    def conv_fprop(self, image: tensor, weight: tensor, padding: Sequence[int] | None = None,
                   stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None, *,
                   pre_padding: Sequence[int] | None = None, post_padding: Sequence[int] | None = None,
                   convolution_mode: convolution_mode = convolution_mode.CROSS_CORRELATION,
                   compute_data_type: Any = None, name: str = "") -> tensor:  # fmt: skip
        """y = image * weight (cross-correlation), as cuDNN's conv_fprop."""
        _cross_correlation("conv_fprop", convolution_mode)
        pads = _conv_padding("conv_fprop", padding, pre_padding, post_padding)

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.conv_fprop(r.t(image), r.t(weight), stride=stride, dilation=dilation, name=r.name,
                                 compute_dtype=r.compute, **pads)]  # fmt: skip

        return self._record("conv_fprop", name, [image, weight], 1, build, compute_data_type)[0]

    def conv_dgrad(self, loss: tensor, filter: tensor, padding: Sequence[int] | None = None,
                   stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None, *,
                   pre_padding: Sequence[int] | None = None, post_padding: Sequence[int] | None = None,
                   convolution_mode: convolution_mode = convolution_mode.CROSS_CORRELATION,
                   compute_data_type: Any = None, name: str = "") -> tensor:  # fmt: skip
        """dx from dy (``loss``) and w (``filter``); dx's dims from its set_dim where the conv is strided or grouped."""
        _cross_correlation("conv_dgrad", convolution_mode)
        pads = _conv_padding("conv_dgrad", padding, pre_padding, post_padding)
        out: list[tensor] = []

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.conv_dgrad(r.t(loss), r.t(filter), stride=stride, dilation=dilation, dims=r.dims(out[0]),
                                 name=r.name, compute_dtype=r.compute, **pads)]  # fmt: skip

        out += self._record("conv_dgrad", name, [loss, filter], 1, build, compute_data_type)
        return out[0]

    def conv_wgrad(self, image: tensor, loss: tensor, padding: Sequence[int] | None = None,
                   stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None, *,
                   pre_padding: Sequence[int] | None = None, post_padding: Sequence[int] | None = None,
                   convolution_mode: convolution_mode = convolution_mode.CROSS_CORRELATION,
                   compute_data_type: Any = None, name: str = "") -> tensor:  # fmt: skip
        """dw from x (``image``) and dy (``loss``); dw's dims from its set_dim where the conv is strided or grouped."""
        _cross_correlation("conv_wgrad", convolution_mode)
        pads = _conv_padding("conv_wgrad", padding, pre_padding, post_padding)
        out: list[tensor] = []

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.conv_wgrad(r.t(image), r.t(loss), stride=stride, dilation=dilation, dims=r.dims(out[0]),
                                 name=r.name, compute_dtype=r.compute, **pads)]  # fmt: skip

        out += self._record("conv_wgrad", name, [image, loss], 1, build, compute_data_type)
        return out[0]

    def matmul(self, A: tensor, B: tensor, compute_data_type: Any = None, padding: float = 0.0,
               name: str = "") -> tensor:  # fmt: skip
        """C = A @ B over the last two dims, batched."""
        if padding != 0.0:
            raise NotImplementedError("pygraph.matmul(padding=...): sigdnn's matmul has no padding value")

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.matmul(r.t(A), r.t(B), name=r.name, compute_dtype=r.compute)]

        return self._record("matmul", name, [A, B], 1, build, compute_data_type)[0]

    # -- normalizations --------------------------------------------------------
    def batchnorm(self, input: tensor, scale: tensor, bias: tensor, in_running_mean: tensor | None,
                  in_running_var: tensor | None, epsilon: Any, momentum: Any, peer_stats: Sequence[Any] = (),
                  compute_data_type: Any = None, name: str = "") -> list[tensor | None]:  # fmt: skip
        """Training batchnorm -> [y, mean, inv_variance, next_running_mean, next_running_var]."""
        unsupported("batchnorm", peer_stats=list(peer_stats))

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.batchnorm(r.t(input), r.t(scale), r.t(bias), r.t(in_running_mean), r.t(in_running_var),
                               r.value(epsilon, "epsilon"), r.value(momentum, "momentum"), name=r.name,
                               compute_dtype=r.compute)  # fmt: skip

        ins = [input, scale, bias, in_running_mean, in_running_var, epsilon, momentum]
        return self._record("batchnorm", name, ins, 5, build, compute_data_type)

    def batchnorm_inference(self, input: tensor, mean: tensor, inv_variance: tensor, scale: tensor, bias: tensor,
                            compute_data_type: Any = None, name: str = "") -> tensor:  # fmt: skip
        """y = (x - mean) * inv_variance * scale + bias."""

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.batchnorm_inference(r.t(input), r.t(mean), r.t(inv_variance), r.t(scale), r.t(bias),
                                          name=r.name, compute_dtype=r.compute)]  # fmt: skip

        ins = [input, mean, inv_variance, scale, bias]
        return self._record("batchnorm_inference", name, ins, 1, build, compute_data_type)[0]

    def batchnorm_backward(self, grad: tensor, input: tensor, scale: tensor, mean: tensor, inv_variance: tensor,
                           peer_stats: Sequence[Any] = (), compute_data_type: Any = None,
                           name: str = "") -> list[tensor | None]:  # fmt: skip
        """-> [dx, dscale, dbias] from dy (``grad``) and the saved statistics."""
        unsupported("batchnorm_backward", peer_stats=list(peer_stats))

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.batchnorm_backward(r.t(grad), r.t(input), r.t(scale), r.t(mean), r.t(inv_variance),
                                        name=r.name, compute_dtype=r.compute)  # fmt: skip

        ins = [grad, input, scale, mean, inv_variance]
        return self._record("batchnorm_backward", name, ins, 3, build, compute_data_type)

    def layernorm(self, norm_forward_phase: norm_forward_phase, input: tensor, scale: tensor, bias: tensor,
                  epsilon: Any, compute_data_type: Any = None, name: str = "") -> list[tensor | None]:  # fmt: skip
        """-> [y, mean, inv_variance]; mean and inv_variance are None in the INFERENCE phase."""
        phase = _phase("layernorm", norm_forward_phase)

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.layernorm(phase, r.t(input), r.t(scale), r.t(bias), r.value(epsilon, "epsilon"), name=r.name,
                               compute_dtype=r.compute)  # fmt: skip

        outs = self._record("layernorm", name, [input, scale, bias, epsilon], 3, build, compute_data_type)
        return outs if phase == "training" else [outs[0], None, None]

    def layernorm_backward(self, grad: tensor, input: tensor, scale: tensor, mean: tensor, inv_variance: tensor,
                           compute_data_type: Any = None, name: str = "") -> list[tensor | None]:  # fmt: skip
        """-> [dx, dscale, dbias]."""

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.layernorm_backward(r.t(grad), r.t(input), r.t(scale), r.t(mean), r.t(inv_variance),
                                        name=r.name, compute_dtype=r.compute)  # fmt: skip

        ins = [grad, input, scale, mean, inv_variance]
        return self._record("layernorm_backward", name, ins, 3, build, compute_data_type)

    def rmsnorm(self, norm_forward_phase: norm_forward_phase, input: tensor, scale: tensor,
                bias: tensor | None = None, epsilon: Any = None, compute_data_type: Any = None,
                name: str = "") -> list[tensor | None]:  # fmt: skip
        """-> [y, inv_variance]; inv_variance is None in the INFERENCE phase."""
        phase = _phase("rmsnorm", norm_forward_phase)
        if epsilon is None:
            raise TypeError("rmsnorm() missing required argument: epsilon")

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.rmsnorm(phase, r.t(input), r.t(scale), r.t(bias), r.value(epsilon, "epsilon"), name=r.name,
                             compute_dtype=r.compute)  # fmt: skip

        outs = self._record("rmsnorm", name, [input, scale, bias, epsilon], 2, build, compute_data_type)
        return outs if phase == "training" else [outs[0], None]

    def rmsnorm_backward(self, grad: tensor, input: tensor, scale: tensor, inv_variance: tensor, has_dbias: bool,
                         compute_data_type: Any = None, name: str = "") -> list[tensor | None]:  # fmt: skip
        """-> [dx, dscale, dbias]; dbias is None unless ``has_dbias``."""

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.rmsnorm_backward(r.t(grad), r.t(input), r.t(scale), r.t(inv_variance), bool(has_dbias),
                                      name=r.name, compute_dtype=r.compute)  # fmt: skip

        outs = self._record("rmsnorm_backward", name, [grad, input, scale, inv_variance], 3, build, compute_data_type)
        return outs if has_dbias else [outs[0], outs[1], None]

    # -- softmax, reduction, data movement --------------------------------------
    def softmax(self, input: tensor, axes: Sequence[int] | int | None = None, log: bool = False,
                generate_stats: bool = False, compute_data_type: Any = None,
                name: str = "") -> list[tensor | None]:  # fmt: skip
        """sigdnn's softmax (cuDNN's Python graph has none; its C++ graph builds one inside sdpa) -> [y, stats]."""

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return g.softmax(r.t(input), axes, log, generate_stats, name=r.name, compute_dtype=r.compute)

        outs = self._record("softmax", name, [input], 2, build, compute_data_type)
        return outs if generate_stats else [outs[0], None]

    def reduction(self, input: tensor, mode: reduction_mode, compute_data_type: Any = None,
                  name: str = "") -> tensor:  # fmt: skip
        """Reduce ``input`` to the output's dims (set with set_dim, as in cuDNN: reduced dims are 1)."""
        if not isinstance(mode, reduction_mode) or mode is reduction_mode.NOT_SET:
            raise GraphError(f"pygraph.reduction: mode must be a cudnn.reduction_mode, got {mode!r}")
        out: list[tensor] = []

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            dims = r.dims(out[0])
            if dims is None:
                raise GraphError(f"reduction '{r.name}': set the output's dims (set_dim) to say which axes reduce")
            return [g.reduction(r.t(input), mode.value, dims, name=r.name, compute_dtype=r.compute)]

        out += self._record("reduction", name, [input], 1, build, compute_data_type)
        return out[0]

    def reshape(self, input: tensor, name: str = "", reshape_mode: Any = None) -> tensor:
        """y: input's elements in logical row-major order under the output's set_dim."""
        out: list[tensor] = []

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            dims = r.dims(out[0])
            if dims is None:
                raise GraphError(f"reshape '{r.name}': set the output's dims (set_dim)")
            return [g.reshape(r.t(input), dims, name=r.name)]

        out += self._record("reshape", name, [input], 1, build, None)
        return out[0]

    def transpose(self, input: tensor, permutation: Sequence[int], compute_data_type: Any = None,
                  name: str = "") -> tensor:  # fmt: skip
        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.transpose(r.t(input), permutation, name=r.name, compute_dtype=r.compute)]

        return self._record("transpose", name, [input], 1, build, compute_data_type)[0]

    def slice(self, input: tensor, slices: Sequence[slice] = (), compute_data_type: Any = None,
              name: str = "") -> tensor:  # fmt: skip
        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.slice(r.t(input), list(slices), name=r.name, compute_dtype=r.compute)]

        return self._record("slice", name, [input], 1, build, compute_data_type)[0]

    def concatenate(self, inputs: Sequence[tensor], axis: int, in_place_index: int | None = None,
                    name: str = "") -> tensor:  # fmt: skip
        unsupported("concatenate", in_place_index=in_place_index)

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            return [g.concatenate([r.t(t) for t in inputs], axis, name=r.name)]

        return self._record("concatenate", name, list(inputs), 1, build, None)[0]

    # -- attention -------------------------------------------------------------
    def sdpa(self, q: tensor, k: tensor, v: tensor, is_inference: bool | None = None, attn_scale: Any = None,
             bias: tensor | None = None, block_mask: Any = None, use_alibi_mask: bool = False,
             use_padding_mask: bool = False, seq_len_q: Any = None, seq_len_kv: Any = None,
             use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
             sliding_window_length: Any = None, diagonal_alignment: Any = None, diagonal_band_left_bound: Any = None,
             diagonal_band_right_bound: Any = None, dropout: Any = None, rng_dump: Any = None,
             paged_attention_k_table: Any = None, paged_attention_v_table: Any = None,
             paged_attention_max_seq_len_kv: Any = None, compute_data_type: Any = None, name: str = "",
             score_mod: Any = None, generate_stats: bool | None = None, implementation: Any = None,
             score_max: Any = None, score_sum_exp: Any = None, sink_token: Any = None,
             unfuse_fma: bool = False) -> list[tensor | None]:  # fmt: skip
        """Scaled dot-product attention -> [o, stats]; stats only when generating them (training, not inference)."""
        unsupported("sdpa", block_mask=block_mask, use_alibi_mask=use_alibi_mask, dropout=dropout, rng_dump=rng_dump,
                    paged_attention_k_table=paged_attention_k_table, paged_attention_v_table=paged_attention_v_table,
                    paged_attention_max_seq_len_kv=paged_attention_max_seq_len_kv, score_mod=score_mod,
                    score_max=score_max, score_sum_exp=score_sum_exp, sink_token=sink_token,
                    unfuse_fma=unfuse_fma)  # fmt: skip
        band = _band("sdpa", use_causal_mask, use_causal_mask_bottom_right, sliding_window_length,
                     diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)  # fmt: skip
        stats = _stats(is_inference, generate_stats)
        lengths = _padding("sdpa", use_padding_mask, seq_len_q, seq_len_kv)
        outs: list[Any] = []

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            scale = None if attn_scale is None else r.value(attn_scale, "attn_scale")
            return g.sdpa(r.t(q), r.t(k), r.t(v), scale, r.t(bias), generate_stats=stats, name=r.name,
                          compute_dtype=r.compute, **band, **_varlen(r, lengths, q, k, v, outs[0]))  # fmt: skip

        ins = [q, k, v, bias, attn_scale, *lengths]
        outs += self._record("sdpa", name, ins, 2, build, compute_data_type)
        return outs if stats else [outs[0], None]

    def sdpa_backward(self, q: tensor, k: tensor, v: tensor, o: tensor, dO: tensor, stats: tensor,
                      attn_scale: Any = None, bias: tensor | None = None, dBias: Any = None,
                      use_alibi_mask: bool = False, use_padding_mask: bool = False, seq_len_q: Any = None,
                      seq_len_kv: Any = None, max_total_seq_len_q: Any = None, max_total_seq_len_kv: Any = None,
                      use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
                      sliding_window_length: Any = None, diagonal_alignment: Any = None,
                      diagonal_band_left_bound: Any = None, diagonal_band_right_bound: Any = None,
                      dropout: Any = None, rng_dump: Any = None, use_deterministic_algorithm: bool = False,
                      compute_data_type: Any = None, name: str = "", score_mod: Any = None,
                      score_mod_bprop: Any = None, sink_token: Any = None,
                      dSink_token: Any = None) -> list[tensor | None]:  # fmt: skip
        """-> [dQ, dK, dV] from the forward's o and stats and dO. (sigdnn's backward is deterministic.)"""
        unsupported("sdpa_backward", dBias=dBias, use_alibi_mask=use_alibi_mask, dropout=dropout, rng_dump=rng_dump,
                    score_mod=score_mod, score_mod_bprop=score_mod_bprop, sink_token=sink_token,
                    dSink_token=dSink_token)  # fmt: skip
        band = _band("sdpa_backward", use_causal_mask, use_causal_mask_bottom_right, sliding_window_length,
                     diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)  # fmt: skip
        lengths = _padding("sdpa_backward", use_padding_mask, seq_len_q, seq_len_kv)  # max_total_seq_len_*: hints

        def build(g: Graph, r: Resolver) -> Sequence[Any]:
            scale = None if attn_scale is None else r.value(attn_scale, "attn_scale")
            return g.sdpa_backward(r.t(q), r.t(k), r.t(v), r.t(o), r.t(dO), r.t(stats), scale, r.t(bias),
                                   name=r.name, compute_dtype=r.compute, **band,
                                   **_varlen(r, lengths, q, k, v, o))  # fmt: skip

        ins = [q, k, v, o, dO, stats, bias, attn_scale, *lengths]
        return self._record("sdpa_backward", name, ins, 3, build, compute_data_type)


def _cross_correlation(method: str, mode: Any) -> None:
    if mode is not convolution_mode.CROSS_CORRELATION:
        raise NotImplementedError(f"pygraph.{method}(convolution_mode={mode}): sigdnn convolves by cross-correlation")


def _band(
    method: str,
    causal: bool,
    causal_bottom_right: bool,
    sliding_window_length: Any,
    alignment: Any,
    left_bound: Any,
    right_bound: Any,
) -> dict[str, Any]:
    """The node's diagonal band (Graph.sdpa's keywords) from cuDNN's spellings, with the pygraph's own rules: the
    causal flags are the causal mask aligned top-left / bottom-right (a right bound 0), a sliding window is the
    left bound, and neither pair may be given twice."""
    if causal and causal_bottom_right:
        raise GraphError(f"pygraph.{method}: use_causal_mask and use_causal_mask_bottom_right cannot both be true")
    if (causal or causal_bottom_right) and right_bound is not None:
        raise GraphError(f"pygraph.{method}: a causal mask and diagonal_band_right_bound cannot both be set")
    if sliding_window_length is not None and left_bound is not None:
        raise GraphError(f"pygraph.{method}: sliding_window_length and diagonal_band_left_bound cannot both be set")
    if alignment is not None and not isinstance(alignment, diagonal_alignment):
        raise GraphError(f"pygraph.{method}: diagonal_alignment must be a cudnn.diagonal_alignment, got {alignment!r}")
    bottom_right = alignment is diagonal_alignment.BOTTOM_RIGHT
    if causal or causal_bottom_right:
        bottom_right = causal_bottom_right
    left = sliding_window_length if sliding_window_length is not None else left_bound
    return {
        "use_causal_mask": causal or causal_bottom_right,
        "diagonal_bottom_right": bottom_right,
        "left_bound": left,
        "right_bound": right_bound,
    }


def _padding(method: str, use_padding_mask: bool, seq_len_q: Any, seq_len_kv: Any) -> list[Any]:
    """The padding mask's length tensors: both with use_padding_mask, neither without it."""
    given = [t for t in (seq_len_q, seq_len_kv) if t is not None]
    if use_padding_mask and len(given) != 2:
        raise GraphError(f"pygraph.{method}: use_padding_mask needs both seq_len_q and seq_len_kv")
    if given and not use_padding_mask:
        raise GraphError(f"pygraph.{method}: seq_len_q / seq_len_kv are given without use_padding_mask=True")
    return given


def _varlen(r: Resolver, lengths: list[Any], q: Any, k: Any, v: Any, o: Any) -> dict[str, Any]:
    """sigdnn's variable-length arguments: the padding lengths and the ragged offsets set on q, k, v, o."""
    offsets = {port: r.t(t._ragged_offset) for port, t in zip("qkvo", (q, k, v, o)) if t._ragged_offset is not None}
    seq_len_q, seq_len_kv = (r.t(t) for t in lengths) if lengths else (None, None)
    return {"seq_len_q": seq_len_q, "seq_len_kv": seq_len_kv, "ragged_offsets": offsets or None}


def _stats(is_inference: bool | None, generate_stats: bool | None) -> bool:
    """cuDNN's two spellings: generate_stats, or the older is_inference (stats unless inferring)."""
    if generate_stats is not None and is_inference is not None and bool(generate_stats) == bool(is_inference):
        raise GraphError("pygraph.sdpa: is_inference and generate_stats disagree; give one")
    if generate_stats is not None:
        return bool(generate_stats)
    return not is_inference if is_inference is not None else False
