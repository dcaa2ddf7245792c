"""Hopper (sm_90a) conv fprop as an implicit GEMM in CuTe DSL: TMA im2col loads feeding the Hopper GEMM.

    y[(n, p, q), k] = sum over (r, s, c) of x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] * w[k, r, s, c]

The GEMM's A operand is never written out: its producer warp loads each
(pixels x channels) tile of A straight from NHWC x with the TMA unit in
im2col mode. The descriptor holds the bounding box of the filter's
footprint (padding as zero fill, the conv stride as the traversal stride,
the dilation as the step between filter taps); each load names one filter
tap (s, r) and a block of 64 channels, and the TMA gathers those channels
of the 128 (or 256) output pixels the tile covers -- across image rows and
images -- into swizzled shared memory that wgmma reads as it reads a plain
GEMM's A. The K loop walks (channel block, s, r), and B (the KRSC filter,
viewed as (K, (C, S, R))) is tiled the same way, so the two K orders agree.
Channel blocks past C read zeros on both sides; output pixels past N*P*Q
are clipped by the store.

Everything else -- warp specialization, the persistent tile scheduler,
clusters, the fused bias / relu epilogue, the TMA store into NHWK y (a
row-major (N*P*Q) x K matrix) -- is the Hopper GEMM's (gemm_sm90.py).

Extents, padding, stride and dilation are launch arguments: one compiled
specialization per (dtypes, epilogue, tile config, spatial rank) serves
every 2-D (or 3-D) conv. So are split-K's split count, whole-tile count and
stream-K segments (with its workspace and tile counters, read by split-K
configs only). A 3-D conv is the same with x viewed as
((W, H, D, N), C) and the K loop walking (channel block, s, r, t).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import cuda.bindings.driver as cuda
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Int32, const_expr
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.kernels.gemm_sm90 import HopperGemm

CHANNEL_ALIGN = 8  # 16-byte rows of x and w: TMA strides must be multiples of 16 bytes


class ConvGeometry(NamedTuple):
    """A 2-D conv's launch scalars: x, the filter and the output's extents, padding, stride, dilation."""

    n: Any
    h: Any
    w: Any
    c: Any
    k: Any
    r: Any
    s: Any
    p: Any
    q: Any
    pad_h: Any
    pad_w: Any
    pad_h_hi: Any
    pad_w_hi: Any
    stride_h: Any
    stride_w: Any
    dil_h: Any
    dil_w: Any


def im2col_atom(op, x: cute.Tensor, smem: cute.ComposedLayout, tiler, g: ConvGeometry, multicast: int = 1):
    """The TMA im2col atom of a 2-D conv's windows over x ((W, H, N), C) (trace time): the padding as zero
    fill, the conv stride as the traversal stride, the dilation as the step between filter taps."""
    return cpasync.make_im2col_tma_atom(
        op,
        x,
        smem,
        tiler,
        lower_corner_whd=(-g.pad_w, -g.pad_h),
        upper_corner_whd=(g.pad_w_hi - (g.s - 1) * g.dil_w, g.pad_h_hi - (g.r - 1) * g.dil_h),
        lower_padding_whd=(g.pad_w, g.pad_h),
        upper_padding_whd=(g.pad_w_hi, g.pad_h_hi),
        stride_whd=(g.stride_w, g.stride_h),
        lower_srt=(0, 0),
        stride_srt=(g.dil_w, g.dil_h),
        num_multicast=multicast,
    )


class HopperConvFprop(HopperGemm):
    """One compiled 2-D conv fprop specialization: the GEMM's spec (dtypes, epilogue) and tile config."""

    def tiler_a(self):
        # The K mode of the im2col tensor is (C, S, R): tile the channels, walk the taps.
        return (self.tile_mnk[0], (self.tile_mnk[2],))

    def tiler_b(self):
        return (self.tile_mnk[1], (self.tile_mnk[2],))

    # K tiles as (channel block, s, r[, t]) counters: indexing the hierarchical K mode with a flat tile number
    # cost the producer a chain of integer divisions per K tile (not hoisted: they sit in the elected thread's
    # branch), which capped small tiles at one K tile per ~0.5 us.

    def a_tile(self, tAgA, m_tile, a_l):
        # The tile's first pixel as TMA coordinates (w, h[, d], n) once, here, ahead of the K loop: sliced
        # by the M tile, the im2col coordinates divided the tile's pixel index by W and H in every K step's
        # load (in the elected thread's branch, where the compiler cannot hoist a division). The pixel and
        # K modes of the coordinate map add, and the m = 0 slice's pixel part is 0 at each box's origin.
        # With A multicast a CTA's box starts at its slice of the tile: the sliced form keeps that right.
        if self.cluster_mn[1] > 1:
            return super().a_tile(tAgA, m_tile, a_l)
        coords = cute.make_tensor(tAgA.iterator, tAgA.layout.inner)  # (pixels, K) -> TMA coordinates
        first = cute.domain_offset((m_tile * self.tile_mnk[0], 0), coords).iterator
        return cute.make_tensor(first, tAgA[(None, 0, None, a_l)].layout)

    @cute.jit
    def k_counters(self, gA, tBgB, k_begin, b_l):
        extents = gA.shape[3]  # (channel blocks, S, R[, T])
        k0 = k_begin % extents[0]
        rest = k_begin // extents[0]
        k1 = rest % extents[1]
        rest = rest // extents[1]
        k2 = rest
        k3 = Int32(0)
        if const_expr(len(extents) == 4):
            k2 = rest % extents[2]
            k3 = rest // extents[2]
        return k0, k1, k2, k3

    def k_coord(self, gA, k0, k1, k2, k3):
        return (k0, k1, k2, k3) if len(gA.shape[3]) == 4 else (k0, k1, k2)

    @cute.jit
    def k_advance(self, gA, b_tile, k0, k1, k2, k3):
        extents = gA.shape[3]
        k0 = k0 + 1
        wrap0 = k0 == extents[0]
        k0 = Int32(0) if wrap0 else k0
        k1 = k1 + 1 if wrap0 else k1
        wrap1 = k1 == extents[1]
        k1 = Int32(0) if wrap1 else k1
        k2 = k2 + 1 if wrap1 else k2
        if const_expr(len(extents) == 4):
            wrap2 = k2 == extents[2]
            k2 = Int32(0) if wrap2 else k2
            k3 = k3 + 1 if wrap2 else k3
        return k0, k1, k2, k3

    def split_args(
        self, splits: Int32, whole: Int32, sk_segments: Int32, work_ptr: cute.Pointer, flags_ptr: cute.Pointer
    ):
        """launch_kernel's split-K arguments (None for an unsplit kernel, which reads neither pointer)."""
        if not self.split:
            return None
        layout = cute.make_layout(1)  # addressed through the iterators alone
        return splits, whole, sk_segments, cute.make_tensor(work_ptr, layout), cute.make_tensor(flags_ptr, layout)

    def launch_conv(self, load_a, mW, y_ptr, bias_ptr, mk, tiled_mma, smem_layouts, stream, split) -> None:
        """What the 2-D and 3-D fprop share after A's im2col load (trace time): B's TMA over the filter, y as
        (M, K, 1), the bias, one batch mode on both loads, and the launch."""
        tma_a, gA = load_a
        m, k = mk
        cm, _ = self.cluster_mn
        mY = cute.make_tensor(y_ptr, cute.make_layout((m, k, 1), stride=(k, 1, m * k)))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(k))  # read only when spec.bias_dtype is set
        tma_b, gB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp() if cm == 1 else cpasync.CopyBulkTensorTileG2SMulticastOp(),
            mW,
            cute.slice_(smem_layouts[1], (None, None, 0)),
            self.tiler_b(),
            num_multicast=cm,
        )
        # The kernel indexes (M, K, L): one batch entry.
        gA = cute.make_tensor(gA.iterator, cute.append(gA.layout, cute.make_layout(1)))
        gB = cute.make_tensor(gB.iterator, cute.append(gB.layout, cute.make_layout(1)))
        mScales = (mBias, mBias)  # no scales in a conv epilogue: never read
        self.launch_kernel(
            (tma_a, gA, tma_b, gB), mY, tiled_mma, smem_layouts, (m, k, 1), mBias, mScales, stream, split
        )

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
        self.trace(
            (x_ptr, w_ptr, y_ptr, bias_ptr),
            ConvGeometry(n, h, w, c, k, r, s, p, q, pad_h, pad_w, pad_h_hi, pad_w_hi, stride_h, stride_w, dil_h, dil_w),
            (splits, whole, sk_segments, work_ptr, flags_ptr),
            stream,
        )

    def trace(self, ptrs: tuple, g: ConvGeometry, split: tuple, stream: cuda.CUstream) -> None:
        """The launch (trace time): ``ptrs`` x, w, y and the bias; ``split`` split_args's arguments. Variant
        kernels of the same launch scalars override this, not the signature."""
        x_ptr, w_ptr, y_ptr, bias_ptr = ptrs
        n, h, w, c, k, r, s, p, q, *_ = g  # the window: im2col_atom reads it from g
        c = cute.assume(c, divby=CHANNEL_ALIGN)
        k = cute.assume(k, divby=128 // self.c_dtype.width)
        # x as ((W, H, N), C): the im2col atom's (pixels, channels) view.
        mX = cute.make_tensor(x_ptr, cute.make_layout(((w, h, n), c), stride=((c, w * c, h * w * c), 1)))
        # w (KRSC) as (K, (C, S, R)): the K order the im2col loads walk.
        mW = cute.make_tensor(w_ptr, cute.make_layout((k, (c, s, r)), stride=(r * s * c, (1, c, s * c))))

        row_major = utils.LayoutEnum.ROW_MAJOR  # A, B and y are all contiguous along their inner GEMM dim
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(row_major, row_major, row_major)

        _, cn = self.cluster_mn
        tma_a, gA = im2col_atom(
            cpasync.CopyBulkTensorIm2ColG2SOp() if cn == 1 else cpasync.CopyBulkTensorIm2ColG2SMulticastOp(),
            mX,
            cute.slice_(a_smem, (None, None, 0)),
            self.tiler_a(),
            g,
            cn,
        )
        self.launch_conv(
            (tma_a, gA),
            mW,
            y_ptr,
            bias_ptr,
            (n * p * q, k),
            tiled_mma,
            (a_smem, b_smem, epi_smem),
            stream,
            self.split_args(*split),
        )


class HopperConvFprop3d(HopperConvFprop):
    """The 3-D conv fprop: x NDHWC viewed as ((W, H, D, N), C), the filter KTRSC as (K, (C, S, R, T))."""

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
        d: Int32,
        h: Int32,
        w: Int32,
        c: Int32,
        k: Int32,
        t: Int32,
        r: Int32,
        s: Int32,
        z: Int32,
        p: Int32,
        q: Int32,
        pad_d: Int32,
        pad_h: Int32,
        pad_w: Int32,
        pad_d_hi: Int32,
        pad_h_hi: Int32,
        pad_w_hi: Int32,
        stride_d: Int32,
        stride_h: Int32,
        stride_w: Int32,
        dil_d: Int32,
        dil_h: Int32,
        dil_w: Int32,
        splits: Int32,
        whole: Int32,
        sk_segments: Int32,
        stream: cuda.CUstream,
    ):
        c = cute.assume(c, divby=CHANNEL_ALIGN)
        k = cute.assume(k, divby=128 // self.c_dtype.width)
        mX = cute.make_tensor(
            x_ptr, cute.make_layout(((w, h, d, n), c), stride=((c, w * c, h * w * c, d * h * w * c), 1))
        )
        mW = cute.make_tensor(
            w_ptr, cute.make_layout((k, (c, s, r, t)), stride=(t * r * s * c, (1, c, s * c, r * s * c)))
        )

        row_major = utils.LayoutEnum.ROW_MAJOR
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(row_major, row_major, row_major)

        _, cn = self.cluster_mn
        tma_a, gA = cpasync.make_im2col_tma_atom(
            cpasync.CopyBulkTensorIm2ColG2SOp() if cn == 1 else cpasync.CopyBulkTensorIm2ColG2SMulticastOp(),
            mX,
            cute.slice_(a_smem, (None, None, 0)),
            self.tiler_a(),
            lower_corner_whd=(-pad_w, -pad_h, -pad_d),
            upper_corner_whd=(pad_w_hi - (s - 1) * dil_w, pad_h_hi - (r - 1) * dil_h, pad_d_hi - (t - 1) * dil_d),
            lower_padding_whd=(pad_w, pad_h, pad_d),
            upper_padding_whd=(pad_w_hi, pad_h_hi, pad_d_hi),
            stride_whd=(stride_w, stride_h, stride_d),
            lower_srt=(0, 0, 0),
            stride_srt=(dil_w, dil_h, dil_d),
            num_multicast=cn,
        )
        self.launch_conv(
            (tma_a, gA),
            mW,
            y_ptr,
            bias_ptr,
            (n * z * p * q, k),
            tiled_mma,
            (a_smem, b_smem, epi_smem),
            stream,
            self.split_args(splits, whole, sk_segments, work_ptr, flags_ptr),
        )
