"""Batchnorm training forward over channels-last x in CuTe DSL: the experiment's kernels (not sigdnn's).

Written to learn whether CuTe DSL passes could take sigdnn's cuTile
batchnorm (NHWC 64x256x56x56 bf16, 2.38 TB/s) to #7's 2.5 TB/s; measured by
``cute_bn_train.py`` (benchmarks/results/gpu_cutile_2026-12-02c.md), none
did, so no builder uses them. x is an (M, C) row-major array (M = N*H*W). A
thread owns one 16-byte vector of channels (``vec`` of them) and walks rows
``rows`` apart, so ``lanes = C / vec`` threads cover a row and a block of
``lanes * rows`` threads covers ``rows`` rows at a step; loads are issued
``unroll`` at a time before any is used.

* ``ChannelStats``: the partial-sum pass in the format sigdnn's cuTile
  finalize reads, one float64 (S, C) row per block, blocks walking x in
  bands of chunks; d = x - x[0] and d^2 added in float32 per thread.
* ``ChannelApply``: y = (x - mean) * (inv * scale) + bias, each thread's
  coefficients loaded once, chunks last first.
* ``OnePass``: the whole node in one cooperative launch, x kept in shared
  memory where it fits, a grid-wide barrier between the passes.
"""

from __future__ import annotations

from typing import Any

import attrs
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Float64, Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES

THREADS = 256  # a block's threads, unless one row of C needs more lanes


