"""The torch.library custom ops (namespace ``sigdnn``): each runs its cached sigdnn graph; fakes give shapes to tracers.

Autograd goes through the backward graphs: sdpa through sdpa_backward,
layer_norm through layer_norm_backward, conv through conv_dgrad and
conv_wgrad, each itself a custom op, so ``torch.compile(fullgraph=True)``
traces forward and backward without a graph break. The ops are defined on a
``torch.library.Library`` with their CPU and CUDA kernels registered
directly: ``torch.library.custom_op`` would wrap each call in layers
(a dynamo-disable frame among them) that cost a small op a third of its
host time.
"""

from __future__ import annotations

from typing import Any

import torch

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.torch import eager, graphs
from sigdnn.torch.cache import run

Tensor = torch.Tensor
_LIBRARY = torch.library.Library("sigdnn", "DEF")


_KERNELS: dict[str, Any] = {}  # op name -> its CPU / CUDA kernel (what the autograd kernel calls directly)
_FUNCTIONS: dict[str, Any] = {}  # op name -> its autograd.Function (what a Python entry applies for a gradient)
_BACKEND_KEYS = (torch._C.DispatchKey.CPU, torch._C.DispatchKey.CUDA)


def define(schema: str) -> Any:
    """Define ``sigdnn::<schema>`` with the decorated function as its CPU and CUDA kernel; returns the op's
    Python entry (eager.entry: the kernel without the dispatcher where nothing else would run)."""

    def register(kernel: Any) -> Any:
        name = schema.split("(", 1)[0]
        _LIBRARY.define(schema)
        for key in ("CPU", "CUDA"):
            _LIBRARY.impl(name, kernel, key)
        _KERNELS[name] = kernel
        return eager.entry(getattr(torch.ops.sigdnn, name), kernel, _FUNCTIONS)

    return register


def register_autograd(name: str, backward: Any, setup_context: Any) -> None:
    """``torch.library.register_autograd``'s contract (``setup_context(ctx, inputs, output)``, ``backward(ctx,
    *grads)`` -> a tuple of a gradient or None per input) with a shorter path where no gradient is needed.

    torch's Autograd kernel redispatches every call through the dispatcher
    to the CPU / CUDA kernel, boxing the arguments again (with its wrapper,
    18 us of a small op's 100 us on an H100 before; 12 us with this one).
    Here a call that needs no gradient, whose next key is the CPU or CUDA
    backend itself, calls the kernel directly; any other key there (a fake
    or functional tensor under a tracer, a dispatch mode) still
    redispatches, as does the forward of a call that needs gradients. That
    kernel call does not exclude autograd below it: no input needs a
    gradient, so the kernel's own torch calls record nothing either way,
    and the exclusion's guard cost torch.ops.sigdnn.layer_norm (8 x 64, the
    reference's CPU) 4,900 of its 883,000 instructions a call (callgrind;
    sdpa 7,600 of 815,000), 0-3 us of its ~175 in time. The
    op's autograd.Function goes in ``_FUNCTIONS``: the op's Python entry
    (eager.entry) applies it with ``None`` for the key set, and its forward
    then calls the kernel itself.
    """
    op = getattr(torch.ops.sigdnn, name).default
    kernel = _KERNELS[name]

    def forward(ctx: Any, *args: Any) -> Any:
        *inputs, below = args
        if below is None:  # from the op's Python entry, which skipped the dispatcher
            output = kernel(*inputs)
        else:
            with torch._C._AutoDispatchBelowAutograd():
                output = op.redispatch(below, *inputs)
        setup_context(ctx, tuple(inputs), output)
        return output

    def gradients(ctx: Any, *grads: Any) -> Any:
        everything = ctx.needs_input_grad
        ctx.needs_input_grad = everything[:-1]  # as the op's inputs, without the key set
        try:
            found = backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = everything  # a second backward (retain_graph) trims it again
        return (*found, None)

    # named after the op: its grad_fn in an autograd graph reads sigdnn_<op>Backward
    methods = {"forward": staticmethod(forward), "backward": staticmethod(gradients)}
    Function = _FUNCTIONS[name] = type(f"sigdnn_{name}", (torch.autograd.Function,), methods)

    def autograd_kernel(keyset: Any, *args: Any) -> Any:
        below = keyset & torch._C._after_autograd_keyset
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
            return Function.apply(*args, below)
        if below.highestPriorityTypeId() in _BACKEND_KEYS:
            return kernel(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(below, *args)

    _LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)


