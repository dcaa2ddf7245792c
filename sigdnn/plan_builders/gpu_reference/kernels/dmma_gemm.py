"""float64 GEMM on Hopper's tensor cores (DMMA): the GPU reference's GEMM where CuTe DSL is installed.

What: out[p] = a[p] @ b[p] for packed row-major float64 arrays a (batch, M, K), b (batch, K, N), out
(batch, M, N), any extents. Every product and sum is an exact float64 fused multiply-add, as in a BLAS
dgemm: the result differs from NumPy's only by summation order (within 2 gamma_K (|a| @ |b|)).

How: ``mma.sync.aligned.m16n8k16.f64`` through inline PTX (CuTe DSL 4.8 has no float64 MMA atom, and cuTile
lowers a float64 ``ct.mma`` to DMUL + DADD; docs/experiments.md). A block of 8 warps owns a 128 x 128 tile of
out, a warp 32 x 64 of it (2 x 8 DMMA tiles, 64 accumulators a thread; 255 registers, 16 bytes of spill); K
advances in tiles of 16 through two shared-memory stages, the next tile's global loads held in registers while
the current tile computes, one barrier a tile. Elements past M, N or K load as 0 and add nothing. Shared rows are padded (20 and 132
elements) so that a warp's fragment reads meet no bank conflict. Grid: (N / 128, M / 128, batch).

How to run: ``Gpu.gemm`` (``gpu_reference.backend``) sends here on a GPU with CuTe DSL; the GPU tests in
``tests/gpu/test_gpu_reference.py`` check it against NumPy element by element, and
``benchmarks/gpu_reference.py --parts gemm`` times it (with 64-bit offsets throughout: 36.9 TFLOP/s at 4096^3
and 8192^3 on an H100, cuBLAS's DGEMM 60.1 / 56.1 in the same run, 50% of the float64 tensor-core peak with a
matmul node's read and write; the 32-bit form is not yet timed).

Constraints: sm_90; M below 2^23 (grid y), N and K below 2^31; offsets 32-bit where every operand has fewer
than 2^31 elements, else 64-bit (two compiles, about 2 s each, once per process).
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float64, Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import T, dsl_user_op

TILE_M, TILE_N, TILE_K = 128, 128, 16
WARP_M, WARP_N = 32, 64  # a warp's tile of out: 2 x 8 DMMA tiles of 16 x 8
THREADS = 32 * (TILE_M // WARP_M) * (TILE_N // WARP_N)  # 8 warps
PITCH_A, PITCH_B = TILE_K + 4, TILE_N + 4  # shared row lengths: conflict-free fragment reads
LOADS = TILE_M * TILE_K // THREADS  # elements of each operand a thread stages per K tile (8)


@dsl_user_op
def _dmma(a: list, b: list, c: list, *, loc: Any = None, ip: Any = None) -> list:
    """d = a (16 x 16, row) @ b (16 x 8, col) + c over the warp: this thread's 8 A, 4 B, 4 C elements -> 4 D."""
    values = [Float64(v).ir_value(loc=loc, ip=ip) for v in (*a, *b, *c)]
    quad = llvm.inline_asm(
        llvm.StructType.get_literal([T.f64()] * 4),
        values,
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {$0, $1, $2, $3}, {$4, $5, $6, $7, $8, $9, $10, $11}, "
        "{$12, $13, $14, $15}, {$16, $17, $18, $19};",
        ",".join(["=d"] * 4 + ["d"] * 16),
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )
    return [Float64(llvm.extractvalue(T.f64(), quad, [i])) for i in range(4)]


