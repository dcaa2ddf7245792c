"""Hopper (sm_90a) GEMM in CuTe DSL: TMA loads, wgmma, warp specialization, persistent tiles.

    C[m, n, l] = sum_k A[m, k, l] * B[n, k, l]     (float32 accumulation)

One CTA holds a producer warpgroup (one warp issues the TMA loads of A and
B into a ring of shared-memory stages) and two consumer warpgroups (wgmma
from shared memory into register accumulators, then the epilogue: convert,
stage through shared memory, TMA store). CTAs are persistent: a static
scheduler hands each one tile after tile, so the next tile's loads overlap
the current tile's math and epilogue.

Two consumer schedules:
- cooperative: both warpgroups split one tile along M and run the mainloop
  and the epilogue together;
- pingpong: each warpgroup owns a whole tile; ordered barriers let one
  warpgroup's mainloop run while the other does its epilogue, so the tensor
  cores idle less during epilogues.

Clusters of 2 CTAs along M (or N) share B (or A) tiles through TMA
multicast, halving that operand's L2 traffic.

The epilogue can multiply by per-tensor scales (fp8 descaling), add a bias
per output column and apply relu or gelu (erf or tanh form) in float32
before the one rounding to the output dtype.

fp8 operands (e4m3 / e5m2, mixed) use 128-deep K tiles (128 bytes, like
64 deep at 16 bits) and, unless the config asks for fast accumulation,
promote: each K tile's wgmma products land in a fresh accumulator that is
added to the float32 total, since Hopper's fp8 wgmma accumulates with fewer
bits than float32 (about 13 mantissa bits by published measurements).

Tails need no predication: TMA fills out-of-bounds loads with zeros (so a
partial K tile adds nothing) and clips out-of-bounds stores.

Split-K and stream-K (``config.split``; the conv fprop uses them, for layers
whose output tiles leave SMs idle or fill a last wave partly): the scheduler
hands out work units instead of tiles; the split is launch scalars, so one
specialization serves every split. The first ``whole`` tiles run unsplit.
Split-K cuts each later tile's K loop into ``splits`` near-equal ranges,
numbered split-major (a tile's last split after its others); every split but
the last parks its float32 accumulator in its own workspace slot and bumps
the tile's counter (release), and the last waits for the counter (acquire),
adds the slots and runs the epilogue. Stream-K cuts the later tiles' K
iterations into one contiguous range per SM, crossing tile boundaries (unit
whole + j * SMs + v: the j-th tile CTA v's range touches, empty past its
end); a range that starts inside a tile parks that part (its first unit,
which never waits), and the CTA holding a tile's first K tile -- its range's
last unit -- waits for the parts of the CTAs after it and adds them.

Partials go out as 16-byte vectors, interleaved so a warp writes 512
contiguous bytes, and come back through L2 (ld.global.cg). The waiting CTA
resets the counter to zero for the next launch and adds the parts in slot
order (the sum is deterministic), then applies bias and activation once, on
the full sum. No deadlock: every CTA is resident (one per SM) and takes its
units in order; a split-K unit waits only on units of lower number, and a
stream-K owner only on parts parked by other CTAs' first stream-K units,
which never wait.
"""

from __future__ import annotations

import math
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warp, warpgroup

from sigdnn.plan_builders.cute.gemm_layout import GemmConfig, GemmSpec, bias_once_a_tile, resident_clusters
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES

# Named barrier ids (0 is __syncthreads).
_BAR_EPI = 1
_BAR_MMA_WG0 = 2  # pingpong: +1 for warpgroup 1
_BAR_EPI_WG0 = 4  # pingpong: +1 for warpgroup 1

_THREADS_PER_WG = 128
_SMEM_CAPACITY = 232448  # sm_90: 227 KiB per block
_BARRIER_BYTES = 1024


