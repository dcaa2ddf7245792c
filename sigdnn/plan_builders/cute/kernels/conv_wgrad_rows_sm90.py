"""Hopper (sm_90a) 3x3 conv wgrad on 64 input channels, one image row a K step: x's row read once for 3 taps.

    dw[k, (c, s, r)] = sum over (n, p, q) of dy[(n, p, q), k] * x[n, p + r - 1, q + s - 1, c]

The im2col wgrad (kernels/conv_wgrad_sm90.py) loads one TMA box per filter
tap: with 64 channels, a 64 x 192 tile (the three taps s of one filter row r)
pulls the same x pixels from L2 three times, one pixel apart, and conv2_3x3
of ResNet-50 ran L2-bound there. Here a K step is one output row (n, p): its
Q <= 64 pixels of dy (A, the box's pixels past Q zeros) and x's row
p + r - 1 from pixel -1 on (B, a BOX_ROWS-pixel box, zeros outside x). The
three taps are three 64 x 64 views of that one row, starting s pixels in:
each view's wgmma descriptor starts s 128-byte rows into the swizzled
buffer. The 128-byte swizzle is a function of the shared-memory address
(the DSL's swizzled pointer, and the hardware's, as wgmma descriptors that
advance inside a swizzle row rely on), so a view starting at any row reads
what the TMA wrote there. Each tap is one m64n64k16 wgmma into its third of
the 64 x 192 accumulator, and the epilogue (float32 partials or dw) is the
GEMM's.

Restricted to what that needs: C = 64, R = S = 3, padding 1, unit stride and
dilation, Q <= 64, pingpong 64 x 192 tiles (N tile t is filter row r = t).
The reduction over rows is cut into ``splits`` slices of ``chunk`` / 64 rows
(the last slice's rows past N * P load zeros), as the im2col wgrad's.
"""

from __future__ import annotations

import cutlass.cute as cute
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync, warpgroup

from sigdnn.plan_builders.cute.kernels.conv_wgrad_sm90 import TILE_N, HopperConvWgrad

TAPS = 3  # filter columns s: the N tile's 64-channel sub-tiles
BOX_ROWS = 80  # x's pixels a K step: 64 + 2 halo in whole 8-pixel swizzle atoms (9 atoms crash the DSL's slice)
_ACC_PER_TAP = 32  # accumulator registers a thread holds per 64 columns (m64n64 float32)


