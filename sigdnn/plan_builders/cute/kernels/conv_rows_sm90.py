"""Hopper (sm_90a) 3x3 conv fprop on 64 channels, one output row a tile: x's rows read once for 3 taps each.

    y[(n, p, q), k] = sum over (r, s, c) of x[n, p + r - 1, q + s - 1, c] * w[k, r, s, c]

The im2col fprop (kernels/conv_sm90.py) loads an A box per filter tap and a
filter tile per K step; with C = K = 64 (ResNet-50's conv2_3x3) each output
pixel's x row comes through L2 three times per filter row, and the filter
once per tile. Here a tile is one output row (n, p) of Q <= 64 pixels (the
GEMM's M tile of 64, rows past Q clipped by the store) by 64 output
channels, and its K loop is the filter's three rows r: a K step loads x's
row p + r - 1 from pixel -1 on (an 80-pixel tiled TMA box, zeros outside x)
and issues the three taps s as wgmma with A descriptors starting s pixels
(128-byte rows) into that swizzled buffer -- the swizzle follows the
address, as the row wgrad (kernels/conv_wgrad_rows_sm90.py) relies on. The
whole filter (K <= 64 rows of 576) stays in shared memory: one TMA load per
CTA, on its own barrier, ahead of the first stage. The epilogue (bias,
activation, the TMA store into y as (Q, K, rows)) is the GEMM's.

Restricted to what that needs: C = 64, K <= 64, R = S = 3, padding 1, unit
stride and dilation, Q <= 64, pingpong 64 x 64 tiles, no split-K.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32, Int64
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.kernels.conv_sm90 import HopperConvFprop
from sigdnn.plan_builders.cute.kernels.gemm_sm90 import HopperGemm

CHANNELS = 64  # C: one 128-byte row a pixel, one K step's depth
TAPS = 3  # filter rows (the K steps) and columns (the wgmma a step)
BOX_ROWS = 80  # x's pixels a K step: 64 + 2 halo in whole 8-pixel swizzle atoms (9 atoms crash the DSL's slice)
FILTER = CHANNELS * TAPS * TAPS  # the resident filter's K extent: (c, s, r)


class HopperConvFpropRows(HopperConvFprop):
    """One compiled specialization (dtypes, epilogue); the tile config must be pingpong 64 x 64, unsplit."""

    def __init__(self, spec, config, sm_count: int) -> None:
        super().__init__(spec, config, sm_count)
        if not config.pingpong or (config.tile_m, config.tile_n) != (64, 64) or config.split:
            raise ValueError(f"row conv tile config {config.label}: pingpong 64 x 64 without split-K only")
        if config.cluster_m * config.cluster_n != 1:
            raise ValueError(f"row conv tile config {config.label}: no cluster")
        filter_bytes = self.tile_mnk[1] * FILTER * self.b_dtype.width // 8
        self.ab_stage = (self.stage_budget - filter_bytes - 1024) // (BOX_ROWS * CHANNELS * self.a_dtype.width // 8)

    def mma_and_smem(self, a_layout, b_layout, c_layout):
        tiled_mma, _, _, epi_smem = super().mma_and_smem(a_layout, b_layout, c_layout)
        self.ab_layouts = (a_layout, b_layout)
        a_smem = sm90_utils.make_smem_layout_a(a_layout, (BOX_ROWS, self.tile_mnk[1], CHANNELS), self.a_dtype,
                                               self.ab_stage)  # fmt: skip
        b_smem = sm90_utils.make_smem_layout_b(b_layout, (self.tile_mnk[0], self.tile_mnk[1], FILTER), self.b_dtype, 1)
        return tiled_mma, a_smem, b_smem, epi_smem

    def stage_tx_bytes(self, a_smem, b_smem):
        return cute.size_in_bytes(self.a_dtype, cute.slice_(a_smem, (None, None, 0)))  # the filter is not staged

    def tiler_a(self):
        return (BOX_ROWS, CHANNELS)

    def tiler_b(self):
        return (self.tile_mnk[1], FILTER)

    # The K loop is the three filter rows, A's flat K tiles: the GEMM's counters, and its plain tile slice.
    a_tile = HopperGemm.a_tile
    k_counters = HopperGemm.k_counters
    k_coord = HopperGemm.k_coord
    k_advance = HopperGemm.k_advance

    def copy_b(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask) -> None:
        """Nothing a stage: the filter is resident."""

    def extra_fields(self):
        return {"filter_full": cute.struct.MemRange[Int64, 1]}

    @cute.jit
    def init_resident(self, storage, warp_idx) -> None:
        if warp_idx == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_init(storage.filter_full.data_ptr(), 1)
        cute.arch.mbarrier_init_fence()

    def load_resident(self, tma_b, tBgB, tBsB, storage) -> None:
        barrier = storage.filter_full.data_ptr()
        filter_bytes = self.tile_mnk[1] * FILTER * self.b_dtype.width // 8
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(barrier, filter_bytes)
        cute.copy(tma_b, tBgB[(None, 0, 0, 0)], tBsB[(None, 0)], tma_bar_ptr=barrier)

    def wait_resident(self, storage) -> None:
        cute.arch.mbarrier_wait(storage.filter_full.data_ptr(), 0)

    def mma_fragments(self, tiled_mma, thr_mma, sA, sB):
        """A's descriptors for each tap (a 64 x 64 view of the stage's row starting s pixels in), and the
        resident filter's."""
        a_layout, _ = self.ab_layouts
        view = sm90_utils.make_smem_layout_a(a_layout, (64, self.tile_mnk[1], CHANNELS), self.a_dtype, self.ab_stage)
        outer = view.outer
        # The views' stages lie a whole row buffer apart, not 64 pixels.
        outer = cute.make_layout(outer.shape, stride=(*outer.stride[:2], (0, BOX_ROWS * CHANNELS)))
        taps = tuple(
            tiled_mma.make_fragment_A(thr_mma.partition_A(cute.make_tensor(sA.iterator + CHANNELS * s, outer)))
            for s in range(TAPS)
        )
        return taps, tiled_mma.make_fragment_B(thr_mma.partition_B(sB))

    def mma(self, tiled_mma, acc, tCrA, tCrB, coord, k_tile) -> None:
        _, _, kb, stage = coord
        blocks = CHANNELS // 16  # wgmma K blocks a tap
        for s in range(TAPS):
            tap = (k_tile * TAPS + s) * blocks + kb  # the filter's K order is (c, s, r)
            cute.gemm(tiled_mma, acc, tCrA[s][(None, None, kb, stage)], tCrB[(None, None, tap, 0)], acc)

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        y_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        work_ptr: cute.Pointer,
        flags_ptr: cute.Pointer,
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
        splits: Int32,
        whole: Int32,
        sk_segments: Int32,
        stream: cuda.CUstream,
    ):
        k = cute.assume(k, divby=128 // self.c_dtype.width)
        rows = n * p
        # x as (W, C, H, N): A's box is BOX_ROWS pixels of one row, 64 channels each (K contiguous).
        mX = cute.make_tensor(x_ptr, cute.make_layout((w, c, h, n), stride=(c, 1, w * c, h * w * c)))
        # w (KRSC) as (K, (C, S, R)): the resident filter's K order (its extents fixed by the kernel's scope).
        mW = cute.make_tensor(
            w_ptr, cute.make_layout((k, (CHANNELS, TAPS, TAPS)), stride=(FILTER, (1, CHANNELS, CHANNELS * TAPS)))
        )
        # y as (Q, K, rows): an M tile is one output row, its pixels past Q clipped by the store.
        mY = cute.make_tensor(y_ptr, cute.make_layout((q, k, rows), stride=(k, 1, q * k)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(k))  # read only when spec.bias_dtype is set

        row_major = utils.LayoutEnum.ROW_MAJOR
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(row_major, row_major, row_major)

        tma_a, gX = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mX, cute.slice_(a_smem, (None, None, 0)), (BOX_ROWS, CHANNELS)
        )
        # Origin at pixel -pad_w of row -pad_h: tile (p, n)'s K step r loads row p + r from pixel 0 on.
        gX = cute.domain_offset((-pad_w, 0, -pad_h, 0), gX)
        sx = gX.layout.stride
        # (M, K, L) = ((BOX_ROWS pixels, (P, N)), (64 channels, R), 1): M tile t is output row t, K tile r.
        gA = cute.make_tensor(
            gX.iterator,
            cute.make_layout(((BOX_ROWS, (p, n)), (CHANNELS, r), 1),
                             stride=((sx[0], (sx[2], sx[3])), (sx[1], sx[2]), 0)),
        )  # fmt: skip
        tma_b, gW = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mW, cute.slice_(b_smem, (None, None, 0)), self.tiler_b()
        )
        gW = cute.make_tensor(gW.iterator, cute.append(gW.layout, cute.make_layout(1)))
        tma_c, gY = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mY, cute.slice_(epi_smem, (None, None, 0)), self.epi_tile
        )
        sy = gY.layout.stride
        # (M, N, L) = ((64 pixels, rows), K, 1): the GEMM's output tiles.
        gC = cute.make_tensor(
            gY.iterator,
            cute.make_layout(((self.tile_mnk[0], rows), k, 1), stride=((sy[0], sy[2]), sy[1], 0)),
        )
        mScales = (mBias, mBias)  # no scales in a conv epilogue: never read
        self.launch_kernel(
            (tma_a, gA, tma_b, gW),
            gC,
            tiled_mma,
            (a_smem, b_smem, epi_smem),
            (self.tile_mnk[0] * rows, k, 1),
            mBias,
            mScales,
            stream,
            None,
            (tma_c, gC),
        )
