"""What every op-method mixin of Graph's frontend shares: the calls into Graph it relies on, one-output nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sigdnn.graph.arguments import DTypeLike
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.node import Node
    from sigdnn.graph.ops.base import Op

Maybe = Tensor | None
Scalar = float | Tensor  # a value, or a pass-by-value scalar tensor whose value is taken (cuDNN passes tensors)


class FrontendBase:
    """Graph's ``add_node`` and ``outputs_of`` as the mixins see them, and the one-output shortcut."""

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
