"""The flipped, transposed filter a conv dgrad runs as a conv fprop over dy, written to the workspace.

    w_flip[c, r, s, k] = w[k, R-1-r, S-1-s, c]     (both packed channels-last: KRSC in, CRSK out)

One thread per output element, consecutive threads along k: the writes are
contiguous, the reads stride by C (the filter is small next to the dgrad's
GEMM, whose A is all of dy). Every extent is a launch argument, so one
compiled function per dtype serves every filter.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, int32_cells

_THREADS = 256


class FilterFlip:
    """One compiled specialization: the element dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(self, w_ptr: cute.Pointer, out_ptr: cute.Pointer, k: Int32, r: Int32, s: Int32, c: Int32,
                 stream: cuda.CUstream):  # fmt: skip
        mW = cute.make_tensor(w_ptr, cute.make_layout((c, s, r, k), stride=(1, c, s * c, r * s * c)))
        mOut = cute.make_tensor(out_ptr, cute.make_layout((k, s, r, c), stride=(1, k, s * k, r * s * k)))
        total = k * r * s * c
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mW, mOut, k, r, s, total).launch(grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mW: cute.Tensor, mOut: cute.Tensor, k: Int32, r: Int32, s: Int32, total: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            kk = i % k
            t = i // k
            ss = t % s
            t = t // s
            rr = t % r
            cc = t // r
            mOut[(kk, ss, rr, cc)] = mW[(cc, s - 1 - ss, r - 1 - rr, kk)]


_CACHE = CompileCache()


def compiled(dtype: str) -> Any:
    """The compiled flip of one dtype (compiled once per process: about a second)."""

    def compile_fn() -> Any:
        ptrs = [make_ptr(DTYPES[dtype], 0, cute.AddressSpace.gmem, assumed_align=16) for _ in range(2)]
        return cute.compile(FilterFlip(dtype), *ptrs, *[Int32(1)] * 4, cuda.CUstream(0))

    return _CACHE.get(dtype, None, compile_fn)


class FilterFlipLaunch:
    """One filter's flip: the extents are fixed, the pointers and stream are not."""

    def __init__(self, dtype: str, krsc: tuple[int, int, int, int]) -> None:
        self._launch = PackedLaunch(compiled(dtype), 2, int32_cells(*krsc), "filter flip")

    def __call__(self, w_ptr: int, out_ptr: int, stream: int) -> None:
        self._launch((w_ptr, out_ptr), stream)