@attrs.frozen
class ChannelGeometry:
    """How (M, C) x is cut among a block's threads; ``unroll`` rows a thread has in flight."""

    dtype: str
    channels: int
    blocks: int
    threads: int = THREADS
    unroll: int = 4

    @property
    def vec(self) -> int:
        return 16 // (DTYPES[self.dtype].width // 8)

    @property
    def lanes(self) -> int:
        return self.channels // self.vec

    @property
    def rows(self) -> int:
        return max(1, self.threads // self.lanes)

    @property
    def block_threads(self) -> int:
        return self.lanes * self.rows


def _vector(m: cute.Tensor, row: Int32, lane: Int32, vec: int) -> cute.Tensor:
    return cute.local_tile(m[row, None], (vec,), (lane,))


def _shifted_sums(mX: cute.Tensor, lane: Int32, vec: int, dtype: Any) -> tuple:
    """This thread's shift (x's first row at its channels, as loaded and as float32) and two zeroed sums."""
    shift = cute.make_rmem_tensor(vec, dtype)
    cute.autovec_copy(_vector(mX, 0, lane, vec), shift)
    acc0 = cute.make_rmem_tensor(vec, Float32)
    acc1 = cute.make_rmem_tensor(vec, Float32)
    acc0.fill(0.0)
    acc1.fill(0.0)
    return shift, shift.load().to(Float32), acc0, acc1


def _add(acc0: cute.Tensor, acc1: cute.Tensor, xv: cute.Tensor, p: Any) -> None:
    """acc0 += d, acc1 += d^2 for d = x - p."""
    d = xv.load().to(Float32) - p
    acc0.store(acc0.load() + d)
    acc1.store(acc1.load() + d * d)


class ChannelStats:
    """Partial sums of d = x - x[0] and d^2 per channel, one float64 row per block.

    ``atomics``: the block's sums are added by float64 atomics into p0 as a (2, C) accumulator instead (p1 unused);
    ``trigger``: dependents of a programmatic launch may start once this block has read its rows.
    """

    def __init__(self, g: ChannelGeometry, atomics: bool = False, trigger: bool = False) -> None:
        self.g = g
        self.dtype = DTYPES[g.dtype]
        self.atomics = atomics
        self.trigger = trigger

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, p0_ptr: cute.Pointer, p1_ptr: cute.Pointer, m: Int32,
                 stream: cuda.CUstream):  # fmt: skip
        g = self.g
        mX = cute.make_tensor(x_ptr, cute.make_layout((m, g.channels), stride=(g.channels, 1)))
        parts = cute.make_layout((g.blocks, g.channels), stride=(g.channels, 1))
        mP0, mP1 = cute.make_tensor(p0_ptr, parts), cute.make_tensor(p1_ptr, parts)
        self.kernel(mX, mP0, mP1, m).launch(grid=[g.blocks, 1, 1], block=[g.block_threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mP0: cute.Tensor, mP1: cute.Tensor, m: Int32):
        g = self.g
        vec, lanes, rows, blocks = g.vec, g.lanes, g.rows, g.blocks
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        lane, r = tidx % lanes, tidx // lanes
        smem = utils.SmemAllocator()
        sums = cute.make_layout((rows, g.channels), stride=(g.channels, 1))
        s0 = smem.allocate_tensor(Float32, sums, 16)
        s1 = smem.allocate_tensor(Float32, sums, 16)

        _, p, acc0, acc1 = _shifted_sums(mX, lane, vec, self.dtype)
        chunk = g.unroll * rows
        full = m // chunk
        xs = [cute.make_rmem_tensor(vec, self.dtype) for _ in range(g.unroll)]
        for i in cutlass.range((full + blocks - 1 - bidx) // blocks):
            base = (i * blocks + bidx) * chunk + r
            for u in cutlass.range_constexpr(g.unroll):  # every load first: unroll of them in flight
                cute.autovec_copy(_vector(mX, base + u * rows, lane, vec), xs[u])
            for u in cutlass.range_constexpr(g.unroll):
                _add(acc0, acc1, xs[u], p)
        if bidx == full % blocks:  # the rows after the last whole chunk
            for u in cutlass.range_constexpr(g.unroll):
                row = full * chunk + u * rows + r
                if row < m:
                    cute.autovec_copy(_vector(mX, row, lane, vec), xs[u])
                    _add(acc0, acc1, xs[u], p)
        if cutlass.const_expr(self.trigger):
            cute.arch.griddepcontrol_launch_dependents()
        for j in cutlass.range_constexpr(vec):
            s0[r, lane * vec + j] = acc0[j]
            s1[r, lane * vec + j] = acc1[j]
        cute.arch.sync_threads()
        for c in cutlass.range(tidx, g.channels, g.block_threads):
            t0, t1 = Float64(0.0), Float64(0.0)
            for k in cutlass.range_constexpr(rows):
                t0 = t0 + Float64(s0[k, c])
                t1 = t1 + Float64(s1[k, c])
            if cutlass.const_expr(self.atomics):
                cute.arch.red(mP0.iterator + c, t0, op="add", dtype=Float64, sem="relaxed", scope="gpu")
                cute.arch.red(mP0.iterator + g.channels + c, t1, op="add", dtype=Float64, sem="relaxed", scope="gpu")
            else:
                mP0[bidx, c] = t0
                mP1[bidx, c] = t1


class ChannelApply:
    """y = (x - mean) * (inv * scale) + bias, float32 coefficients, rows last first."""

    def __init__(self, g: ChannelGeometry, param_dtype: str) -> None:
        self.g = g
        self.dtype = DTYPES[g.dtype]
        self.param = DTYPES[param_dtype]

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, mean_ptr: cute.Pointer, inv_ptr: cute.Pointer, scale_ptr: cute.Pointer,
                 bias_ptr: cute.Pointer, y_ptr: cute.Pointer, m: Int32, stream: cuda.CUstream):  # fmt: skip
        g = self.g
        rows = cute.make_layout((m, g.channels), stride=(g.channels, 1))
        mX, mY = cute.make_tensor(x_ptr, rows), cute.make_tensor(y_ptr, rows)
        vec = cute.make_layout(g.channels)
        mMean, mInv = cute.make_tensor(mean_ptr, vec), cute.make_tensor(inv_ptr, vec)
        mScale, mBias = cute.make_tensor(scale_ptr, vec), cute.make_tensor(bias_ptr, vec)
        self.kernel(mX, mMean, mInv, mScale, mBias, mY, m).launch(
            grid=[g.blocks, 1, 1], block=[g.block_threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mMean: cute.Tensor, mInv: cute.Tensor, mScale: cute.Tensor,
               mBias: cute.Tensor, mY: cute.Tensor, m: Int32):  # fmt: skip
        g = self.g
        vec, lanes, rows, blocks = g.vec, g.lanes, g.rows, g.blocks
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        lane, r = tidx % lanes, tidx // lanes
        coef = []
        for t, dtype in ((mMean, Float32), (mInv, Float32), (mScale, self.param), (mBias, self.param)):
            v = cute.make_rmem_tensor(vec, dtype)
            cute.autovec_copy(cute.local_tile(t, (vec,), (lane,)), v)
            coef.append(v.load().to(Float32))
        mean, a, b = coef[0], coef[1] * coef[2], coef[3]
        chunk = g.unroll * rows
        head = m % chunk  # rows before the first whole chunk (chunks end at the last row)
        full = m // chunk
        xs = [cute.make_rmem_tensor(vec, self.dtype) for _ in range(g.unroll)]
        ys = cute.make_rmem_tensor(vec, self.dtype)
        for i in cutlass.range((full + blocks - 1 - bidx) // blocks):
            base = head + (full - 1 - (i * blocks + bidx)) * chunk + r  # last chunk first
            for u in cutlass.range_constexpr(g.unroll):  # every load first: x and y may alias for the compiler
                cute.autovec_copy(_vector(mX, base + u * rows, lane, vec), xs[u])
            for u in cutlass.range_constexpr(g.unroll):
                ys.store(((xs[u].load().to(Float32) - mean) * a + b).to(self.dtype))
                cute.autovec_copy(ys, _vector(mY, base + u * rows, lane, vec))
        if bidx == full % blocks:
            for u in cutlass.range_constexpr(g.unroll):
                row = u * rows + r
                if row < head:
                    cute.autovec_copy(_vector(mX, row, lane, vec), xs[u])
                    ys.store(((xs[u].load().to(Float32) - mean) * a + b).to(self.dtype))
                    cute.autovec_copy(ys, _vector(mY, row, lane, vec))


@attrs.frozen
class DerivedSpec:
    """An elementwise pass that derives the coefficients from ``ChannelStats``'s (2, C) float64 accumulator."""

    geometry: ChannelGeometry  # ``blocks`` unused: one chunk of ``unroll * rows`` rows a block, last first
    param_dtype: str
    stat_dtype: str
    running: bool
    epsilon: float
    momentum: float
    pdl: bool = False  # launched as a programmatic dependent of the statistics pass


def _node_tensors(c: int, m: Int32, ptrs: tuple, acc_ptr: cute.Pointer, count_ptr: cute.Pointer, counters: int):
    """x, y (M, C); scale, bias, mean, inv_variance, running mean and variance in and out (C,); the (2, C)
    accumulator and ``counters`` int32 counters."""
    rows, vec = cute.make_layout((m, c), stride=(c, 1)), cute.make_layout(c)
    tensors = [cute.make_tensor(p, rows if i < 2 else vec) for i, p in enumerate(ptrs)]
    return [*tensors, cute.make_tensor(acc_ptr, cute.make_layout(2 * c)), cute.make_tensor(count_ptr, counters)]


class _NodeKernel:
    """A kernel that writes the node's per-channel outputs (``_outputs``) from a DerivedSpec or OnePassSpec."""

    def __init__(self, spec: Any) -> None:
        self.s = spec
        self.g = spec.geometry
        self.dtype = DTYPES[self.g.dtype]
        self.param = DTYPES[spec.param_dtype]
        self.stat = DTYPES[spec.stat_dtype]

    @cute.jit
    def _outputs(self, mMean: cute.Tensor, mInv: cute.Tensor, mRm: cute.Tensor, mRv: cute.Tensor, mNrm: cute.Tensor,
                 mNrv: cute.Tensor, ch: Int32, mu: Float64, var: Float64, inv: Float64, count: Float64):  # fmt: skip
        s = self.s
        mMean[ch] = self.stat(mu)
        mInv[ch] = self.stat(inv)
        if cutlass.const_expr(s.running):
            keep = 1.0 - s.momentum
            mNrm[ch] = self.stat(keep * Float64(mRm[ch]) + s.momentum * mu)
            mNrv[ch] = self.stat(keep * Float64(mRv[ch]) + s.momentum * var * (count / (count - 1.0)))


class ChannelApplyDerived(_NodeKernel):
    """y = (x - mean) * (inv * scale) + bias, each block deriving its coefficients from the sums; block 0 writes
    the per-channel outputs, and the last block to finish puts the accumulator and its ticket back to zero."""

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, y_ptr: cute.Pointer, scale_ptr: cute.Pointer, bias_ptr: cute.Pointer,
                 mean_ptr: cute.Pointer, inv_ptr: cute.Pointer, rm_ptr: cute.Pointer, rv_ptr: cute.Pointer,
                 nrm_ptr: cute.Pointer, nrv_ptr: cute.Pointer, acc_ptr: cute.Pointer, count_ptr: cute.Pointer,
                 m: Int32, stream: cuda.CUstream):  # fmt: skip
        g = self.g
        ptrs = (x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, rm_ptr, rv_ptr, nrm_ptr, nrv_ptr)
        tensors = _node_tensors(g.channels, m, ptrs, acc_ptr, count_ptr, 1)
        chunk = g.unroll * g.rows
        grid = (m + chunk - 1) // chunk
        self.kernel(*tensors, m).launch(
            grid=[grid, 1, 1], block=[g.block_threads, 1, 1], use_pdl=self.s.pdl, stream=stream
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mScale: cute.Tensor, mBias: cute.Tensor, mMean: cute.Tensor,
               mInv: cute.Tensor, mRm: cute.Tensor, mRv: cute.Tensor, mNrm: cute.Tensor, mNrv: cute.Tensor,
               mAcc: cute.Tensor, mCount: cute.Tensor, m: Int32):  # fmt: skip
        s, g = self.s, self.g
        vec, lanes, rows, unroll, c = g.vec, g.lanes, g.rows, g.unroll, g.channels
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        lane, r = tidx % lanes, tidx // lanes
        smem = utils.SmemAllocator()
        sLast = smem.allocate_tensor(Int32, cute.make_layout(1), 4)
        chunk = unroll * rows
        base = (gdim - 1 - bidx) * chunk + r  # last chunk first
        xs = [cute.make_rmem_tensor(vec, self.dtype) for _ in range(unroll)]
        shift = cute.make_rmem_tensor(vec, self.dtype)
        scale = cute.make_rmem_tensor(vec, self.param)
        bias = cute.make_rmem_tensor(vec, self.param)
        cute.autovec_copy(_vector(mX, 0, lane, vec), shift)
        cute.autovec_copy(cute.local_tile(mScale, (vec,), (lane,)), scale)
        cute.autovec_copy(cute.local_tile(mBias, (vec,), (lane,)), bias)
        for u in cutlass.range_constexpr(unroll):  # x does not depend on the statistics: load it first
            if base + u * rows < m:
                cute.autovec_copy(_vector(mX, base + u * rows, lane, vec), xs[u])
        if cutlass.const_expr(s.pdl):
            cute.arch.griddepcontrol_wait()
        per = Float64(1.0) / Float64(m)
        mean = cute.make_rmem_tensor(vec, Float32)
        a = cute.make_rmem_tensor(vec, Float32)
        sums = [cute.make_rmem_tensor(vec, Float64) for _ in range(2)]
        for k in cutlass.range_constexpr(2):  # plain vector loads: the statistics grid has finished
            cute.autovec_copy(cute.local_tile(mAcc, (vec,), (k * lanes + lane,)), sums[k])
        for j in cutlass.range_constexpr(vec):
            ch = lane * vec + j
            s0, s1 = sums[0][j], sums[1][j]
            mu = Float64(shift[j]) + s0 * per
            var = cutlass.max((s1 - s0 * (s0 * per)) * per, Float64(0.0))
            mean[j] = Float32(mu)
            a[j] = cute.math.rsqrt(Float32(var + s.epsilon)) * Float32(scale[j])
            if bidx == 0 and r == 0:
                inv = Float64(1.0) / cute.math.sqrt(var + s.epsilon)
                self._outputs(mMean, mInv, mRm, mRv, mNrm, mNrv, ch, mu, var, inv, Float64(m))
        mv, av, bv = mean.load(), a.load(), bias.load().to(Float32)
        ys = cute.make_rmem_tensor(vec, self.dtype)
        for u in cutlass.range_constexpr(unroll):
            if base + u * rows < m:
                ys.store(((xs[u].load().to(Float32) - mv) * av + bv).to(self.dtype))
                cute.autovec_copy(ys, _vector(mY, base + u * rows, lane, vec))
        cute.arch.sync_threads()  # every thread has read the sums: the last block out may clear them
        if tidx == 0:
            sLast[0] = Int32(0)
            if cute.arch.atomic_add(mCount.iterator, Int32(1), sem="relaxed", scope="gpu") == gdim - 1:
                sLast[0] = Int32(1)
        cute.arch.sync_threads()
        if sLast[0] == 1:
            for ch in cutlass.range(tidx, 2 * c, g.block_threads):
                mAcc[ch] = Float64(0.0)
            if tidx == 0:
                mCount[0] = Int32(0)


@attrs.frozen
class OnePassSpec:
    """One batchnorm training forward over (M, C) channels-last x in one cooperative launch."""

    dtype: str  # x and y
    channels: int
    param_dtype: str  # scale, bias
    stat_dtype: str  # mean, inv_variance and the running statistics
    running: bool
    epsilon: float
    momentum: float
    blocks: int  # one a SM, all resident (cooperative launch)
    threads: int = 512
    unroll: int = 8
    cache_bytes: int = 200 * 1024  # of x kept in shared memory between the passes
    fold: int = 4  # the block's sums meet in shared memory ``rows / fold`` rows at a time
    trace: bool = False  # record each block's phase times (globaltimer) into the trace array

    @property
    def geometry(self) -> ChannelGeometry:
        return ChannelGeometry(self.dtype, self.channels, self.blocks, self.threads, self.unroll)

    @property
    def chunk_rows(self) -> int:
        """Rows a block takes at a time: ``unroll`` steps of ``rows``."""
        return self.unroll * self.geometry.rows

    @property
    def cache_chunks(self) -> int:
        """Chunks of x each block keeps in shared memory."""
        return self.cache_bytes // (self.chunk_rows * self.channels * (16 // self.geometry.vec))


class OnePass(_NodeKernel):
    """Statistics, a grid-wide barrier, the per-channel outputs, y: x read from DRAM once where it fits on chip.

    Every block keeps its share of x's first ``cache_chunks * blocks`` chunks
    (``chunk_rows`` rows each, block b taking chunks b, b + blocks, ...) in
    shared memory while adding d = x - x[0] and d^2 per channel, then takes
    the other chunks from a queue (an atomic counter; blocks read at
    different rates). The block's float64 sums go to a (2, C) accumulator by
    atomic adds; a counter then holds every block until all have added.
    Each thread derives its channels' coefficients from the totals, block 0
    writes the node's per-channel outputs, and y is written: the uncached
    chunks from a second queue, last first (L2 saw them last), then the kept
    ones from shared memory. The accumulator, counter and queues start at
    zero and the last block out puts them back (the launch owns them); the
    atomic adds land in any order, so the float64 totals vary in their last
    bits between runs. ``trace`` records each block's phase ends.
    """

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, y_ptr: cute.Pointer, scale_ptr: cute.Pointer, bias_ptr: cute.Pointer,
                 mean_ptr: cute.Pointer, inv_ptr: cute.Pointer, rm_ptr: cute.Pointer, rv_ptr: cute.Pointer,
                 nrm_ptr: cute.Pointer, nrv_ptr: cute.Pointer, acc_ptr: cute.Pointer, count_ptr: cute.Pointer,
                 trace_ptr: cute.Pointer, m: Int32, stream: cuda.CUstream):  # fmt: skip
        ptrs = (x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, rm_ptr, rv_ptr, nrm_ptr, nrv_ptr)
        tensors = _node_tensors(self.s.channels, m, ptrs, acc_ptr, count_ptr, 4)
        tensors.append(cute.make_tensor(trace_ptr, cute.make_layout((self.s.blocks, 8), stride=(8, 1))))
        self.kernel(*tensors, m).launch(
            grid=[self.s.blocks, 1, 1], block=[self.g.block_threads, 1, 1], cooperative=True, stream=stream
        )

    @cute.jit
    def _mark(self, trace: cute.Tensor, tidx: Int32, bidx: Int32, phase: int):
        """With ``trace``: the time this block reached ``phase``."""
        if cutlass.const_expr(self.s.trace):  # noqa: SIM102 (a compile-time test cannot join a run-time one)
            if tidx == 0:
                trace[bidx, phase] = cute.arch.globaltimer()

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mScale: cute.Tensor, mBias: cute.Tensor, mMean: cute.Tensor,
               mInv: cute.Tensor, mRm: cute.Tensor, mRv: cute.Tensor, mNrm: cute.Tensor, mNrv: cute.Tensor,
               mAcc: cute.Tensor, mCount: cute.Tensor, mTrace: cute.Tensor, m: Int32):  # fmt: skip
        s, g = self.s, self.g
        vec, lanes, rows, unroll, blocks, c = g.vec, g.lanes, g.rows, g.unroll, s.blocks, s.channels
        threads, chunk, kept = g.block_threads, s.chunk_rows, s.cache_chunks
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        lane, r = tidx % lanes, tidx // lanes
        smem = utils.SmemAllocator()
        sX = smem.allocate_tensor(self.dtype, cute.make_layout((max(kept, 1) * chunk, c), stride=(c, 1)), 16)
        folded = rows // s.fold
        sSum = smem.allocate_tensor(Float32, cute.make_layout((2, folded, c), stride=(folded * c, c, 1)), 16)
        sNext = smem.allocate_tensor(Int32, cute.make_layout(2), 8)  # a chunk taken from a queue; the last block
        self._mark(mTrace, tidx, bidx, 0)

        whole = m // chunk  # whole chunks of ``chunk`` rows; the first ``kept`` * blocks are kept on chip
        shared = cutlass.min(whole, kept * blocks)
        cached = (shared + blocks - 1 - bidx) // blocks  # block b keeps chunks b, b + blocks, ...
        shift, p, acc0, acc1 = _shifted_sums(mX, lane, vec, self.dtype)
        xs = [cute.make_rmem_tensor(vec, self.dtype) for _ in range(unroll)]

        # 1. statistics: this block's kept chunks, then chunks from a queue (blocks run at different rates), the
        # rows after the last chunk
        for i in cutlass.range(cached):
            base = (i * blocks + bidx) * chunk + r
            for u in cutlass.range_constexpr(unroll):  # every load first: unroll of them in flight
                cute.autovec_copy(_vector(mX, base + u * rows, lane, vec), xs[u])
            for u in cutlass.range_constexpr(unroll):
                _add(acc0, acc1, xs[u], p)
                cute.autovec_copy(xs[u], _vector(sX, i * chunk + u * rows + r, lane, vec))
        if tidx == 0:
            sNext[0] = shared + cute.arch.atomic_add(mCount.iterator + 1, Int32(1), sem="relaxed", scope="gpu")
        cute.arch.sync_threads()
        k = sNext[0]
        while k < whole:
            base = k * chunk + r
            for u in cutlass.range_constexpr(unroll):
                cute.autovec_copy(_vector(mX, base + u * rows, lane, vec), xs[u])
            cute.arch.sync_threads()  # every thread has k: the next may be taken
            if tidx == 0:
                sNext[0] = shared + cute.arch.atomic_add(mCount.iterator + 1, Int32(1), sem="relaxed", scope="gpu")
            for u in cutlass.range_constexpr(unroll):
                _add(acc0, acc1, xs[u], p)
            cute.arch.sync_threads()
            k = sNext[0]
        tail = whole * chunk
        if bidx == whole % blocks:
            for u in cutlass.range_constexpr(unroll):
                if tail + u * rows + r < m:
                    cute.autovec_copy(_vector(mX, tail + u * rows + r, lane, vec), xs[u])
                    _add(acc0, acc1, xs[u], p)
        self._mark(mTrace, tidx, bidx, 1)

        # 2. the block's sums (folded through shared memory) into the accumulator, then the barrier
        for f in cutlass.range_constexpr(s.fold):
            if r // folded == f:
                for j in cutlass.range_constexpr(vec):
                    at = lane * vec + j
                    if cutlass.const_expr(f == 0):
                        sSum[0, r % folded, at] = acc0[j]
                        sSum[1, r % folded, at] = acc1[j]
                    else:
                        sSum[0, r % folded, at] = sSum[0, r % folded, at] + acc0[j]
                        sSum[1, r % folded, at] = sSum[1, r % folded, at] + acc1[j]
            cute.arch.sync_threads()
        for ch in cutlass.range(tidx, c, threads):
            t0, t1 = Float64(0.0), Float64(0.0)
            for k in cutlass.range_constexpr(folded):
                t0 = t0 + Float64(sSum[0, k, ch])
                t1 = t1 + Float64(sSum[1, k, ch])
            cute.arch.red(mAcc.iterator + ch, t0, op="add", dtype=Float64, sem="relaxed", scope="gpu")
            cute.arch.red(mAcc.iterator + c + ch, t1, op="add", dtype=Float64, sem="relaxed", scope="gpu")
        cute.arch.sync_threads()
        self._mark(mTrace, tidx, bidx, 5)
        if tidx == 0:
            cute.arch.fence_acq_rel_gpu()
            cute.arch.atomic_add(mCount.iterator, Int32(1), sem="relaxed", scope="gpu")
            seen = cute.arch.load(mCount.iterator, Int32, sem="acquire", scope="gpu")
            while seen < blocks:
                seen = cute.arch.load(mCount.iterator, Int32, sem="acquire", scope="gpu")
        cute.arch.sync_threads()
        self._mark(mTrace, tidx, bidx, 2)

        # 3. each thread's coefficients from the totals; block 0 writes the per-channel outputs
        count = Float64(m)
        mean = cute.make_rmem_tensor(vec, Float32)
        a = cute.make_rmem_tensor(vec, Float32)
        b = cute.make_rmem_tensor(vec, Float32)
        scale = cute.make_rmem_tensor(vec, self.param)
        bias = cute.make_rmem_tensor(vec, self.param)
        cute.autovec_copy(cute.local_tile(mScale, (vec,), (lane,)), scale)
        cute.autovec_copy(cute.local_tile(mBias, (vec,), (lane,)), bias)
        for j in cutlass.range_constexpr(vec):
            ch = lane * vec + j
            s0 = cute.arch.load(mAcc.iterator + ch, Float64, sem="relaxed", scope="gpu")
            s1 = cute.arch.load(mAcc.iterator + c + ch, Float64, sem="relaxed", scope="gpu")
            mu = Float64(shift[j]) + s0 / count
            var = cutlass.max((s1 - s0 * (s0 / count)) / count, Float64(0.0))
            inv = Float64(1.0) / cute.math.sqrt(var + s.epsilon)
            mean[j] = Float32(mu)
            a[j] = Float32(inv) * Float32(scale[j])
            b[j] = Float32(bias[j])
            if bidx == 0 and r == 0:
                self._outputs(mMean, mInv, mRm, mRv, mNrm, mNrv, ch, mu, var, inv, count)
        # 4. y: the rows after the last chunk, chunks from a second queue last first (L2 saw them last), the kept
        mv, av, bv = mean.load(), a.load(), b.load()
        ys = cute.make_rmem_tensor(vec, self.dtype)
        if bidx == whole % blocks:
            for u in cutlass.range_constexpr(unroll):
                if tail + u * rows + r < m:
                    cute.autovec_copy(_vector(mX, tail + u * rows + r, lane, vec), xs[u])
                    ys.store(((xs[u].load().to(Float32) - mv) * av + bv).to(self.dtype))
                    cute.autovec_copy(ys, _vector(mY, tail + u * rows + r, lane, vec))
        if tidx == 0:
            sNext[0] = whole - 1 - cute.arch.atomic_add(mCount.iterator + 2, Int32(1), sem="relaxed", scope="gpu")
        cute.arch.sync_threads()
        k = sNext[0]
        while k >= shared:
            base = k * chunk + r
            for u in cutlass.range_constexpr(unroll):
                cute.autovec_copy(_vector(mX, base + u * rows, lane, vec), xs[u])
            cute.arch.sync_threads()
            if tidx == 0:
                taken = cute.arch.atomic_add(mCount.iterator + 2, Int32(1), sem="relaxed", scope="gpu")
                sNext[0] = whole - 1 - taken
            for u in cutlass.range_constexpr(unroll):
                ys.store(((xs[u].load().to(Float32) - mv) * av + bv).to(self.dtype))
                cute.autovec_copy(ys, _vector(mY, base + u * rows, lane, vec))
            cute.arch.sync_threads()
            k = sNext[0]
        self._mark(mTrace, tidx, bidx, 3)
        for i in cutlass.range(cached):
            base = (i * blocks + bidx) * chunk + r
            for u in cutlass.range_constexpr(unroll):
                cute.autovec_copy(_vector(sX, i * chunk + u * rows + r, lane, vec), xs[u])
                ys.store(((xs[u].load().to(Float32) - mv) * av + bv).to(self.dtype))
                cute.autovec_copy(ys, _vector(mY, base + u * rows, lane, vec))
        self._mark(mTrace, tidx, bidx, 4)

        # 5. the last block out puts the accumulator, the counter and the queues back to zero for the next launch
        if tidx == 0:
            sNext[1] = Int32(0)
            if cute.arch.atomic_add(mCount.iterator, Int32(1), sem="relaxed", scope="gpu") == 2 * blocks - 1:
                sNext[1] = Int32(1)
        cute.arch.sync_threads()
        if sNext[1] == 1:
            for ch in cutlass.range(tidx, 2 * c, threads):
                mAcc[ch] = Float64(0.0)
            if tidx < 3:
                mCount[tidx] = Int32(0)


