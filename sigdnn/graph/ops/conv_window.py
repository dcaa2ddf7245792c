"""What the three convolutions (conv_fprop, conv_dgrad, conv_wgrad) share: one declaration of their window.

The attributes (``pre_padding``, ``post_padding``, ``stride``, ``dilation``:
one entry per spatial dim), their wire fields, the spatial rank that goes
into the key, the checks and output sizes of the forward window sweep
(``windows``), and that each is a sum of products (|terms| runs bound its
accumulation). Each op adds its ports (first on the wire) and its own rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from sigdnn.graph.ops.base import Op, WireFields
from sigdnn.graph.ops.windows import check_conv_attributes, window_outputs
from sigdnn.graph.tensor import Tensor

WINDOW_WIRE_FIELDS: WireFields = (
    ("pre_padding", "i64[]"),
    ("post_padding", "i64[]"),
    ("stride", "i64[]"),
    ("dilation", "i64[]"),
)


@attrs.frozen(kw_only=True)
class ConvWindowOp(Op):
    """A convolution's window attributes (keyword-only: each op's ports come first, as on the wire)."""

    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    sums_absolute_terms: ClassVar[bool] = True
    dot_products: ClassVar[bool] = True

    @property
    def spatial_rank(self) -> int:
        return len(self.stride)

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (("spatial_rank", self.spatial_rank),)

    def check_window(self, where: str, spatial: int) -> None:
        """GraphError naming ``where`` unless each attribute has ``spatial`` entries in range."""
        check_conv_attributes(where, spatial, self.pre_padding, self.post_padding, self.stride, self.dilation)

    def forward_outputs(self, where: str, inputs: Sequence[int], kernel: Sequence[int]) -> tuple[int, ...]:
        """The spatial dims the forward sweep of ``kernel`` over ``inputs`` produces."""
        return window_outputs(where, inputs, kernel, self.pre_padding, self.post_padding, self.stride, self.dilation)
