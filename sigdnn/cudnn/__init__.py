"""cuDNN-frontend's Python API on sigdnn: ``import sigdnn.cudnn as cudnn`` runs pygraph code unchanged.

Tensors and graphs keep cuDNN's names, port keywords and lifecycle; the
handle picks sigdnn's backend (``create_handle(device="cpu")``: the
reference). docs/cudnn.md lists every method and keyword, implemented or not.
"""

from sigdnn.cudnn.enums import (
    attention_implementation,
    behavior_note,
    build_plan_policy,
    convolution_mode,
    data_type,
    diagonal_alignment,
    heur_mode,
    norm_forward_phase,
    numerical_note,
    reduction_mode,
    reshape_mode,
    scalar_type,
    tensor_reordering,
)
from sigdnn.cudnn.graph import pygraph
from sigdnn.cudnn.handle import Handle, create_handle, destroy_handle, get_stream, set_stream
from sigdnn.cudnn.plans import cudnnGraphNotSupportedError
from sigdnn.cudnn.tensor import tensor


def backend_version() -> int:
    """sigdnn's version as cuDNN spells its own (major * 10000 + minor * 100 + patch)."""
    from sigdnn import __version__

    major, minor, patch = (int(p) for p in __version__.split(".")[:3])
    return major * 10000 + minor * 100 + patch


__all__ = [
    "Handle",
    "attention_implementation",
    "backend_version",
    "behavior_note",
    "build_plan_policy",
    "convolution_mode",
    "create_handle",
    "cudnnGraphNotSupportedError",
    "data_type",
    "destroy_handle",
    "diagonal_alignment",
    "get_stream",
    "heur_mode",
    "norm_forward_phase",
    "numerical_note",
    "pygraph",
    "reduction_mode",
    "reshape_mode",
    "scalar_type",
    "set_stream",
    "tensor",
    "tensor_reordering",
]
