"""What tensor_like reads off an array: dims, strides (in elements), data type, whether it is in host memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from sigdnn.errors import UsageError


def describe(array: Any, where: str) -> tuple[tuple[int, ...], tuple[int, ...], Any, bool, list[Any]]:
    """(dims, strides, sigdnn data type, in host memory, its values when it has one element) of a torch / NumPy array."""
    from sigdnn.dtypes import as_data_type

    if hasattr(array, "stride") and hasattr(array, "dtype") and hasattr(array, "device"):  # torch
        dims, strides = tuple(array.shape), tuple(array.stride())
        on_host = array.device.type == "cpu"
        values = [array.detach().cpu().reshape(-1)[0].item()] if array.numel() == 1 and on_host else []
    elif isinstance(array, np.ndarray):
        dims, strides = array.shape, tuple(s // array.itemsize for s in array.strides)
        on_host, values = True, ([array.reshape(-1)[0].item()] if array.size == 1 else [])
    else:
        raise UsageError(
            f"{where}: expected a torch tensor, a NumPy array or a cudnn tensor, got {type(array).__name__}"
        )
    try:
        dtype = as_data_type(array.dtype)
    except (KeyError, ValueError, TypeError) as e:
        raise UsageError(f"{where}: dtype {array.dtype} is not a sigdnn data type: {e}") from None
    return tuple(int(d) for d in dims), tuple(int(s) for s in strides), dtype, on_host, values
