"""The two helper kernels of a strided dgrad by stride phases (plan_builders/cute/dgrad_phases.py).

Gather: every running phase's sub-filter, flipped and transposed into the
fprop's KRSC order (dx's channels as K), written to the workspace from w:

    out[dst + c * c_stride + k] = w[k, tap, c]  (tap = r*S + s; 0 for a zero tap)

one table row (tap, dst, c_stride) per sub-filter tap, one thread per output
element, consecutive threads along k (the writes are contiguous; the filter
is small next to the convs).

Interleave: dx from the phases' outputs in the workspace, zeros where no tap
reaches, every element of dx written:

    dx[n, h, w, c] = out_ph[n, h / sh, w / sw, c]  with ph = (h % sh, w % sw); 0 for a zero phase

one table row (element offset or -1, Hp, Wp) per phase. One thread per 16
bytes of dx (and of the phase output): 16-byte loads and stores,
consecutive threads on consecutive vectors. Both tables are int32 arrays in
device memory the launch owns (written once at build); every extent is a
launch argument, so one compiled function per dtype serves every shape.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import numpy as np
from cutlass import Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, int32_cells

_THREADS = 256


class PhaseGather:
    """One compiled specialization: the filter's dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(self, w_ptr: cute.Pointer, table_ptr: cute.Pointer, out_ptr: cute.Pointer, rows: Int32, k: Int32,
                 taps: Int32, c: Int32, span: Int32, stream: cuda.CUstream):  # fmt: skip
        mW = cute.make_tensor(w_ptr, cute.make_layout(k * taps * c))
        mTable = cute.make_tensor(table_ptr, cute.make_layout(rows * 3))
        mOut = cute.make_tensor(out_ptr, cute.make_layout(span))
        total = rows * c * k
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mW, mTable, mOut, k, taps, c, total).launch(
            grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mW: cute.Tensor, mTable: cute.Tensor, mOut: cute.Tensor, k: Int32, taps: Int32, c: Int32,
               total: Int32):  # fmt: skip
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            kk = i % k
            t = i // k
            cc = t % c
            row = t // c
            tap = mTable[row * 3]
            value = self.dtype(0.0)
            if tap >= 0:
                value = mW[(kk * taps + tap) * c + cc]
            mOut[mTable[row * 3 + 1] + cc * mTable[row * 3 + 2] + kk] = value


class PhaseInterleave:
    """One compiled specialization: dx's dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]
        self.vector = 128 // self.dtype.width  # elements per 16 bytes

    @cute.jit
    def __call__(self, work_ptr: cute.Pointer, table_ptr: cute.Pointer, dx_ptr: cute.Pointer, n: Int32, h: Int32,
                 w: Int32, c: Int32, sh: Int32, sw: Int32, span: Int32, stream: cuda.CUstream):  # fmt: skip
        c = cute.assume(c, divby=self.vector)
        mWork = cute.make_tensor(work_ptr, cute.make_layout(span))
        mTable = cute.make_tensor(table_ptr, cute.make_layout(sh * sw * 3))
        total = n * h * w * (c // self.vector)
        mDx = cute.make_tensor(dx_ptr, cute.make_layout(total * self.vector))
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mWork, mTable, mDx, h, w, c, sh, sw, total).launch(
            grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mWork: cute.Tensor, mTable: cute.Tensor, mDx: cute.Tensor, h: Int32, w: Int32, c: Int32,
               sh: Int32, sw: Int32, total: Int32):  # fmt: skip
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            vectors = c // self.vector
            v = i % vectors
            t = i // vectors
            x = t % w
            t = t // w
            y = t % h
            nn = t // h
            phase = ((y % sh) * sw + x % sw) * 3
            base = mTable[phase]
            atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128)
            frag = cute.make_rmem_tensor((self.vector,), self.dtype)
            frag.fill(0.0)
            if base >= 0:
                src = base + ((nn * mTable[phase + 1] + y // sh) * mTable[phase + 2] + x // sw) * c + v * self.vector
                src = cute.assume(src, divby=self.vector)
                cute.copy(atom, cute.make_tensor(mWork.iterator + src, cute.make_layout(self.vector)), frag)
            dst = cute.assume(i * self.vector, divby=self.vector)
            cute.copy(atom, frag, cute.make_tensor(mDx.iterator + dst, cute.make_layout(self.vector)))


_CACHE = CompileCache()


def _ptr(dtype: Any, address: int, align: int = 16) -> Any:
    return make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=align)


def compiled(kind: str, dtype: str) -> Any:
    """The compiled gather or interleave of one dtype (compiled once per process: about a second)."""

    def compile_fn() -> Any:
        kernel = PhaseGather(dtype) if kind == "gather" else PhaseInterleave(dtype)
        ptrs = [_ptr(DTYPES[dtype], 0), _ptr(cutlass.Int32, 0, 4), _ptr(DTYPES[dtype], 0)]
        return cute.compile(kernel, *ptrs, *[Int32(1)] * (5 if kind == "gather" else 7), cuda.CUstream(0))

    return _CACHE.get((kind, dtype), None, compile_fn)


class _Table:
    """An int32 table in device memory, written once, freed with its owner."""

    def __init__(self, owner: object, values: Sequence[int]) -> None:
        host = np.ascontiguousarray(values, dtype=np.int32)
        err, ptr = cuda.cuMemAlloc(max(4, host.nbytes))
        if err != cuda.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"phase table of {host.nbytes} bytes: cuMemAlloc failed ({err})")
        weakref.finalize(owner, cuda.cuMemFree, ptr)
        (err,) = cuda.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes)
        if err != cuda.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"phase table: cuMemcpyHtoD failed ({err})")
        self.address = int(ptr)


class PhaseGatherLaunch:
    """One dgrad's sub-filter gather: the table (dgrad_phases.PhaseLayout.gather) and extents are fixed."""

    def __init__(self, dtype: str, table: Sequence[int], k: int, taps: int, c: int, span: int) -> None:
        self._table = _Table(self, table)
        scalars = int32_cells(len(table) // 3, k, taps, c, span)
        self._launch = PackedLaunch(compiled("gather", dtype), 3, scalars, "phase gather")

    def __call__(self, w_ptr: int, out_ptr: int, stream: int) -> None:
        self._launch((w_ptr, self._table.address, out_ptr), stream)


class PhaseInterleaveLaunch:
    """One dgrad's interleave into dx: the table (dgrad_phases.PhaseLayout.interleave) and extents are fixed."""

    def __init__(self, dtype: str, table: Sequence[int], nhwc: tuple[int, int, int, int], stride: tuple[int, int],
                 span: int) -> None:  # fmt: skip
        self._table = _Table(self, table)
        scalars = int32_cells(*nhwc, *stride, span)
        self._launch = PackedLaunch(compiled("interleave", dtype), 3, scalars, "phase interleave")

    def __call__(self, work_ptr: int, dx_ptr: int, stream: int) -> None:
        self._launch((work_ptr, self._table.address, dx_ptr), stream)
