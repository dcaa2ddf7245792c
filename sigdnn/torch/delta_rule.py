"""The gated delta rule's torch ops: ``torch.ops.sigdnn.gdn`` / ``kda`` and their backward, on cached graphs.

Token-packed as the sigdnn ops (docs/ops.md, "gdn"): q, k [T, H, K],
v [T, H, V], g [T, H] (gdn) or [T, H, K] (kda), beta [T, H], cu_seqlens
[N + 1], initial_state [N, H, K, V] optional. The forward returns
(o [T, H, V], final_state or None); autograd runs gdn_bwd / kda_bwd, which
recompute the recurrence from the forward's inputs, so nothing but those
inputs is saved. An optional tensor's presence is part of the graph's
signature: the ports present travel with the attributes, as does torch's
float32 matmul precision, which picks the chunk products' operands as it
does torch's own float32 matmuls: "highest" (torch's default) exact float32,
"high" (``torch.set_float32_matmul_precision("high")``, or
``torch.backends.cuda.matmul.allow_tf32``) TF32, "medium" bfloat16, the
operands flash-linear-attention's dots take from bf16 inputs (its fastest).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from sigdnn.torch import graphs
from sigdnn.torch.cache import run
from sigdnn.torch.ops import _LIBRARY, _stats_dtype, define, register_autograd

Tensor = torch.Tensor
FORWARD_PORTS = ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state")
BACKWARD_PORTS = (*FORWARD_PORTS, "d_o", "d_final_state")
FORWARD_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor cu_seqlens, Tensor? initial_state, float? scale,"
    " bool use_qk_l2norm, bool output_final_state) -> (Tensor, Tensor?)"
)
BACKWARD_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor cu_seqlens, Tensor? initial_state, Tensor d_o,"
    " Tensor? d_final_state, float? scale, bool use_qk_l2norm) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor?)"
)


def present(names: tuple[str, ...], tensors: tuple[Tensor | None, ...]) -> tuple[tuple[str, ...], tuple[Tensor, ...]]:
    """The ports given a tensor and their tensors, in port order."""
    pairs = [(n, t) for n, t in zip(names, tensors) if t is not None]
    return tuple(n for n, _ in pairs), tuple(t for _, t in pairs)


def precision() -> str:
    """torch's float32 matmul precision ("highest", "high" or "medium"): the products' operands
    (``graphs.products_compute``)."""
    return torch.get_float32_matmul_precision()


def forward(kind: str, tensors: tuple[Tensor | None, ...], scale: float | None, l2norm: bool,
            output_final_state: bool) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    ports, given = present(FORWARD_PORTS, tensors)
    scale = None if scale is None else float(scale)
    attributes = (ports, scale, bool(l2norm), bool(output_final_state), precision())
    outs = run(kind, functools.partial(graphs.delta_rule, kind), given, attributes)
    return outs[0], (outs[1] if output_final_state else None)


def backward(kind: str, tensors: tuple[Tensor | None, ...], scale: float | None,
             l2norm: bool) -> tuple[Tensor | None, ...]:  # fmt: skip
    ports, given = present(BACKWARD_PORTS, tensors)
    scale = None if scale is None else float(scale)
    attributes = (ports, scale, bool(l2norm), precision())
    grads = run(f"{kind}_bwd", functools.partial(graphs.delta_rule_bwd, kind), given, attributes)
    return (*grads[:5], grads[5] if "initial_state" in ports else None)


def fake_forward(q: Tensor, v: Tensor, cu_seqlens: Tensor, initial_state: Tensor | None,
                 output_final_state: bool) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """o [T, H, V] in q's dtype; final_state [N, H, K, V] in the initial state's dtype (float32 / float64 without)."""
    o = q.new_empty((*q.shape[:2], v.shape[-1]))
    if not output_final_state:
        return o, None
    dims = (cu_seqlens.shape[0] - 1, q.shape[1], q.shape[2], v.shape[-1])
    dtype = _stats_dtype(q) if initial_state is None else initial_state.dtype
    return o, q.new_empty(dims, dtype=dtype)


def fake_backward(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                  initial_state: Tensor | None) -> tuple[Tensor | None, ...]:  # fmt: skip
    grads = tuple(t.new_empty(t.shape) for t in (q, k, v, g, beta))
    return (*grads, None if initial_state is None else initial_state.new_empty(initial_state.shape))


def _context(ctx: Any, inputs: tuple, output: tuple) -> None:
    *tensors, scale, l2norm, _ = inputs
    ctx.save_for_backward(*tensors)
    ctx.scale, ctx.l2norm = scale, l2norm


def _gradients(backward_op: Any) -> Any:
    def gradients(ctx: Any, d_o: Tensor, d_final_state: Tensor | None) -> tuple:
        q, k, v, g, beta, cu_seqlens, initial_state = ctx.saved_tensors
        d_final = None if d_final_state is None else d_final_state.contiguous()
        grads = backward_op(q, k, v, g, beta, cu_seqlens, initial_state, d_o.contiguous(), d_final, ctx.scale,
                            ctx.l2norm)  # fmt: skip
        dq, dk, dv, dg, dbeta, d_initial = grads
        return dq, dk, dv, dg, dbeta, None, d_initial, None, None, None

    return gradients


def _register(kind: str) -> Any:
    """``sigdnn::<kind>`` and ``sigdnn::<kind>_bwd`` (CPU / CUDA kernels, fakes, autograd); the forward op.

    gdn: one decay g [T, H] per head; kda: one per key channel, g [T, H, K] (dg takes g's shape)."""
    backward_op = define(f"{kind}_bwd{BACKWARD_SCHEMA}")(
        lambda q, k, v, g, beta, cu_seqlens, initial_state, d_o, d_final_state, scale, l2norm: backward(
            kind, (q, k, v, g, beta, cu_seqlens, initial_state, d_o, d_final_state), scale, l2norm
        )
    )
    torch.library.register_fake(f"sigdnn::{kind}_bwd", lib=_LIBRARY)(
        lambda q, k, v, g, beta, cu_seqlens, initial_state, *_: fake_backward(q, k, v, g, beta, initial_state)
    )
    op = define(f"{kind}{FORWARD_SCHEMA}")(
        lambda q, k, v, g, beta, cu_seqlens, initial_state, scale, l2norm, output_final_state: forward(
            kind, (q, k, v, g, beta, cu_seqlens, initial_state), scale, l2norm, output_final_state
        )
    )
    torch.library.register_fake(f"sigdnn::{kind}", lib=_LIBRARY)(
        lambda q, k, v, g, beta, cu_seqlens, initial_state, scale, l2norm, output_final_state: fake_forward(
            q, v, cu_seqlens, initial_state, output_final_state
        )
    )
    register_autograd(kind, _gradients(backward_op), _context)
    return op


gdn = _register("gdn")  # (o, final_state or None) over the sequences cu_seqlens packs
kda = _register("kda")