def _stats_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if as_data_type(t.dtype) is DataType.FLOAT64 else torch.float32


# -- attention ---------------------------------------------------------------
BAND_ARGUMENTS = "bool bottom_right=False, int? left_bound=None, int? right_bound=None"  # docs/ops.md, sdpa's band


def _band(bottom_right: bool, left_bound: int | None, right_bound: int | None) -> tuple:
    """The band's attributes as a cache key holds them (a Python bool and ints, whatever numbers were passed)."""
    left = left_bound if left_bound is None else int(left_bound)
    return bool(bottom_right), left, right_bound if right_bound is None else int(right_bound)


@define(f"sdpa(Tensor q, Tensor k, Tensor v, float scale, bool causal, {BAND_ARGUMENTS}) -> (Tensor, Tensor)")
def sdpa(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, bottom_right: bool = False,
         left_bound: int | None = None, right_bound: int | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(o, stats): attention of q [B, Hq, Sq, D] over k, v [B, Hkv, Skv, D / Dv] in the causal mask and band
    given; stats is each row's logsumexp."""
    attributes = (float(scale), bool(causal), *_band(bottom_right, left_bound, right_bound))
    o, stats = run("sdpa", graphs.sdpa, (q, k, v), attributes)
    return o, stats


@torch.library.register_fake("sigdnn::sdpa", lib=_LIBRARY)
def _(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, bottom_right: bool = False,
      left_bound: int | None = None, right_bound: int | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    rows = tuple(q.shape[:-1])
    return q.new_empty((*rows, v.shape[-1])), q.new_empty((*rows, 1), dtype=_stats_dtype(q))


@define(
    "sdpa_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor d_o, Tensor stats, float scale, bool causal, "
    f"{BAND_ARGUMENTS}) -> (Tensor, Tensor, Tensor)"
)
def sdpa_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, d_o: Tensor, stats: Tensor, scale: float,
                  causal: bool, bottom_right: bool = False, left_bound: int | None = None,
                  right_bound: int | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    attributes = (float(scale), bool(causal), *_band(bottom_right, left_bound, right_bound))
    dq, dk, dv = run("sdpa_backward", graphs.sdpa_backward, (q, k, v, o, d_o, stats), attributes)
    return dq, dk, dv


@torch.library.register_fake("sigdnn::sdpa_backward", lib=_LIBRARY)
def _(q: Tensor, k: Tensor, v: Tensor, o: Tensor, d_o: Tensor, stats: Tensor, scale: float, causal: bool,
      bottom_right: bool = False, left_bound: int | None = None,
      right_bound: int | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _sdpa_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, *attributes = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.attributes = attributes  # scale, causal and the band


def _sdpa_grad(ctx: Any, d_o: Tensor, d_stats: Tensor) -> tuple:
    q, k, v, o, stats = ctx.saved_tensors
    dq, dk, dv = sdpa_backward(q, k, v, o, d_o.contiguous(), stats, *ctx.attributes)
    return dq, dk, dv, *(None for _ in ctx.attributes)


register_autograd("sdpa", _sdpa_grad, _sdpa_context)


# -- layer norm --------------------------------------------------------------
@define("layer_norm(Tensor x, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)")
def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd) over x's trailing dims that weight spans."""
    y, mean, rstd = run("layer_norm", graphs.layer_norm, (x, weight, bias), (float(eps),))
    return y, mean, rstd


def _row_stats(x: Tensor, weight: Tensor) -> tuple[int, ...]:
    return (*x.shape[: x.dim() - weight.dim()], *(1 for _ in range(weight.dim())))


@torch.library.register_fake("sigdnn::layer_norm", lib=_LIBRARY)
def _(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    rows = _row_stats(x, weight)
    return x.new_empty(x.shape), x.new_empty(rows, dtype=_stats_dtype(x)), x.new_empty(rows, dtype=_stats_dtype(x))


@define("layer_norm_backward(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)")
def layer_norm_backward(dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor,
                        rstd: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    dx, dw, db = run("layer_norm_backward", graphs.layer_norm_backward, (dy, x, weight, mean, rstd), ())
    return dx, dw, db


@torch.library.register_fake("sigdnn::layer_norm_backward", lib=_LIBRARY)
def _(dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return x.new_empty(x.shape), weight.new_empty(weight.shape), weight.new_empty(weight.shape)


def _layer_norm_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, weight, _, _ = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])


def _layer_norm_grad(ctx: Any, dy: Tensor, d_mean: Tensor, d_rstd: Tensor) -> tuple:
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = layer_norm_backward(dy.contiguous(), x, weight, mean, rstd)
    return dx, dw, db, None


register_autograd("layer_norm", _layer_norm_grad, _layer_norm_context)


# -- convolution ---------------------------------------------------------------
def _conv_dims(x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int]) -> tuple[int, ...]:
    spatial = [
        (s + 2 * p - d * (r - 1) - 1) // st + 1
        for s, r, st, p, d in zip(x.shape[2:], w.shape[2:], stride, padding, dilation)
    ]
    return (x.shape[0], w.shape[0], *spatial)


@define("conv(Tensor x, Tensor w, int[] stride, int[] padding, int[] dilation) -> Tensor")
def conv(x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int]) -> Tensor:
    """Cross-correlation of x [N, C, *S] with w [K, C, *R] (no groups), as torch's convNd without bias."""
    (y,) = run("conv", graphs.conv, (x, w), (tuple(stride), tuple(padding), tuple(dilation)))
    return y


@torch.library.register_fake("sigdnn::conv", lib=_LIBRARY)
def _(x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int]) -> Tensor:
    dims = _conv_dims(x, w, stride, padding, dilation)
    return x.new_empty_strided(dims, graphs.strides_like(graphs.Spec.of(x), dims))


