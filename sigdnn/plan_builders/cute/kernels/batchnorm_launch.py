"""Compile once, cache in process and on disk, launch with pointers only: the one-launch batchnorm training forward.

The same path as the GEMM's (launch.py). A launch owns the kernel's state:
two float64 accumulators and the grid barrier's counter, zeroed once when
allocated; the kernel leaves them ready for the next launch (it clears the
accumulator the next launch adds into, and the counter needs no reset). So
one launch of it may be in flight at a time, like any plan's.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float64, Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.batchnorm import BatchnormSpec
from sigdnn.plan_builders.cute.kernels import batchnorm_sm90
from sigdnn.plan_builders.cute.kernels.batchnorm_sm90 import BatchnormTrainSm90
from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, zeroed_memory

_CACHE = CompileCache()
STATS = _CACHE.stats
_DIGEST = hashlib.sha256(
    b"\0".join([cutlass.__version__.encode(), Path(batchnorm_sm90.__file__).read_bytes()])
).hexdigest()[:16]
POINTERS = 12  # x, y, scale, bias, mean, inv_variance, running mean and variance in and out, accumulator, counter


def _compile(spec: BatchnormSpec) -> Any:
    def ptr(dtype: Any, align: int = 16) -> Any:
        return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

    dt, pt, st = DTYPES[spec.dtype], DTYPES[spec.param_dtype], DTYPES[spec.stat_dtype]
    ptrs = (ptr(dt), ptr(dt), ptr(pt, 2), ptr(pt, 2), *(ptr(st, 4) for _ in range(6)), ptr(Float64, 8), ptr(Int32, 4))
    return cute.compile(BatchnormTrainSm90(spec), *ptrs, cuda.CUstream(0))


def compiled(spec: BatchnormSpec) -> Any:
    """The compiled kernel of a spec: from this process, the disk cache, or a fresh compile."""
    name = "batchnorm_" + hashlib.sha256(repr((spec, _DIGEST)).encode()).hexdigest()[:24]
    return _CACHE.get(spec, name, lambda: _compile(spec))


class BatchnormLaunch:
    """One node's launch: the spec compiled in, the state owned; the node's pointers and the stream per call."""

    def __init__(self, spec: BatchnormSpec) -> None:
        self.spec = spec
        self._launch = PackedLaunch(compiled(spec), POINTERS, [], "batchnorm")
        accumulators = 8 * spec.accumulator_elements
        self._state = zeroed_memory(accumulators + 16, self, "batchnorm state")
        self._counter = self._state + accumulators
        self._lock = threading.Lock()

    def __call__(self, x: int, y: int, scale: int, bias: int, mean: int, inv: int, rm: int, rv: int, nrm: int,
                 nrv: int, stream: int) -> None:  # fmt: skip
        """Enqueue the node on ``stream``: raw device addresses (the running statistics' 0 without them)."""
        with self._lock:  # the cells are shared: one launch at a time
            self._launch((x, y, scale, bias, mean, inv, rm, rv, nrm, nrv, self._state, self._counter), stream)