class HopperConvWgradRows(HopperConvWgrad):
    """One compiled specialization (dtypes; the tile config must be pingpong 64 x 192)."""

    def __init__(self, spec, config, sm_count: int) -> None:
        super().__init__(spec, config, sm_count)
        if not config.pingpong or config.tile_m != 64 or self.sub_tiles != TAPS:
            raise ValueError(f"row wgrad tile config {config.label}: pingpong 64 x {TAPS * TILE_N} only")
        # Shared memory a stage: A's 64 x 64 and one x row of BOX_ROWS pixels (not three 64-pixel boxes).
        self.ab_stage = self.stage_budget // ((self.tile_mnk[0] * self.tile_mnk[2] + TILE_N * BOX_ROWS) * 2)

    def mma_and_smem(self, a_layout, b_layout, c_layout):
        tiled_mma, a_smem, _, epi_smem = super().mma_and_smem(a_layout, b_layout, c_layout)
        self.ab_layouts = (a_layout, b_layout)
        # B's stage: BOX_ROWS pixels of 64 channels, channels contiguous, 128-byte swizzle (8-pixel atoms).
        b_smem = sm90_utils.make_smem_layout_b(b_layout, (self.tile_mnk[0], TILE_N, BOX_ROWS), self.b_dtype,
                                               self.ab_stage)  # fmt: skip
        return tiled_mma, a_smem, b_smem, epi_smem

    def tiler_b(self):
        return (TILE_N, BOX_ROWS)

    def partition_b(self, tma_b, cluster_coord, cluster_layout_mnk, sB, gB):
        return cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                     cute.group_modes(gB, 0, 2))  # fmt: skip

    def b_tile(self, tBgB, n_tile, b_l):
        """The filter row r (the N tile) and P (rows of an image)."""
        return n_tile, tBgB.layout.shape[3][0]

    def k_counters(self, gA, tBgB, k_begin, b_l):
        """K tile ``k_begin`` of slice ``b_l`` and its output row as (p, n)."""
        row = b_l * cute.size(gA, mode=[3]) + k_begin
        p_extent = tBgB.layout.shape[3][0]
        return k_begin, row % p_extent, row // p_extent, Int32(0)

    @cute.jit
    def k_advance(self, gA, b_tile, k0, k1, k2, k3):
        p = k1 + 1
        wrap = p >= b_tile[1]
        p = 0 if wrap else p
        n = k2 + 1 if wrap else k2
        return k0 + 1, p, n, k3

    def copy_b(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask) -> None:
        # x's row p + r - 1 (the padding is in the tensor's origin), pixels -1 on.
        row = (counters[1] + b_tile[0], counters[2])
        cute.copy(tma_b, tBgB[(None, 0, 0, row)], tBsB[(None, stage)], tma_bar_ptr=barrier)

    def mma_fragments(self, tiled_mma, thr_mma, sA, sB):
        """A's descriptors, and B's for each tap: a 64 x 64 view of the stage's row starting s pixels in."""
        a_layout, b_layout = self.ab_layouts
        self.tap_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.b_dtype, a_layout.sm90_mma_major_mode(), b_layout.sm90_mma_major_mode(),
            self.acc_dtype, (1, 1, 1), tiler_mn=(64, TILE_N),
        )  # fmt: skip
        thr = self.tap_mma.get_slice(0)
        view = sm90_utils.make_smem_layout_b(b_layout, (64, TILE_N, self.tile_mnk[2]), self.b_dtype, self.ab_stage)
        outer = view.outer
        # The views' stages lie a whole row buffer apart, not 64 pixels.
        outer = cute.make_layout(outer.shape, stride=(*outer.stride[:2], (0, TILE_N * BOX_ROWS)))
        taps = tuple(
            self.tap_mma.make_fragment_B(thr.partition_B(cute.make_tensor(sB.iterator + TILE_N * s, outer)))
            for s in range(TAPS)
        )
        return self.tap_mma.make_fragment_A(thr.partition_A(sA)), taps

    def mma(self, tiled_mma, acc, tCrA, tCrB, coord) -> None:
        # The m64n192 accumulator holds each 64-column third as 32 consecutive registers a thread.
        third = cute.make_layout(((2, 2, 8), 1, 1), stride=((1, 2, 4), 0, 0))
        self.tap_mma.set(warpgroup.Field.ACCUMULATE, True)
        for s in range(TAPS):
            part = cute.make_tensor(acc.iterator + _ACC_PER_TAP * s, third)
            cute.gemm(self.tap_mma, part, tCrA[coord], tCrB[s][coord], part)

    def trace(self, ptrs, g, chunk, splits, stream) -> None:
        """The launch (trace time): the wgrad's scalars (HopperConvWgrad.trace)."""
        dy_ptr, x_ptr, c_ptr, bias_ptr = ptrs
        n, h, w, c, k, r, s, p, q, pad_h, pad_w, *_ = g
        k = cute.assume(k, divby=8)
        chunk = cute.assume(chunk, divby=self.tile_mnk[2])
        rsc = r * s * c
        rows = n * p
        # dy as (K, Q, rows), K contiguous; a K step's box is 64 pixels of one row (past Q: zeros).
        mA = cute.make_tensor(dy_ptr, cute.make_layout((k, q, rows), stride=(1, k, k * q)))
        mX = cute.make_tensor(x_ptr, cute.make_layout((c, w, h, n), stride=(1, c, w * c, h * w * c)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((k, rsc, splits), stride=(rsc, 1, k * rsc)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(rsc))  # no epilogue bias: never read
        mScales = (mBias, mBias)

        m_major, row_major = utils.LayoutEnum.COL_MAJOR, utils.LayoutEnum.ROW_MAJOR
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(m_major, m_major, row_major)

        tma_a, gA_rows = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            mA,
            cute.slice_(a_smem, (None, None, 0)),
            (self.tile_mnk[0], self.tile_mnk[2]),
        )
        # (K, (64 pixels, rows a slice), slices): K tile t of slice l is row l * chunk / 64 + t, the last
        # slice's rows past N * P at coordinates the TMA fills with zeros.
        st = gA_rows.layout.stride
        gA = cute.make_tensor(
            gA_rows.iterator, cute.make_layout((k, (self.tile_mnk[2], rows)), stride=(st[0], (st[1], st[2])))
        )
        gA = cute.logical_divide(gA, (None, (None, chunk // self.tile_mnk[2])))  # (K, (64, (rows, slices)))
        sh, st = gA.layout.shape, gA.layout.stride
        gA = cute.make_tensor(
            gA.iterator,
            cute.make_layout((sh[0], (sh[1][0], sh[1][1][0]), sh[1][1][1]),
                             stride=(st[0], (st[1][0], st[1][1][0]), st[1][1][1])),
        )  # fmt: skip

        tma_b, gX = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mX, cute.slice_(b_smem, (None, None, 0)), (TILE_N, BOX_ROWS)
        )
        # Origin at pixel -pad_w of row -pad_h: a K step's box for filter row r is at row p + r, pixel 0.
        gX = cute.domain_offset((0, -pad_w, -pad_h, 0), gX)
        sx = gX.layout.stride
        gB = cute.make_tensor(
            gX.iterator, cute.make_layout((TILE_N, BOX_ROWS, (p, n)), stride=(sx[0], sx[1], (sx[2], sx[3])))
        )
        self.launch_kernel(
            (tma_a, gA, tma_b, gB), mC, tiled_mma, (a_smem, b_smem, epi_smem), (k, rsc, splits), mBias, mScales, stream
        )
