"""sigdnn's torch ops: torch.library custom ops (``torch.ops.sigdnn.*``) running cached sigdnn graphs.

Importing this package imports torch and registers the ops; ``import
sigdnn`` alone never does. ``with sigdnn.torch.attention(): model(x)`` runs
the model's ``F.scaled_dot_product_attention`` calls through sigdnn.
"""

from sigdnn.torch import ops
from sigdnn.torch.cache import cache_size
from sigdnn.torch.functional import attention, conv, layer_norm, scaled_dot_product_attention

__all__ = ["attention", "cache_size", "conv", "layer_norm", "ops", "scaled_dot_product_attention"]
