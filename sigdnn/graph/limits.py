"""Limits checked before anything is allocated, so a hostile buffer stays cheap."""

from __future__ import annotations

import attrs


@attrs.frozen
class Limits:
    """Upper bounds on what one graph may declare."""

    max_tensors: int = 1 << 20
    max_nodes: int = 1 << 20
    max_rank: int = 8
    max_elements: int = 1 << 40  # per tensor, counting its strided span
    max_name_length: int = 4096
    max_scalar_bytes: int = 64


DEFAULT_LIMITS = Limits()
