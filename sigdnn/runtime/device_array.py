"""sigdnn's own typed, strided view of device memory, readable by every GPU library without a copy.

A :class:`DeviceArray` exposes ``__cuda_array_interface__`` (version 3) so
cuTile, CuPy, Numba and torch (``torch.as_tensor(a, device="cuda")``) can read
it. It deliberately has no ``__dlpack__``: cuTile's ``ct.launch`` prefers
``__dlpack__`` over the CUDA array interface when an object has both, and
building a DLPack capsule in Python on every launch would cost more than the
interface dict it reads now; ``cuda.core`` only exports DLPack for its raw,
untyped ``Buffer``. Importing this module imports nothing GPU-related.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from sigdnn.graph.layout import packed_strides

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

# CUDA-array-interface type strings: NumPy's own, except bfloat16, which has
# none; '<V2' is what cuTile (and DLPack-to-CAI bridges) read as bfloat16.
_TYPESTR_TO_DTYPE: dict[str, np.dtype] = {"<V2": BFLOAT16}


def _typestr(dtype: np.dtype) -> str:
    if dtype == BFLOAT16:
        return "<V2"
    return dtype.str


def dtype_from_typestr(typestr: str) -> np.dtype:
    if typestr in _TYPESTR_TO_DTYPE:
        return _TYPESTR_TO_DTYPE[typestr]
    dtype = np.dtype(typestr)
    if dtype.kind == "V":
        raise TypeError(f"unsupported __cuda_array_interface__ typestr {typestr!r}")
    return dtype


class DeviceArray:
    """A typed strided view of device memory; strides count ELEMENTS.

    ``owner`` keeps the memory alive (a cuda.core Buffer, a torch tensor, ...)
    for as long as any view of it exists.
    """

    __slots__ = (
        "_cai",
        "_flat",
        "device_id",
        "dtype",
        "owner",
        "ptr",
        "shape",
        "strides",
    )

    def __init__(
        self,
        ptr: int,
        shape: Sequence[int],
        strides: Sequence[int] | None,
        dtype: Any,
        owner: Any = None,
        device_id: int = 0,
    ) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.strides = packed_strides(self.shape) if strides is None else tuple(int(s) for s in strides)
        if len(self.strides) != len(self.shape):
            raise ValueError(f"shape {self.shape} and strides {self.strides} differ in rank")
        self.dtype = np.dtype(dtype)
        self.owner = owner
        self.device_id = int(device_id)
        self._cai: dict[str, Any] | None = None
        self._flat: DeviceArray | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        """Row-major packed (size-1 dims may carry any stride)."""
        expected = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if d != 1 and s != expected:
                return False
            expected *= d
        return True

    @property
    def is_dense(self) -> bool:
        """Packed in some dim order: the elements fill ``nbytes`` from ``ptr``, no gaps."""
        dims = sorted(
            (i for i, d in enumerate(self.shape) if d != 1),
            key=lambda i: -self.strides[i],
        )
        expected = 1
        for i in reversed(dims):
            if self.strides[i] != expected:
                return False
            expected *= self.shape[i]
        return True

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # Built once: a view never changes, and cuTile reads this per launch.
        if self._cai is None:
            strides = None if self.is_contiguous else tuple(s * self.itemsize for s in self.strides)
            self._cai = {
                "version": 3,
                "shape": self.shape,
                "strides": strides,
                "typestr": _typestr(self.dtype),
                "data": (self.ptr, False),
                "descr": [("", _typestr(self.dtype))],
            }
        return self._cai

    def as_strided(self, shape: Sequence[int], strides: Sequence[int], offset_elements: int = 0) -> DeviceArray:
        """Another view of the same memory (no bounds check: the caller's job)."""
        return DeviceArray(
            self.ptr + offset_elements * self.itemsize,
            shape,
            strides,
            self.dtype,
            owner=self.owner,
            device_id=self.device_id,
        )

    def flat(self) -> DeviceArray:
        """The 1-D view of a dense array, in memory order (cached: plans reuse it per launch)."""
        if self._flat is None:
            if not self.is_dense:
                raise ValueError(f"flat() needs a dense array, got strides {self.strides}")
            self._flat = self.as_strided((self.size,), (1,))
        return self._flat

    def __repr__(self) -> str:
        return (
            f"DeviceArray(ptr=0x{self.ptr:x}, shape={self.shape}, strides={self.strides}, "
            f"dtype={self.dtype.name}, device={self.device_id})"
        )
