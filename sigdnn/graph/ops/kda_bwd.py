"""kda_bwd: Kimi Delta Attention's gradients, gdn_bwd with one decay per key channel (dg [T, H, K])."""

from __future__ import annotations

from typing import ClassVar

import attrs

from sigdnn.graph.ops.gdn_bwd import GdnBwd


@attrs.frozen
class KdaBwd(GdnBwd):
    kind: ClassVar[str] = "kda_bwd"
    table: ClassVar[str] = "KdaBackwardAttributes"
    per_channel_gate: ClassVar[bool] = True
