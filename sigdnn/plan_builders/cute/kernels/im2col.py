"""im2col for NHWC convolution in CuTe DSL: the GEMM operand A of a conv fprop, written to the workspace.

    A[(n, p, q), (r, s, c)] = x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]   (0 outside x)

A is row-major with K = R * S * C contiguous, in the order the KRSC filter
is stored, so the GEMM's B is the filter itself read K-major. Each thread
moves eight consecutive channels of one (pixel, tap) pair: consecutive
threads cover consecutive bytes of both x and A. A first, plain version:
the conv makes one extra pass over memory that an implicit GEMM (gathering
A's tiles in the GEMM's own producer) would not.

Every extent is a launch argument, so one compiled specialization per
dtype serves every conv shape.
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
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, int32_cells

VECTOR = 8  # channels per thread: 16 bytes
_THREADS = 256


class Im2col:
    """One compiled specialization: the element dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        a_ptr: cute.Pointer,
        n: Int32,
        h: Int32,
        w: Int32,
        c: Int32,
        p: Int32,
        q: Int32,
        r: Int32,
        s: Int32,
        pad_h: Int32,
        pad_w: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        stream: cuda.CUstream,
    ):
        c = cute.assume(c, divby=VECTOR)
        mX = cute.make_tensor(x_ptr, cute.make_layout((c, w, h, n), stride=(1, c, w * c, h * w * c)))
        kg = r * s * c
        mA = cute.make_tensor(a_ptr, cute.make_layout((kg, q, p, n), stride=(1, kg, q * kg, p * q * kg)))
        total = n * p * q * r * s * (c // VECTOR)
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mX, mA, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, total).launch(
            grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mX: cute.Tensor,
        mA: cute.Tensor,
        h: Int32,
        w: Int32,
        c: Int32,
        p: Int32,
        q: Int32,
        r: Int32,
        s: Int32,
        pad_h: Int32,
        pad_w: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        total: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            vectors = c // VECTOR
            v = i % vectors
            t = i // vectors
            tap = t % (r * s)
            t = t // (r * s)
            qq = t % q
            t = t // q
            pp = t % p
            nn = t // p
            rr = tap // s
            ss = tap - rr * s
            hi = pp * stride_h - pad_h + rr * dil_h
            wi = qq * stride_w - pad_w + ss * dil_w
            frag = cute.make_rmem_tensor((VECTOR,), self.dtype)
            frag.fill(0.0)
            # Taps that fall in the padding stay zero.
            if hi >= 0 and hi < h and wi >= 0 and wi < w:
                for e in cutlass.range_constexpr(VECTOR):
                    frag[e] = mX[(v * VECTOR + e, wi, hi, nn)]
            for e in cutlass.range_constexpr(VECTOR):
                mA[(tap * c + v * VECTOR + e, qq, pp, nn)] = frag[e]


class Im2colNarrow:
    """A for any channel count: K = R * S * C padded with zeros to ``kpad`` columns (a multiple of 8), each
    thread writing one 16-byte vector of A's row.

    For C not a multiple of 8 (an image model's 3-channel first layer): x's
    rows are then not 16 bytes apart, so x is read element by element, and A's
    rows are padded to a multiple of 8 elements so the GEMM's TMA can read
    them. A thread finds its vector's first (tap, channel) by one division and
    steps through the other seven by counting (a channel past C starts the
    next tap, a tap past S the next filter row), so the index arithmetic is a
    few instructions an element; its eight elements leave as one 16-byte store,
    consecutive threads' stores side by side. The filter goes through the same
    kernel as a 1 x 1 "image" of R * S * C channels, giving B the same padded
    rows.
    """

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        a_ptr: cute.Pointer,
        n: Int32,
        h: Int32,
        w: Int32,
        c: Int32,
        p: Int32,
        q: Int32,
        r: Int32,
        s: Int32,
        pad_h: Int32,
        pad_w: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        kpad: Int32,
        stream: cuda.CUstream,
    ):
        kpad = cute.assume(kpad, divby=VECTOR)
        mX = cute.make_tensor(x_ptr, cute.make_layout((c, w, h, n), stride=(1, c, w * c, h * w * c)))
        mA = cute.make_tensor(a_ptr, cute.make_layout(n * p * q * kpad))
        total = n * p * q * (kpad // VECTOR)
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mX, mA, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, kpad, total).launch(
            grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mX: cute.Tensor,
        mA: cute.Tensor,
        h: Int32,
        w: Int32,
        c: Int32,
        p: Int32,
        q: Int32,
        r: Int32,
        s: Int32,
        pad_h: Int32,
        pad_w: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        kpad: Int32,
        total: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx  # A's i-th vector: pixel i // (kpad / 8), columns from (i % (kpad / 8)) * 8
        if i < total:
            vectors = kpad // VECTOR
            t = i // vectors
            kk = (i - t * vectors) * VECTOR
            qq = t % q
            t = t // q
            pp = t % p
            nn = t // p
            tap = kk // c
            ch = kk - tap * c
            rr = tap // s
            ss = tap - rr * s
            h0 = pp * stride_h - pad_h
            w0 = qq * stride_w - pad_w
            frag = cute.make_rmem_tensor((VECTOR,), self.dtype)
            frag.fill(0.0)
            for e in cutlass.range_constexpr(VECTOR):
                hi = h0 + rr * dil_h
                wi = w0 + ss * dil_w
                # The padding columns (past the last filter row) and taps in the image's padding stay zero.
                if rr < r and hi >= 0 and hi < h and wi >= 0 and wi < w:
                    frag[e] = mX[(ch, wi, hi, nn)]
                ch = ch + 1
                if ch == c:
                    ch = Int32(0)
                    ss = ss + 1
                    if ss == s:
                        ss = Int32(0)
                        rr = rr + 1
            atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128)
            start = cute.assume(i * VECTOR, divby=VECTOR)
            cute.copy(atom, frag, cute.make_tensor(mA.iterator + start, cute.make_layout(VECTOR)))