_CACHE = CompileCache()


def _ptr(dtype: Any) -> Any:
    return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=16)


def _node_ptrs(spec: DerivedSpec | OnePassSpec) -> tuple:
    """Placeholder pointers of ``NODE_PORTS``' order (x, y, scale, bias, four statistics), the accumulator, the
    counters: what the node kernels compile against."""
    dt, pt, st = DTYPES[spec.geometry.dtype], DTYPES[spec.param_dtype], DTYPES[spec.stat_dtype]
    return (_ptr(dt), _ptr(dt), _ptr(pt), _ptr(pt), *(_ptr(st) for _ in range(6)), _ptr(Float64), _ptr(Int32))


def compiled_stats(g: ChannelGeometry) -> Any:
    """The compiled statistics pass of one geometry (once per process)."""

    def compile_fn() -> Any:
        return cute.compile(ChannelStats(g), _ptr(DTYPES[g.dtype]), _ptr(Float64), _ptr(Float64), Int32(1),
                            cuda.CUstream(0))  # fmt: skip

    return _CACHE.get(("stats", g), None, compile_fn)


def compiled_apply(g: ChannelGeometry, param_dtype: str) -> Any:
    """The compiled elementwise pass of one geometry and scale / bias dtype (once per process)."""

    def compile_fn() -> Any:
        dt, pt = DTYPES[g.dtype], DTYPES[param_dtype]
        ptrs = (_ptr(dt), _ptr(Float32), _ptr(Float32), _ptr(pt), _ptr(pt), _ptr(dt))
        return cute.compile(ChannelApply(g, param_dtype), *ptrs, Int32(1), cuda.CUstream(0))

    return _CACHE.get(("apply", g, param_dtype), None, compile_fn)


