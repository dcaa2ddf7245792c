"""Host arrays from what users hand over: NumPy, torch CPU tensors of every dtype, any CPU DLPack producer.

torch's own ``.numpy()`` refuses bfloat16 and fp8, and NumPy's DLPack import
knows no bfloat16; both are read here through a same-size integer view,
without a copy, and reinterpreted as the ml_dtypes type. Results go back
out the same way (``to_torch``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sigdnn.dtypes import DataType, is_ml_dtypes
from sigdnn.errors import VariantPackError

_KDL_CPU = 1  # DLPack device type of host memory
# torch dtype name -> (integer dtype of the same size, the sigdnn dtype it holds; its NumPy type is ml_dtypes')
_REINTERPRETED = {
    "bfloat16": (np.int16, DataType.BFLOAT16),
    "float8_e4m3fn": (np.int8, DataType.FP8_E4M3),
    "float8_e5m2": (np.int8, DataType.FP8_E5M2),
}


def is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def from_torch(tensor: Any, where: str) -> np.ndarray:
    """A NumPy view of a CPU torch tensor (no copy), whatever its dtype."""
    if tensor.device.type != "cpu":
        raise VariantPackError(f"{where}: torch tensor is on {tensor.device}; the reference backend takes host memory")
    if tensor.requires_grad:  # .numpy() refuses such a tensor; a detach costs a view otherwise
        tensor = tensor.detach()
    name = str(tensor.dtype).removeprefix("torch.")
    if name in _REINTERPRETED:
        import torch

        integer, dtype = _REINTERPRETED[name]
        return tensor.view(getattr(torch, np.dtype(integer).name)).numpy().view(dtype.numpy)
    return tensor.numpy()


def to_torch(array: np.ndarray) -> Any:
    """A CPU torch tensor sharing ``array``'s memory, whatever its dtype."""
    import torch

    for name, (integer, dtype) in _REINTERPRETED.items():
        if is_ml_dtypes(array.dtype) and array.dtype == dtype.numpy:
            return torch.from_numpy(array.view(integer)).view(getattr(torch, name))
    return torch.from_numpy(array)


def is_host_dlpack(obj: Any) -> bool:
    """Whether ``obj`` exports DLPack from host memory."""
    try:
        return hasattr(obj, "__dlpack__") and obj.__dlpack_device__()[0] == _KDL_CPU
    except Exception:
        return False


def from_dlpack(obj: Any, where: str) -> np.ndarray:
    try:
        return np.from_dlpack(obj)
    except Exception as e:  # any producer error is the caller's array, not sigdnn
        raise VariantPackError(f"{where}: its DLPack export could not be read: {type(e).__name__}: {e}") from None
