"""The array work of validation's bookkeeping, written once, done where the truth's values are.

Bounds, carried errors, perturbed runs and comparisons are whole-array
arithmetic on every tensor a graph makes. With the CPU reference as truth
they run on NumPy (``HOST``); with the GPU reference they run on the device
beside its values (``sigdnn.validation.device_arrays``), so a full-size
model's tensors never cross to the host. ``step_reference``, ``spread`` and
``compare`` are written against ``Arrays``, the operations both provide.
Values are arrays of either kind (NumPy arrays on the host, device arrays
on the GPU) that a reference plan can read and write.

Random signs and fractions (the carried-error runs' and the spread runs'
moves) come from one counter hash of each element's flat index i and a
seed, so both sides draw the very same numbers and the CPU and GPU truths
give the very same bounds: x = (i + (seed * SEED_STRIDE + 1) mod P) mod P,
then x = (x^2 + c) mod P for each c of HASH_ROUNDS, P = 2^31 - 1 (every
product fits in 63 bits). A sign is 1 - 2 (x mod 2), a fraction
x * (2 / P) - 1. Each side computes it with its own integer operations
(tests/validation/test_device_bookkeeping.py holds them equal).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from sigdnn.dtypes import as_data_type, round_to

PRIME = 2**31 - 1
HASH_ROUNDS = (0x2545F491, 0x1B873593)
SEED_STRIDE = 0x9E3779B1  # seeds start their counters far apart


class Arrays(Protocol):
    """What the bookkeeping does to arrays; its arithmetic is float64."""

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised array (a plan's output buffer)."""

    def full(self, shape: tuple[int, ...], value: float) -> Any:
        """A float64 array of one value."""

    def upload(self, host: np.ndarray) -> Any:
        """A host array where this namespace keeps its arrays."""

    def host(self, x: Any) -> np.ndarray:
        """A host copy (or the array itself on the host)."""

    def cast(self, x: Any, dtype: Any) -> Any:
        """``x`` as ``dtype``: itself when it has it already, else its values converted (an input given wider)."""

    def random_signs(self, seed: int, shape: tuple[int, ...]) -> Any:
        """+1.0 or -1.0 per element (float64), half of each (the carried-error moves): the module's hash."""

    def random_fractions(self, seed: int, shape: tuple[int, ...]) -> Any:
        """Uniform in (-1, 1) per element (float64; the spread's moves): the module's hash."""

    def widen(self, x: Any) -> Any:
        """``x``'s values in float64 (exact for every float dtype)."""

    def abs(self, x: Any) -> Any:
        """|x| in x's own dtype (a linear reduction's |terms| run reads it as an input)."""

    def magnitude(self, x: Any) -> Any:
        """|x| in float64, 0 where x is not finite."""

    def finite_or_zero(self, x: Any) -> Any:
        """x in float64, 0 where it is not finite."""

    def finite(self, x: Any) -> Any:
        """Where x is finite: a mask for ``where``."""

    def add(self, a: Any, b: Any) -> Any:
        """a + b, broadcast; ``b`` may be a number."""

    def sub(self, a: Any, b: Any) -> Any:
        """a - b, broadcast."""

    def mul(self, a: Any, b: Any) -> Any:
        """a * b, broadcast; ``b`` may be a number."""

    def fmax(self, a: Any, b: Any) -> Any:
        """The larger of a and b; a NaN on one side gives the other."""

    def where(self, mask: Any, a: Any, b: Any) -> Any:
        """a where mask (nonzero), else b."""

    def broadcast(self, x: Any, shape: tuple[int, ...]) -> Any:
        """x broadcast to ``shape`` (NumPy's rules)."""

    def largest_magnitude(self, x: Any) -> float:
        """The largest |x| over its finite elements (0 when none)."""

    def round_to(self, x: Any, dtype: Any) -> Any:
        """float64 ``x`` rounded once to ``dtype`` (as the reference stores a tensor)."""


class HostArrays:
    """``Arrays`` on NumPy: the CPU reference's side."""

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype)

    def full(self, shape: tuple[int, ...], value: float) -> np.ndarray:
        return np.full(shape, float(value))

    def upload(self, host: np.ndarray) -> np.ndarray:
        return np.asarray(host)

    def host(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def cast(self, x: Any, dtype: Any) -> np.ndarray:
        return np.asarray(x, dtype=dtype)

    def random_signs(self, seed: int, shape: tuple[int, ...]) -> np.ndarray:
        return 1.0 - 2.0 * (_hashed(seed, shape) & 1).astype(np.float64)

    def random_fractions(self, seed: int, shape: tuple[int, ...]) -> np.ndarray:
        return _hashed(seed, shape).astype(np.float64) * (2.0 / PRIME) - 1.0

    def widen(self, x: Any) -> np.ndarray:
        return np.asarray(x).astype(np.float64)

    def abs(self, x: Any) -> np.ndarray:
        return np.abs(x)

    def magnitude(self, x: Any) -> np.ndarray:
        return np.abs(self.finite_or_zero(x))

    def finite_or_zero(self, x: Any) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            wide = np.asarray(x).astype(np.float64)
            return np.where(np.isfinite(wide), wide, 0.0)

    def finite(self, x: Any) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.isfinite(np.asarray(x).astype(np.float64))

    def add(self, a: Any, b: Any) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.add(a, b, dtype=np.float64)

    def sub(self, a: Any, b: Any) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.subtract(a, b, dtype=np.float64)

    def mul(self, a: Any, b: Any) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.multiply(a, b, dtype=np.float64)

    def fmax(self, a: Any, b: Any) -> np.ndarray:
        return np.fmax(a, b)

    def where(self, mask: Any, a: Any, b: Any) -> np.ndarray:
        return np.where(mask, a, b)

    def broadcast(self, x: Any, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(x, shape)

    def largest_magnitude(self, x: Any) -> float:
        return float(self.magnitude(x).max(initial=0.0))

    def round_to(self, x: Any, dtype: Any) -> np.ndarray:
        return round_to(np.asarray(x), as_data_type(np.dtype(dtype)))  # (one rounding, whatever ml_dtypes does)


def _hashed(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """The module's hash, in uint64 (in place: the CPU validation of a model draws millions)."""
    x = np.arange(math.prod(shape), dtype=np.uint64)
    x += np.uint64((seed * SEED_STRIDE + 1) % PRIME)
    _modulo_prime(x)
    for c in HASH_ROUNDS:
        x *= x
        x += np.uint64(c)
        _modulo_prime(x)
    return x.reshape(shape)


def _modulo_prime(y: np.ndarray) -> None:
    """y = y mod (2^31 - 1), in place, for y < 2^63: 2^31 is 1 modulo it, so the bits above 31 fold down."""
    prime, shift = np.uint64(PRIME), np.uint64(31)
    high = np.empty_like(y)
    for _ in range(2):  # < 2^32 + 2^31, then < 2^31 + 3
        np.right_shift(y, shift, out=high)
        y &= prime
        y += high
    y -= (y >= prime).astype(np.uint64) * prime


HOST = HostArrays()
