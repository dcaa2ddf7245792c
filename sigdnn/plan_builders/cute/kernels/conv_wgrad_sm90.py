"""Hopper (sm_90a) conv wgrad as an implicit GEMM in CuTe DSL: dw = dy^T x im2col(x), B gathered by the TMA.

    dw[k, (c, s, r)] = sum over (n, p, q) of dy[(n, p, q), k] * x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]

M is dy's channel count K, N runs over (c, s, r) (dw's KRSC columns, in
order when C is a multiple of the 64-wide N tile), and the reduction runs
over the output pixels (n, p, q). A is dy read M-major (its rows of K
channels are the GEMM's columns). B's tiles are the fprop's im2col boxes
turned on their side: one TMA load per (64-channel block, filter tap) and
64 output pixels writes, for each pixel, 64 channels contiguous -- which
is a 64 x 64 N-major B tile in shared memory. The reduction is cut into
``splits`` equal slices of ``chunk`` pixels, run as the GEMM's batch: each
writes float32 partials that kernels/splitk_reduce.py adds (one slice
writes dw directly).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.kernels.gemm_sm90 import HopperGemm

TILE_N = 64  # B's N tile: one 64-channel block of one filter tap (128-byte rows for the swizzle)


class HopperConvWgrad(HopperGemm):
    """One compiled 2-D conv wgrad specialization: the GEMM's spec (dtypes) and tile config (N tile 64)."""

    def tiler_b(self):
        # B's N mode is (C, S, R): tile the channels, walk the taps.
        return ((self.tile_mnk[1],), self.tile_mnk[2])

    @cute.jit
    def __call__(
        self,
        dy_ptr: cute.Pointer,
        x_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        n: Int32,
        h: Int32,
        w: Int32,
        c: Int32,
        k: Int32,
        r: Int32,
        s: Int32,
        p: Int32,
        q: Int32,
        pad_h: Int32,
        pad_w: Int32,
        pad_h_hi: Int32,
        pad_w_hi: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_h: Int32,
        dil_w: Int32,
        chunk: Int32,
        splits: Int32,
        stream: cuda.CUstream,
    ):
        c = cute.assume(c, divby=TILE_N)
        k = cute.assume(k, divby=8)
        chunk = cute.assume(chunk, divby=8)
        rsc = r * s * c
        # A = dy^T, (K, chunk, splits), K contiguous: M-major.
        mA = cute.make_tensor(dy_ptr, cute.make_layout((k, chunk, splits), stride=(1, k, chunk * k)))
        mX = cute.make_tensor(x_ptr, cute.make_layout(((w, h, n), c), stride=((c, w * c, h * w * c), 1)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((k, rsc, splits), stride=(rsc, 1, k * rsc)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(rsc))  # no epilogue bias: never read
        mScales = (mBias, mBias)

        m_major, row_major = utils.LayoutEnum.COL_MAJOR, utils.LayoutEnum.ROW_MAJOR
        # A M-major, B N-major (both "column-major" in the enum's (rows, cols) terms), C row-major.
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(m_major, m_major, row_major)

        tma_a, gA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            mA,
            cute.slice_(a_smem, (None, None, 0)),
            (self.tile_mnk[0], self.tile_mnk[2]),
        )
        # The im2col atom is made over x's (pixels, channels) modes, so its shared-memory layout is given
        # (K, N) -- pixels, then channels -- the same bytes as B's N-major (N, K) tile.
        b0 = cute.slice_(b_smem, (None, None, 0))
        b0_kn = cute.make_composed_layout(b0.inner, 0, cute.select(b0.outer, mode=[1, 0]))
        tma_b, gB_pc = cpasync.make_im2col_tma_atom(
            cpasync.CopyBulkTensorIm2ColG2SOp(),
            mX,
            b0_kn,
            (self.tile_mnk[2], (self.tile_mnk[1],)),
            lower_corner_whd=(-pad_w, -pad_h),
            upper_corner_whd=(pad_w_hi - (s - 1) * dil_w, pad_h_hi - (r - 1) * dil_h),
            lower_padding_whd=(pad_w, pad_h),
            upper_padding_whd=(pad_w_hi, pad_h_hi),
            stride_whd=(stride_w, stride_h),
            lower_srt=(0, 0),
            stride_srt=(dil_w, dil_h),
        )
        # (pixels, (C, S, R)) -> ((C, S, R), pixels) -> ((C, S, R), chunk, splits): the kernel's (N, K, L).
        gB = cute.make_tensor(gB_pc.iterator, cute.select(gB_pc.layout, mode=[1, 0]))
        gB = cute.logical_divide(gB, (None, chunk))
        lay = gB.layout
        gB = cute.make_tensor(
            gB.iterator,
            cute.make_composed_layout(lay.inner, lay.offset, cute.group_modes(cute.flatten(lay.outer), 0, 3)),
        )
        self.launch_kernel(
            (tma_a, gA, tma_b, gB), mC, tiled_mma, (a_smem, b_smem, epi_smem), (k, rsc, splits), mBias, mScales, stream
        )
