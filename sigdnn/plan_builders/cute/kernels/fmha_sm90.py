"""Hopper (sm_90a) flash-attention forward in CuTe DSL: TMA, wgmma, warp specialization, online softmax.

    o[b, h, i] = sum_j softmax_j(attn_scale * q[b, h, i] . k[b, h // G, j]) v[b, h // G, j]

A work tile is 128 query rows of one (batch, head); a work unit is one
tile, or (``balanced``, causal) the pair of query blocks m_blocks - 1 - p
and p of one head, which together visit m_blocks + 1 key tiles whatever p
is. A CTA takes unit after unit, ``grid`` apart: one unit each when the
grid covers them all, or (persistent) one CTA per SM walking many, its
producer loading the next tile's Q and first K / V while the consumers
finish the current one. A producer warp loads the Q tile and streams K and
V tiles of ``tile_n`` keys through a ring of shared-memory stages by TMA;
two consumer warpgroups (64 query rows each) run, per key tile, S = Q K^T
(wgmma, both operands in shared memory) and O += P V (wgmma, P from
registers), with the softmax kept online: a running row max m and row sum
l, O rescaled by exp2(m_old - m_new) when the max grows. The steps overlap
inside a warpgroup: S of tile j is issued together with P V of tile j - 1,
so the tensor cores work on that P V while the softmax of S_j runs (the
wait for P V is kept behind a branch so that ptxas cannot hoist it above
the softmax). With ``pingpong`` the two warpgroups also take turns issuing
(named barriers), as FlashAttention-3 schedules them.

Key tiles go from the last to the first, so the tiles that need masking
(the causal diagonal, the ragged end of the keys) come first; the others
run without a mask. Causal tiles go longest-first within each head. Rows
past the end of the queries read TMA's zero fill and are never stored;
keys past the end are masked to -inf.

The host entry takes raw pointers, extents and strides, so one compiled
specialization (dtype, head dim, causal, stats, tiles) serves every
problem size and layout with the head dim contiguous.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup

from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES
from sigdnn.plan_builders.cute.sdpa_layout import FmhaConfig, FmhaSpec

_THREADS_PER_WG = 128
_NUM_MMA_WG = 2
_LN2 = math.log(2.0)
_BAR_WG0 = 1  # pingpong: named barrier of consumer warpgroup 0's turn (+1: warpgroup 1's); 0 is __syncthreads


def _acc_mn(acc: cute.Tensor) -> cute.Tensor:
    """A wgmma accumulator ((2, 2, V), M, N) viewed as (rows, columns): ((2, M), (2, V, N))."""
    s, d = acc.layout.shape, acc.layout.stride
    layout = cute.make_layout(
        ((s[0][1], s[1]), (s[0][0], s[0][2], s[2])),
        stride=((d[0][1], d[1]), (d[0][0], d[0][2], d[2])),
    )
    return cute.make_tensor(acc.iterator, layout)


def _acc_as_a(acc: cute.Tensor) -> cute.Tensor:
    """The S accumulator ((2, 2, V), M, N) as the A operand of the next wgmma: ((2, 2, 2), M, (V / 2, N)).

    A 16-bit A fragment of one k = 16 step holds, per thread, the accumulator values of two
    neighbouring 8-column groups: the same registers, regrouped."""
    div = cute.logical_divide(acc.layout, ((None, None, 2), None, None))
    s, d = div.shape, div.stride
    layout = cute.make_layout(
        ((s[0][0], s[0][1], s[0][2][0]), s[1], (s[0][2][1], s[2])),
        stride=((d[0][0], d[0][1], d[0][2][0]), d[1], (d[0][2][1], d[2])),
    )
    return cute.make_tensor(acc.iterator, layout)


def _row(t: cute.Tensor, r: int, cols: int) -> list[Any]:
    """The values of row ``r`` of a (rows, columns) register view (read at trace time)."""
    return [t[r, c] for c in range(cols)]


def _tree(op: Any, values: list[Any]) -> Any:
    """Reduce pairwise: a dependency chain of log2(n) steps instead of n (max and sum of a score row)."""
    while len(values) > 1:
        pairs = [op(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = pairs + values[len(pairs) * 2 :]
    return values[0]


class HopperFmha:
    """One compiled specialization of the forward kernel."""

    def __init__(self, spec: FmhaSpec, config: FmhaConfig) -> None:
        self.spec = spec
        self.config = config
        self.dtype = DTYPES[spec.dtype]
        self.tile_m, self.tile_n, self.stages = config.tile_m, config.tile_n, config.stages
        self.d = spec.head_dim
        self.threads = (_NUM_MMA_WG + 1) * _THREADS_PER_WG
        self.load_warp = _NUM_MMA_WG * 4  # first warp of the producer warpgroup
        self.load_regs, self.mma_regs = 24, 240
        self.balanced = config.balanced and spec.causal
        self.per_unit = 2 if self.balanced else 1  # work tiles per unit

    # ------------------------------------------------------------------
    # Host side

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        lse_ptr: cute.Pointer,
        batch: Int32,
        heads: Int32,
        groups: Int32,
        sq: Int32,
        skv: Int32,
        q_bs: Int64,
        q_hs: Int64,
        q_ss: Int64,
        k_bs: Int64,
        k_hs: Int64,
        k_ss: Int64,
        v_bs: Int64,
        v_hs: Int64,
        v_ss: Int64,
        o_bs: Int64,
        o_hs: Int64,
        o_ss: Int64,
        l_bs: Int64,
        l_hs: Int64,
        l_ss: Int64,
        scale_log2: Float32,
        ctas: Int32,
        stream: cuda.CUstream,
    ):
        align = 128 // self.dtype.width
        kv_heads = heads // groups
        d = self.d
        # (seq, d, head, batch) views; V as (d, seq, head, batch): the B operand of P V, d contiguous.
        mQ = cute.make_tensor(
            q_ptr,
            cute.make_layout(
                (sq, d, heads, batch),
                stride=(
                    cute.assume(q_ss, divby=align),
                    1,
                    cute.assume(q_hs, divby=align),
                    cute.assume(q_bs, divby=align),
                ),
            ),
        )
        mK = cute.make_tensor(
            k_ptr,
            cute.make_layout(
                (skv, d, kv_heads, batch),
                stride=(
                    cute.assume(k_ss, divby=align),
                    1,
                    cute.assume(k_hs, divby=align),
                    cute.assume(k_bs, divby=align),
                ),
            ),
        )
        mVt = cute.make_tensor(
            v_ptr,
            cute.make_layout(
                (d, skv, kv_heads, batch),
                stride=(
                    1,
                    cute.assume(v_ss, divby=align),
                    cute.assume(v_hs, divby=align),
                    cute.assume(v_bs, divby=align),
                ),
            ),
        )
        mO = cute.make_tensor(o_ptr, cute.make_layout((sq, d, heads, batch), stride=(o_ss, 1, o_hs, o_bs)))
        mLse = cute.make_tensor(lse_ptr, cute.make_layout((sq, heads, batch), stride=(l_ss, l_hs, l_bs)))

        tm, tn = self.tile_m, self.tile_n
        row_major = utils.LayoutEnum.ROW_MAJOR  # K-major operand
        col_major = utils.LayoutEnum.COL_MAJOR  # MN-major operand
        # Two copies of the S product: the first k-step overwrites S, the others accumulate. Their
        # ACCUMULATE fields are set once, outside every loop and branch (a field set inside one is a
        # value of that region and cannot be read after it).
        tiled_mma_qk, tiled_mma_qk0 = (
            sm90_utils.make_trivial_tiled_mma(
                self.dtype,
                self.dtype,
                warpgroup.OperandMajorMode.K,
                warpgroup.OperandMajorMode.K,
                Float32,
                (_NUM_MMA_WG, 1, 1),
                tiler_mn=(64, tn),
            )
            for _ in range(2)
        )
        tiled_mma_pv = sm90_utils.make_trivial_tiled_mma(
            self.dtype,
            self.dtype,
            warpgroup.OperandMajorMode.K,
            warpgroup.OperandMajorMode.MN,
            Float32,
            (_NUM_MMA_WG, 1, 1),
            tiler_mn=(64, d),
            a_source=warpgroup.OperandSource.RMEM,
        )
        q_smem = sm90_utils.make_smem_layout_a(row_major, (tm, tn, d), self.dtype, 1)
        k_smem = sm90_utils.make_smem_layout_b(row_major, (tm, tn, d), self.dtype, self.stages)
        v_smem = sm90_utils.make_smem_layout_b(col_major, (tm, d, tn), self.dtype, self.stages)

        op = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, gQ = cpasync.make_tiled_tma_atom(op, mQ, cute.slice_(q_smem, (None, None, 0)), (tm, d))
        tma_k, gK = cpasync.make_tiled_tma_atom(op, mK, cute.slice_(k_smem, (None, None, 0)), (tn, d))
        tma_v, gVt = cpasync.make_tiled_tma_atom(op, mVt, cute.slice_(v_smem, (None, None, 0)), (d, tn))
        self.q_bytes = cute.size_in_bytes(self.dtype, cute.slice_(q_smem, (None, None, 0)))
        self.kv_bytes = cute.size_in_bytes(self.dtype, cute.slice_(k_smem, (None, None, 0)))

        @cute.struct
        class SharedStorage:
            q_barriers: cute.struct.MemRange[Int64, 2]
            k_barriers: cute.struct.MemRange[Int64, self.stages * 2]
            v_barriers: cute.struct.MemRange[Int64, self.stages * 2]
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(q_smem)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(k_smem)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(v_smem)], 1024]

        self.shared_storage = SharedStorage
        self.kernel(
            tma_q,
            gQ,
            tma_k,
            gK,
            tma_v,
            gVt,
            mO,
            mLse,
            tiled_mma_qk,
            tiled_mma_qk0,
            tiled_mma_pv,
            q_smem,
            k_smem,
            v_smem,
            heads,
            batch,
            groups,
            sq,
            skv,
            scale_log2,
        ).launch(
            grid=(ctas, 1, 1),
            block=[self.threads, 1, 1],
            min_blocks_per_mp=1,
            stream=stream,
        )

    # ------------------------------------------------------------------
    # Device side

    @cute.kernel
    def kernel(
        self,
        tma_q: cute.CopyAtom,
        mQ: cute.Tensor,
        tma_k: cute.CopyAtom,
        mK: cute.Tensor,
        tma_v: cute.CopyAtom,
        mVt: cute.Tensor,
        mO: cute.Tensor,
        mLse: cute.Tensor,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_qk0: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        q_smem: cute.ComposedLayout,
        k_smem: cute.ComposedLayout,
        v_smem: cute.ComposedLayout,
        heads: Int32,
        batch: Int32,
        groups: Int32,
        sq: Int32,
        skv: Int32,
        scale_log2: Float32,
    ):
        tm, tn = self.tile_m, self.tile_n
        tidx, _, _ = cute.arch.thread_idx()
        first_unit, _, _ = cute.arch.block_idx()
        unit_step, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)
        m_blocks = cute.ceil_div(sq, tm)
        units = m_blocks * heads * batch
        if const_expr(self.balanced):
            units = (m_blocks + 1) // 2 * heads * batch
        my_tiles = (units - first_unit + unit_step - 1) // unit_step * self.per_unit

        if warp_idx == self.load_warp:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_k)
            cpasync.prefetch_descriptor(tma_v)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, _NUM_MMA_WG * 4)  # one arrive per warp
        q_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.q_barriers.data_ptr(),
            num_stages=1,
            producer_group=producer,
            consumer_group=consumers,
            tx_count=self.q_bytes,
            defer_sync=True,
        )
        k_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.k_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=producer,
            consumer_group=consumers,
            tx_count=self.kv_bytes,
            defer_sync=True,
        )
        v_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.v_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=producer,
            consumer_group=consumers,
            tx_count=self.kv_bytes,
            defer_sync=True,
        )
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        sQ = storage.sQ.get_tensor(q_smem.outer, swizzle=q_smem.inner)
        sK = storage.sK.get_tensor(k_smem.outer, swizzle=k_smem.inner)
        sVt = storage.sV.get_tensor(v_smem.outer, swizzle=v_smem.inner)

        if wg_idx == _NUM_MMA_WG:
            # ---------------- producer warp ----------------
            cute.arch.setmaxregister_decrease(self.load_regs)
            if warp_idx == self.load_warp:
                q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                for k in cutlass.range(my_tiles, unroll=1):
                    m_block, head, b, n_blocks = self._work(first_unit, unit_step, k, m_blocks, heads, skv)
                    kv_head = head // groups
                    gQ = cute.local_tile(mQ[None, None, head, b], (tm, self.d), (None, 0))  # (tm, d, RestM)
                    gK = cute.local_tile(mK[None, None, kv_head, b], (tn, self.d), (None, 0))  # (tn, d, RestN)
                    gV = cute.local_tile(mVt[None, None, kv_head, b], (self.d, tn), (0, None))  # (d, tn, RestN)
                    tQsQ, tQgQ = cpasync.tma_partition(
                        tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
                    )
                    tKsK, tKgK = cpasync.tma_partition(
                        tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
                    )
                    tVsV, tVgV = cpasync.tma_partition(
                        tma_v, 0, cute.make_layout(1), cute.group_modes(sVt, 0, 2), cute.group_modes(gV, 0, 2)
                    )
                    # The previous tile's Q stays until the consumers' last S of that tile.
                    q_pipe.producer_acquire(q_state)
                    cute.copy(
                        tma_q,
                        tQgQ[(None, m_block)],
                        tQsQ[(None, 0)],
                        tma_bar_ptr=q_pipe.producer_get_barrier(q_state),
                    )
                    q_pipe.producer_commit(q_state)
                    q_state.advance()
                    for i in cutlass.range(n_blocks, unroll=1):
                        n = n_blocks - 1 - i
                        k_pipe.producer_acquire(state)
                        cute.copy(
                            tma_k,
                            tKgK[(None, n)],
                            tKsK[(None, state.index)],
                            tma_bar_ptr=k_pipe.producer_get_barrier(state),
                        )
                        k_pipe.producer_commit(state)
                        v_pipe.producer_acquire(state)
                        cute.copy(
                            tma_v,
                            tVgV[(None, n)],
                            tVsV[(None, state.index)],
                            tma_bar_ptr=v_pipe.producer_get_barrier(state),
                        )
                        v_pipe.producer_commit(state)
                        state.advance()
        else:
            # ---------------- consumer warpgroups ----------------
            cute.arch.setmaxregister_increase(self.mma_regs)
            wg_qk = tiled_mma_qk.get_slice(wg_idx * _THREADS_PER_WG)
            wg_pv = tiled_mma_pv.get_slice(wg_idx * _THREADS_PER_WG)
            tSrQ = tiled_mma_qk.make_fragment_A(wg_qk.partition_A(sQ))
            tSrK = tiled_mma_qk.make_fragment_B(wg_qk.partition_B(sK))
            tOrV = tiled_mma_pv.make_fragment_B(wg_pv.partition_B(sVt))
            acc_s = cute.make_rmem_tensor(tiled_mma_qk.partition_shape_C((tm, tn)), Float32)
            acc_o = cute.make_rmem_tensor(tiled_mma_pv.partition_shape_C((tm, self.d)), Float32)
            tOrP = tiled_mma_pv.make_fragment_A(tiled_mma_pv.partition_shape_A((tm, tn)))
            # (row, column) inside the tile of every accumulator value this thread holds.
            tScS = tiled_mma_qk.get_slice(tidx).partition_C(cute.make_identity_tensor((tm, tn)))
            tOcO = tiled_mma_pv.get_slice(tidx).partition_C(cute.make_identity_tensor((tm, self.d)))
            s_mn = _acc_mn(acc_s)
            o_mn = _acc_mn(acc_o)
            rows = cute.size(s_mn, mode=[0])
            row_max = cute.make_rmem_tensor(rows, Float32)
            row_sum = cute.make_rmem_tensor(rows, Float32)
            factor = cute.make_rmem_tensor(rows, Float32)
            # Set here, not in a loop: an MMA field set inside a loop body cannot be read after it.
            tiled_mma_pv.set(warpgroup.Field.ACCUMULATE, True)
            tiled_mma_qk.set(warpgroup.Field.ACCUMULATE, True)
            tiled_mma_qk0.set(warpgroup.Field.ACCUMULATE, False)
            qk = (tiled_mma_qk0, tiled_mma_qk)
            p_view = _acc_as_a(acc_s)
            o_cmn = _acc_mn(tOcO)
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            for k in cutlass.range(my_tiles, unroll=1):
                m_block, head, b, n_blocks = self._work(first_unit, unit_step, k, m_blocks, heads, skv)
                row0 = m_block * tm
                # A key tile reaching past this column needs the mask: the end of the keys, or
                # (causal) the first row's own key.
                mask_from = skv
                if const_expr(self.spec.causal):
                    mask_from = cutlass.min(skv, row0 + 1)
                row_max.fill(-math.inf)
                row_sum.fill(0.0)
                acc_o.fill(0.0)
                q_pipe.consumer_wait(q_state)

                # First (last in key order) tile: S, softmax; its P V is issued with the next S.
                n = n_blocks - 1
                k_pipe.consumer_wait(k_state)
                self._issue_s(qk, acc_s, tSrQ, tSrK, k_state.index)
                warpgroup.wait_group(0)
                k_pipe.consumer_release(k_state)
                self._mask(acc_s, tScS, n, row0, skv)
                self._softmax(s_mn, row_max, row_sum, factor, scale_log2)
                tOrP.store(p_view.load().to(self.dtype))
                v_state = k_state.clone()
                k_state.advance()

                if const_expr(self.config.pingpong):  # noqa: SIM102
                    if wg_idx == 1:
                        cute.arch.barrier_arrive(barrier_id=_BAR_WG0, number_of_threads=2 * _THREADS_PER_WG)
                for i in cutlass.range(n_blocks - 1, unroll=1):
                    n = n_blocks - 2 - i
                    k_pipe.consumer_wait(k_state)
                    if const_expr(self.config.pingpong):
                        cute.arch.barrier(barrier_id=_BAR_WG0 + wg_idx, number_of_threads=2 * _THREADS_PER_WG)
                    self._issue_s(qk, acc_s, tSrQ, tSrK, k_state.index)
                    v_pipe.consumer_wait(v_state)
                    self._gemm_pv(tiled_mma_pv, acc_o, tOrP, tOrV, v_state.index)
                    if const_expr(self.config.pingpong):
                        cute.arch.barrier_arrive(
                            barrier_id=_BAR_WG0 + 1 - wg_idx, number_of_threads=2 * _THREADS_PER_WG
                        )
                    warpgroup.wait_group(1)  # S is in
                    k_pipe.consumer_release(k_state)
                    if (n + 1) * tn > mask_from:
                        self._mask(acc_s, tScS, n, row0, skv)
                    self._softmax(s_mn, row_max, row_sum, factor, scale_log2)
                    # The wait for P V sits behind a branch: in the softmax's block, ptxas moves it to
                    # the top (to start the O rescale and the P conversion early), and the softmax
                    # then no longer overlaps P V. The condition always holds (plan_sdpa takes
                    # attn_scale > 0) and is uniform across the warpgroup, as wgmma.wait_group needs.
                    if scale_log2 > Float32(0.0):
                        warpgroup.wait_group(0)  # P V is in: O may be rescaled and P rewritten
                        if const_expr(self.spec.stats):
                            # The vote's branch below tips ptxas into serializing the wgmma (C7511,
                            # register resources) of the causal head-dim-128 kernel with stats.
                            self._rescale(o_mn, factor)
                        else:
                            # Only where some row max of the warp grew (ever rarer along the keys).
                            grew = factor[0] != Float32(1.0)
                            for r in cutlass.range_constexpr(1, rows):
                                grew = grew | (factor[r] != Float32(1.0))
                            if cute.arch.vote_any_sync(grew):
                                self._rescale(o_mn, factor)
                        tOrP.store(p_view.load().to(self.dtype))
                    v_pipe.consumer_release(v_state)
                    v_state.advance()
                    k_state.advance()
                self._pingpong_end(wg_idx)
                q_pipe.consumer_release(q_state)
                q_state.advance()
                v_pipe.consumer_wait(v_state)
                self._gemm_pv(tiled_mma_pv, acc_o, tOrP, tOrV, v_state.index)
                warpgroup.wait_group(0)
                v_pipe.consumer_release(v_state)
                self._epilogue(acc_o, o_mn, o_cmn, row_max, row_sum, mO, mLse, row0, head, b, sq, scale_log2, tidx)

    @cute.jit
    def _pingpong_end(self, wg_idx: Int32):
        """Warpgroup 0 takes warpgroup 1's last turn signal of the tile, so every arrive is matched (and
        warpgroup 1 cannot arrive for the next tile before it)."""
        if const_expr(self.config.pingpong):  # noqa: SIM102
            if wg_idx == 0:
                cute.arch.barrier(barrier_id=_BAR_WG0, number_of_threads=2 * _THREADS_PER_WG)

    @cute.jit
    def _issue_s(self, qk: tuple, acc_s: cute.Tensor, tSrQ: cute.Tensor, tSrK: cute.Tensor, stage: Int32):
        """Issue S = Q K^T for the K tile in ``stage`` (not waited for); ``qk``: the overwriting and the
        accumulating MMA."""
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            cute.gemm(qk[min(kb, 1)], acc_s, tSrQ[None, None, kb, 0], tSrK[None, None, kb, stage], acc_s)
        warpgroup.commit_group()

    @cute.jit
    def _rescale(self, o_mn: cute.Tensor, factor: cute.Tensor):
        """O *= exp2((m_old - m_new) * scale_log2), row by row."""
        for r in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                o_mn[r, c] = o_mn[r, c] * factor[r]

    @cute.jit
    def _work(self, first: Int32, step: Int32, k: Int32, m_blocks: Int32, heads: Int32, skv: Int32):
        """(query block, head, batch, key tiles to visit) of this CTA's k-th work tile.

        A CTA takes units ``first``, ``first + step``, ...; query blocks of one head are neighbours
        (they share K and V in L2). Causal: the longest (last) query block of each head first, or
        (balanced) a unit is the pair of query blocks m_blocks - 1 - p and p, the longer first. With
        an odd count the middle block pairs with itself: computed twice, the same values stored twice
        (one extra tile in m_blocks + 1, and no branch around the main loop, which makes ptxas
        serialize the wgmma)."""
        unit = first + (k // self.per_unit) * step
        if const_expr(self.balanced):
            pairs = (m_blocks + 1) // 2
            p = unit % pairs
            bh = unit // pairs
            m_block = m_blocks - 1 - p if k % 2 == 0 else p
        else:
            m_block = unit % m_blocks
            bh = unit // m_blocks
            if const_expr(self.spec.causal):
                m_block = m_blocks - 1 - m_block
        n_blocks = cute.ceil_div(skv, self.tile_n)
        if const_expr(self.spec.causal):
            n_blocks = cutlass.min(n_blocks, cute.ceil_div((m_block + 1) * self.tile_m, self.tile_n))
        return m_block, bh % heads, bh // heads, n_blocks

    @cute.jit
    def _epilogue(
        self,
        acc_o: cute.Tensor,
        o_mn: cute.Tensor,
        o_cmn: cute.Tensor,
        row_max: cute.Tensor,
        row_sum: cute.Tensor,
        mO: cute.Tensor,
        mLse: cute.Tensor,
        row0: Int32,
        head: Int32,
        b: Int32,
        sq: Int32,
        scale_log2: Float32,
        tidx: Int32,
    ):
        """O / l to global memory (rows past sq skipped); stats = (m * scale_log2 + log2 l) * ln 2."""
        for r in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
            total = row_sum[r]
            total = total + cute.arch.shuffle_sync_bfly(total, offset=2)
            total = total + cute.arch.shuffle_sync_bfly(total, offset=1)
            inv = cutlass.Float32(1.0) / total
            grow = row0 + o_cmn[r, 0][0]
            if grow < sq:
                for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                    mO[grow, o_cmn[r, c][1], head, b] = (o_mn[r, c] * inv).to(self.dtype)
                # A compile-time test cannot share an `if` with a run-time one in the DSL.
                if const_expr(self.spec.stats):  # noqa: SIM102
                    if tidx % 4 == 0:
                        mLse[grow, head, b] = (row_max[r] * scale_log2 + cute.math.log2(total)) * Float32(_LN2)

    @cute.jit
    def _gemm_pv(self, tiled_mma: cute.TiledMma, acc: cute.Tensor, tOrP: cute.Tensor, tOrV: cute.Tensor, stage: Int32):
        """Issue O += P V for one key tile (not waited for); the MMA accumulates (set once, outside loops)."""
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            cute.gemm(tiled_mma, acc, tOrP[None, None, kb], tOrV[None, None, kb, stage], acc)
        warpgroup.commit_group()

    @cute.jit
    def _mask(self, acc_s: cute.Tensor, tScS: cute.Tensor, n: Int32, row0: Int32, skv: Int32):
        """-inf where the key is past the end or (causal) after the query."""
        col0 = n * self.tile_n
        for i in cutlass.range_constexpr(cute.size(acc_s)):
            col = col0 + tScS[i][1]
            limit = skv
            if const_expr(self.spec.causal):
                limit = cutlass.min(skv, row0 + tScS[i][0] + 1)
            acc_s[i] = Float32(-math.inf) if col >= limit else acc_s[i]

    @cute.jit
    def _softmax(
        self,
        s_mn: cute.Tensor,
        row_max: cute.Tensor,
        row_sum: cute.Tensor,
        factor: cute.Tensor,
        scale_log2: Float32,
    ):
        """S -> P = exp2(S * scale_log2 - m * scale_log2) in place; m, l updated; factor = exp2((m_old - m) * c).

        A row that has seen only masked keys keeps m = -inf; its base is taken as 0 so that
        exp2(-inf - base) = 0 instead of NaN."""
        cols = cute.size(s_mn, mode=[1])
        for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            mx = _tree(cute.arch.fmax, _row(s_mn, r, cols))
            mx = cute.arch.fmax(mx, cute.arch.shuffle_sync_bfly(mx, offset=2))
            mx = cute.arch.fmax(mx, cute.arch.shuffle_sync_bfly(mx, offset=1))
            new_max = cute.arch.fmax(mx, row_max[r])
            base = Float32(0.0) if new_max == Float32(-math.inf) else new_max * scale_log2
            f = cute.math.exp2(row_max[r] * scale_log2 - base, fastmath=True)
            factor[r] = f
            row_max[r] = new_max
            for c in cutlass.range_constexpr(cols):
                s_mn[r, c] = cute.math.exp2(s_mn[r, c] * scale_log2 - base, fastmath=True)
            row_sum[r] = row_sum[r] * f + _tree(operator.add, _row(s_mn, r, cols))
