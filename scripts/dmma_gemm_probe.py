"""Probe for issue #31: a float64 GEMM on Hopper's tensor cores (DMMA) written in CuTe DSL, against cuBLAS.

cuTile lowers a float64 ``ct.mma`` to DMUL + DADD and CuTe DSL 4.8 has no float64 MMA atom
(docs/experiments.md), so this kernel issues ``mma.sync.aligned.m8n8k4.row.col.f64`` through inline PTX.
How: a block of 4 warps owns a 64 x 64 tile of C, a warp 32 x 32 (4 x 4 DMMA tiles of 8 x 8, 32 float64
accumulators a thread); each K step of 4 loads a thread's 4 A and 4 B fragment elements straight from global
memory (0 past M, N or K) and issues 16 DMMA; a second kernel first stages each K tile of 16 in shared
memory with coalesced loads of the whole block (rows padded against bank conflicts) and runs 4 such steps
from there. Row-major A (M x K), B (K x N) and C, any extents. Compiled offline for sm_90a (``--sass``): 16
DMMA.8x8x4 a K step and 8 LDG; 64 DMMA, 32 LDS and 16 LDG a K tile of the staged kernel.

Not product: the GPU reference does not use it yet. Next: time it on the device (this script, same run as
torch's cuBLAS DGEMM); take the faster (double-buffer its staging if the loads show) and bring it into
``gpu_reference`` as its GEMM on a GPU (the cuTile kernel staying for the emulator, which cannot run CuTe);
record the figures in docs/experiments.md and delete this script.

    PYTHONPATH=. python3 scripts/dmma_gemm_probe.py --n 4096          # on the GPU: error vs torch, ms, TFLOP/s
    CUTE_DSL_ARCH=sm_90a python3 scripts/dmma_gemm_probe.py --sass     # without a GPU: compile, count SASS ops
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import subprocess
import sys
import tempfile

if "--sass" in sys.argv:  # CuTe DSL reads what to keep when it is imported
    os.environ.update(CUTE_DSL_KEEP="cubin", CUTE_DSL_DUMP_DIR=tempfile.mkdtemp())

import cutlass
import cutlass.cute as cute
from cutlass import Float64, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


@dsl_user_op
def dmma(a, b, c0, c1, *, loc=None, ip=None):
    """d = a (8 x 4, row) @ b (4 x 8, col) + c over the warp: this thread's A and B element, its 2 of C / D."""
    values = [Float64(v).ir_value(loc=loc, ip=ip) for v in (a, b, c0, c1)]
    pair = llvm.inline_asm(
        llvm.StructType.get_literal([T.f64(), T.f64()]),
        values,
        "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {$0, $1}, {$2}, {$3}, {$4, $5};",
        "=d,=d,d,d,d,d",
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )
    return Float64(llvm.extractvalue(T.f64(), pair, [0])), Float64(llvm.extractvalue(T.f64(), pair, [1]))


