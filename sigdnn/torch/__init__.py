"""sigdnn's torch ops: torch.library custom ops (``torch.ops.sigdnn.*``) running cached sigdnn graphs.

Importing this package imports torch and registers the ops; ``import
sigdnn`` alone never does. ``with sigdnn.torch.attention(): model(x)`` runs
the model's ``F.scaled_dot_product_attention`` calls through sigdnn.
"""

from sigdnn.torch import delta_rule, ops, varlen
from sigdnn.torch.cache import cache_size
from sigdnn.torch.functional import (
    attention,
    chunk_gated_delta_rule,
    chunk_kda,
    conv,
    flash_attention,
    layer_norm,
    scaled_dot_product_attention,
    varlen_attention,
)

__all__ = [
    "attention",
    "cache_size",
    "chunk_gated_delta_rule",
    "chunk_kda",
    "conv",
    "delta_rule",
    "flash_attention",
    "layer_norm",
    "ops",
    "scaled_dot_product_attention",
    "varlen",
    "varlen_attention",
]
