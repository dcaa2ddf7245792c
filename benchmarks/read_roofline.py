"""How fast the H200 reads memory it never writes: the ceiling of batchnorm's partial-sum pass.

Batchnorm training forward (NHWC 64x256x56x56 bf16) is 2.33-2.35 TB/s against
#7's 2.5. Its partial pass reads x (98 MiB) at 3.36 TB/s, faster than
torch's own sum of x (3.15), but nobody has measured what a pure read can
reach here: the copy's 4.0-4.3 TB/s counts reads and writes. This times, on
the same buffers in one run:

* a CUDA C read kernel (CuPy ``RawKernel``): each thread keeps UNROLL
  16-byte loads in flight (``ld.global.nc.L1::no_allocate``), folds them
  with xor, and writes nothing unless the fold hits a sentinel; over a grid
  of SMs x BLOCKS_PER_SM blocks of THREADS threads;
* a Triton kernel summing x in float32 (one partial per program);
* torch's ``sum`` of x and torch's copy of x (bytes read plus written).

Sizes: batchnorm's x (98 MiB) and 256 MiB. On the H200 (CuPy and Triton are
in its image):

    python3 benchmarks/read_roofline.py
"""

from __future__ import annotations

import argparse
import itertools

import cupy as cp
import torch
import triton
import triton.language as tl
from cuda_timing import median_ms

READ = r"""
extern "C" __global__ void read_all(const uint4* __restrict__ x, unsigned long long n, unsigned* out) {
    unsigned acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * UNROLL;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    for (; i + (UNROLL - 1) * blockDim.x < n; i += stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const uint4* p = x + i + (unsigned long long)u * blockDim.x;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p));
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {  // the tail: this thread's last, partial chunk
        const unsigned long long j = i + (unsigned long long)u * blockDim.x;
        if (j < n) acc ^= x[j].x;
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}
"""


@triton.jit
def _sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(values.to(tl.float32)))


def cuda_c(x: torch.Tensor, sms: int) -> dict[str, float]:
    """TB/s of the read kernel at each (UNROLL, THREADS, BLOCKS_PER_SM)."""
    words = x.numel() * x.element_size() // 16
    xs = cp.from_dlpack(x.view(torch.uint8))
    out = cp.zeros(1, dtype=cp.uint32)
    found = {}
    for unroll, threads, per_sm in itertools.product((4, 8), (256, 512), (2, 4, 8)):
        kernel = cp.RawKernel(READ, "read_all", options=(f"-DUNROLL={unroll}",))
        grid = (sms * per_sm,)

        def run(kernel=kernel, grid=grid, threads=threads) -> None:
            kernel(grid, (threads,), (xs, cp.uint64(words), out))

        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            ms = median_ms(run)
        found[f"cuda u{unroll} t{threads} b{per_sm}"] = x.nbytes / ms / 1e9
    return found


def others(x: torch.Tensor) -> dict[str, float]:
    """TB/s of Triton's sum at several block sizes, torch's sum, and torch's copy (read + written)."""
    n = x.numel()
    found = {}
    for block in (4096, 8192, 16384):
        partial = torch.empty(triton.cdiv(n, block), device="cuda", dtype=torch.float32)
        ms = median_ms(lambda block=block, partial=partial: _sum_kernel[(partial.numel(),)](x, partial, n, BLOCK=block))
        found[f"triton sum {block}"] = x.nbytes / ms / 1e9
    found["torch sum"] = x.nbytes / median_ms(lambda: torch.sum(x, dtype=torch.float32)) / 1e9
    y = torch.empty_like(x)
    found["torch copy (read + write)"] = 2 * x.nbytes / median_ms(lambda: y.copy_(x)) / 1e9
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", default="98,256", help="buffer sizes (98: batchnorm's x, 64x256x56x56 bf16)")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for mib in args.mib.split(","):
        elements = 64 * 256 * 56 * 56 if mib == "98" else int(mib) * (1 << 20) // 2
        x = torch.empty(elements, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
        results = {**cuda_c(x, sms), **others(x)}
        best = max((k for k in results if k.startswith("cuda")), key=results.get)
        print(f"{x.nbytes / 2**20:.0f} MiB, {sms} SMs; best read kernel: {best} {results[best]:.2f} TB/s", flush=True)
        for label, tb_s in results.items():
            print(f"  {label:28s} {tb_s:5.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