@cute.kernel
def _kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    tidx, _, _ = cute.arch.thread_idx()
    bn, bm, p = cute.arch.block_idx()  # column tiles on x, whose bound is 2^31 - 1 (an im2col has ~10^6 columns)
    warp, lane = tidx // 32, tidx % 32
    g, t = lane // 4, lane % 4  # the fragment coordinates of mma.m16n8k16.f64 (PTX ISA)
    mb, nb = bm * TILE_M, bn * TILE_N
    wm, wn = (warp // (TILE_N // WARP_N)) * WARP_M, (warp % (TILE_N // WARP_N)) * WARP_N
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(
        Float64, cute.make_layout((2, TILE_M, TILE_K), stride=(TILE_M * PITCH_A, PITCH_A, 1)), byte_alignment=16
    )
    sB = smem.allocate_tensor(
        Float64, cute.make_layout((2, TILE_K, TILE_N), stride=(TILE_K * PITCH_B, PITCH_B, 1)), byte_alignment=16
    )
    acc = cute.make_rmem_tensor(cute.make_layout(WARP_M * WARP_N // 32), Float64)
    acc.fill(0.0)
    pa = cute.make_rmem_tensor(cute.make_layout(LOADS), Float64)
    pb = cute.make_rmem_tensor(cute.make_layout(LOADS), Float64)
    fa = cute.make_rmem_tensor(cute.make_layout(16), Float64)
    fb = cute.make_rmem_tensor(cute.make_layout(4), Float64)
    tiles = (K + TILE_K - 1) // TILE_K
    for kt in cutlass.range(-1, tiles):  # -1: stage tile 0 before the first compute
        s, following = (kt + 2) % 2, (kt + 1) % 2  # the stage computed, the stage loaded
        k = (kt + 1) * TILE_K
        if kt + 1 < tiles:
            for e in cutlass.range_constexpr(LOADS):  # rows read whole: coalesced
                i = tidx + THREADS * e
                ra, ca, rb, cb = i // TILE_K, i % TILE_K, i // TILE_N, i % TILE_N
                pa[e] = 0.0
                if (mb + ra < M) & (k + ca < K):
                    pa[e] = gA[p, mb + ra, k + ca]
                pb[e] = 0.0
                if (k + rb < K) & (nb + cb < N):
                    pb[e] = gB[p, k + rb, nb + cb]
        if kt >= 0:
            for mt in cutlass.range_constexpr(2):  # A fragment i: row g + 8 (i % 2), column t + 4 (i // 2)
                for i in cutlass.range_constexpr(8):
                    fa[8 * mt + i] = sA[s, wm + 16 * mt + g + 8 * (i % 2), t + 4 * (i // 2)]
            for nt in cutlass.range_constexpr(WARP_N // 8):  # B fragment i: row t + 4 i, column g
                for i in cutlass.range_constexpr(4):
                    fb[i] = sB[s, t + 4 * i, wn + 8 * nt + g]
                for mt in cutlass.range_constexpr(2):
                    c = 4 * (WARP_N // 8 * mt + nt)
                    d = _dmma([fa[8 * mt + i] for i in range(8)], [fb[i] for i in range(4)],
                              [acc[c + i] for i in range(4)])  # fmt: skip
                    for i in cutlass.range_constexpr(4):
                        acc[c + i] = d[i]
        if kt + 1 < tiles:
            for e in cutlass.range_constexpr(LOADS):
                i = tidx + THREADS * e
                sA[following, i // TILE_K, i % TILE_K] = pa[e]
                sB[following, i // TILE_N, i % TILE_N] = pb[e]
        cute.arch.sync_threads()
    for mt in cutlass.range_constexpr(2):
        for nt in cutlass.range_constexpr(WARP_N // 8):  # D fragment i: row g + 8 (i // 2), column 2 t + i % 2
            for i in cutlass.range_constexpr(4):
                row, col = mb + wm + 16 * mt + g + 8 * (i // 2), nb + wn + 8 * nt + 2 * t + i % 2
                if (row < M) & (col < N):
                    gC[p, row, col] = acc[4 * (WARP_N // 8 * mt + nt) + i]


@cute.jit
def _gemm(a: cute.Pointer, b: cute.Pointer, c: cute.Pointer, batch: Int32, M: Int32, N: Int32, K: Int32,
          stream: cuda.CUstream, wide: cutlass.Constexpr) -> None:  # fmt: skip
    """``wide``: 64-bit element offsets (an operand of 2^31 elements or more); else 32-bit ones, which spill less
    (16 bytes of stack against 64, 3 spill stores a K tile against 15, compiled offline)."""
    if cutlass.const_expr(wide):
        mk, kn, mn, k, n = Int64(M) * K, Int64(K) * N, Int64(M) * N, Int64(K), Int64(N)
    else:
        mk, kn, mn, k, n = M * K, K * N, M * N, K, N
    gA = cute.make_tensor(a, cute.make_layout((batch, M, K), stride=(mk, k, 1)))
    gB = cute.make_tensor(b, cute.make_layout((batch, K, N), stride=(kn, n, 1)))
    gC = cute.make_tensor(c, cute.make_layout((batch, M, N), stride=(mn, n, 1)))
    grid = ((N + TILE_N - 1) // TILE_N, (M + TILE_M - 1) // TILE_M, batch)
    _kernel(gA, gB, gC, M, N, K).launch(grid=grid, block=(THREADS, 1, 1), stream=stream)


NARROW_LIMIT = 2**31  # operands below this many elements take 32-bit offsets
_compiled: dict[bool, Any] = {}


def _pointer(address: int) -> Any:
    return make_ptr(Float64, address, cute.AddressSpace.gmem, assumed_align=8)


def gemm(a: int, b: int, out: int, batch: int, m: int, n: int, k: int, stream: int) -> None:
    """Enqueue out = a @ b (device addresses of packed float64 arrays) on ``stream`` (a raw CUstream)."""
    wide = max(batch * m * k, batch * k * n, batch * m * n) >= NARROW_LIMIT
    if wide not in _compiled:
        pointers = (_pointer(0) for _ in range(3))
        _compiled[wide] = cute.compile(_gemm, *pointers, *(Int32(1) for _ in range(4)), cuda.CUstream(0), wide)
    _compiled[wide](_pointer(a), _pointer(b), _pointer(out), Int32(batch), Int32(m), Int32(n), Int32(k),
                    cuda.CUstream(stream))  # fmt: skip