class HopperGemm:
    """One compiled specialization: dtypes, operand majors, batch pattern and tile config."""

    def __init__(self, spec: GemmSpec, config: GemmConfig, sm_count: int) -> None:
        self.spec = spec
        self.config = config
        self.a_dtype = DTYPES[spec.a_dtype]
        self.b_dtype = DTYPES[spec.b_dtype]
        self.c_dtype = DTYPES[spec.c_dtype]
        self.acc_dtype = cutlass.Float32
        self.fused = spec.bias_dtype is not None or spec.activation != "none" or bool(spec.scale_dtypes)
        self.promote = self.a_dtype.width == 8 and not config.fast_accum
        # A 16-bit output has error to spare for a fast erf / exp (see _activation).
        self.fast_math = self.c_dtype.width == 16
        self.pingpong = config.pingpong
        self.split = config.split
        self.cluster_mn = (config.cluster_m, config.cluster_n)
        cluster_size = config.cluster_m * config.cluster_n
        self.max_active_clusters = resident_clusters(sm_count, cluster_size)

        tile_m, tile_n = config.tile_m, config.tile_n
        # Cooperative: two warpgroups stacked along M (64 rows per wgmma atom).
        self.atom_layout_mnk = (1, 1, 1) if self.pingpong else (2, 1, 1)
        self.num_mma_wg = 2
        self.threads_per_cta = (self.num_mma_wg + 1) * _THREADS_PER_WG
        self.load_warp = self.num_mma_wg * 4  # first warp of the producer warpgroup
        # Threads that take part in one tile's epilogue.
        self.num_epi_threads = _THREADS_PER_WG * (1 if self.pingpong else self.num_mma_wg)
        acc_regs = config.accumulator_registers(self.a_dtype.width == 8)
        if acc_regs > 208:
            raise ValueError(f"tile {tile_m}x{tile_n} needs {acc_regs} accumulator registers per thread")
        self.load_regs, self.mma_regs = (40, 232) if acc_regs < 208 else (24, 240)

        # Four wgmma instructions (k = 16 at 16 bits, 32 at 8 bits) per stage: 128-byte rows either way.
        self.tile_k = 64 if self.a_dtype.width == 16 else 128
        self.tile_mnk = (tile_m, tile_n, self.tile_k)
        # Epilogue subtile: the accumulator is written out 32 columns at a time;
        # its M extent covers what one pass of the tiled MMA holds.
        epi_m = math.gcd(128 if not self.pingpong else 64, tile_m)
        self.epi_tile = (epi_m, math.gcd(32, tile_n))
        self.epi_stage = 4 if self.c_dtype.width == 16 else 2
        self.bias_per_tile = bias_once_a_tile(spec.bias_per, epi_m, tile_m)
        epi_bytes = math.prod(self.epi_tile) * self.c_dtype.width // 8 * self.epi_stage
        ab_bytes = (tile_m * self.a_dtype.width + tile_n * self.b_dtype.width) * self.tile_k // 8
        self.stage_budget = _SMEM_CAPACITY - _BARRIER_BYTES - epi_bytes  # shared memory for A and B stages
        self.ab_stage = self.stage_budget // ab_bytes
        if self.ab_stage < 2:
            raise ValueError(f"tile {tile_m}x{tile_n} leaves {self.ab_stage} pipeline stages")

    # ------------------------------------------------------------------
    # Host side

    def _layout(self, major_is_inner: bool, rows: Any, cols: Any, batch: Any, ld: Any, bstride: Any) -> cute.Layout:
        """(rows, cols, batch): ``cols`` contiguous when ``major_is_inner``, else ``rows``."""
        if major_is_inner:
            return cute.make_layout((rows, cols, batch), stride=(ld, 1, bstride))
        return cute.make_layout((rows, cols, batch), stride=(1, ld, bstride))

    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        scale0_ptr: cute.Pointer,
        scale1_ptr: cute.Pointer,
        m: Int32,
        n: Int32,
        k: Int32,
        batch: Int32,
        lda: Int64,
        ldb: Int64,
        ldc: Int64,
        batch_stride_a: Int64,
        batch_stride_b: Int64,
        batch_stride_c: Int64,
        stream: cuda.CUstream,
    ):
        spec = self.spec
        # TMA needs 16-byte aligned strides: the builder checked them; say so.
        lda = cute.assume(lda, divby=128 // self.a_dtype.width)
        ldb = cute.assume(ldb, divby=128 // self.b_dtype.width)
        ldc = cute.assume(ldc, divby=128 // self.c_dtype.width)
        a_batch, a_bstride = (batch, cute.assume(batch_stride_a, divby=128 // self.a_dtype.width))
        b_batch, b_bstride = (batch, cute.assume(batch_stride_b, divby=128 // self.b_dtype.width))
        if const_expr(not spec.a_batched):
            a_batch, a_bstride = 1, 0
        if const_expr(not spec.b_batched):
            b_batch, b_bstride = 1, 0
        c_bstride = cute.assume(batch_stride_c, divby=128 // self.c_dtype.width)

        mA = cute.make_tensor(a_ptr, self._layout(spec.a_major == "k", m, k, a_batch, lda, a_bstride))
        mB = cute.make_tensor(b_ptr, self._layout(spec.b_major == "k", n, k, b_batch, ldb, b_bstride))
        mC = cute.make_tensor(c_ptr, self._layout(spec.c_major == "n", m, n, batch, ldc, c_bstride))
        mBias = cute.make_tensor(bias_ptr, cute.make_layout(n))  # read only when spec.bias_dtype is set
        # One value each, read only for the scales the spec names.
        mScales = (cute.make_tensor(scale0_ptr, cute.make_layout(1)), cute.make_tensor(scale1_ptr, cute.make_layout(1)))

        a_layout = utils.LayoutEnum.from_tensor(mA)
        b_layout = utils.LayoutEnum.from_tensor(mB)
        c_layout = utils.LayoutEnum.from_tensor(mC)
        tiled_mma, a_smem, b_smem, epi_smem = self.mma_and_smem(a_layout, b_layout, c_layout)

        cm, cn = self.cluster_mn
        # A is shared by the CTAs of a cluster row (same M tile), B by a cluster column.
        tma_a, gA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp() if cn == 1 else cpasync.CopyBulkTensorTileG2SMulticastOp(),
            mA,
            cute.slice_(a_smem, (None, None, 0)),
            (self.tile_mnk[0], self.tile_mnk[2]),
            num_multicast=cn,
        )
        tma_b, gB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp() if cm == 1 else cpasync.CopyBulkTensorTileG2SMulticastOp(),
            mB,
            cute.slice_(b_smem, (None, None, 0)),
            (self.tile_mnk[1], self.tile_mnk[2]),
            num_multicast=cm,
        )
        self.launch_kernel(
            (tma_a, gA, tma_b, gB), mC, tiled_mma, (a_smem, b_smem, epi_smem), (m, n, batch), mBias, mScales, stream
        )

    def mma_and_smem(self, a_layout: Any, b_layout: Any, c_layout: Any) -> tuple[Any, Any, Any, Any]:
        """The tiled wgmma and the staged shared-memory layouts of A, B and the epilogue (trace time)."""
        self.c_layout = c_layout
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, self.tile_mnk[1]),
        )
        a_smem = sm90_utils.make_smem_layout_a(a_layout, self.tile_mnk, self.a_dtype, self.ab_stage)
        b_smem = sm90_utils.make_smem_layout_b(b_layout, self.tile_mnk, self.b_dtype, self.ab_stage)
        epi_smem = sm90_utils.make_smem_layout_epi(self.c_dtype, c_layout, self.epi_tile, self.epi_stage)
        return tiled_mma, a_smem, b_smem, epi_smem

    def launch_kernel(
        self,
        loads: tuple[Any, Any, Any, Any],
        mC: cute.Tensor,
        tiled_mma: Any,
        smem_layouts: tuple[Any, Any, Any],
        extents_mnl: tuple[Any, Any, Any],
        mBias: cute.Tensor,
        mScales: tuple[cute.Tensor, cute.Tensor],
        stream: cuda.CUstream,
        split: tuple[Any, Any, Any, cute.Tensor, cute.Tensor] | None = None,
        store: tuple[Any, Any] | None = None,
    ) -> None:
        """The output's TMA store, the tile scheduler, shared storage and the launch (trace time).

        ``loads`` are A's and B's TMA atoms and TMA tensors, (M, K, L) and
        (N, K, L) in the kernel's view; their K mode may be hierarchical (the
        conv's (C, S, R)) as long as ``tiler_a`` / ``tiler_b`` tile it.
        ``split`` (split-K kernels, one batch entry): the split count, the
        number of leading tiles left whole, the stream-K segments per CTA (0:
        no stream-K), the float32 partials workspace and the int32 tile
        counters (zero before the first launch). ``store``: the output's TMA
        atom and (M, N, L) TMA tensor when the caller makes them (else from mC).
        """
        tma_a, gA, tma_b, gB = loads
        a_smem, b_smem, epi_smem = smem_layouts
        m, n, batch = extents_mnl
        cm, cn = self.cluster_mn
        tma_c, gC = store or cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(),
            mC,
            cute.slice_(epi_smem, (None, None, 0)),
            self.epi_tile,
        )

        tiles_mnl = (
            cute.ceil_div(m, self.tile_mnk[0]),
            cute.ceil_div(n, self.tile_mnk[1]),
            batch,
        )
        splits, whole, sk_segments, mWork, mFlags = (1, 0, 0, mBias, mBias) if split is None else split
        if const_expr(self.split):
            # One unit per whole tile, then each split tile's ranges (splits = 0 with stream-K), or each CTA's
            # stream-K segments (one range per SM; sk_segments: the most tiles one range touches, 0 without
            # stream-K): the scheduler walks units.
            tiles = tiles_mnl[0] * tiles_mnl[1]
            tiles_mnl = (whole + (tiles - whole) * splits + sk_segments * self.max_active_clusters, 1, 1)
        sched_params = utils.PersistentTileSchedulerParams(
            tiles_mnl, (cm, cn, 1), self.config.swizzle, self.config.raster_along_m
        )
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched_params, self.max_active_clusters)

        tx_bytes = cute.size_in_bytes(self.a_dtype, cute.slice_(a_smem, (None, None, 0))) + cute.size_in_bytes(
            self.b_dtype, cute.slice_(b_smem, (None, None, 0))
        )
        self.tx_bytes = tx_bytes

        # Built with evaluated annotations: this module's annotations are strings (PEP 563).
        fields = {
            "ab_barriers": cute.struct.MemRange[Int64, self.ab_stage * 2],
            "sA": cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(a_smem)], 1024],
            "sB": cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(b_smem)], 1024],
            "sC": cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(epi_smem)], 1024],
        }
        self.shared_storage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

        self.kernel(
            tma_a,
            gA,
            tma_b,
            gB,
            tma_c,
            gC,
            tiled_mma,
            cute.make_layout((cm, cn, 1)),
            a_smem,
            b_smem,
            epi_smem,
            sched_params,
            mBias,
            mScales[0],
            mScales[1],
            mWork,
            mFlags,
            splits,
            whole,
            sk_segments,
        ).launch(
            grid=grid,
            block=[self.threads_per_cta, 1, 1],
            cluster=(cm, cn, 1),
            min_blocks_per_mp=1,
            stream=stream,
        )

    def tiler_a(self) -> Any:
        """How A's TMA tensor is cut into (M, K) tiles."""
        return cute.slice_(self.tile_mnk, (None, 0, None))

    def tiler_b(self) -> Any:
        """How B's TMA tensor is cut into (N, K) tiles."""
        return cute.slice_(self.tile_mnk, (0, None, None))

    # ------------------------------------------------------------------
    # Device side

    def partition_b(self, tma_b: Any, cluster_coord: Any, cluster_layout_mnk: Any, sB: Any, gB: Any) -> Any:
        """B's TMA partitions (shared-memory stages, global tiles) for the producer warp (trace time)."""
        return cpasync.tma_partition(
            tma_b,
            cluster_coord[0],
            cute.make_layout(cute.slice_(cluster_layout_mnk, (None, 0, 0)).shape),
            cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2),
        )

    def b_tile(self, tBgB: Any, n_tile: Int32, b_l: Any) -> Any:
        """What ``copy_b`` needs of B's N tile, made once per tile ahead of the K loop (trace time)."""
        return n_tile

    def copy_b(self, tma_b: Any, tBgB: Any, tBsB: Any, b_tile: Any, k: Any, counters: Any, b_l: Any, stage: Any,
               barrier: Any, mask: Any) -> None:  # fmt: skip
        """Issue the TMA load(s) of B's tile (``b_tile``, K coordinate ``k``, batch) into one pipeline stage
        (trace time); ``counters`` are the producer's K counters (see k_counters)."""
        cute.copy(tma_b, tBgB[(None, b_tile, k, b_l)], tBsB[(None, stage)], tma_bar_ptr=barrier, mcast_mask=mask)

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA_mkl: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_c: cute.CopyAtom,
        mC_mnl: cute.Tensor,
        tiled_mma: cute.TiledMma,
        cluster_layout_mnk: cute.Layout,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        epi_smem: cute.ComposedLayout,
        sched_params: utils.PersistentTileSchedulerParams,
        mBias: cute.Tensor,
        mScale0: cute.Tensor,
        mScale1: cute.Tensor,
        mWork: cute.Tensor,
        mFlags: cute.Tensor,
        splits: Int32,
        whole: Int32,
        sk_segments: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)

        if warp_idx == self.load_warp:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)

        cluster_size = cute.size(cluster_layout_mnk)
        rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cluster_layout_mnk.get_flat_coord(rank_in_cluster)
        a_mcast_mask = cute.make_layout_image_mask(cluster_layout_mnk, cluster_coord, mode=1)
        b_mcast_mask = cute.make_layout_image_mask(cluster_layout_mnk, cluster_coord, mode=0)
        a_mcast_mask = a_mcast_mask if self.cluster_mn[1] > 1 else 0
        b_mcast_mask = b_mcast_mask if self.cluster_mn[0] > 1 else 0

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # Every consumer warp releases a stage to each CTA that multicast into it.
        mcast_size = self.cluster_mn[0] + self.cluster_mn[1] - 1
        consumer_warps = (1 if self.pingpong else self.num_mma_wg) * 4
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_barriers.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, mcast_size * consumer_warps),
            tx_count=self.tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cluster_layout_mnk.shape)),
        )
        if cluster_size > 1:
            cute.arch.cluster_arrive_relaxed()

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sC = storage.sC.get_tensor(epi_smem.outer, swizzle=epi_smem.inner)

        # (bM, bK, RestM, RestK, RestL) and friends
        gA = cute.local_tile(mA_mkl, self.tiler_a(), (None, None, None))
        gB = cute.local_tile(mB_nkl, self.tiler_b(), (None, None, None))
        gC = cute.local_tile(mC_mnl, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None))
        k_tile_cnt = cute.size(gA, mode=[3])
        tiles_m = cute.size(gC, mode=[2])
        tiles_total = tiles_m * cute.size(gC, mode=[3])

        if cluster_size > 1:
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()

        if wg_idx == self.num_mma_wg:
            # ---------------- producer warpgroup ----------------
            cute.arch.setmaxregister_decrease(self.load_regs)
            if warp_idx == self.load_warp:
                tAsA, tAgA = cpasync.tma_partition(
                    tma_a,
                    cluster_coord[1],
                    cute.make_layout(cute.slice_(cluster_layout_mnk, (0, None, 0)).shape),
                    cute.group_modes(sA, 0, 2),
                    cute.group_modes(gA, 0, 2),
                )
                tBsB, tBgB = self.partition_b(tma_b, cluster_coord, cluster_layout_mnk, sB, gB)
                scheduler = utils.StaticPersistentTileScheduler.create(
                    sched_params, cute.arch.block_idx(), cute.arch.grid_dim()
                )
                work = scheduler.initial_work_tile_info()
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
                while work.is_valid_tile:
                    tile, k_begin, k_count, _, _, _, _ = self._work_unit(
                        work.tile_idx, tiles_m, tiles_total, k_tile_cnt, splits, whole, sk_segments
                    )
                    a_l = tile[2] if const_expr(self.spec.a_batched) else 0
                    b_l = tile[2] if const_expr(self.spec.b_batched) else 0
                    tAgA_k = self.a_tile(tAgA, tile[0], a_l)
                    b_tile = self.b_tile(tBgB, tile[1], b_l)
                    k0, k1, k2, k3 = self.k_counters(gA, tBgB, k_begin, b_l)
                    for _kt in cutlass.range(k_count, unroll=1):
                        ab_pipeline.producer_acquire(state)
                        barrier = ab_pipeline.producer_get_barrier(state)
                        k = self.k_coord(gA, k0, k1, k2, k3)
                        cute.copy(
                            tma_a,
                            tAgA_k[(None, k)],
                            tAsA[(None, state.index)],
                            tma_bar_ptr=barrier,
                            mcast_mask=a_mcast_mask,
                        )
                        self.copy_b(
                            tma_b, tBgB, tBsB, b_tile, k, (k0, k1, k2, k3), b_l, state.index, barrier, b_mcast_mask
                        )
                        ab_pipeline.producer_commit(state)
                        state.advance()
                        k0, k1, k2, k3 = self.k_advance(gA, b_tile, k0, k1, k2, k3)
                    scheduler.advance_to_next_work()
                    work = scheduler.get_current_work()
                ab_pipeline.producer_tail(state)
        else:
            # ---------------- consumer warpgroups ----------------
            cute.arch.setmaxregister_increase(self.mma_regs)
            if const_expr(self.pingpong):
                mma_tidx = tidx % _THREADS_PER_WG
                thr_mma = tiled_mma.get_slice(0)
                is_store_warp = warp_idx % 4 == 0
            else:
                mma_tidx = tidx
                # wgmma partitions per warpgroup: slice at the warpgroup's first thread.
                thr_mma = tiled_mma.get_slice(wg_idx * _THREADS_PER_WG)
                is_store_warp = warp_idx == 0
            tCrA, tCrB = self.mma_fragments(tiled_mma, thr_mma, sA, sB)
            tCgC = thr_mma.partition_C(gC)
            acc = cute.make_rmem_tensor(tCgC.shape[:3], self.acc_dtype)
            # fp8 promotion: one K tile's products, added to ``acc`` after each tile.
            acc_tile = acc
            if const_expr(self.promote):
                acc_tile = cute.make_rmem_tensor(tCgC.shape[:3], self.acc_dtype)
            num_k_blocks = cute.size(tCrA, mode=[2])
            # Per-tensor scales: one value each, read once.
            scales = [m[0].to(cutlass.Float32) for m in (mScale0, mScale1)[: len(self.spec.scale_dtypes)]]

            # Epilogue: registers -> shared memory (stmatrix for 16-bit) -> TMA store.
            store_atom = sm90_utils.get_smem_store_op(self.c_layout, self.c_dtype, self.acc_dtype)
            c_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4), self.c_dtype)
            tiled_copy_r2s = cute.make_tiled_copy_S(store_atom, cute.make_tiled_copy_C_atom(c_atom, tiled_mma))
            thr_copy_r2s = tiled_copy_r2s.get_slice(mma_tidx)
            tRS_sC = thr_copy_r2s.partition_D(sC)
            tRS_rAcc = tiled_copy_r2s.retile(acc)
            rD_shape = cute.shape(thr_copy_r2s.partition_S(sC))[:3]
            tRS_rD = cute.make_rmem_tensor(rD_shape, self.acc_dtype)
            tRS_rOut = cute.make_rmem_tensor(rD_shape, self.c_dtype)
            # The bias of the next epilogue subtile, loaded before this one's barriers (see _load_bias).
            bias_next = cute.make_rmem_tensor(rD_shape, cutlass.Float32)
            bias_cur = cute.make_rmem_tensor(rD_shape, cutlass.Float32)
            rD_size = cute.size(tRS_rD)
            # (m, n) inside the epilogue subtile of every value this thread holds. The source side:
            # stmatrix writes a thread's registers through other threads' row addresses, so the
            # destination partition does not say where this thread's values land.
            tRS_cD = thr_copy_r2s.partition_S(cute.make_identity_tensor(self.epi_tile))
            epi_barrier = pipeline.NamedBarrier(barrier_id=_BAR_EPI, num_threads=self.num_epi_threads)
            store_pipeline = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stage,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_epi_threads),
            )

            scheduler = utils.StaticPersistentTileScheduler.create(
                sched_params, cute.arch.block_idx(), cute.arch.grid_dim()
            )
            work = scheduler.initial_work_tile_info()
            read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            tile_step = 1
            if const_expr(self.pingpong):
                tile_step = 2
                if wg_idx == 0:
                    # Warpgroup 0 goes first: pre-arrive its own mainloop and epilogue turns.
                    self._pingpong_arrive(0, _BAR_MMA_WG0)
                    self._pingpong_arrive(0, _BAR_EPI_WG0)
                else:
                    # Warpgroup 1 takes the odd tiles: skip the first tile's stages.
                    read_state.advance(k_tile_cnt)
                    scheduler.advance_to_next_work()
                    work = scheduler.get_current_work()

            epi_tiles = Int32(0)  # epilogues this CTA ran (split-K: not every unit runs one)
            while work.is_valid_tile:
                tile, _, k_count, store_slot, wait_count, first_slot, flag = self._work_unit(
                    work.tile_idx, tiles_m, tiles_total, k_tile_cnt, splits, whole, sk_segments
                )
                # Stream-K leaves some units empty; every other unit has K tiles.
                has_work = k_count > 0 if const_expr(self.split) else True
                if has_work:
                    # ---- mainloop ----
                    if const_expr(self.pingpong):
                        self._pingpong_sync(wg_idx, _BAR_MMA_WG0)
                    release_state = read_state.clone()
                    acc.fill(0.0)
                    if const_expr(self.promote):
                        # Each K tile into a fresh acc_tile, then acc += acc_tile in float32. The add needs
                        # the tile's wgmma batch complete, so the batch before is waited for (and its stage
                        # released) before the next is issued; the other consumer warpgroup's wgmma keeps
                        # the tensor cores busy meanwhile.
                        ab_pipeline.consumer_wait(read_state)
                        warpgroup.fence()
                        tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            coord = (None, None, kb, read_state.index)
                            self.mma(tiled_mma, acc_tile, tCrA, tCrB, coord)
                            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                        warpgroup.commit_group()
                        read_state.advance()
                        for _kt in cutlass.range(1, k_count, unroll=1):
                            ab_pipeline.consumer_wait(read_state)
                            warpgroup.wait_group(0)
                            acc.store(acc.load() + acc_tile.load())
                            ab_pipeline.consumer_release(release_state)
                            release_state.advance()
                            warpgroup.fence()
                            tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
                            for kb in cutlass.range_constexpr(num_k_blocks):
                                coord = (None, None, kb, read_state.index)
                                self.mma(tiled_mma, acc_tile, tCrA, tCrB, coord)
                                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                            warpgroup.commit_group()
                            read_state.advance()
                        warpgroup.wait_group(0)
                        acc.store(acc.load() + acc_tile.load())
                        ab_pipeline.consumer_release(release_state)
                    else:
                        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                        ab_pipeline.consumer_wait(read_state)
                        warpgroup.fence()
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            coord = (None, None, kb, read_state.index)
                            self.mma(tiled_mma, acc, tCrA, tCrB, coord)
                        warpgroup.commit_group()
                        read_state.advance()
                        for _kt in cutlass.range(1, k_count, unroll=1):
                            ab_pipeline.consumer_wait(read_state)
                            warpgroup.fence()
                            for kb in cutlass.range_constexpr(num_k_blocks):
                                coord = (None, None, kb, read_state.index)
                                self.mma(tiled_mma, acc, tCrA, tCrB, coord)
                            warpgroup.commit_group()
                            # Keep one wgmma batch in flight; the one before it is done with its stage.
                            warpgroup.wait_group(1)
                            ab_pipeline.consumer_release(release_state)
                            release_state.advance()
                            read_state.advance()
                    if const_expr(self.pingpong):
                        # The other warpgroup may start its mainloop while this one drains.
                        self._pingpong_arrive(1 - wg_idx, _BAR_MMA_WG0)
                    if const_expr(not self.promote):
                        warpgroup.wait_group(0)
                        ab_pipeline.consumer_release(release_state)

                    run_epilogue = True
                    if const_expr(self.split):
                        run_epilogue = self._split_fixup(
                            acc, mWork, mFlags, (store_slot, wait_count, first_slot, flag), mma_tidx, epi_barrier
                        )
                    if run_epilogue:
                        # ---- epilogue ----
                        if const_expr(self.pingpong):
                            self._pingpong_sync(wg_idx, _BAR_EPI_WG0)
                        c_l = tile[2]
                        gC_tile = gC[(None, None, tile[0], tile[1], c_l)]
                        gC_epi = cute.zipped_divide(gC_tile, self.epi_tile)
                        bSG_sC, bSG_gC = cpasync.tma_partition(
                            tma_c,
                            0,
                            cute.make_layout(1),
                            cute.group_modes(sC, 0, 2),
                            gC_epi,
                        )
                        epi_grid = gC_epi.shape[1]
                        epi_order = cute.make_ordered_layout(epi_grid, order=(1, 0))
                        epi_count = cute.size(epi_grid)
                        epi_prev = (epi_tiles if const_expr(self.split) else scheduler.num_tiles_executed) * epi_count
                        if const_expr(self.spec.bias_dtype is not None):
                            self._load_bias(bias_next, mBias, tile, epi_order, 0, tRS_cD)
                        for epi_idx in cutlass.range_constexpr(epi_count):
                            for v in cutlass.range_constexpr(rD_size):
                                tRS_rD[v] = tRS_rAcc[epi_idx * rD_size + v]
                            if const_expr(self.spec.bias_dtype is not None):
                                bias_cur.store(bias_next.load())
                                if const_expr(epi_idx + 1 < epi_count and not self.bias_per_tile):
                                    self._load_bias(bias_next, mBias, tile, epi_order, epi_idx + 1, tRS_cD)
                            if const_expr(self.fused):
                                for v in cutlass.range_constexpr(rD_size):
                                    x = _round(self.spec.round_x, tRS_rD[v])
                                    for i in cutlass.range_constexpr(len(scales)):
                                        x = _round(self.spec.round_s[i], x * scales[i])
                                    if const_expr(self.spec.bias_dtype is not None):
                                        x = _round(self.spec.round_y, x + bias_cur[v])
                                    tRS_rD[v] = _activation(self.spec.activation, self.fast_math, x)
                            tRS_rOut.store(tRS_rD.load().to(self.c_dtype))
                            buf = (epi_prev + epi_idx) % self.epi_stage
                            if is_store_warp:
                                # The buffer about to be written must have left for global memory.
                                store_pipeline.producer_acquire()
                            epi_barrier.arrive_and_wait()
                            cute.copy(tiled_copy_r2s, tRS_rOut, tRS_sC[(None, None, None, buf)])
                            cute.arch.fence_view_async_shared()
                            epi_barrier.arrive_and_wait()
                            if is_store_warp:
                                cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_order.get_hier_coord(epi_idx))])
                                store_pipeline.producer_commit()
                        if const_expr(self.pingpong):
                            # Both warpgroups stage through the same buffers: drain before handing over.
                            if is_store_warp:
                                store_pipeline.producer_tail()
                            self._pingpong_arrive(1 - wg_idx, _BAR_EPI_WG0)
                            read_state.advance(k_tile_cnt)
                        epi_tiles += 1
                scheduler.advance_to_next_work(advance_count=tile_step)
                work = scheduler.get_current_work()

            # A compile-time test cannot share an `if` with a run-time one in the DSL.
            if const_expr(not self.pingpong):  # noqa: SIM102
                if is_store_warp:
                    store_pipeline.producer_tail()

    def mma_fragments(self, tiled_mma: Any, thr_mma: Any, sA: cute.Tensor, sB: cute.Tensor) -> tuple[Any, Any]:
        """This thread's wgmma operands over every stage of A and B: shared-memory descriptors (trace time)."""
        return tiled_mma.make_fragment_A(thr_mma.partition_A(sA)), tiled_mma.make_fragment_B(thr_mma.partition_B(sB))

    def mma(self, tiled_mma: Any, acc: cute.Tensor, tCrA: Any, tCrB: Any, coord: Any) -> None:
        """acc += one K block of A times B (``coord``: (None, None, K block, stage)), issued (trace time)."""
        cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)

    def a_tile(self, tAgA: cute.Tensor, m_tile: Int32, a_l: Any) -> cute.Tensor:
        """A's TMA tensor at M tile ``m_tile``, indexed by K tile next (trace time)."""
        return tAgA[(None, m_tile, None, a_l)]

    # The producer's K tile, kept as counters (k0, k1, k2, k3) that step without a division: a GEMM's K mode
    # is flat (k0 alone); the conv fprop's is (channel block, s, r[, t]) (kernels/conv_sm90.py).

    def k_counters(self, gA: cute.Tensor, tBgB: Any, k_begin: Int32, b_l: Any) -> tuple[Int32, Int32, Int32, Int32]:
        """The counters of K tile ``k_begin`` of batch entry ``b_l`` (trace time)."""
        return k_begin, Int32(0), Int32(0), Int32(0)

    def k_coord(self, gA: cute.Tensor, k0: Int32, k1: Int32, k2: Int32, k3: Int32) -> Any:
        """The K-mode coordinate of A's and B's tiles the counters name (trace time)."""
        return k0

    def k_advance(self, gA: cute.Tensor, b_tile: Any, k0: Int32, k1: Int32, k2: Int32, k3: Int32) -> tuple[Int32, ...]:
        """The counters of the next K tile (trace time; ``b_tile`` from b_tile)."""
        return k0 + 1, k1, k2, k3

    @cute.jit
    def _load_bias(
        self,
        dst: cute.Tensor,
        mBias: cute.Tensor,
        tile: Any,
        epi_order: cute.Layout,
        epi_idx: cutlass.Constexpr,
        tRS_cD: cute.Tensor,
    ) -> None:
        """The bias of every value this thread holds in epilogue subtile ``epi_idx``, as float32: by column
        or, with ``spec.bias_per`` "m", by row.

        Loaded one subtile ahead: read where they are used, the loads sat
        between the subtile's barriers, each subtile waiting out their latency
        (the fused conv ran 2.4-4.8 us slower than the plain one on ResNet-50
        layers). Rows and columns past M and N are clipped by the store; they
        read an in-range bias: every index is clamped to the bias's own length (not the GEMM's extent, which a
        bias indexed along the wrong axis would overrun: the planted bug of test_cute_conv_transposed).
        """
        axis = 0 if self.spec.bias_per == "m" else 1
        first = tile[axis] * self.tile_mnk[axis] + epi_order.get_hier_coord(epi_idx)[axis] * self.epi_tile[axis]
        last = cute.size(mBias) - 1
        for v in cutlass.range_constexpr(cute.size(dst)):
            dst[v] = mBias[cutlass.min(first + tRS_cD[v][axis], last)].to(cutlass.Float32)

    @cute.jit
    def _work_unit(
        self,
        idx: Any,
        tiles_m: Int32,
        tiles_total: Int32,
        k_tiles: Int32,
        splits: Int32,
        whole: Int32,
        sk_segments: Int32,
    ):
        """The scheduler's unit ``idx`` as (tile (m, n, l), first K tile, K tile count, then split-K's
        bookkeeping: the partial slot this unit stores (-1: none), how many partials it waits for and adds
        (0: none), the first of them, and the tile's counter). Without split-K, ``idx`` is the tile."""
        if const_expr(not self.split):
            return idx, 0, k_tiles, -1, 0, 0, 0
        u = idx[0]
        tile = u
        k_begin = Int32(0)
        k_count = k_tiles
        store_slot = Int32(-1)
        wait_count = Int32(0)
        first_slot = Int32(0)
        if u >= whole:
            rest = tiles_total - whole
            if sk_segments > 0:
                # Stream-K: CTA v owns iterations [a, b) of the split tiles' rest * k_tiles, a = v * total // G;
                # unit whole + j * G + v is the j-th tile its range touches (empty past its end). A range
                # that starts inside a tile parks that part (its first segment) in slot v; the CTA holding
                # a tile's first K tile adds the parts of the CTAs after it and stores the tile.
                # With fewer iterations than SMs, only the first ``total`` CTAs get one (every range non-empty:
                # an owner counts the CTAs after it as parts).
                total = rest * k_tiles
                ctas = cutlass.min(total, self.max_active_clusters)
                v = (u - whole) % self.max_active_clusters
                j = (u - whole) // self.max_active_clusters
                a = cutlass.min(v, ctas) * total // ctas
                b = cutlass.min(v + 1, ctas) * total // ctas
                t = a // k_tiles + j
                if j == 0:
                    k_begin = a - t * k_tiles
                k_end = cutlass.min(b - t * k_tiles, k_tiles)
                k_count = cutlass.max(k_end - k_begin, 0)
                tile = whole + t
                if k_count > 0:
                    if k_begin > 0:
                        store_slot = v
                    elif k_end < k_tiles:
                        # The CTAs covering [t * k_tiles + k_end, (t + 1) * k_tiles): slots first..last.
                        first_slot = ((t * k_tiles + k_end + 1) * ctas + total - 1) // total - 1
                        last = (((t + 1) * k_tiles) * ctas + total - 1) // total - 1
                        wait_count = last - first_slot + 1
            else:
                # Split-major: unit whole + s * rest + t is split s of tile whole + t; the last split adds
                # the others' partials (slots t * (splits - 1) + s).
                tile = whole + (u - whole) % rest
                split_idx = (u - whole) // rest
                k_begin = split_idx * k_tiles // splits
                k_count = (split_idx + 1) * k_tiles // splits - k_begin
                first_slot = (tile - whole) * (splits - 1)
                if split_idx < splits - 1:
                    store_slot = first_slot + split_idx
                else:
                    wait_count = splits - 1
        return (tile % tiles_m, tile // tiles_m, 0), k_begin, k_count, store_slot, wait_count, first_slot, tile - whole

    @cute.jit
    def _split_fixup(
        self,
        acc: cute.Tensor,
        mWork: cute.Tensor,
        mFlags: cute.Tensor,
        roles: tuple[Int32, Int32, Int32, Int32],
        mma_tidx: Int32,
        epi_barrier: Any,
    ) -> cutlass.Boolean:
        """Split-K after a unit's mainloop: park a partial accumulator, or wait for the tile's other parts
        and add them in slot order (a deterministic sum). True when this unit holds the tile's full sum
        and runs the epilogue. ``roles``: _work_unit's store slot, wait count, first slot and counter."""
        store_slot, wait_count, first_slot, tile = roles
        full = cutlass.Boolean(True)
        flag = mFlags.iterator + tile
        if store_slot >= 0:
            self._partial(acc, mWork, store_slot, mma_tidx, True)
            # Every consumer thread's stores, then one release of the tile's counter (CUTLASS's generic
            # barrier: bar.sync, fence.acq_rel.gpu, relaxed red.add).
            epi_barrier.arrive_and_wait()
            if mma_tidx == 0:
                cute.arch.fence_acq_rel_gpu()
                cute.arch.red(flag, Int32(1), op="add", dtype=Int32, sem="relaxed", scope="gpu")
            full = cutlass.Boolean(False)
        elif wait_count > 0:
            if mma_tidx == 0:
                seen = cute.arch.load(flag, Int32, sem="acquire", scope="gpu")
                while seen < wait_count:
                    seen = cute.arch.load(flag, Int32, sem="acquire", scope="gpu")
                cute.arch.store(flag, Int32(0))  # every part has arrived: ready for the next launch
            epi_barrier.arrive_and_wait()
            for j in cutlass.range(wait_count, unroll=1):
                self._partial(acc, mWork, first_slot + j, mma_tidx, False)
        return full

    @cute.jit
    def _partial(self, acc: cute.Tensor, mWork: cute.Tensor, index: Int32, mma_tidx: Int32, store: cutlass.Constexpr):
        """Store ``acc`` into the workspace's partial tile ``index``, or add that tile to ``acc``.

        Each consumer thread's registers go out as 16-byte vectors, vector v
        of thread t at (v * threads + t) * 4 floats: a warp's store covers
        512 contiguous bytes. The loads bypass L1 (another SM wrote them).
        """
        nv = cute.size(acc) // 4
        threads = self.num_epi_threads
        tile_elems = self.tile_mnk[0] * self.tile_mnk[1]
        offset = cute.assume(index * tile_elems + mma_tidx * 4, divby=4)
        gmem = cute.make_tensor(mWork.iterator + offset, cute.make_layout((4, nv), stride=(1, 4 * threads)))
        regs = cute.make_tensor(acc.iterator, cute.make_layout((4, nv), stride=(1, 4)))
        if const_expr(store):
            atom = cute.make_copy_atom(
                cute.nvgpu.CopyR2GOp(), cutlass.Float32, num_bits_per_copy=128,
                store_cache_mode=cute.nvgpu.StoreCacheMode.GLOBAL,
            )  # fmt: skip
            cute.copy(atom, regs, gmem)
        else:
            atom = cute.make_copy_atom(
                cute.nvgpu.CopyG2ROp(), cutlass.Float32, num_bits_per_copy=128,
                load_cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL,
            )  # fmt: skip
            part = cute.make_rmem_tensor((4, nv), cutlass.Float32)
            cute.copy(atom, gmem, part)
            regs.store(regs.load() + part.load())

    def _pingpong_sync(self, wg: Any, base: int) -> None:
        cute.arch.barrier(barrier_id=base + wg, number_of_threads=2 * _THREADS_PER_WG)

    def _pingpong_arrive(self, wg: Any, base: int) -> None:
        cute.arch.barrier_arrive(barrier_id=base + wg, number_of_threads=2 * _THREADS_PER_WG)


_SQRT_HALF = 0.7071067811865476
_GELU_TANH_C = 0.7978845608028654  # sqrt(2 / pi)
_LOG2E = 1.4426950408889634
# Numerical Recipes' erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0: fractional error below
# 1.2e-7 for every z (Press et al., Numerical Recipes, 6.2); P's coefficients, constant term first.
_ERFC_P = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
# ex2.approx and rcp.approx flush subnormal results to zero; computing 2^64 times the small factor and
# scaling back with an ordinary multiply keeps results that are subnormal in float32 (and bfloat16).
_LIFT = 64.0
_DROP = 2.0**-64


@cute.jit
def _round(dtype: cutlass.Constexpr, x: cutlass.Float32) -> cutlass.Float32:
    """``x`` rounded to ``dtype`` and back (the declared dtype of an intermediate tensor)."""
    y = x
    if const_expr(dtype != "float32"):
        y = x.to(DTYPES[dtype]).to(cutlass.Float32)
    return y


@cute.jit
def _activation(kind: cutlass.Constexpr, fast: cutlass.Constexpr, x: cutlass.Float32) -> cutlass.Float32:
    """The epilogue activation in float32, as docs/ops.md defines it (NaN stays NaN).

    ``fast`` (a 16-bit output): gelu through the hardware's approximate
    exp2 and reciprocal, with relative error about 1e-5 -- a fiftieth of a
    float16 half-ulp, a four-hundredth of a bfloat16 one -- instead of the
    accurate erfc / exp and an IEEE division (dozens of instructions per
    element, which the cooperative schedule does not hide behind the tensor
    cores). A float32 output keeps the accurate functions.
    """
    y = x
    if const_expr(kind == "relu"):
        # x <= 0 -> 0; NaN fails the comparison and passes through.
        y = cutlass.Float32(0.0) if x <= cutlass.Float32(0.0) else x
    elif const_expr(kind == "gelu" and fast):
        # 0.5 x erfc(z), z = -x / sqrt 2. erfc(|z|) = t e^(P(t) - z^2) with t = 1 / (1 + |z|/2);
        # erfc(z) = 2 - erfc(|z|) for z < 0 (x > 0), where no precision is lost.
        z = x * cutlass.Float32(-_SQRT_HALF)
        az = cute.math.absf(z)
        t = cute.arch.rcp_approx(cutlass.Float32(1.0) + cutlass.Float32(0.5) * az)
        p = cutlass.Float32(_ERFC_P[-1])
        for c in cutlass.range_constexpr(len(_ERFC_P) - 2, -1, -1):
            p = p * t + cutlass.Float32(_ERFC_P[c])
        e = (p - az * az) * cutlass.Float32(_LOG2E) + cutlass.Float32(_LIFT)
        q = t * cute.math.exp2(e, fastmath=True)  # erfc(|z|) * 2^64
        half_x = cutlass.Float32(0.5) * x
        if z >= cutlass.Float32(0.0):
            y = half_x * q * cutlass.Float32(_DROP)
        else:
            y = half_x * (cutlass.Float32(2.0) - q * cutlass.Float32(_DROP))
    elif const_expr(kind == "gelu"):
        # 0.5 x (1 + erf(x / sqrt 2)) written with erfc: no cancellation in the negative tail.
        y = cutlass.Float32(0.5) * x * cute.math.erfc(-x * cutlass.Float32(_SQRT_HALF))
    elif const_expr(kind == "gelu_tanh" and fast):
        # x sigmoid(2u) = x / (1 + e^(-2u)); for u < 0 as 2^-64 x / (2^-64 + 2^-64 e^(-2u)), so the
        # reciprocal stays normal in the negative tail.
        u = cutlass.Float32(_GELU_TANH_C) * (x + cutlass.Float32(0.044715) * x * x * x)
        negative = u < cutlass.Float32(0.0)
        lift = cutlass.Float32(_LIFT) if negative else cutlass.Float32(0.0)
        drop = cutlass.Float32(_DROP) if negative else cutlass.Float32(1.0)
        d = cute.math.exp2(u * cutlass.Float32(-2.0 * _LOG2E) - lift, fastmath=True)
        y = x * cute.arch.rcp_approx(drop + d) * drop
    elif const_expr(kind == "gelu_tanh"):
        # 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
        u = cutlass.Float32(_GELU_TANH_C) * (x + cutlass.Float32(0.044715) * x * x * x)
        y = x / (cutlass.Float32(1.0) + cute.math.exp(cutlass.Float32(-2.0) * u))
    return y