def compiled_stats_atomics(g: ChannelGeometry, trigger: bool) -> Any:
    """The statistics pass adding into a (2, C) accumulator (once per process)."""

    def compile_fn() -> Any:
        return cute.compile(ChannelStats(g, True, trigger), _ptr(DTYPES[g.dtype]), _ptr(Float64), _ptr(Float64),
                            Int32(1), cuda.CUstream(0))  # fmt: skip

    return _CACHE.get(("stats_atomics", g, trigger), None, compile_fn)


def compiled_derived(spec: DerivedSpec) -> Any:
    """The elementwise pass deriving its coefficients (once per process)."""

    def compile_fn() -> Any:
        return cute.compile(ChannelApplyDerived(spec), *_node_ptrs(spec), Int32(1), cuda.CUstream(0))

    return _CACHE.get(("derived", spec), None, compile_fn)


def compiled_one_pass(spec: OnePassSpec) -> Any:
    """The compiled one-launch training forward of one spec (once per process)."""

    def compile_fn() -> Any:
        trace = make_ptr(cutlass.Int64, 0, cute.AddressSpace.gmem, assumed_align=8)
        return cute.compile(OnePass(spec), *_node_ptrs(spec), trace, Int32(1), cuda.CUstream(0))

    return _CACHE.get(("one_pass", spec), None, compile_fn)
