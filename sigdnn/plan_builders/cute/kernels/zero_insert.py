"""dy with stride - 1 zeros between its pixels, written to the workspace: a strided dgrad's unit-stride input.

    out[n, u, v, k] = dy[n, u / sh, v / sw, k]  when sh divides u and sw divides v, else 0
    (u < (P-1)*sh + 1, v < (Q-1)*sw + 1; both packed channels-last)

Every element of the output is written (the workspace is not zeroed
first). One thread per output element, consecutive threads along k: the
writes are contiguous and so are the reads of each dy pixel. Every extent
is a launch argument, so one compiled function per dtype serves every
shape.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache

DTYPES: dict[str, Any] = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16}
_THREADS = 256


class ZeroInsert:
    """One compiled specialization: the element dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(self, dy_ptr: cute.Pointer, out_ptr: cute.Pointer, n: Int32, p: Int32, q: Int32, k: Int32,
                 sh: Int32, sw: Int32, stream: cuda.CUstream):  # fmt: skip
        hd = (p - 1) * sh + 1
        wd = (q - 1) * sw + 1
        mDy = cute.make_tensor(dy_ptr, cute.make_layout((k, q, p, n), stride=(1, k, q * k, p * q * k)))
        mOut = cute.make_tensor(out_ptr, cute.make_layout((k, wd, hd, n), stride=(1, k, wd * k, hd * wd * k)))
        total = n * hd * wd * k
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mDy, mOut, k, wd, hd, sh, sw, total).launch(
            grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mDy: cute.Tensor, mOut: cute.Tensor, k: Int32, wd: Int32, hd: Int32, sh: Int32, sw: Int32,
               total: Int32):  # fmt: skip
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            kk = i % k
            t = i // k
            v = t % wd
            t = t // wd
            u = t % hd
            nn = t // hd
            value = self.dtype(0.0)
            if u % sh == 0 and v % sw == 0:
                value = mDy[(kk, v // sw, u // sh, nn)]
            mOut[(kk, v, u, nn)] = value


_CACHE = CompileCache()


def compiled(dtype: str) -> Any:
    """The compiled zero insertion of one dtype (compiled once per process: about a second)."""

    def compile_fn() -> Any:
        ptrs = [make_ptr(DTYPES[dtype], 0, cute.AddressSpace.gmem, assumed_align=16) for _ in range(2)]
        return cute.compile(ZeroInsert(dtype), *ptrs, *[Int32(1)] * 6, cuda.CUstream(0))

    return _CACHE.get(dtype, None, compile_fn)


class ZeroInsertLaunch:
    """One dy's zero insertion: the extents and strides are fixed, the pointers and stream are not."""

    def __init__(self, dtype: str, npqk: tuple[int, int, int, int], stride: tuple[int, int]) -> None:
        self._dtype = DTYPES[dtype]
        self._fn = compiled(dtype)
        self._scalars = [Int32(v) for v in (*npqk, *stride)]

    def __call__(self, dy_ptr: int, out_ptr: int, stream: int) -> None:
        dy = make_ptr(self._dtype, dy_ptr, cute.AddressSpace.gmem, assumed_align=16)
        out = make_ptr(self._dtype, out_ptr, cute.AddressSpace.gmem, assumed_align=16)
        self._fn(dy, out, *self._scalars, cuda.CUstream(stream))
