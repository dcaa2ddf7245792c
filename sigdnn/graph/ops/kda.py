"""kda: Kimi Delta Attention forward, gdn with one decay per key channel (g [T, H, K]; linear_attention.py)."""

from __future__ import annotations

from typing import ClassVar

import attrs

from sigdnn.graph.ops.gdn import Gdn


@attrs.frozen
class Kda(Gdn):
    kind: ClassVar[str] = "kda"
    table: ClassVar[str] = "KdaAttributes"
    per_channel_gate: ClassVar[bool] = True
