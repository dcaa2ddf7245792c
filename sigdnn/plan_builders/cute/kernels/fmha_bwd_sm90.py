"""Hopper (sm_90a) flash-attention backward in CuTe DSL: TMA, wgmma, warp specialization, dq by atomics.

With p = exp(attn_scale * q k^T - stats) (the forward's probabilities,
recomputed from its logsumexp) and D = rowsum(d_o * o):

    dv = p^T d_o,   dp = d_o v^T,   ds = p * (dp - D),
    dq = attn_scale * ds k,   dk = attn_scale * ds^T q

(dk, dv summed over the query heads sharing a kv head). Three kernels, as
FlashAttention-2/3 split it:

* ``BwdPreprocess``: per query row, D, the stats in base 2 (log2(e) * stats;
  +inf where stats is -inf or the row is padding, so p = 0 there) and the
  row of the float32 dq accumulator zeroed. Rows are padded to the main
  kernel's 64-row step.
* ``HopperFmhaBwd``: one CTA per block of 128 keys of one kv head. A producer
  warp loads that block's K and V once and streams 64-row tiles of Q and
  d_o (every query head of the group, the causally visible rows only)
  through two shared-memory stages by TMA. Two consumer warpgroups each own
  64 keys. Per tile: S = Q K^T and dP = d_o V^T (wgmma, both operands in
  shared memory); P = exp2(S * scale log2(e) - stats2) and dS = P * (dP - D)
  in registers, stored (16-bit, stmatrix, two stages) for the products that
  read them transposed or whole; then dQ = dS K (64 x head-dim / 2 per
  warpgroup), dV += P^T d_o and dK += dS^T Q. dV and dK stay in registers
  for the whole CTA; dQ is added into the float32 accumulator by 16-byte
  vector reductions, in fragment order (a warp's 512 bytes contiguous),
  while dV and dK run. (Issuing dV as soon as a warpgroup's own P is stored,
  to overlap it with dS, measured 1-4 % slower on the H200.)
* ``BwdConvert``: dq = attn_scale * accumulator, rounded to dq's dtype.

The host entries take raw pointers, extents and strides, so one compiled
specialization (dtype, head dim, causal) serves every problem size and
layout with the head dim contiguous.
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
from cutlass import Float32, Int32, Int64, const_expr
from cutlass._mlir import ir
from cutlass._mlir.dialects import vector
from cutlass.cute.nvgpu import cpasync, warp, warpgroup

from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES
from sigdnn.plan_builders.cute.sdpa_backward_layout import TILE_M, TILE_N, BwdSpec

_THREADS_PER_WG = 128
_NUM_MMA_WG = 2
_MMA_THREADS = _NUM_MMA_WG * _THREADS_PER_WG
_LOG2E = math.log2(math.e)
_BAR_PDS = 1  # named barrier: P and dS of a step are in shared memory (0 is __syncthreads)
_ROW_CHUNK = 8  # elements of a row one thread of the row kernels handles
_VEC = 4  # float32 values per vector reduction into the dq accumulator


def _acc_mn(acc: cute.Tensor) -> cute.Tensor:
    """A wgmma accumulator ((2, 2, V), M, N) viewed as (rows, columns): ((2, M), (2, V, N))."""
    s, d = acc.layout.shape, acc.layout.stride
    layout = cute.make_layout(
        ((s[0][1], s[1]), (s[0][0], s[0][2], s[2])),
        stride=((d[0][1], d[1]), (d[0][0], d[0][2], d[2])),
    )
    return cute.make_tensor(acc.iterator, layout)


def _dq_mma(dtype: Any, d: int) -> cute.TiledMma:
    """dQ = dS K: 64 query rows, each warpgroup half the head dim (dS K-major, K MN-major)."""
    K, MN = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
    return sm90_utils.make_trivial_tiled_mma(
        dtype, dtype, K, MN, Float32, (1, _NUM_MMA_WG, 1), tiler_mn=(TILE_M, d // _NUM_MMA_WG)
    )


def _dq_offset(t: Any, i: int) -> Any:
    """Where value ``i`` of consumer thread ``t``'s dQ fragment sits in its tile of the accumulator: groups of
    four values, each group's threads side by side (one 16-byte reduction per group, a warp's 512 bytes
    contiguous)."""
    return (i // _VEC) * (_MMA_THREADS * _VEC) + t * _VEC + i % _VEC


def _transpose(t: cute.Tensor) -> cute.Tensor:
    """A (rows, columns, stages) shared-memory tensor viewed as (columns, rows, stages)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 0, 2]))


