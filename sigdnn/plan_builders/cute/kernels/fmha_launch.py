"""Compile once, cache in process and on disk, launch with scalars only: the flash-attention kernel.

The same path as the GEMM's (launch.py): a specialization is compiled once
per process, exported to the disk cache (``SIGDNN_CUTE_CACHE``) so a later
process loads it without tracing, and launched through the compiled
handle with a packed argument array whose pointer and stream cells are
rewritten in place.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from pathlib import Path
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels import fmha_sm90
from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, _Cell
from sigdnn.plan_builders.cute.sdpa_layout import FmhaConfig, FmhaProblem, FmhaSpec

_CACHE = CompileCache()
STATS = _CACHE.stats
_DIGEST = hashlib.sha256(b"\0".join([cutlass.__version__.encode(), Path(fmha_sm90.__file__).read_bytes()])).hexdigest()[
    :16
]


def _key_name(spec: FmhaSpec, config: FmhaConfig) -> str:
    return "fmha_" + hashlib.sha256(repr((spec, config, _DIGEST)).encode()).hexdigest()[:24]


def _compile(spec: FmhaSpec, config: FmhaConfig) -> Any:
    kernel = fmha_sm90.HopperFmha(spec, config)
    dt = fmha_sm90.DTYPES[spec.dtype]
    ptrs = [make_ptr(dt, 0, cute.AddressSpace.gmem, assumed_align=16) for _ in range(4)]
    ptrs.append(make_ptr(cutlass.Float32, 0, cute.AddressSpace.gmem, assumed_align=4))
    ints = [Int32(1)] * 5
    strides = [Int64(8)] * 15
    return cute.compile(kernel, *ptrs, *ints, *strides, Float32(1.0), Int32(1), cuda.CUstream(0))


def compiled(spec: FmhaSpec, config: FmhaConfig) -> Any:
    """The compiled function of a specialization: from this process, the disk cache, or a fresh compile."""
    config = config.kernel
    key = (spec, config)
    return _CACHE.get(key, _key_name(spec, config), lambda: _compile(spec, config))


class FmhaLaunch:
    """One problem's launch: extents, strides and scale fixed; pointers and stream not."""

    def __init__(self, spec: FmhaSpec, config: FmhaConfig, problem: FmhaProblem, sm_count: int) -> None:
        self.spec, self.config, self.problem = spec, config, problem
        p = problem
        ints = [_Cell(ctypes.c_int32, x) for x in (p.batch, p.heads, p.groups, p.sq, p.skv)]
        strides = [
            _Cell(ctypes.c_int64, x) for x in (*p.q_strides, *p.k_strides, *p.v_strides, *p.o_strides, *p.stats_strides)
        ]
        scale = _Cell(ctypes.c_float, 0)
        scale.value.value = p.scale_log2
        ctas = _Cell(ctypes.c_int32, p.ctas(config, sm_count))
        # q, k, v, o, stats
        self._launch = PackedLaunch(compiled(spec, config), 5, [*ints, *strides, scale, ctas], "SDPA")
        self._lock = threading.Lock()

    def __call__(self, q: int, k: int, v: int, o: int, stats: int, stream: int) -> None:
        """Enqueue the attention on ``stream`` (raw CUstream); q, k, v 16-byte aligned, o 2-byte, stats 4-byte."""
        if (q | k | v) & 15:
            raise ValueError("TMA needs 16-byte aligned q, k and v")
        if self.spec.stats and not stats:
            raise ValueError("this specialization writes stats: give its address")
        with self._lock:
            self._launch((q, k, v, o, stats), stream)
