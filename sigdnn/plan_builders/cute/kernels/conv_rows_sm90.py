"""Hopper (sm_90a) 3x3 conv fprop on 64 channels as the transposed GEMM over whole output rows.

    y^T[k, (q, p, n)] = sum over (c, s, r) of w[k, r, s, c] * x[n, p + r - 1, q + s - 1, c]

The transposed conv (kernels/conv_transposed_sm90.py) still loads one im2col
box per filter tap: every x pixel comes through L2 nine times. Here a tile is
ROWS consecutive output rows of one image (N = ROWS * 64 pixel slots, Q <= 62
of each 64 used) by the output channels (M = 64), and its K loop is the
filter's three rows r. A K step loads, with one tiled TMA box, x's rows
p + r - 1 .. p + r + ROWS - 2 as 64 pixels each from pixel -1 on (zeros
outside x), and the three taps s of filter row r (A: 64 x 192). Tap s's B is
that buffer read from row s on: output slot i of row j reads box row
64 j + i + s, which is pixel i + s - 1 of x's row j while i + s < 64 -- every
slot q < Q, since Q <= 62 -- and garbage only in slots q >= 62, which the
store clips. The 128-byte swizzle follows the shared-memory address, so a
wgmma descriptor may start on any row (as in kernels/conv_wgrad_rows_sm90.py).
Each K step is twelve m64n256k16 wgmma; x's bytes through L2 drop from nine
reads a pixel to three. The epilogue (bias by row, activation, y as
(K, Q, P, N) so slots past Q and rows past P are clipped) is the GEMM's.

Restricted to what that needs: C = 64, K <= 64, R = S = 3, padding 1, unit
stride and dilation, Q <= 62, P a multiple of ROWS, pingpong 64 x 256 tiles.
"""

from __future__ import annotations

import cutlass.cute as cute
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.kernels.conv_transposed_sm90 import HopperConvFpropTransposed
from sigdnn.plan_builders.cute.kernels.gemm_sm90 import HopperGemm

CHANNELS = 64  # C: one 128-byte row a pixel
TAPS = 3  # filter rows (the K steps) and columns (the taps a K step)
SLOTS = 64  # pixel slots an output row takes in the N tile
ROWS = 4  # output rows a tile: N = 256