class Im2colElements:
    """A for any channel count and any row length ``kpad`` >= R * S * C (zeros past R * S * C), one element per
    thread: what rows of ``kpad`` columns not 16 bytes apart need (the wgrad's copy of dw's real R * S * C
    columns out of its padded rows, a 1 x 1 "image" of kpad channels)."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        a_ptr: cute.Pointer,
        n: Int32,
        h: Int32,
        w: Int32,
        c: Int32,
        p: Int32,
        q: Int32,
        r: Int32,
        s: Int32,
        pad_h: Int32,
        pad_w: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        kpad: Int32,
        stream: cuda.CUstream,
    ):
        mX = cute.make_tensor(x_ptr, cute.make_layout((c, w, h, n), stride=(1, c, w * c, h * w * c)))
        mA = cute.make_tensor(a_ptr, cute.make_layout((kpad, q, p, n), stride=(1, kpad, q * kpad, p * q * kpad)))
        total = n * p * q * kpad
        blocks = (total + (_THREADS - 1)) // _THREADS
        self.kernel(mX, mA, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, kpad, total).launch(
            grid=[blocks, 1, 1], block=[_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mX: cute.Tensor,
        mA: cute.Tensor,
        h: Int32,
        w: Int32,
        c: Int32,
        p: Int32,
        q: Int32,
        r: Int32,
        s: Int32,
        pad_h: Int32,
        pad_w: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        kpad: Int32,
        total: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * _THREADS + tidx
        if i < total:
            kk = i % kpad
            t = i // kpad
            qq = t % q
            t = t // q
            pp = t % p
            nn = t // p
            tap = kk // c
            ch = kk - tap * c
            rr = tap // s
            ss = tap - rr * s
            hi = pp * stride_h - pad_h + rr * dil_h
            wi = qq * stride_w - pad_w + ss * dil_w
            frag = cute.make_rmem_tensor((1,), self.dtype)
            frag.fill(0.0)
            # The padding columns (tap >= R * S) and taps in the image's padding stay zero.
            if tap < r * s and hi >= 0 and hi < h and wi >= 0 and wi < w:
                frag[0] = mX[(ch, wi, hi, nn)]
            mA[(kk, qq, pp, nn)] = frag[0]


_CACHE = CompileCache()


def compiled(dtype: str) -> Any:
    """The compiled im2col of one dtype (compiled once per process: a second or two)."""

    def compile_fn() -> Any:
        ptrs = [make_ptr(DTYPES[dtype], 0, cute.AddressSpace.gmem, assumed_align=16) for _ in range(2)]
        return cute.compile(Im2col(dtype), *ptrs, *[Int32(1)] * 14, cuda.CUstream(0))

    return _CACHE.get(dtype, None, compile_fn)


def compiled_narrow(dtype: str, vectors: bool) -> Any:
    """The compiled narrow im2col (any channel count) of one dtype: 16-byte vectors of rows padded to a multiple
    of 8 (``Im2colNarrow``), else element by element (``Im2colElements``)."""
    kind = Im2colNarrow if vectors else Im2colElements

    def compile_fn() -> Any:
        ptrs = [make_ptr(DTYPES[dtype], 0, cute.AddressSpace.gmem, assumed_align=16) for _ in range(2)]
        return cute.compile(kind(dtype), *ptrs, *[Int32(1)] * 15, cuda.CUstream(0))

    return _CACHE.get((kind.__name__, dtype), None, compile_fn)


class Im2colLaunch:
    """One conv shape's im2col: the extents are fixed, the pointers and stream are not."""

    def __init__(self, dtype: str, extents: tuple[int, ...]) -> None:
        """``extents``: n, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, and for the
        narrow kernels (any C) the row length kpad as a 15th (16-byte vectors where it is a multiple of 8)."""
        if len(extents) not in (14, 15):
            raise ValueError("im2col takes n, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w"
                             " [, kpad]")  # fmt: skip
        kernel = compiled(dtype) if len(extents) == 14 else compiled_narrow(dtype, extents[14] % VECTOR == 0)
        self._launch = PackedLaunch(kernel, 2, int32_cells(*extents), "im2col")

    def __call__(self, x_ptr: int, a_ptr: int, stream: int) -> None:
        self._launch((x_ptr, a_ptr), stream)
