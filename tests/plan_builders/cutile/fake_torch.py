"""Host memory dressed as torch CUDA tensors, so the GPU executor's torch paths run on the CPU."""

from __future__ import annotations

import numpy as np


class FakeDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDtype) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class FakeCudaTensor:
    """Host memory dressed as a torch CUDA tensor (strides in elements, as torch gives them)."""

    def __init__(self, array: np.ndarray, shape=None, strides=None, device: int = 0) -> None:
        self.array = array
        self.shape = tuple(array.shape if shape is None else shape)
        self._strides = tuple(s // array.itemsize for s in array.strides) if strides is None else tuple(strides)
        self.dtype = FakeDtype(array.dtype.name)
        self.is_cuda = True
        self.index = device

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def get_device(self) -> int:
        return self.index

    @property
    def device(self):
        return type("device", (), {"index": self.index})()


FakeCudaTensor.__module__ = "torch.fake"  # what the executor reads to tell a torch tensor