class HopperConvFpropRows(HopperConvFpropTransposed):
    """One compiled specialization (dtypes, epilogue with the bias by row); tile config pingpong 64 x 256."""

    def __init__(self, spec, config, sm_count: int) -> None:
        super().__init__(spec, config, sm_count)
        if not config.pingpong or (config.tile_m, config.tile_n) != (64, SLOTS * ROWS) or config.split:
            raise ValueError(f"row conv tile config {config.label}: pingpong 64 x {SLOTS * ROWS} without split-K")
        if config.cluster_m * config.cluster_n != 1:
            raise ValueError(f"row conv tile config {config.label}: no cluster")
        # A stage: the three taps of one filter row (64 x 192) and ROWS x rows of 64 pixels.
        stage = (self.tile_mnk[0] * TAPS * CHANNELS + SLOTS * ROWS * CHANNELS) * self.a_dtype.width // 8
        self.ab_stage = self.stage_budget // stage

    def mma_and_smem(self, a_layout, b_layout, c_layout):
        tiled_mma, _, b_smem, epi_smem = super().mma_and_smem(a_layout, b_layout, c_layout)
        self.ab_layouts = (a_layout, b_layout)
        a_smem = sm90_utils.make_smem_layout_a(a_layout, (self.tile_mnk[0], self.tile_mnk[1], TAPS * CHANNELS),
                                               self.a_dtype, self.ab_stage)  # fmt: skip
        return tiled_mma, a_smem, b_smem, epi_smem

    def tiler_a(self):
        return (self.tile_mnk[0], TAPS * CHANNELS)

    def tiler_b(self):
        return (SLOTS * ROWS, CHANNELS)

    # Plain tiled loads of A and B: the GEMM's slices, one K counter (the filter row).
    a_tile = HopperGemm.a_tile
    b_tile = HopperGemm.b_tile
    copy_b = HopperGemm.copy_b
    k_counters = HopperGemm.k_counters
    k_coord = HopperGemm.k_coord
    k_advance = HopperGemm.k_advance

    def mma_fragments(self, tiled_mma, thr_mma, sA, sB):
        """A's descriptors (three taps deep), and B's for each tap: the stage's rows from row s on."""
        taps = tuple(
            tiled_mma.make_fragment_B(thr_mma.partition_B(cute.make_tensor(sB.iterator + CHANNELS * s, sB.layout)))
            for s in range(TAPS)
        )
        return tiled_mma.make_fragment_A(thr_mma.partition_A(sA)), taps

    def mma(self, tiled_mma, acc, tCrA, tCrB, coord) -> None:
        _, _, kb, stage = coord
        blocks = CHANNELS // 16  # wgmma K blocks a tap
        cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[kb // blocks][(None, None, kb % blocks, stage)], acc)

    def trace(self, ptrs, g, split, stream) -> None:
        """The launch (trace time): the fprop's scalars (HopperConvFprop.trace); no split-K."""
        x_ptr, w_ptr, y_ptr, bias_ptr = ptrs
        n, h, w, c, k, _, _, p, q, pad_h, pad_w, *_ = g  # 3x3, padding 1, unit stride: fixed
        k = cute.assume(k, divby=128 // self.c_dtype.width)
        # x as ((W, H), C, N): B's box is ROWS rows of 64 pixels (past W: zeros), 64 channels each.
        mX = cute.make_tensor(x_ptr, cute.make_layout(((w, h), c, n), stride=((c, w * c), 1, h * w * c)))
        # w (KRSC) as (K, (C, S, R)), extents fixed by the kernel's scope: A's box is one filter row's taps.
        mW = cute.make_tensor(
            w_ptr,
            cute.make_layout(
                (k, (CHANNELS, TAPS, TAPS)), stride=(TAPS * TAPS * CHANNELS, (1, CHANNELS, TAPS * CHANNELS))
            ),
        )
        # y (NHWK) as (K, Q, P, N): output slots past Q and rows past P are clipped by the store.
        mY = cute.make_tensor(y_ptr, cute.make_layout((k, q, p, n), stride=(1, k, q * k, p * q * k)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(k))  # read only when spec.bias_dtype is set

        row_major, col_major = utils.LayoutEnum.ROW_MAJOR, utils.LayoutEnum.COL_MAJOR
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(row_major, row_major, col_major)

        tma_a, gW = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mW, cute.slice_(a_smem, (None, None, 0)), self.tiler_a()
        )
        # (M, K, L) = (K, ((64 channels, 3 taps), R), 1): K tile r is filter row r.
        sw = gW.layout.stride
        gA = cute.make_tensor(
            gW.iterator,
            cute.make_layout((k, ((CHANNELS, TAPS), TAPS), 1), stride=(sw[0], ((sw[1][0], sw[1][1]), sw[1][2]), 0)),
        )
        tma_b, gX = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mX, cute.slice_(b_smem, (None, None, 0)), ((SLOTS, ROWS), CHANNELS)
        )
        # Origin at pixel -pad_w of row -pad_h: the tile of rows p0.. loads, at K step r, rows p0 + r on.
        gX = cute.domain_offset(((-pad_w, -pad_h), 0, 0), gX)
        sx = gX.layout.stride
        # (N, K, L) = (((64 slots, ROWS rows), (P / ROWS, N)), (64 channels, R), 1).
        gB = cute.make_tensor(
            gX.iterator,
            cute.make_layout(
                (((SLOTS, ROWS), (p // ROWS, n)), (CHANNELS, TAPS), 1),
                stride=(((sx[0][0], sx[0][1]), (sx[0][1] * ROWS, sx[2])), (sx[1], sx[0][1]), 0),
            ),
        )
        tma_c, gY = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mY, cute.slice_(epi_smem, (None, None, 0)), self.epi_tile
        )
        sy = gY.layout.stride
        # (M, N, L) = (K, ((64 slots, ROWS rows), (P / ROWS, N)), 1): the GEMM's output tiles.
        gC = cute.make_tensor(
            gY.iterator,
            cute.make_layout(
                (k, ((SLOTS, ROWS), (p // ROWS, n)), 1), stride=(sy[0], ((sy[1], sy[2]), (sy[2] * ROWS, sy[3])), 0)
            ),
        )
        mScales = (mBias, mBias)  # no scales in a conv epilogue: never read
        self.launch_kernel(
            (tma_a, gA, tma_b, gB),
            gC,
            tiled_mma,
            (a_smem, b_smem, epi_smem),
            (k, SLOTS * p * n, 1),
            mBias,
            mScales,
            stream,
            None,
            (tma_c, gC),
        )
