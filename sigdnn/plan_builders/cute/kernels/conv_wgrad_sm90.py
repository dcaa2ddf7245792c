"""Hopper (sm_90a) conv wgrad as an implicit GEMM in CuTe DSL: dw = dy^T x im2col(x), B gathered by the TMA.

    dw[k, (c, s, r)] = sum over (n, p, q) of dy[(n, p, q), k] * x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]

M is dy's channel count K, N runs over (c, s, r) (dw's KRSC columns, in
order when C is a multiple of the 64-wide N tile), and the reduction runs
over the output pixels (n, p, q). A is dy read M-major (its rows of K
channels are the GEMM's columns). B's tiles are the fprop's im2col boxes
turned on their side: one TMA load per (64-channel block, filter tap) and
64 output pixels writes, for each pixel, 64 channels contiguous -- which
is a 64 x 64 N-major B tile in shared memory. A wider N tile (128, 192 or
256) is that many 64-column sub-tiles side by side -- the N-major swizzled
layout keeps each 64-wide block contiguous -- each filled by its own TMA
load of the next (channel block, tap) in (C, S, R) order, so one dy tile
(A) feeds up to four taps' worth of products. The reduction is cut into
``splits`` slices of ``chunk`` pixels (a multiple of the 64-pixel K tile),
run as the GEMM's batch: each writes float32 partials that
kernels/splitk_reduce.py adds (one slice writes dw directly). The slices
need not divide N*P*Q: A's TMA tensor is dy's whole (K, N*P*Q) and a slice
only offsets its pixel coordinate, so the last slice's steps past the end
load zeros (the TMA fills what lies out of bounds) and add nothing. Any
slice count fills the SMs, not just N*P*Q's divisors.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.kernels.conv_sm90 import ConvGeometry, im2col_atom
from sigdnn.plan_builders.cute.kernels.gemm_sm90 import HopperGemm

TILE_N = 64  # B's N tile: one 64-channel block of one filter tap (128-byte rows for the swizzle)


class HopperConvWgrad(HopperGemm):
    """One compiled 2-D conv wgrad specialization: the GEMM's spec (dtypes) and tile config (N tile 64 * t)."""

    def __init__(self, spec, config, sm_count: int) -> None:
        super().__init__(spec, config, sm_count)
        if config.tile_n % TILE_N or config.cluster_m * config.cluster_n != 1:
            raise ValueError(f"wgrad tile config {config.label}: N tile a multiple of {TILE_N}, no cluster")
        self.sub_tiles = config.tile_n // TILE_N

    def tiler_b(self):
        # B's N mode is (C, S, R): tile the channels, walk the taps; one tile per 64-column sub-tile.
        return ((TILE_N,), self.tile_mnk[2])

    def sub_tile_smem(self, stages: int):
        """B's shared memory as 64-column sub-tiles, ``sub_tiles`` per pipeline stage (trace time): the same
        bytes and swizzle as the N-major (tile_n, 64) stages, whose 64-wide N blocks are contiguous."""
        tile = (self.tile_mnk[0], TILE_N, self.tile_mnk[2])
        return sm90_utils.make_smem_layout_b(utils.LayoutEnum.COL_MAJOR, tile, self.b_dtype, stages)

    def partition_b(self, tma_b, cluster_coord, cluster_layout_mnk, sB, gB):
        sB_sub = cute.make_tensor(sB.iterator, self.sub_tile_smem(self.ab_stage * self.sub_tiles).outer)
        return cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB_sub, 0, 2),
                                     cute.group_modes(gB, 0, 2))  # fmt: skip

    # The producer's B coordinates without a division per K step: indexed by flat numbers, B's im2col boxes
    # divided the N tile's number by (C / 64) and S, and the pixel tile's first pixel by Q and P, in every
    # load (in the elected thread's branch, where the compiler cannot hoist a division). Now each N sub-tile's
    # (channel, s, r) is made once per tile, and the K step's first pixel (q, p, n) is kept as counters that
    # step one K tile of pixels with carries (k1, k2, k3; k0 stays A's flat K tile).

    def b_tile(self, tBgB, n_tile, b_l):
        """Each 64-column sub-tile's (channel, s, r), and a K step's pixels as (q, p, n) increments (trace
        time: the divisions run once per tile)."""
        blocks, taps_s, _ = tBgB.layout.outer.shape[1]  # (C / 64, S, R)
        q_extent, p_extent, _ = tBgB.layout.inner.shape[0]
        subs = []
        for j in range(self.sub_tiles):
            n = n_tile * self.sub_tiles + j
            subs.append(((n % blocks) * TILE_N, (n // blocks) % taps_s, n // (blocks * taps_s)))
        step = self.tile_mnk[2]  # pixels a K step: whole rows, whole images and the rest
        rows = step // q_extent
        return subs, (step % q_extent, rows % p_extent, rows // p_extent), q_extent, p_extent

    def k_counters(self, gA, tBgB, k_begin, b_l):
        """K tile ``k_begin`` of slice ``b_l`` and its first pixel as (q, p, n)."""
        pixel = cute.crd2idx((0, 0, k_begin, b_l), tBgB.layout.outer)[0]  # 64 k_begin + chunk b_l
        q_extent, p_extent, _ = tBgB.layout.inner.shape[0]
        return k_begin, pixel % q_extent, (pixel // q_extent) % p_extent, pixel // (q_extent * p_extent)

    @cute.jit
    def k_advance(self, gA, b_tile, k0, k1, k2, k3):
        q_extent, p_extent = b_tile[2], b_tile[3]
        dq, dp, dn = b_tile[1]
        q = k1 + dq
        p = k2 + dp
        n = k3 + dn
        wrap_q = q >= q_extent
        q = q - q_extent if wrap_q else q
        p = p + 1 if wrap_q else p
        wrap_p = p >= p_extent
        p = p - p_extent if wrap_p else p
        n = n + 1 if wrap_p else n
        return k0 + 1, q, p, n

    def copy_b(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask) -> None:
        coords = cute.make_tensor(tBgB.iterator, tBgB.layout.inner)  # (pixels, (C, S, R)) -> TMA coordinates
        box = tBgB[(None, 0, 0, 0)].layout  # one box at pixel 0, N 0: its origin adds nothing
        for j in range(self.sub_tiles):  # a plain method: unrolled at trace time
            first = cute.domain_offset((counters[1:], b_tile[0][j]), coords).iterator
            cute.copy(tma_b, cute.make_tensor(first, box), tBsB[(None, stage * self.sub_tiles + j)],
                      tma_bar_ptr=barrier)  # fmt: skip

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
        self.trace(
            (dy_ptr, x_ptr, c_ptr, bias_ptr),
            ConvGeometry(n, h, w, c, k, r, s, p, q, pad_h, pad_w, pad_h_hi, pad_w_hi, stride_h, stride_w, dil_h, dil_w),
            chunk,
            splits,
            stream,
        )

    def trace(self, ptrs: tuple, g: ConvGeometry, chunk: Int32, splits: Int32, stream: cuda.CUstream) -> None:
        """The launch (trace time): ``ptrs`` dy, x, dw (or the partials) and the bias; ``chunk`` and ``splits``
        the slices. Variant kernels of the same launch scalars override this, not the signature."""
        dy_ptr, x_ptr, c_ptr, bias_ptr = ptrs
        n, h, w, c, k, r, s, p, q, *_ = g  # the window: im2col_atom reads it from g
        c = cute.assume(c, divby=TILE_N)
        k = cute.assume(k, divby=8)
        chunk = cute.assume(chunk, divby=self.tile_mnk[2])
        rsc = r * s * c
        # A = dy^T, (K, N*P*Q), K contiguous: M-major; sliced below through its TMA coordinates.
        mA = cute.make_tensor(dy_ptr, cute.make_layout((k, n * p * q), stride=(1, k)))
        mX = cute.make_tensor(x_ptr, cute.make_layout(((w, h, n), c), stride=((c, w * c, h * w * c), 1)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((k, rsc, splits), stride=(rsc, 1, k * rsc)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(rsc))  # no epilogue bias: never read
        mScales = (mBias, mBias)

        m_major, row_major = utils.LayoutEnum.COL_MAJOR, utils.LayoutEnum.ROW_MAJOR
        # A M-major, B N-major (both "column-major" in the enum's (rows, cols) terms), C row-major.
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(m_major, m_major, row_major)

        tma_a, gA_kp = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            mA,
            cute.slice_(a_smem, (None, None, 0)),
            (self.tile_mnk[0], self.tile_mnk[2]),
        )
        # (K, pixels) -> (K, chunk, splits): slice l's pixel j at coordinate l * chunk + j, past N*P*Q in the
        # last slice's tail (zeros).
        gA = cute.logical_divide(gA_kp, (None, chunk))
        gA = cute.make_tensor(gA.iterator, cute.flatten(gA.layout))
        # The im2col atom is made over x's (pixels, channels) modes, so its shared-memory layout is given
        # (K, N) -- pixels, then channels -- the same bytes as B's N-major (N, K) tile.
        b0 = cute.slice_(self.sub_tile_smem(1), (None, None, 0))
        b0_kn = cute.make_composed_layout(b0.inner, 0, cute.select(b0.outer, mode=[1, 0]))
        tma_b, gB_pc = im2col_atom(cpasync.CopyBulkTensorIm2ColG2SOp(), mX, b0_kn, (self.tile_mnk[2], (TILE_N,)), g)
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
