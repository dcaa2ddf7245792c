"""Tensor: a named, typed, strided array slot of a graph, addressed by uid."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.graph.arguments import integer, ints, text
from sigdnn.graph.frozen import guard


@attrs.define(eq=False, on_setattr=[guard, attrs.setters.convert, attrs.setters.validate])
class Tensor:
    """One tensor of a graph.

    ``dtype`` may stay None while building; it then resolves to the graph's
    intermediate dtype for a virtual tensor and its io dtype otherwise, as in
    cuDNN. Setters return the tensor so calls chain like the frontend's.
    """

    uid: int
    name: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DataType | None = None
    is_virtual: bool = False
    value: bytes | None = None  # pass-by-value scalar, little-endian in dtype
    data: bytes | None = None  # constant: every element, logical row-major order, little-endian in dtype
    frozen: bool = attrs.field(default=False, init=False, eq=False, repr=False)  # its graph is planned

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    def constant(self) -> np.ndarray:
        """The constant's elements as a read-only array of the tensor's logical dims (no copy)."""
        if self.data is None or self.dtype is None:
            raise ValueError(f"tensor '{self.name}' holds no constant data")
        return np.frombuffer(self.data, dtype=self.dtype.numpy.newbyteorder("<")).reshape(self.dims)

    @property
    def is_pass_by_value(self) -> bool:
        return self.value is not None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def scalar(self) -> np.ndarray:
        """The pass-by-value value as a 0-d array of the tensor's dtype."""
        if self.value is None or self.dtype is None:
            raise ValueError(f"tensor '{self.name}' has no pass-by-value value")
        return np.frombuffer(self.value, dtype=self.dtype.numpy.newbyteorder("<"))[0]

    def set_output(self, is_output: bool = True) -> Tensor:
        self.is_virtual = not is_output
        return self

    def set_name(self, name: str) -> Tensor:
        self.name = text(name, f"tensor '{self.name}' new name")
        return self

    def set_data_type(self, dtype: DataType | str) -> Tensor:
        self.dtype = as_data_type(dtype)
        return self

    def set_dim(self, dims: Sequence[int]) -> Tensor:
        self.dims = ints(dims, f"tensor '{self.name}' dims")
        return self

    def set_stride(self, strides: Sequence[int]) -> Tensor:
        self.strides = ints(strides, f"tensor '{self.name}' strides")
        return self

    def set_uid(self, uid: int) -> Tensor:
        self.uid = integer(uid, f"tensor '{self.name}' uid")
        return self

    @property
    def kind(self) -> str:
        """What fills the tensor: "virtual" (the executor), "scalar" / "constant" (the graph), "io" (the caller)."""
        if self.is_virtual:
            return "virtual"
        if self.value is not None:
            return "scalar"
        return "constant" if self.data is not None else "io"

    def __repr__(self) -> str:
        dt = self.dtype.short if self.dtype else "?"
        return (
            f"Tensor({self.name!r}, uid={self.uid}, {dt}{list(self.dims)}, strides={list(self.strides)}, {self.kind})"
        )