class HopperFmhaBwd:
    """One compiled specialization of the main backward kernel."""

    def __init__(self, spec: BwdSpec) -> None:
        self.spec = spec
        self.dtype = DTYPES[spec.dtype]
        self.d = spec.head_dim
        self.tile_m, self.tile_n, self.stages = TILE_M, TILE_N, 2
        self.threads = (_NUM_MMA_WG + 1) * _THREADS_PER_WG
        self.load_warp = _NUM_MMA_WG * 4
        self.load_regs, self.mma_regs = 24, 240

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        dqacc_ptr: cute.Pointer,
        lse_ptr: cute.Pointer,
        dsum_ptr: cute.Pointer,
        batch: Int32,
        heads: Int32,
        groups: Int32,
        sq: Int32,
        skv: Int32,
        sq_pad: Int32,
        q_bs: Int64,
        q_hs: Int64,
        q_ss: Int64,
        k_bs: Int64,
        k_hs: Int64,
        k_ss: Int64,
        v_bs: Int64,
        v_hs: Int64,
        v_ss: Int64,
        do_bs: Int64,
        do_hs: Int64,
        do_ss: Int64,
        dk_bs: Int64,
        dk_hs: Int64,
        dk_ss: Int64,
        dv_bs: Int64,
        dv_hs: Int64,
        dv_ss: Int64,
        scale_log2: Float32,
        scale: Float32,
        stream: cuda.CUstream,
    ):
        align = 128 // self.dtype.width
        kv_heads = heads // groups
        d = self.d
        tm, tn = self.tile_m, self.tile_n

        def tma_view(ptr, rows, nheads, bs, hs, ss):
            return cute.make_tensor(
                ptr,
                cute.make_layout(
                    (rows, d, nheads, batch),
                    stride=(
                        cute.assume(ss, divby=align),
                        1,
                        cute.assume(hs, divby=align),
                        cute.assume(bs, divby=align),
                    ),
                ),
            )

        mQ = tma_view(q_ptr, sq, heads, q_bs, q_hs, q_ss)
        mK = tma_view(k_ptr, skv, kv_heads, k_bs, k_hs, k_ss)
        mV = tma_view(v_ptr, skv, kv_heads, v_bs, v_hs, v_ss)
        mdO = tma_view(do_ptr, sq, heads, do_bs, do_hs, do_ss)
        mdK = cute.make_tensor(dk_ptr, cute.make_layout((skv, d, kv_heads, batch), stride=(dk_ss, 1, dk_hs, dk_bs)))
        mdV = cute.make_tensor(dv_ptr, cute.make_layout((skv, d, kv_heads, batch), stride=(dv_ss, 1, dv_hs, dv_bs)))
        rows = sq_pad * heads
        # One tm x d tile of float32 per (query block, head, batch), its values in fragment order (_dq_offset).
        mdQacc = cute.make_tensor(
            dqacc_ptr,
            cute.make_layout((tm * d, sq_pad // tm, heads, batch), stride=(1, tm * d, sq_pad * d, rows * d)),
        )
        mLse = cute.make_tensor(lse_ptr, cute.make_layout((sq_pad, heads, batch), stride=(1, sq_pad, rows)))
        mDsum = cute.make_tensor(dsum_ptr, cute.make_layout((sq_pad, heads, batch), stride=(1, sq_pad, rows)))

        K, MN = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        # S = Q K^T, dP = dO V^T: 64 query rows, each warpgroup 64 of the 128 keys.
        tiled_mma_sdp = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K, K, Float32, (1, _NUM_MMA_WG, 1), tiler_mn=(tm, tn // _NUM_MMA_WG)
        )
        # dV += P^T dO, dK += dS^T Q: 128 keys (64 per warpgroup) by the head dim; both operands MN-major.
        tiled_mma_dkv = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, MN, MN, Float32, (_NUM_MMA_WG, 1, 1), tiler_mn=(tn // _NUM_MMA_WG, d)
        )
        tiled_mma_dq = _dq_mma(self.dtype, d)
        row_major = utils.LayoutEnum.ROW_MAJOR
        q_smem = sm90_utils.make_smem_layout_a(row_major, (tm, tn, d), self.dtype, self.stages)
        kv_smem = sm90_utils.make_smem_layout_b(row_major, (tm, tn, d), self.dtype, 1)
        pds_smem = sm90_utils.make_smem_layout_a(row_major, (tm, d, tn), self.dtype, self.stages)

        op = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, gQ = cpasync.make_tiled_tma_atom(op, mQ, cute.slice_(q_smem, (None, None, 0)), (tm, d))
        tma_do, gdO = cpasync.make_tiled_tma_atom(op, mdO, cute.slice_(q_smem, (None, None, 0)), (tm, d))
        tma_k, gK = cpasync.make_tiled_tma_atom(op, mK, cute.slice_(kv_smem, (None, None, 0)), (tn, d))
        tma_v, gV = cpasync.make_tiled_tma_atom(op, mV, cute.slice_(kv_smem, (None, None, 0)), (tn, d))
        self.q_bytes = cute.size_in_bytes(self.dtype, cute.slice_(q_smem, (None, None, 0)))
        self.kv_bytes = cute.size_in_bytes(self.dtype, cute.slice_(kv_smem, (None, None, 0)))

        @cute.struct
        class SharedStorage:
            kv_barriers: cute.struct.MemRange[Int64, 2]
            q_barriers: cute.struct.MemRange[Int64, self.stages * 2]
            do_barriers: cute.struct.MemRange[Int64, self.stages * 2]
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(q_smem)], 1024]
            sdO: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(q_smem)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(kv_smem)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(kv_smem)], 1024]
            sP: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(pds_smem)], 1024]
            sdS: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(pds_smem)], 1024]

        self.shared_storage = SharedStorage
        n_blocks = cute.ceil_div(skv, tn)
        self.kernel(
            tma_q,
            gQ,
            tma_do,
            gdO,
            tma_k,
            gK,
            tma_v,
            gV,
            mdK,
            mdV,
            mdQacc,
            mLse,
            mDsum,
            tiled_mma_sdp,
            tiled_mma_dkv,
            tiled_mma_dq,
            q_smem,
            kv_smem,
            pds_smem,
            groups,
            sq,
            skv,
            scale_log2,
            scale,
        ).launch(
            grid=(n_blocks, kv_heads, batch),
            block=[self.threads, 1, 1],
            min_blocks_per_mp=1,
            stream=stream,
        )

    @cute.kernel
    def kernel(
        self,
        tma_q: cute.CopyAtom,
        mQ: cute.Tensor,
        tma_do: cute.CopyAtom,
        mdO: cute.Tensor,
        tma_k: cute.CopyAtom,
        mK: cute.Tensor,
        tma_v: cute.CopyAtom,
        mV: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mdQacc: cute.Tensor,
        mLse: cute.Tensor,
        mDsum: cute.Tensor,
        tiled_mma_sdp: cute.TiledMma,
        tiled_mma_dkv: cute.TiledMma,
        tiled_mma_dq: cute.TiledMma,
        q_smem: cute.ComposedLayout,
        kv_smem: cute.ComposedLayout,
        pds_smem: cute.ComposedLayout,
        groups: Int32,
        sq: Int32,
        skv: Int32,
        scale_log2: Float32,
        scale: Float32,
    ):
        tm, tn, d = self.tile_m, self.tile_n, self.d
        tidx, _, _ = cute.arch.thread_idx()
        n_block, kv_head, b = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)
        n0 = n_block * tn
        m_blocks = cute.ceil_div(sq, tm)
        # Causal: query rows before the block's first key see none of it.
        m_start = Int32(0)
        if const_expr(self.spec.causal):
            m_start = cutlass.min(n0 // tm, m_blocks)
        per_head = m_blocks - m_start
        steps = per_head * groups

        if warp_idx == self.load_warp:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_do)
            cpasync.prefetch_descriptor(tma_k)
            cpasync.prefetch_descriptor(tma_v)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, _NUM_MMA_WG * 4)  # one arrive per warp
        kv_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.kv_barriers.data_ptr(),
            num_stages=1,
            producer_group=producer,
            consumer_group=consumers,
            tx_count=2 * self.kv_bytes,
            defer_sync=True,
        )
        q_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.q_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=producer,
            consumer_group=consumers,
            tx_count=self.q_bytes,
            defer_sync=True,
        )
        do_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.do_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=producer,
            consumer_group=consumers,
            tx_count=self.q_bytes,
            defer_sync=True,
        )
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        sQ = storage.sQ.get_tensor(q_smem.outer, swizzle=q_smem.inner)
        sdO = storage.sdO.get_tensor(q_smem.outer, swizzle=q_smem.inner)
        sK = storage.sK.get_tensor(kv_smem.outer, swizzle=kv_smem.inner)
        sV = storage.sV.get_tensor(kv_smem.outer, swizzle=kv_smem.inner)
        sP = storage.sP.get_tensor(pds_smem.outer, swizzle=pds_smem.inner)
        sdS = storage.sdS.get_tensor(pds_smem.outer, swizzle=pds_smem.inner)

        if wg_idx == _NUM_MMA_WG:
            # ---------------- producer warp ----------------
            cute.arch.setmaxregister_decrease(self.load_regs)
            if warp_idx == self.load_warp:
                if steps > 0:
                    gK = cute.local_tile(mK[None, None, kv_head, b], (tn, d), (None, 0))
                    gV = cute.local_tile(mV[None, None, kv_head, b], (tn, d), (None, 0))
                    tKsK, tKgK = cpasync.tma_partition(
                        tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
                    )
                    tVsV, tVgV = cpasync.tma_partition(
                        tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2)
                    )
                    kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                    kv_pipe.producer_acquire(kv_state)
                    bar = kv_pipe.producer_get_barrier(kv_state)
                    cute.copy(tma_k, tKgK[(None, n_block)], tKsK[(None, 0)], tma_bar_ptr=bar)
                    cute.copy(tma_v, tVgV[(None, n_block)], tVsV[(None, 0)], tma_bar_ptr=bar)
                    kv_pipe.producer_commit(kv_state)
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                for step in cutlass.range(steps, unroll=1):
                    head = kv_head * groups + step // per_head
                    m_block = m_start + step % per_head
                    gQ = cute.local_tile(mQ[None, None, head, b], (tm, d), (None, 0))
                    gdO = cute.local_tile(mdO[None, None, head, b], (tm, d), (None, 0))
                    tQsQ, tQgQ = cpasync.tma_partition(
                        tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
                    )
                    tOsO, tOgO = cpasync.tma_partition(
                        tma_do, 0, cute.make_layout(1), cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2)
                    )
                    q_pipe.producer_acquire(state)
                    cute.copy(
                        tma_q,
                        tQgQ[(None, m_block)],
                        tQsQ[(None, state.index)],
                        tma_bar_ptr=q_pipe.producer_get_barrier(state),
                    )
                    q_pipe.producer_commit(state)
                    do_pipe.producer_acquire(state)
                    cute.copy(
                        tma_do,
                        tOgO[(None, m_block)],
                        tOsO[(None, state.index)],
                        tma_bar_ptr=do_pipe.producer_get_barrier(state),
                    )
                    do_pipe.producer_commit(state)
                    state.advance()
        else:
            # ---------------- consumer warpgroups ----------------
            cute.arch.setmaxregister_increase(self.mma_regs)
            wg_sdp = tiled_mma_sdp.get_slice(wg_idx * _THREADS_PER_WG)
            wg_dkv = tiled_mma_dkv.get_slice(wg_idx * _THREADS_PER_WG)
            wg_dq = tiled_mma_dq.get_slice(wg_idx * _THREADS_PER_WG)
            tSrQ = tiled_mma_sdp.make_fragment_A(wg_sdp.partition_A(sQ))
            tSrK = tiled_mma_sdp.make_fragment_B(wg_sdp.partition_B(sK))
            tPrdO = tiled_mma_sdp.make_fragment_A(wg_sdp.partition_A(sdO))
            tPrV = tiled_mma_sdp.make_fragment_B(wg_sdp.partition_B(sV))
            tVrPt = tiled_mma_dkv.make_fragment_A(wg_dkv.partition_A(_transpose(sP)))
            tVrdOt = tiled_mma_dkv.make_fragment_B(wg_dkv.partition_B(_transpose(sdO)))
            tKrdSt = tiled_mma_dkv.make_fragment_A(wg_dkv.partition_A(_transpose(sdS)))
            tKrQt = tiled_mma_dkv.make_fragment_B(wg_dkv.partition_B(_transpose(sQ)))
            tQrdS = tiled_mma_dq.make_fragment_A(wg_dq.partition_A(sdS))
            tQrKt = tiled_mma_dq.make_fragment_B(wg_dq.partition_B(_transpose(sK)))

            acc_s = cute.make_rmem_tensor(tiled_mma_sdp.partition_shape_C((tm, tn)), Float32)
            acc_dp = cute.make_rmem_tensor(tiled_mma_sdp.partition_shape_C((tm, tn)), Float32)
            acc_dq = cute.make_rmem_tensor(tiled_mma_dq.partition_shape_C((tm, d)), Float32)
            acc_dv = cute.make_rmem_tensor(tiled_mma_dkv.partition_shape_C((tn, d)), Float32)
            acc_dk = cute.make_rmem_tensor(tiled_mma_dkv.partition_shape_C((tn, d)), Float32)
            acc_dv.fill(0.0)
            acc_dk.fill(0.0)
            thr_sdp = tiled_mma_sdp.get_slice(tidx)
            tScS = thr_sdp.partition_C(cute.make_identity_tensor((tm, tn)))
            # P and dS to shared memory by stmatrix, in the layout of the S accumulator.
            store_pds = cute.make_tiled_copy_C(
                cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), self.dtype), tiled_mma_sdp
            ).get_slice(tidx)
            tPsP = store_pds.partition_D(sP)
            tPsdS = store_pds.partition_D(sdS)
            r_p = cute.make_rmem_tensor_like(acc_s, self.dtype)
            r_ds = cute.make_rmem_tensor_like(acc_dp, self.dtype)
            s_mn = _acc_mn(acc_s)
            dp_mn = _acc_mn(acc_dp)
            c_mn = _acc_mn(tScS)
            rows = cute.size(s_mn, mode=[0])
            cols = cute.size(s_mn, mode=[1])
            lse = cute.make_rmem_tensor(rows, Float32)
            dsum = cute.make_rmem_tensor(rows, Float32)
            # Set here, not in a loop: an MMA field set inside a loop body cannot be read after it.
            tiled_mma_dkv.set(warpgroup.Field.ACCUMULATE, True)
            k_blocks_sdp = cute.size(tSrQ, mode=[2])
            k_blocks_kv = cute.size(tVrPt, mode=[2])
            k_blocks_dq = cute.size(tQrdS, mode=[2])
            # A step needs the mask where its keys pass the end (every step) or, causal, where some key
            # follows some row (the steps starting below the block's last key).
            mask_below = Int32(0)
            if const_expr(self.spec.causal):
                mask_below = n0 + tn
            if n0 + tn > skv:
                mask_below = sq + tm

            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            if steps > 0:
                kv_pipe.consumer_wait(pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1))
            for step in cutlass.range(steps, unroll=1):
                head = kv_head * groups + step // per_head
                m_block = m_start + step % per_head
                m0 = m_block * tm
                stage = state.index
                # (1) S = Q K^T and dP = dO V^T, issued together.
                q_pipe.consumer_wait(state)
                warpgroup.fence()
                tiled_mma_sdp.set(warpgroup.Field.ACCUMULATE, False)
                for kb in cutlass.range_constexpr(k_blocks_sdp):
                    cute.gemm(tiled_mma_sdp, acc_s, tSrQ[None, None, kb, stage], tSrK[None, None, kb, 0], acc_s)
                    tiled_mma_sdp.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.commit_group()
                do_pipe.consumer_wait(state)
                tiled_mma_sdp.set(warpgroup.Field.ACCUMULATE, False)
                for kb in cutlass.range_constexpr(k_blocks_sdp):
                    cute.gemm(tiled_mma_sdp, acc_dp, tPrdO[None, None, kb, stage], tPrV[None, None, kb, 0], acc_dp)
                    tiled_mma_sdp.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.commit_group()
                for r in cutlass.range_constexpr(rows):
                    row = m0 + c_mn[r, 0][0]
                    lse[r] = mLse[row, head, b]
                    dsum[r] = mDsum[row, head, b]
                # (2) P = exp2(S * scale_log2 - lse2), to shared memory.
                warpgroup.wait_group(1)
                if m0 < mask_below:
                    self._mask(acc_s, tScS, m0, n0, skv)
                for r in cutlass.range_constexpr(rows):
                    for c in cutlass.range_constexpr(cols):
                        s_mn[r, c] = cute.math.exp2(s_mn[r, c] * scale_log2 - lse[r], fastmath=True)
                r_p.store(acc_s.load().to(self.dtype))
                cute.copy(store_pds, store_pds.retile(r_p), tPsP[None, None, None, stage])
                # (3) dS = P * (dP - D), to shared memory.
                warpgroup.wait_group(0)
                for r in cutlass.range_constexpr(rows):
                    for c in cutlass.range_constexpr(cols):
                        dp_mn[r, c] = s_mn[r, c] * (dp_mn[r, c] - dsum[r])
                r_ds.store(acc_dp.load().to(self.dtype))
                cute.copy(store_pds, store_pds.retile(r_ds), tPsdS[None, None, None, stage])
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.barrier(barrier_id=_BAR_PDS, number_of_threads=_MMA_THREADS)
                # (4) dQ = dS K first (its atomics overlap the rest), then dV += P^T dO, dK += dS^T Q.
                warpgroup.fence()
                tiled_mma_dq.set(warpgroup.Field.ACCUMULATE, False)
                for kb in cutlass.range_constexpr(k_blocks_dq):
                    cute.gemm(tiled_mma_dq, acc_dq, tQrdS[None, None, kb, stage], tQrKt[None, None, kb, 0], acc_dq)
                    tiled_mma_dq.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.commit_group()
                for kb in cutlass.range_constexpr(k_blocks_kv):
                    cute.gemm(
                        tiled_mma_dkv, acc_dv, tVrPt[None, None, kb, stage], tVrdOt[None, None, kb, stage], acc_dv
                    )
                warpgroup.commit_group()
                for kb in cutlass.range_constexpr(k_blocks_kv):
                    cute.gemm(
                        tiled_mma_dkv, acc_dk, tKrdSt[None, None, kb, stage], tKrQt[None, None, kb, stage], acc_dk
                    )
                warpgroup.commit_group()
                warpgroup.wait_group(2)
                gdQ = mdQacc[None, m_block, head, b]
                vec4 = ir.VectorType.get([_VEC], Float32.mlir_type)
                for g in cutlass.range_constexpr(cute.size(acc_dq) // _VEC):
                    values = [acc_dq[g * _VEC + e].ir_value() for e in range(_VEC)]
                    cute.arch.red(
                        gdQ.iterator + _dq_offset(tidx, g * _VEC),
                        vector.from_elements(vec4, values),
                        op="add",
                        dtype=Float32,
                        sem="relaxed",
                        scope="gpu",
                    )
                warpgroup.wait_group(0)
                q_pipe.consumer_release(state)
                do_pipe.consumer_release(state)
                state.advance()
            self._epilogue(tiled_mma_dkv, acc_dk, acc_dv, mdK, mdV, n0, kv_head, b, skv, scale, tidx)

    @cute.jit
    def _mask(self, acc_s: cute.Tensor, tScS: cute.Tensor, m0: Int32, n0: Int32, skv: Int32):
        """-inf where the key is past the end or (causal) after the query."""
        for i in cutlass.range_constexpr(cute.size(acc_s)):
            col = n0 + tScS[i][1]
            limit = skv
            if const_expr(self.spec.causal):
                limit = cutlass.min(skv, m0 + tScS[i][0] + 1)
            acc_s[i] = Float32(-math.inf) if col >= limit else acc_s[i]

    @cute.jit
    def _epilogue(
        self,
        tiled_mma_dkv: cute.TiledMma,
        acc_dk: cute.Tensor,
        acc_dv: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        n0: Int32,
        kv_head: Int32,
        b: Int32,
        skv: Int32,
        scale: Float32,
        tidx: Int32,
    ):
        """dK (times attn_scale) and dV to global memory; keys past the end skipped."""
        coords = tiled_mma_dkv.get_slice(tidx).partition_C(cute.make_identity_tensor((self.tile_n, self.d)))
        for i in cutlass.range_constexpr(cute.size(acc_dk)):
            key = n0 + coords[i][0]
            if key < skv:
                mdK[key, coords[i][1], kv_head, b] = (acc_dk[i] * scale).to(self.dtype)
                mdV[key, coords[i][1], kv_head, b] = acc_dv[i].to(self.dtype)


class BwdPreprocess:
    """Per padded query row: D = rowsum(dO * O), stats in base 2, the dq accumulator's row zeroed."""

    def __init__(self, spec: BwdSpec) -> None:
        self.dtype = DTYPES[spec.dtype]
        self.d = spec.head_dim
        self.per_row = self.d // _ROW_CHUNK
        self.rows_per_cta = _THREADS_PER_WG // self.per_row

    @cute.jit
    def __call__(
        self,
        o_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        stats_ptr: cute.Pointer,
        dqacc_ptr: cute.Pointer,
        lse_ptr: cute.Pointer,
        dsum_ptr: cute.Pointer,
        batch: Int32,
        heads: Int32,
        sq: Int32,
        sq_pad: Int32,
        o_bs: Int64,
        o_hs: Int64,
        o_ss: Int64,
        do_bs: Int64,
        do_hs: Int64,
        do_ss: Int64,
        st_bs: Int64,
        st_hs: Int64,
        st_ss: Int64,
        stream: cuda.CUstream,
    ):
        d = self.d
        align = 128 // self.dtype.width  # rows 16-byte aligned (the builder checks): 16-byte loads

        def rows_of(ptr, bs, hs, ss):
            strides = (cute.assume(ss, divby=align), 1, cute.assume(hs, divby=align), cute.assume(bs, divby=align))
            return cute.make_tensor(ptr, cute.make_layout((sq, d, heads, batch), stride=strides))

        mO = rows_of(o_ptr, o_bs, o_hs, o_ss)
        mdO = rows_of(do_ptr, do_bs, do_hs, do_ss)
        mSt = cute.make_tensor(stats_ptr, cute.make_layout((sq, heads, batch), stride=(st_ss, st_hs, st_bs)))
        total = sq_pad * heads * batch
        mAcc = cute.make_tensor(dqacc_ptr, cute.make_layout((d, total), stride=(1, d)))
        mLse = cute.make_tensor(lse_ptr, cute.make_layout(total))
        mDsum = cute.make_tensor(dsum_ptr, cute.make_layout(total))
        self.kernel(mO, mdO, mSt, mAcc, mLse, mDsum, heads, sq, sq_pad).launch(
            grid=[total // self.rows_per_cta, 1, 1], block=[_THREADS_PER_WG, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mO: cute.Tensor,
        mdO: cute.Tensor,
        mSt: cute.Tensor,
        mAcc: cute.Tensor,
        mLse: cute.Tensor,
        mDsum: cute.Tensor,
        heads: Int32,
        sq: Int32,
        sq_pad: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        row = bidx * self.rows_per_cta + tidx // self.per_row
        i = row % sq_pad
        h = (row // sq_pad) % heads
        b = row // (sq_pad * heads)
        chunk = tidx % self.per_row
        acc = Float32(0.0)
        if i < sq:
            r_o = cute.make_rmem_tensor(_ROW_CHUNK, self.dtype)
            r_do = cute.make_rmem_tensor(_ROW_CHUNK, self.dtype)
            cute.autovec_copy(cute.local_tile(mO[i, None, h, b], (_ROW_CHUNK,), (chunk,)), r_o)
            cute.autovec_copy(cute.local_tile(mdO[i, None, h, b], (_ROW_CHUNK,), (chunk,)), r_do)
            for e in cutlass.range_constexpr(_ROW_CHUNK):
                acc = acc + r_o[e].to(Float32) * r_do[e].to(Float32)
        for k in cutlass.range_constexpr(self.per_row.bit_length() - 1):  # the lanes of one row are neighbours
            acc = acc + cute.arch.shuffle_sync_bfly(acc, offset=self.per_row >> (k + 1))
        zeros = cute.make_rmem_tensor(_ROW_CHUNK, Float32)
        zeros.fill(0.0)
        cute.autovec_copy(zeros, cute.local_tile(mAcc[None, row], (_ROW_CHUNK,), (chunk,)))
        if tidx % self.per_row == 0:
            lse2 = Float32(math.inf)
            if i < sq:
                stat = mSt[i, h, b]
                if stat != Float32(-math.inf):
                    lse2 = stat * Float32(_LOG2E)
            mLse[row] = lse2
            mDsum[row] = acc


class BwdConvert:
    """dq = attn_scale * accumulator, rounded to dq's dtype, in dq's strides: one CTA per accumulator tile.

    Each thread reads back (16-byte loads) the fragment its namesake in the main kernel added (see
    _dq_offset) and puts it in place in a shared-memory tile; the tile then goes out row by row, a
    warp's stores on consecutive elements."""

    def __init__(self, spec: BwdSpec) -> None:
        self.dtype = DTYPES[spec.dtype]
        self.d = spec.head_dim
        self.pitch = self.d + 8  # a row of the staging tile, padded: the fragment's rows land on other banks

    @cute.jit
    def __call__(
        self,
        dqacc_ptr: cute.Pointer,
        dq_ptr: cute.Pointer,
        batch: Int32,
        heads: Int32,
        sq: Int32,
        sq_pad: Int32,
        dq_bs: Int64,
        dq_hs: Int64,
        dq_ss: Int64,
        scale: Float32,
        stream: cuda.CUstream,
    ):
        d, tm = self.d, TILE_M
        mdQ = cute.make_tensor(dq_ptr, cute.make_layout((sq, d, heads, batch), stride=(dq_ss, 1, dq_hs, dq_bs)))
        tile_elems = cute.assume(sq_pad * d, divby=tm * d)  # whole tiles per head: 16-byte aligned fragments
        mAcc = cute.make_tensor(
            dqacc_ptr,
            cute.make_layout((tm * d, sq_pad // tm, heads, batch), stride=(1, tm * d, tile_elems, tile_elems * heads)),
        )
        tiled_mma_dq = _dq_mma(self.dtype, d)

        @cute.struct
        class SharedStorage:
            tile: cute.struct.Align[cute.struct.MemRange[self.dtype, tm * self.pitch], 16]

        self.shared_storage = SharedStorage
        self.kernel(mAcc, mdQ, tiled_mma_dq, sq, scale).launch(
            grid=[sq_pad // tm, heads, batch], block=[_MMA_THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mAcc: cute.Tensor, mdQ: cute.Tensor, tiled_mma_dq: cute.TiledMma, sq: Int32, scale: Float32):
        tidx, _, _ = cute.arch.thread_idx()
        m_block, h, b = cute.arch.block_idx()
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        sT = storage.tile.get_tensor(cute.make_layout((TILE_M, self.d), stride=(self.pitch, 1)))
        coords = tiled_mma_dq.get_slice(tidx).partition_C(cute.make_identity_tensor((TILE_M, self.d)))
        values = cute.size(coords)
        # This thread's fragment: value i at _dq_offset(tidx, i), i.e. (i % 4, i // 4) of this view.
        tile = mAcc[None, m_block, h, b]
        frags = cute.make_tensor(
            tile.iterator,
            cute.make_layout((_VEC, values // _VEC, _MMA_THREADS), stride=(1, _MMA_THREADS * _VEC, _VEC)),
        )
        frag = frags[None, None, tidx]
        r_acc = cute.make_rmem_tensor((_VEC, values // _VEC), Float32)
        cute.autovec_copy(frag, r_acc)
        for i in cutlass.range_constexpr(values):
            sT[coords[i][0], coords[i][1]] = (r_acc[i] * scale).to(self.dtype)
        cute.arch.sync_threads()
        for k in cutlass.range_constexpr(TILE_M * self.d // _MMA_THREADS):
            r = k * (_MMA_THREADS // self.d) + tidx // self.d
            c = tidx % self.d
            row = m_block * TILE_M + r
            if row < sq:
                mdQ[row, c, h, b] = sT[r, c]
