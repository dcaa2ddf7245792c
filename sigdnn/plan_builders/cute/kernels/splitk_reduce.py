"""Sum of split-K partial products: out[i] = sum over l of parts[l, i], in float32, rounded once to out's dtype.

A GEMM whose output is small next to its reduction (a conv wgrad: K x RSC
outputs, N*P*Q deep) runs as a batch of GEMMs over slices of the reduction,
each writing float32 partials; this kernel adds them. ``lanes`` neighbouring
lanes (a power of two up to 16) share a 4-element vector of outputs, each
adding every ``lanes``-th slice with 16-byte loads, then their sums meet by
shuffles (a fixed order: the result does not vary between runs). The
partials were just written and sit in L2: latency, not bandwidth, bounds
this kernel, so each lane gets about two slices (``lanes_for``), enough
loads in flight without a thread per slice. On the H200 (Nsight Compute) one lane a vector adding all
slices took 4.6-5.7 us for 14-28 slices of 64 x 576 outputs, four lanes
8.1 us for 43, sixteen 5.3 us (cold L2, as Nsight Compute runs it); sixteen
lanes for 7 slices of 256 x 2304 outputs cost conv4_3x3's wgrad 7 us more
than four, a block launched per 64 vectors.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, int32_cells

_THREADS = 256
_VEC = 4  # outputs a vector (16 bytes of float32 partials)
MAX_LANES = 16


def lanes_for(splits: int) -> int:
    """Lanes sharing a vector: the largest power of two up to MAX_LANES with two slices or more each."""
    lanes = 1
    while lanes * 2 <= min(splits // 2, MAX_LANES):
        lanes *= 2
    return lanes


class SplitKReduce:
    """One compiled specialization: the output dtype and the lanes a vector."""

    def __init__(self, dtype: str, lanes: int) -> None:
        self.dtype = DTYPES[dtype]
        self.lanes = lanes

    @cute.jit
    def __call__(self, parts_ptr: cute.Pointer, out_ptr: cute.Pointer, total: Int32, splits: Int32,
                 stream: cuda.CUstream):  # fmt: skip
        total = cute.assume(total, divby=_VEC)
        mParts = cute.make_tensor(parts_ptr, cute.make_layout((total, splits), stride=(1, total)))
        mOut = cute.make_tensor(out_ptr, cute.make_layout(total))
        per_block = _THREADS // self.lanes * _VEC
        blocks = (total + (per_block - 1)) // per_block
        self.kernel(mParts, mOut, total, splits).launch(grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mParts: cute.Tensor, mOut: cute.Tensor, total: Int32, splits: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        vector = bidx * (_THREADS // self.lanes) + tidx // self.lanes
        lane = tidx % self.lanes
        acc = cute.make_rmem_tensor(_VEC, Float32)
        acc.fill(0.0)
        if vector * _VEC < total:
            part = cute.make_rmem_tensor(_VEC, Float32)
            for slice_ in cutlass.range(lane, splits, self.lanes, unroll=4):
                cute.autovec_copy(cute.local_tile(mParts[None, slice_], (_VEC,), (vector,)), part)
                acc.store(acc.load() + part.load())
        for i in cutlass.range_constexpr(_VEC):  # every lane of the group ends with the group's sum
            for step in cutlass.range_constexpr(self.lanes.bit_length() - 1):
                acc[i] = acc[i] + cute.arch.shuffle_sync_bfly(acc[i], offset=1 << step)
        if vector * _VEC < total and lane == 0:
            out = cute.make_rmem_tensor(_VEC, self.dtype)
            out.store(acc.load().to(self.dtype))
            cute.autovec_copy(out, cute.local_tile(mOut, (_VEC,), (vector,)))


_CACHE = CompileCache()


def compiled(dtype: str, lanes: int) -> Any:
    """The compiled reduction into one output dtype, ``lanes`` a vector (compiled once per process: about a
    second)."""

    def compile_fn() -> Any:
        parts = make_ptr(cutlass.Float32, 0, cute.AddressSpace.gmem, assumed_align=16)
        out = make_ptr(DTYPES[dtype], 0, cute.AddressSpace.gmem, assumed_align=16)
        return cute.compile(SplitKReduce(dtype, lanes), parts, out, Int32(1), Int32(1), cuda.CUstream(0))

    return _CACHE.get((dtype, lanes), None, compile_fn)


class SplitKReduceLaunch:
    """One reduction: the extents are fixed, the pointers and stream are not."""

    def __init__(self, dtype: str, total: int, splits: int) -> None:
        if total % _VEC:
            raise ValueError(f"{total} outputs: the reduction takes a multiple of {_VEC}")
        self._launch = PackedLaunch(
            compiled(dtype, lanes_for(splits)), 2, int32_cells(total, splits), "split-K reduction"
        )

    def __call__(self, parts_ptr: int, out_ptr: int, stream: int) -> None:
        self._launch((parts_ptr, out_ptr), stream)
