"""Validation's bookkeeping on the GPU reference's device: ``accuracy.arrays.Arrays`` over its device arrays.

With ``truth="gpu"`` the device run's captured tensors, the truth's values,
their bounds and the comparisons all stay on the device: every operation
here is a few launches of the GPU reference's own kernels
(``plan_builders.gpu_reference.arrays``), and only a comparison's
statistics come back (a failing one comes back whole, for its report and
plots). Values are the buffers a reference plan takes: ``DeviceArray``\\ s
on a GPU, NumPy arrays under the CPU tests' emulator. Random signs and
fractions are ``accuracy.arrays``' counter hash in int64 launches: the
host's very numbers, nothing made on the host.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sigdnn.accuracy.arrays import HASH_ROUNDS, PRIME, SEED_STRIDE
from sigdnn.dtypes import as_data_type
from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.gpu_reference.arrays import Array, gather, maximum, minimum, where
from sigdnn.plan_builders.gpu_reference.backend import Gpu
from sigdnn.plan_builders.gpu_reference.tensors import element_strides, read, write
from sigdnn.runtime.device import ExecutionContext

ROW = 4096  # elements a block of a whole-array reduction takes
TINY = float(np.finfo(np.float64).tiny)
LARGEST_SPACING = 2.0**971  # float64's spacing below its largest finite value


class DeviceArrays:
    """``Arrays`` on the device of a GPU reference run (``context``: its device and stream)."""

    def __init__(self, context: ExecutionContext) -> None:
        self.gpu = Gpu(context.device.context, context.stream)
        self._context = context.device.context

    # -- buffers and arrays --------------------------------------------------------
    def _buffer(self, a: Array) -> Any:
        return self.gpu.shaped(a.data, a.shape)

    def _array(self, x: Any) -> Array:
        """x's values as a float64 Array: the buffer itself when packed float64 (no copy), else widened."""
        if isinstance(x, np.ndarray):  # (a host array: uploaded on a GPU, itself under the emulator)
            x = self.upload(x)
        dims, strides = tuple(x.shape), element_strides(x)
        packed = all(d == 1 or s == p for d, s, p in zip(dims, strides, packed_strides(dims), strict=True))
        if np.dtype(x.dtype) == np.float64 and packed:
            # (the emulator's NumPy buffer as a view that keeps it alive, where raw()'s address would not)
            flat = x.reshape(-1) if isinstance(x, np.ndarray) else self.gpu.raw(x, dims, strides)
            return Array(self.gpu, flat, dims, np.float64)
        return read(self.gpu, x, np.float64)

    def _operand(self, x: Any) -> Any:
        return x if isinstance(x, (int, float)) else self._array(x)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        if self.gpu.emulated:
            return np.empty(shape, dtype)
        return self._context.empty(tuple(shape), dtype)

    def full(self, shape: tuple[int, ...], value: float) -> Any:
        return self._buffer(Array.full(self.gpu, tuple(shape), float(value)))

    def upload(self, host: np.ndarray) -> Any:
        host = np.asarray(host)
        if self.gpu.emulated:
            return host
        return self._context.to_device(np.ascontiguousarray(host))

    def host(self, x: Any) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        return self._context.to_host(x)

    def cast(self, x: Any, dtype: Any) -> Any:
        if isinstance(x, np.ndarray):
            return self.upload(np.asarray(x, dtype))
        if np.dtype(x.dtype) == np.dtype(dtype):
            return x
        return self.upload(np.asarray(self.host(x), dtype))  # an input given in another dtype: rare

    # -- elementwise -----------------------------------------------------------------
    def widen(self, x: Any) -> Any:
        return self._buffer(self._array(x))

    def abs(self, x: Any) -> Any:
        magnitude = self._array(x).apply("ABS")
        if np.dtype(x.dtype) == np.float64:
            return self._buffer(magnitude)
        out = self.empty(tuple(x.shape), x.dtype)
        write(self.gpu, magnitude, out, as_data_type(np.dtype(x.dtype)))  # exact: |x| is x's dtype's value
        return out

    def finite(self, x: Any) -> Any:
        return self._buffer(self._array(x).apply("FINITE"))

    def finite_or_zero(self, x: Any) -> Any:
        return self._buffer(self._array(x).apply("FINITE_OR_ZERO"))

    def magnitude(self, x: Any) -> Any:
        return self._buffer(self._array(x).apply("MAGNITUDE"))

    def add(self, a: Any, b: Any) -> Any:
        return self._buffer(self._array(a).apply("ADD", self._operand(b)))

    def sub(self, a: Any, b: Any) -> Any:
        return self._buffer(self._array(a).apply("SUB", self._operand(b)))

    def mul(self, a: Any, b: Any) -> Any:
        return self._buffer(self._array(a).apply("MUL", self._operand(b)))

    def fmax(self, a: Any, b: Any) -> Any:
        return self._buffer(self._array(a).apply("FMAX", self._array(b)))

    def where(self, mask: Any, a: Any, b: Any) -> Any:
        return self._buffer(where(self._array(mask), self._operand(a), self._operand(b)))

    def broadcast(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self._buffer(self._array(x).broadcast_to(tuple(shape)))

    def round_to(self, x: Any, dtype: Any) -> Any:
        out = self.empty(tuple(x.shape), dtype)
        write(self.gpu, self._array(x), out, as_data_type(np.dtype(dtype)))
        return out

    # -- random draws ------------------------------------------------------------------
    def _hashed(self, seed: int, shape: tuple[int, ...]) -> Array:
        """``accuracy.arrays``' hash: int64 in [0, PRIME) per element, a launch a step."""
        x = Array.counting(self.gpu, shape).apply("ADD_MOD", (seed * SEED_STRIDE + 1) % PRIME, PRIME)
        for c in HASH_ROUNDS:
            x = x.apply("SQUARE_ADD_MOD", c, PRIME)
        return x

    def random_signs(self, seed: int, shape: tuple[int, ...]) -> Any:
        return self._buffer(self._hashed(seed, shape).apply("PARITY_SIGN", dtype=np.float64))

    def random_fractions(self, seed: int, shape: tuple[int, ...]) -> Any:
        drawn = self._hashed(seed, shape).astype(np.float64)
        return self._buffer(drawn.apply("MUL", 2.0 / PRIME).apply("SUB", 1.0))

    # -- whole-array results ---------------------------------------------------------------
    def _total(self, a: Array, mode: str) -> float:
        """SUM / MAX / MIN over every element: rows of ROW reduced per block, again until one is left."""
        flat = a.reshape(a.size)
        identity = {"SUM": 0.0, "MAX": -math.inf, "MIN": math.inf}[mode]
        if flat.size == 0:
            return identity
        while flat.size > 1:
            rows = -(-flat.size // ROW)
            if rows * ROW != flat.size:  # the last row padded with the identity
                padded = Array.full(self.gpu, (rows * ROW,), identity)
                gather(self.gpu, flat.data, flat.size, self.gpu.part(padded.data, 0, flat.size), 0.0, "DECODE_RAW")
                flat = padded
            flat = flat.reshape(rows, ROW).reduce_last(mode)
        return float(flat.host().reshape(-1)[0])

    def largest_magnitude(self, x: Any) -> float:
        return self._total(self._array(x).apply("MAGNITUDE"), "MAX")

    def passing_summary(
        self, got: Any, want: Any, bound: Any, nmant: int, minexp: int
    ) -> tuple[float, float, float, int, float, float] | None:
        """(max abs error, max relative error, max ulps, worst flat index, got and want there) of a comparison in
        which every element passes (finite and within ``bound``, or the same NaN / Inf), else None: the caller
        then takes the whole comparison to the host. As ``accuracy.compare.errors``: an ulp is the output dtype's
        (``nmant``, ``minexp``) at the reference value; the worst element is the first of the largest error."""
        g, w, b = self._array(got), self._array(want), self._array(bound)
        if self._total(g.apply("FAILING", w, b), "SUM") > 0:
            return None
        abs_error = g.apply("ABS_ERROR", w)
        largest = self._total(abs_error, "MAX")
        magnitude = w.apply("MAGNITUDE")  # (where got is not finite the error is 0: no relative error or ulps)
        relative = abs_error / maximum(magnitude, TINY)
        spacing = minimum(magnitude.apply("NEXT_UP") - magnitude, LARGEST_SPACING)  # float64's ulp at |want|
        ulp = maximum(spacing * 2.0 ** (52 - nmant), 2.0 ** (minexp - nmant))  # the output dtype's
        first = where(abs_error == largest, Array.counting(self.gpu, g.shape, np.float64), math.inf)
        worst = int(self._total(first, "MIN"))
        at = (float(self.gpu.download(self.gpu.part(a.data, worst, 1), 1)[0]) for a in (g, w))
        return largest, self._total(relative, "MAX"), self._total(abs_error / ulp, "MAX"), worst, *at
