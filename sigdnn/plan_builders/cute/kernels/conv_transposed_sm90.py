"""Hopper (sm_90a) conv fprop as the transposed implicit GEMM: y^T = W x im2col(x)^T, for few output channels.

    y^T[k, (n, p, q)] = sum over (c, s, r) of w[k, (c, s, r)] * x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]

With K <= 64 output channels the implicit GEMM of kernels/conv_sm90.py runs
N = 64 wide: every wgmma is m64n64k16, which reads 4 KB of shared memory for
as many products as the tensor cores finish in the time the shared-memory
port delivers those 4 KB -- and the TMA writes the same bytes into it. With
the L2 (the im2col boxes read each x pixel once per tap) it held conv2_3x3
at about half the wgmma rate: this kernel alone ran it 4-7 % faster, the row
kernel (kernels/conv_rows_sm90.py), which also reads x once per filter row,
26 %. Transposed, the output channels are the GEMM's M (one 64-row
warpgroup tile) and the pixels its N: m64n256k16 reads 10 KB for four times
the products. A is the filter (K, (C, S, R)) through a tiled TMA, B the
im2col boxes of x (the fprop's A loads, in B's place: each tile's first
pixel made once, the K loop's (channel block, s, r) counters), and y (NHWK)
is the GEMM's output read column-major: M (the channels) contiguous. The
bias is per output row (``GemmSpec.bias_per`` "m").
"""

from __future__ import annotations

import cutlass.cute as cute
import cutlass.utils as utils
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.kernels.conv_sm90 import CHANNEL_ALIGN, HopperConvFprop, im2col_atom
from sigdnn.plan_builders.cute.kernels.gemm_sm90 import HopperGemm


class HopperConvFpropTransposed(HopperConvFprop):
    """One compiled 2-D specialization: the GEMM's spec (bias per row) and tile config (M: output channels)."""

    def tiler_a(self):
        return (self.tile_mnk[0], (self.tile_mnk[2],))

    def tiler_b(self):
        return (self.tile_mnk[1], (self.tile_mnk[2],))

    a_tile = HopperGemm.a_tile  # the filter: a plain tiled load

    def b_tile(self, tBgB, n_tile, b_l):
        """The pixel tile's first pixel as TMA coordinates, once a tile (as the fprop's A: see a_tile there)."""
        coords = cute.make_tensor(tBgB.iterator, tBgB.layout.inner)  # (pixels, K) -> TMA coordinates
        first = cute.domain_offset((n_tile * self.tile_mnk[1], 0), coords).iterator
        return cute.make_tensor(first, tBgB[(None, 0, None, b_l)].layout)

    def copy_b(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask) -> None:
        cute.copy(tma_b, b_tile[(None, k)], tBsB[(None, stage)], tma_bar_ptr=barrier)

    def trace(self, ptrs, g, split, stream) -> None:
        """The launch (trace time): the fprop's scalars (HopperConvFprop.trace); no split-K."""
        x_ptr, w_ptr, y_ptr, bias_ptr = ptrs
        n, h, w, c, k, r, s, p, q, *_ = g  # the window: im2col_atom reads it from g
        c = cute.assume(c, divby=CHANNEL_ALIGN)
        k = cute.assume(k, divby=128 // self.c_dtype.width)
        m = n * p * q
        mX = cute.make_tensor(x_ptr, cute.make_layout(((w, h, n), c), stride=((c, w * c, h * w * c), 1)))
        mW = cute.make_tensor(w_ptr, cute.make_layout((k, (c, s, r)), stride=(r * s * c, (1, c, s * c))))
        # y (NHWK) as the GEMM's (K, pixels, 1) output: column-major, the channels contiguous.
        mY = cute.make_tensor(y_ptr, cute.make_layout((k, m, 1), stride=(1, k, m * k)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(k))  # read only when spec.bias_dtype is set

        row_major, col_major = utils.LayoutEnum.ROW_MAJOR, utils.LayoutEnum.COL_MAJOR
        # A (the filter) and B (x's pixels) both K-major; C M-major.
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(row_major, row_major, col_major)
        tma_a, gA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mW, cute.slice_(a_smem, (None, None, 0)), self.tiler_a()
        )
        tma_b, gB = im2col_atom(
            cpasync.CopyBulkTensorIm2ColG2SOp(), mX, cute.slice_(b_smem, (None, None, 0)), self.tiler_b(), g
        )
        gA = cute.make_tensor(gA.iterator, cute.append(gA.layout, cute.make_layout(1)))
        gB = cute.make_tensor(gB.iterator, cute.append(gB.layout, cute.make_layout(1)))
        mScales = (mBias, mBias)  # no scales in a conv epilogue: never read
        self.launch_kernel(
            (tma_a, gA, tma_b, gB), mY, tiled_mma, (a_smem, b_smem, epi_smem), (k, m, 1), mBias, mScales, stream
        )