@cute.kernel
def dgemm_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    tidx, _, _ = cute.arch.thread_idx()
    bx, by, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    m0, n0 = bx * 64 + (warp // 2) * 32, by * 64 + (warp % 2) * 32
    acc = cute.make_rmem_tensor(cute.make_layout(32), Float64)
    acc.fill(0.0)
    for k in cutlass.range(0, K, 4):
        a = cute.make_rmem_tensor(cute.make_layout(4), Float64)
        b = cute.make_rmem_tensor(cute.make_layout(4), Float64)
        a.fill(0.0)  # past M, N or K: 0, which adds nothing
        b.fill(0.0)
        for i in cutlass.range_constexpr(4):
            row, col = m0 + 8 * i + lane // 4, n0 + 8 * i + lane // 4
            if (row < M) & (k + lane % 4 < K):
                a[i] = gA[row, k + lane % 4]  # A fragment: row lane / 4, column lane % 4
            if (k + lane % 4 < K) & (col < N):
                b[i] = gB[k + lane % 4, col]  # B fragment: row lane % 4, column lane / 4
        for i in cutlass.range_constexpr(4):
            for j in cutlass.range_constexpr(4):
                d0, d1 = dmma(a[i], b[j], acc[2 * (4 * i + j)], acc[2 * (4 * i + j) + 1])
                acc[2 * (4 * i + j)], acc[2 * (4 * i + j) + 1] = d0, d1
    for i in cutlass.range_constexpr(4):
        for j in cutlass.range_constexpr(4):  # C fragment: row lane / 4, columns 2 (lane % 4) and + 1
            row, col = m0 + 8 * i + lane // 4, n0 + 8 * j + 2 * (lane % 4)
            if (row < M) & (col < N):
                gC[row, col] = acc[2 * (4 * i + j)]
            if (row < M) & (col + 1 < N):
                gC[row, col + 1] = acc[2 * (4 * i + j) + 1]


@cute.jit
def dgemm(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    dgemm_kernel(gA, gB, gC, M, N, K).launch(grid=((M + 63) // 64, (N + 63) // 64, 1), block=(128, 1, 1))


@cute.kernel
def dgemm_smem_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    """As dgemm_kernel, with each K tile of 16 staged in shared memory by coalesced loads of the whole block
    (rows padded by one element against bank conflicts), then 4 K steps of DMMA from there."""
    tidx, _, _ = cute.arch.thread_idx()
    bx, by, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    mb, nb = bx * 64, by * 64
    wm, wn = (warp // 2) * 32, (warp % 2) * 32
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(Float64, cute.make_layout((64, 16), stride=(17, 1)), byte_alignment=16)
    sB = smem.allocate_tensor(Float64, cute.make_layout((16, 64), stride=(65, 1)), byte_alignment=16)
    acc = cute.make_rmem_tensor(cute.make_layout(32), Float64)
    acc.fill(0.0)
    a = cute.make_rmem_tensor(cute.make_layout(4), Float64)
    b = cute.make_rmem_tensor(cute.make_layout(4), Float64)
    for k in cutlass.range(0, K, 16):
        for e in cutlass.range_constexpr(8):  # 1,024 elements of each tile, 8 a thread, rows read whole
            i = tidx + 128 * e
            ra, ca, rb, cb = i // 16, i % 16, i // 64, i % 64
            sA[ra, ca] = 0.0
            if (mb + ra < M) & (k + ca < K):
                sA[ra, ca] = gA[mb + ra, k + ca]
            sB[rb, cb] = 0.0
            if (k + rb < K) & (nb + cb < N):
                sB[rb, cb] = gB[k + rb, nb + cb]
        cute.arch.sync_threads()
        for kk in cutlass.range_constexpr(0, 16, 4):
            for i in cutlass.range_constexpr(4):
                a[i] = sA[wm + 8 * i + lane // 4, kk + lane % 4]
                b[i] = sB[kk + lane % 4, wn + 8 * i + lane // 4]
            for i in cutlass.range_constexpr(4):
                for j in cutlass.range_constexpr(4):
                    d0, d1 = dmma(a[i], b[j], acc[2 * (4 * i + j)], acc[2 * (4 * i + j) + 1])
                    acc[2 * (4 * i + j)], acc[2 * (4 * i + j) + 1] = d0, d1
        cute.arch.sync_threads()
    for i in cutlass.range_constexpr(4):
        for j in cutlass.range_constexpr(4):
            row, col = mb + wm + 8 * i + lane // 4, nb + wn + 8 * j + 2 * (lane % 4)
            if (row < M) & (col < N):
                gC[row, col] = acc[2 * (4 * i + j)]
            if (row < M) & (col + 1 < N):
                gC[row, col + 1] = acc[2 * (4 * i + j) + 1]


@cute.jit
def dgemm_smem(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    dgemm_smem_kernel(gA, gB, gC, M, N, K).launch(grid=((M + 63) // 64, (N + 63) // 64, 1), block=(128, 1, 1))


@dsl_user_op
def dmma16(a, b, c, *, loc=None, ip=None):
    """d = a (16 x 16, row) @ b (16 x 8, col) + c over the warp (mma.m16n8k16.f64): this thread's 8 A, 4 B and
    4 C elements in, its 4 D elements out."""
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
def dgemm_big_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    """A 128 x 128 block tile over 8 warps (4 x 2, a warp 32 x 64: 2 x 8 m16n8k16 DMMA), K tiles of 16 in two
    shared-memory stages; the next tile's global loads sit in registers while the current one computes."""
    tidx, _, _ = cute.arch.thread_idx()
    bx, by, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    g, t = lane // 4, lane % 4
    mb, nb = bx * 128, by * 128
    wm, wn = (warp // 2) * 32, (warp % 2) * 64
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(Float64, cute.make_layout((2, 128, 16), stride=(128 * 20, 20, 1)), byte_alignment=16)
    sB = smem.allocate_tensor(Float64, cute.make_layout((2, 16, 128), stride=(16 * 132, 132, 1)), byte_alignment=16)
    acc = cute.make_rmem_tensor(cute.make_layout(64), Float64)
    acc.fill(0.0)
    pa = cute.make_rmem_tensor(cute.make_layout(8), Float64)
    pb = cute.make_rmem_tensor(cute.make_layout(8), Float64)
    fa = cute.make_rmem_tensor(cute.make_layout(16), Float64)
    fb = cute.make_rmem_tensor(cute.make_layout(4), Float64)
    tiles = (K + 15) // 16
    for e in cutlass.range_constexpr(8):  # tile 0 -> registers -> stage 0
        i = tidx + 256 * e
        ra, ca, rb, cb = i // 16, i % 16, i // 128, i % 128
        pa[e] = 0.0
        if (mb + ra < M) & (ca < K):
            pa[e] = gA[mb + ra, ca]
        pb[e] = 0.0
        if (rb < K) & (nb + cb < N):
            pb[e] = gB[rb, nb + cb]
        sA[0, ra, ca] = pa[e]
        sB[0, rb, cb] = pb[e]
    cute.arch.sync_threads()
    for kt in cutlass.range(tiles):
        s = kt % 2
        k = (kt + 1) * 16
        if kt + 1 < tiles:
            for e in cutlass.range_constexpr(8):
                i = tidx + 256 * e
                ra, ca, rb, cb = i // 16, i % 16, i // 128, i % 128
                pa[e] = 0.0
                if (mb + ra < M) & (k + ca < K):
                    pa[e] = gA[mb + ra, k + ca]
                pb[e] = 0.0
                if (k + rb < K) & (nb + cb < N):
                    pb[e] = gB[k + rb, nb + cb]
        for mt in cutlass.range_constexpr(2):
            for i in cutlass.range_constexpr(8):
                fa[8 * mt + i] = sA[s, wm + 16 * mt + g + 8 * (i % 2), t + 4 * (i // 2)]
        for nt in cutlass.range_constexpr(8):
            for i in cutlass.range_constexpr(4):
                fb[i] = sB[s, t + 4 * i, wn + 8 * nt + g]
            for mt in cutlass.range_constexpr(2):
                c = 4 * (8 * mt + nt)
                d = dmma16(
                    [fa[8 * mt + i] for i in range(8)], [fb[i] for i in range(4)], [acc[c + i] for i in range(4)]
                )
                for i in cutlass.range_constexpr(4):
                    acc[c + i] = d[i]
        if kt + 1 < tiles:
            for e in cutlass.range_constexpr(8):
                i = tidx + 256 * e
                sA[1 - s, i // 16, i % 16] = pa[e]
                sB[1 - s, i // 128, i % 128] = pb[e]
        cute.arch.sync_threads()
    for mt in cutlass.range_constexpr(2):
        for nt in cutlass.range_constexpr(8):  # D fragment: row g (+ 8), columns 2 t and 2 t + 1
            for i in cutlass.range_constexpr(4):
                row, col = mb + wm + 16 * mt + g + 8 * (i // 2), nb + wn + 8 * nt + 2 * t + i % 2
                if (row < M) & (col < N):
                    gC[row, col] = acc[4 * (8 * mt + nt) + i]


@cute.jit
def dgemm_big(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: Int32, N: Int32, K: Int32) -> None:
    dgemm_big_kernel(gA, gB, gC, M, N, K).launch(grid=((M + 127) // 128, (N + 127) // 128, 1), block=(256, 1, 1))


KERNELS = {"dmma, fragments from global memory": dgemm, "dmma, K tiles in shared memory": dgemm_smem,
           "m16n8k16, 128 x 128 tiles, two stages": dgemm_big}


def sass_counts(n: int, host: object) -> collections.Counter[str]:
    """Compile ``host`` for the architecture CUTE_DSL_ARCH names (no GPU needed) and count its cubin's SASS
    opcodes (nvdisasm on PATH: the CUDA toolkit's, or the one in Triton's wheel)."""
    from cutlass.cute.runtime import make_fake_tensor

    a, b, c = (make_fake_tensor(Float64, (n, n), stride=(n, 1)) for _ in range(3))
    cute.compile(host, a, b, c, Int32(n), Int32(n), Int32(n))
    cubin = max(glob.glob(f"{os.environ['CUTE_DSL_DUMP_DIR']}/*.cubin"), key=os.path.getmtime)  # this compile's
    sass = subprocess.run(["nvdisasm", cubin], capture_output=True, text=True, check=True).stdout
    counts: collections.Counter[str] = collections.Counter()
    for line in sass.splitlines():
        words = line.split("*/", 1)[1].split() if "*/" in line else []
        words = words[1:] if words and words[0].startswith("@") else words  # a predicate, then the opcode
        if words and not words[0].startswith("."):
            counts[words[0].split(".")[0]] += 1
    return counts


def on_gpu(n: int) -> None:
    """Error against torch's float64 matmul (cuBLAS) and both times, in one run."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    from benchmarks.cuda_timing import median_ms

    a, b = (torch.randn(n, n, dtype=torch.float64, device="cuda") for _ in range(2))
    c = torch.empty(n, n, dtype=torch.float64, device="cuda")
    args = [from_dlpack(t) for t in (a, b, c)] + [Int32(n)] * 3
    want = a @ b
    runs = {}
    for name, host in KERNELS.items():
        kernel = runs[name] = cute.compile(host, *args)
        c.zero_()
        kernel(*args)
        print(f"{name}: max |c - torch| / max |torch| = {float((c - want).abs().max() / want.abs().max()):.2e}")
    runs["torch (cuBLAS)"] = lambda *_: torch.matmul(a, b, out=c)
    for name, run in runs.items():
        ms = median_ms(lambda r=run: r(*args), iters=3, repeats=5)
        print(f"{name}: {ms:.2f} ms, {2 * n**3 / ms / 1e9:.1f} TFLOP/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096, help="M = N = K")
    parser.add_argument("--sass", action="store_true", help="compile only and count SASS opcodes (no GPU)")
    args = parser.parse_args()
    if args.sass:
        for name, host in KERNELS.items():
            print(f"{name}:", dict(sass_counts(args.n, host).most_common(12)))
    else:
        on_gpu(args.n)


if __name__ == "__main__":
    main()
