"""Batchnorm training forward over channels-last x in one cooperative launch (sm_90): x read from DRAM once where
the chip can keep it.

Two passes over x (statistics, then y) read it twice and wait out a
finalize between them; on the H200 no form of them came under 85 us for
NHWC 64x256x56x56 bf16, a hand-written CUDA C one included
(docs/experiments.md). Here each of ``blocks`` blocks (one a SM,
all resident: a cooperative launch) owns whole groups of ``group_rows``
rows, a thread one 16-byte vector of a row (``lanes`` threads cover a row's
channels):

1. statistics: the block's first ``kept_registers`` groups are loaded into
   registers, evict-first in L2 (never read from memory again), and its next
   ``kept_shared`` groups into shared memory (cp.async, bypassing L1);
   its share of the other groups streams through ``step`` at a time (the
   next step's loads issued before this one is added); each thread adds
   d = x - x[0] and d^2 per channel in float32;
2. the block's sums meet in shared memory and go by float64 atomic adds
   into copy ``block % slots`` of an accumulator (copies spread the
   atomics); a grid barrier follows: a counter to which block 0 adds
   2^31 - (blocks - 1) and every other block 1, so its top bit flips when
   the last block arrives (as CUDA's cooperative groups do) and the counter
   needs no reset;
3. every block derives every channel's mean and inverse deviation from the
   accumulator (float64), block 0 writes the node's per-channel outputs, and
   each block zeroes its share of the other accumulator: the one the last
   launch used and the next launch adds into (the top bit says which);
4. y: the streamed groups again, last read first (L2 still holds the
   latest), then the kept ones from registers and shared memory; y stored
   evict-first.

"Evict-first" is an explicit L2 policy (inline PTX ``createpolicy``) with
non-coherent loads of x where ``spec.policy``, else the ``.cs`` operators.
The launch owns the accumulators and the counter (zeroed once, left ready).
On the H200: 78.4-78.7 us
(2.61 TB/s) against cuTile's three launches' 86.5; the same design in CUDA C
74.5 us (docs/experiments.md).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Float64, Int32, Int64
from cutlass._mlir import ir
from cutlass._mlir.dialects import vector
from cutlass.cute.nvgpu import cpasync

from sigdnn.plan_builders.cute.batchnorm import BatchnormSpec
from sigdnn.plan_builders.cute.kernels.cutlass_dtypes import DTYPES


class BatchnormTrainSm90:
    """The kernel of one ``BatchnormSpec``; its launch takes the node's pointers, the accumulators and the counter."""

    def __init__(self, spec: BatchnormSpec) -> None:
        self.s = spec
        self.dtype = DTYPES[spec.dtype]
        self.param = DTYPES[spec.param_dtype]
        self.stat = DTYPES[spec.stat_dtype]

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, y_ptr: cute.Pointer, scale_ptr: cute.Pointer, bias_ptr: cute.Pointer,
                 mean_ptr: cute.Pointer, inv_ptr: cute.Pointer, rm_ptr: cute.Pointer, rv_ptr: cute.Pointer,
                 nrm_ptr: cute.Pointer, nrv_ptr: cute.Pointer, acc_ptr: cute.Pointer, bar_ptr: cute.Pointer,
                 stream: cuda.CUstream):  # fmt: skip
        s = self.s
        rows = cute.make_layout((s.rows, s.channels), stride=(s.channels, 1))
        vec = cute.make_layout(s.channels)
        tensors = [cute.make_tensor(p, rows) for p in (x_ptr, y_ptr)]
        tensors += [cute.make_tensor(p, vec) for p in (scale_ptr, bias_ptr, mean_ptr, inv_ptr, rm_ptr, rv_ptr)]
        tensors += [cute.make_tensor(p, vec) for p in (nrm_ptr, nrv_ptr)]
        tensors.append(cute.make_tensor(acc_ptr, cute.make_layout(s.accumulator_elements)))
        tensors.append(cute.make_tensor(bar_ptr, cute.make_layout(1)))
        self.kernel(*tensors).launch(grid=[s.blocks, 1, 1], block=[s.threads, 1, 1], cooperative=True, stream=stream)

    def _words(self, v: cute.TensorSSA) -> list:
        """A 16-byte vector as its four 32-bit words."""
        words = vector.bitcast(ir.VectorType.get([4], Int32.mlir_type), v)
        return [Int32(vector.extract(words, [], [k])) for k in range(4)]

    def _from_words(self, words: list) -> cute.TensorSSA:
        words_t = ir.VectorType.get([4], Int32.mlir_type)
        packed = vector.from_elements(words_t, [Int32(w).ir_value() for w in words])
        vt = ir.VectorType.get([self.s.vec], self.dtype.mlir_type)
        return cute.TensorSSA(vector.bitcast(vt, packed), (self.s.vec,), self.dtype)

    def _evict_first(self) -> Int64:
        """An L2 cache policy: lines touched under it are the first evicted."""
        return cute.arch.inline_ptx("createpolicy.fractional.L2::evict_first.b64 {$w0}, 1.0;", write_only_types=[Int64])

    def _load(self, ptr: cute.Pointer, streaming: bool, policy: Int64 | None) -> cute.TensorSSA:
        """One 16-byte vector, not allocated in L1; ``streaming`` (read once): evict-first in L2, through
        ``policy`` when the spec asks for one, else the ``.cs`` operator."""
        if cutlass.const_expr(self.s.policy):
            hint, args = (".L2::cache_hint", ", {$r1}") if streaming else ("", "")
            text = f"ld.global.nc.L1::no_allocate{hint}.v4.u32 {{{{$w0}}, {{$w1}}, {{$w2}}, {{$w3}}}}, [{{$r0}}]{args};"
            words = cute.arch.inline_ptx(
                text, write_only_types=[Int32] * 4, read_only_args=[ptr, policy] if streaming else [ptr]
            )
            return self._from_words(list(words))
        vt = ir.VectorType.get([self.s.vec], self.dtype.mlir_type)
        if cutlass.const_expr(streaming):
            value = cute.arch.load(ptr, vt, cop="cs")
        else:
            value = cute.arch.load(ptr, vt, level1_eviction_priority="evict_no_allocate")
        return cute.TensorSSA(value, (self.s.vec,), self.dtype)

    def _opaque(self, v: cute.TensorSSA) -> cute.TensorSSA:
        """``v`` through a register move the compiler cannot see into: a register-kept vector is converted to
        float32 in both passes, and without this the compiler keeps the converted (twice as wide) copy live
        between them, which spilled."""
        moved = [
            cute.arch.inline_ptx("mov.b32 {$w0}, {$r0};", write_only_types=[Int32], read_only_args=[w])
            for w in self._words(v)
        ]
        return self._from_words(moved)

    def _add(self, acc0: cute.Tensor, acc1: cute.Tensor, v: cute.TensorSSA, p: cute.TensorSSA) -> None:
        """acc0 += d, acc1 += d^2 for d = v - p."""
        d = v.to(Float32) - p
        acc0.store(acc0.load() + d)
        acc1.store(acc1.load() + d * d)

    def _put(self, ptr: cute.Pointer, v: cute.TensorSSA, coef: tuple, policy: Int64 | None) -> None:
        """y's vector at ``ptr`` from x's: (x - mean) * a + b, stored evict-first (``policy`` or ``.cs``)."""
        mean, a, b = coef
        y = ((v.to(Float32) - mean) * a + b).to(self.dtype)
        if cutlass.const_expr(self.s.policy):
            text = "st.global.L2::cache_hint.v4.u32 [{$r0}], {{$r1}, {$r2}, {$r3}, {$r4}}, {$r5};"
            cute.arch.inline_ptx(text, read_only_args=[ptr, *self._words(y), policy])
        else:
            cute.arch.store(ptr, y.ir_value(), cop="cs")

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mScale: cute.Tensor, mBias: cute.Tensor, mMean: cute.Tensor,
               mInv: cute.Tensor, mRm: cute.Tensor, mRv: cute.Tensor, mNrm: cute.Tensor, mNrv: cute.Tensor,
               mAcc: cute.Tensor, mBar: cute.Tensor):  # fmt: skip
        s = self.s
        vec, lanes, gr, c, nb, threads = s.vec, s.lanes, s.group_rows, s.channels, s.blocks, s.threads
        nrc, nsc, step, slots = s.kept_registers, s.kept_shared, s.step, s.slots
        base_u = nb * (nrc + nsc)
        n_u = s.groups - base_u
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        lane, r = tidx % lanes, tidx // lanes
        col = lane * vec
        span = gr * c  # elements of a group
        xs = mX.iterator + (r * c + col)  # this thread's vector of a group's first row: group g at g * span
        ys = mY.iterator + (r * c + col)
        smem = utils.SmemAllocator()
        sX = smem.allocate_tensor(self.dtype, cute.make_layout((max(nsc, 1) * gr, c), stride=(c, 1)), 128)
        sSum = smem.allocate_tensor(Float32, cute.make_layout((gr, c), stride=(c, 1)), 16)
        sParity = smem.allocate_tensor(Int32, cute.make_layout(1), 4)
        if tidx == 0:
            sParity[0] = (cute.arch.load(mBar.iterator, Int32, sem="relaxed", scope="gpu") >> 31) & 1
        cute.arch.sync_threads()  # every thread reads the parity thread 0 wrote (shared memory starts as garbage)

        # 1. statistics: kept groups (shared memory by cp.async, registers), then the streamed ones
        atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.dtype, num_bits_per_copy=128
        )
        for i in cutlass.range(nsc, unroll=1):
            row = (nb * nrc + bidx * nsc + i) * gr + r
            src = cute.local_tile(mX[row, None], (vec,), (lane,))
            dst = cute.local_tile(sX[i * gr + r, None], (vec,), (lane,))
            cute.copy(atom, src, dst)
        cute.arch.cp_async_commit_group()
        policy = self._evict_first() if cutlass.const_expr(s.policy) else None
        kept = [self._load(xs + (bidx * nrc + i) * span, True, policy) for i in range(nrc)]
        p = self._load(mX.iterator + col, False, policy).to(Float32)
        acc0 = cute.make_rmem_tensor(vec, Float32)
        acc1 = cute.make_rmem_tensor(vec, Float32)
        acc0.fill(0.0)
        acc1.fill(0.0)
        lo = base_u + n_u * bidx // nb
        hi = base_u + n_u * (bidx + 1) // nb
        steps = (hi - lo) // step
        v = [cute.make_rmem_tensor(vec, self.dtype) for _ in range(step)]
        w = [cute.make_rmem_tensor(vec, self.dtype) for _ in range(step)]
        if steps > 0:
            for u in cutlass.range_constexpr(step):
                v[u].store(self._load(xs + (lo + u) * span, False, policy))
        for t in cutlass.range(steps, unroll=1):
            nxt = lo + (t + cutlass.min(steps - 1 - t, 1)) * step  # the next step, or this one again at the end
            for u in cutlass.range_constexpr(step):
                w[u].store(self._load(xs + (nxt + u) * span, False, policy))
            for u in cutlass.range_constexpr(step):
                self._add(acc0, acc1, v[u].load(), p)
            for u in cutlass.range_constexpr(step):
                v[u].store(w[u].load())
        for g in cutlass.range(lo + steps * step, hi, unroll=1):
            self._add(acc0, acc1, self._load(xs + g * span, False, policy), p)
        tail = s.rows - s.groups * gr
        if cutlass.const_expr(tail > 0):  # noqa: SIM102 (a compile-time test cannot join a run-time one)
            if bidx == nb - 1 and r < tail:
                self._add(acc0, acc1, self._load(xs + s.groups * span, False, policy), p)
        for i in cutlass.range_constexpr(nrc):
            self._add(acc0, acc1, self._opaque(kept[i]), p)
        cute.arch.cp_async_wait_group(0)  # this thread's copies landed: it reads back only its own
        for i in cutlass.range(nsc, unroll=1):
            self._add(acc0, acc1, cute.local_tile(sX[i * gr + r, None], (vec,), (lane,)).load(), p)

        # 2. the block's sums into its accumulator copy, then the grid barrier
        parity = sParity[0]
        copy = mAcc.iterator + (parity * slots + bidx % slots) * 2 * c
        for k in cutlass.range_constexpr(2):
            part = acc0 if k == 0 else acc1
            for j in cutlass.range_constexpr(vec):
                sSum[r, col + j] = part[j]
            cute.arch.sync_threads()
            for ch in cutlass.range(tidx, c, threads, unroll=1):
                total = Float64(0.0)
                for i in cutlass.range_constexpr(gr):
                    total = total + Float64(sSum[i, ch])
                cute.arch.red(copy + (k * c + ch), total, op="add", dtype=Float64, sem="relaxed", scope="gpu")
            cute.arch.sync_threads()
        if tidx == 0:
            cute.arch.fence_acq_rel_gpu()
            arrive = Int32(1)
            if bidx == 0:
                arrive = Int32(0x80000000 - (nb - 1))
            old = cute.arch.atomic_add(mBar.iterator, arrive, sem="relaxed", scope="gpu")
            seen = cute.arch.load(mBar.iterator, Int32, sem="acquire", scope="gpu")
            while (old ^ seen) >= 0:  # the top bit has not flipped: someone has not arrived
                seen = cute.arch.load(mBar.iterator, Int32, sem="acquire", scope="gpu")
        cute.arch.sync_threads()

        # 3. every channel's coefficients (block 0 writes the node's outputs); clear the next launch's accumulator
        count = Float64(s.rows)
        total = mAcc.iterator + parity * slots * 2 * c
        for ch in cutlass.range(tidx, c, threads, unroll=1):
            a0, a1 = Float64(0.0), Float64(0.0)
            for k in cutlass.range_constexpr(slots):
                a0 = a0 + cute.arch.load(total + (k * 2 * c + ch), Float64, cop="cg")
                a1 = a1 + cute.arch.load(total + (k * 2 * c + c + ch), Float64, cop="cg")
            mu = Float64(mX[0, ch]) + a0 / count
            var = cutlass.max((a1 - a0 * (a0 / count)) / count, Float64(0.0))
            inv = Float64(1.0) / cute.math.sqrt(var + s.epsilon)
            sSum[0, ch] = Float32(mu)
            sSum[1, ch] = Float32(inv)
            if bidx == 0:
                mMean[ch] = self.stat(mu)
                mInv[ch] = self.stat(inv)
                if cutlass.const_expr(s.running):
                    keep = 1.0 - s.momentum
                    unbias = s.rows / (s.rows - 1)
                    mNrm[ch] = self.stat(keep * Float64(mRm[ch]) + s.momentum * mu)
                    mNrv[ch] = self.stat(keep * Float64(mRv[ch]) + s.momentum * (var * unbias))
        other = (1 - parity) * slots * 2 * c
        for i in cutlass.range(bidx * threads + tidx, slots * 2 * c, nb * threads, unroll=1):
            mAcc[other + i] = Float64(0.0)
        cute.arch.sync_threads()
        mean = cute.make_rmem_tensor(vec, Float32)
        a = cute.make_rmem_tensor(vec, Float32)
        b = cute.make_rmem_tensor(vec, Float32)
        for j in cutlass.range_constexpr(vec):
            mean[j] = sSum[0, col + j]
            a[j] = sSum[1, col + j] * Float32(mScale[col + j])
            b[j] = Float32(mBias[col + j])
        coef = (mean.load(), a.load(), b.load())

        # 4. y: the tail and the streamed groups, last read first, then the kept groups
        if cutlass.const_expr(tail > 0):  # noqa: SIM102 (a compile-time test cannot join a run-time one)
            if bidx == nb - 1 and r < tail:
                self._put(ys + s.groups * span, self._load(xs + s.groups * span, False, policy), coef, policy)
        top = lo + steps * step
        for k in cutlass.range(hi - top, unroll=1):
            g = hi - 1 - k
            self._put(ys + g * span, self._load(xs + g * span, False, policy), coef, policy)
        if steps > 0:
            for u in cutlass.range_constexpr(step):
                v[u].store(self._load(xs + (top - step + u) * span, False, policy))
        for t in cutlass.range(steps, unroll=1):
            g0 = top - (t + 1) * step
            nxt = g0 - cutlass.min(steps - 1 - t, 1) * step
            for u in cutlass.range_constexpr(step):
                w[u].store(self._load(xs + (nxt + u) * span, False, policy))
            for u in cutlass.range_constexpr(step):
                self._put(ys + (g0 + u) * span, v[u].load(), coef, policy)
            for u in cutlass.range_constexpr(step):
                v[u].store(w[u].load())
        for i in cutlass.range_constexpr(nrc):
            self._put(ys + (bidx * nrc + i) * span, kept[i], coef, policy)
        for i in cutlass.range(nsc, unroll=1):
            kept_row = cute.local_tile(sX[i * gr + r, None], (vec,), (lane,)).load()
            self._put(ys + (nb * nrc + bidx * nsc + i) * span, kept_row, coef, policy)
