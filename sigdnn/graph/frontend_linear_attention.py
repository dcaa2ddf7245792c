"""The builder methods of the gated delta rule ops (gdn, kda and their backward), mixed into Frontend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sigdnn.graph.arguments import DTypeLike, real
from sigdnn.graph.ops.gdn import Gdn
from sigdnn.graph.ops.gdn_bwd import GdnBwd
from sigdnn.graph.ops.kda import Kda
from sigdnn.graph.ops.kda_bwd import KdaBwd
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.node import Node
    from sigdnn.graph.ops.base import Op

Maybe = Tensor | None


class LinearAttentionFrontend:
    """gdn / kda forward -> (o, final_state or None); backward -> (dq, dk, dv, dg, dbeta, d_initial_state or None).

    q, k [T, H, K], v [T, H, V], g [T, H] (gdn) or [T, H, K] (kda), beta [T, H], cu_seqlens [N + 1];
    docs/ops.md ("Linear attention") has the recurrence. ``scale`` defaults to 1 / sqrt(K).
    """

    __slots__ = ()

    if TYPE_CHECKING:

        def add_node(self, op_class: type[Op], inputs: Any, attributes: Any = None, **kw: Any) -> Node: ...

        def outputs_of(self, node: Node) -> tuple[Tensor | None, ...]: ...

    def _delta_rule(self, op: type[Op], inputs: dict[str, Maybe], attributes: dict[str, Any], kw: Any) -> Any:
        if attributes["scale"] is not None:
            attributes["scale"] = real(attributes["scale"], f"node '{kw['name'] or op.kind}' scale")
        return self.outputs_of(self.add_node(op, inputs, attributes, **kw))

    def gdn(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
        initial_state: Maybe = None, *, scale: float | None = None, use_qk_l2norm: bool = False,
        output_final_state: bool = False, name: str | None = None, compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:  # fmt: skip
        """Gated DeltaNet forward: one decay per token and head."""
        inputs = {
            "q": q,
            "k": k,
            "v": v,
            "g": g,
            "beta": beta,
            "cu_seqlens": cu_seqlens,
            "initial_state": initial_state,
        }
        attributes = {
            "scale": scale,
            "use_qk_l2norm": bool(use_qk_l2norm),
            "output_final_state": bool(output_final_state),
        }
        return self._delta_rule(Gdn, inputs, attributes, {"name": name, "compute_dtype": compute_dtype})

    def kda(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
        initial_state: Maybe = None, *, scale: float | None = None, use_qk_l2norm: bool = False,
        output_final_state: bool = False, name: str | None = None, compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:  # fmt: skip
        """Kimi Delta Attention forward: one decay per token, head and key channel."""
        inputs = {
            "q": q,
            "k": k,
            "v": v,
            "g": g,
            "beta": beta,
            "cu_seqlens": cu_seqlens,
            "initial_state": initial_state,
        }
        attributes = {
            "scale": scale,
            "use_qk_l2norm": bool(use_qk_l2norm),
            "output_final_state": bool(output_final_state),
        }
        return self._delta_rule(Kda, inputs, attributes, {"name": name, "compute_dtype": compute_dtype})

    def gdn_bwd(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
        initial_state: Maybe = None, d_o: Maybe = None, d_final_state: Maybe = None, *, scale: float | None = None,
        use_qk_l2norm: bool = False, name: str | None = None, compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """Gated DeltaNet gradients from d_o (required) and d_final_state."""
        inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "cu_seqlens": cu_seqlens,
                  "initial_state": initial_state, "d_o": d_o, "d_final_state": d_final_state}  # fmt: skip
        attributes = {"scale": scale, "use_qk_l2norm": bool(use_qk_l2norm)}
        return self._delta_rule(GdnBwd, inputs, attributes, {"name": name, "compute_dtype": compute_dtype})

    def kda_bwd(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
        initial_state: Maybe = None, d_o: Maybe = None, d_final_state: Maybe = None, *, scale: float | None = None,
        use_qk_l2norm: bool = False, name: str | None = None, compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """Kimi Delta Attention gradients from d_o (required) and d_final_state."""
        inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "cu_seqlens": cu_seqlens,
                  "initial_state": initial_state, "d_o": d_o, "d_final_state": d_final_state}  # fmt: skip
        attributes = {"scale": scale, "use_qk_l2norm": bool(use_qk_l2norm)}
        return self._delta_rule(KdaBwd, inputs, attributes, {"name": name, "compute_dtype": compute_dtype})
