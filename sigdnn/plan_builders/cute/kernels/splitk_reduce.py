"""Sum of split-K partial products: out[i] = sum over l of parts[l, i], in float32, rounded once to out's dtype.

A GEMM whose output is small next to its reduction (a conv wgrad: K x RSC
outputs, N*P*Q deep) runs as a batch of GEMMs over slices of the reduction,
each writing float32 partials; this kernel adds them. One thread per output
element, consecutive threads on consecutive elements of every slice.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES

_THREADS = 256


class SplitKReduce:
    """One compiled specialization: the output dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(self, parts_ptr: cute.Pointer, out_ptr: cute.Pointer, total: Int32, splits: Int32,
                 stream: cuda.CUstream):  # fmt: skip
        mParts = cute.make_tensor(parts_ptr, cute.make_layout((total, splits), stride=(1, total)))
        mOut = cute.make_tensor(out_ptr, cute.make_layout(total))
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mParts, mOut, total, splits).launch(grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mParts: cute.Tensor, mOut: cute.Tensor, total: Int32, splits: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            acc = cutlass.Float32(0.0)
            for part in cutlass.range(splits, unroll=4):
                acc = acc + mParts[(i, part)]
            mOut[i] = acc.to(self.dtype)


_CACHE = CompileCache()


def compiled(dtype: str) -> Any:
    """The compiled reduction into one output dtype (compiled once per process: about a second)."""

    def compile_fn() -> Any:
        parts = make_ptr(cutlass.Float32, 0, cute.AddressSpace.gmem, assumed_align=16)
        out = make_ptr(DTYPES[dtype], 0, cute.AddressSpace.gmem, assumed_align=16)
        return cute.compile(SplitKReduce(dtype), parts, out, Int32(1), Int32(1), cuda.CUstream(0))

    return _CACHE.get(dtype, None, compile_fn)


class SplitKReduceLaunch:
    """One reduction: the extents are fixed, the pointers and stream are not."""

    def __init__(self, dtype: str, total: int, splits: int) -> None:
        self._dtype = DTYPES[dtype]
        self._fn = compiled(dtype)
        self._scalars = [Int32(total), Int32(splits)]

    def __call__(self, parts_ptr: int, out_ptr: int, stream: int) -> None:
        parts = make_ptr(cutlass.Float32, parts_ptr, cute.AddressSpace.gmem, assumed_align=16)
        out = make_ptr(self._dtype, out_ptr, cute.AddressSpace.gmem, assumed_align=16)
        self._fn(parts, out, *self._scalars, cuda.CUstream(stream))