@define("conv_dgrad(Tensor dy, Tensor w, int[] x_dims, int[] stride, int[] padding, int[] dilation) -> Tensor")
def conv_dgrad(dy: Tensor, w: Tensor, x_dims: list[int], stride: list[int], padding: list[int],
               dilation: list[int]) -> Tensor:  # fmt: skip
    attributes = (tuple(x_dims), tuple(stride), tuple(padding), tuple(dilation))
    (dx,) = run("conv_dgrad", graphs.conv_dgrad, (dy, w), attributes)
    return dx


@torch.library.register_fake("sigdnn::conv_dgrad", lib=_LIBRARY)
def _(dy: Tensor, w: Tensor, x_dims: list[int], stride: list[int], padding: list[int], dilation: list[int]) -> Tensor:
    return dy.new_empty_strided(x_dims, graphs.strides_like(graphs.Spec.of(dy), x_dims))


@define("conv_wgrad(Tensor x, Tensor dy, int[] w_dims, int[] stride, int[] padding, int[] dilation) -> Tensor")
def conv_wgrad(x: Tensor, dy: Tensor, w_dims: list[int], stride: list[int], padding: list[int],
               dilation: list[int]) -> Tensor:  # fmt: skip
    attributes = (tuple(w_dims), tuple(stride), tuple(padding), tuple(dilation))
    (dw,) = run("conv_wgrad", graphs.conv_wgrad, (x, dy), attributes)
    return dw


@torch.library.register_fake("sigdnn::conv_wgrad", lib=_LIBRARY)
def _(x: Tensor, dy: Tensor, w_dims: list[int], stride: list[int], padding: list[int], dilation: list[int]) -> Tensor:
    return x.new_empty_strided(w_dims, graphs.strides_like(graphs.Spec.of(x), w_dims))


def _conv_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, w, stride, padding, dilation = inputs
    ctx.save_for_backward(x, w)
    ctx.attributes = (list(stride), list(padding), list(dilation))


def _conv_grad(ctx: Any, dy: Tensor) -> tuple:
    x, w = ctx.saved_tensors
    dy = dy.contiguous()
    dx = conv_dgrad(dy, w, list(x.shape), *ctx.attributes) if ctx.needs_input_grad[0] else None
    dw = conv_wgrad(x, dy, list(w.shape), *ctx.attributes) if ctx.needs_input_grad[1] else None
    return dx, dw, None, None, None


register_autograd("conv", _conv_grad, _conv_context)
