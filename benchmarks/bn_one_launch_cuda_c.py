"""Batchnorm training forward as one cooperative CUDA C launch: x kept in registers and shared memory across a grid
barrier, the rest re-read from L2.

``bn_train_cuda_c.py`` found two passes over x in CUDA C no faster than
sigdnn's cuTile node (85-87 us against #7's 82.2): the statistics pass
reads 103 MB, the elementwise pass reads it again and writes y, and the
finalize between them costs 3-4 us of dependent latency however it is cut.
One launch reads x from DRAM once where it can keep it: each of the 132
blocks (one a SM, 512 threads) keeps ``NRC`` groups of 16 rows (8 KB a group)
in registers and ``NSC`` groups in shared memory (one bulk copy each, TMA),
streams its share of the other groups (``U`` a step, the next step's loads
issued before this one's sums), adds its sums into a float64 accumulator
(``SLOTS`` copies, block b adding into copy b % SLOTS), and meets the other
blocks at a grid barrier (a counter whose top bit flips when the last block
arrives, as CUDA's cooperative groups do; the flipped bit also says which
of two accumulators the next launch adds into, so each launch zeroes the one
the last launch used). Then each block derives every channel's coefficients,
block 0 writes the node's per-channel outputs, and y is written: the
streamed groups again, last read first (L2 still holds the latest), and the
kept groups from registers and shared memory. ``ORDER`` 1 writes the
register-kept groups first.

Labels: ``one/r12/s26/u4/o0/y1/c1``: registers 12 groups, shared memory 26,
4 streamed groups a step, order 0, y stored evict-first, the kept groups
loaded evict-first. Each variant's outputs are checked against sigdnn's node
and float64 torch (run three times: the barrier and accumulators reset
themselves), traced (per phase, first and last block), and timed interleaved
with sigdnn's node. On the H200:

    python3 benchmarks/bn_one_launch_cuda_c.py [LABEL,...]
"""

from __future__ import annotations

import argparse
import ctypes
import re
from collections.abc import Callable

import attrs
import torch
from bn_train_cuda_c import HELPERS, Kernel, _ptr, torch_check
from cutile_bn_stats_pass import EPS, MOMENTUM, NODE_BYTES, ROWS, C, Node, launcher, timed

ONE = r"""
__device__ __forceinline__ unsigned relaxed_load(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned acquire_load(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint4 load_kept(const uint4* p, u64 first) {
#if KEPT_FIRST
    return load_hinted(p, first);
#else
    return load(p);
#endif
}

__device__ __forceinline__ void put(uint4* dst, const uint4& v, const float mu[8], const float a[8], const float b[8],
                                    u64 policy) {
    float f[8];
    unpack8(v, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = fmaf(f[j] - mu[j], a[j], b[j]);
    store(dst, pack8(f), policy);
}

// x: BN_M rows of 256 bf16 in NG groups of R = BN_T / 32 rows; thread (lane, r) owns uint4 lane of row r of a group.
extern "C" __global__ void __launch_bounds__(BN_T, 1) bn_one(
    const uint4* __restrict__ x, uint4* y, const uint4* scale, const uint4* bias, float* mean, float* inv,
    float* wmean, float* winv, const float* rm, const float* rv, float* nrm, float* nrv, double* acc,
    unsigned* bar, u64* trace) {
    constexpr int R = BN_T / 32, GROUP = R * 32;  // uint4 a group
    constexpr long long NG = BN_M / R, BASE_S = (long long)NB * NRC, BASE_U = (long long)NB * (NRC + NSC);
    constexpr long long NU = NG - BASE_U;
    extern __shared__ __align__(128) unsigned char smem[];
    uint4* sx = reinterpret_cast<uint4*>(smem);
    float* scratch = reinterpret_cast<float*>(smem + NSC * GROUP * 16);  // R x 256 floats
    u64* mbar = reinterpret_cast<u64*>(smem + NSC * GROUP * 16 + R * 256 * 4);
    __shared__ unsigned parity;
    const int lane = threadIdx.x & 31, r = threadIdx.x >> 5, b = blockIdx.x;
    const u64 first = evict_first();
    mark(trace, 0, false);
    const unsigned mb = (unsigned)__cvta_generic_to_shared(mbar);
    if (threadIdx.x == 0) {
        parity = relaxed_load(bar) >> 31;
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(mb));
        asm volatile("fence.mbarrier_init.release.cluster;");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(mb), "r"(NSC * GROUP * 16));
        for (int i = 0; i < NSC; ++i) {
            const unsigned dst = (unsigned)__cvta_generic_to_shared(sx + i * GROUP);
            const uint4* src = x + (BASE_S + (long long)b * NSC + i) * GROUP;
#if KEPT_FIRST
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                         " [%0], [%1], %2, [%3], %4;" :: "r"(dst), "l"(src), "r"(GROUP * 16), "r"(mb), "l"(first)
                         : "memory");
#else
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(dst), "l"(src), "r"(GROUP * 16), "r"(mb) : "memory");
#endif
        }
    }
    __syncthreads();  // parity and the mbarrier set
    uint4 kept[NRC];
#pragma unroll
    for (int i = 0; i < NRC; ++i) kept[i] = load_kept(x + ((long long)b * NRC + i) * GROUP + r * 32 + lane, first);
    float p[8], s0[8], s1[8];
    unpack8(x[lane], p);
#pragma unroll
    for (int j = 0; j < 8; ++j) s0[j] = s1[j] = 0.0f;
    // this block's streamed groups [lo, hi), BN_U a step, the next step loaded before this one is added
    const long long lo = BASE_U + NU * b / NB, hi = BASE_U + NU * (b + 1) / NB;
    const uint4* xs = x + r * 32 + lane;
    long long g = lo;
    if (g + BN_U <= hi) {
        uint4 v[BN_U];
#pragma unroll
        for (int u = 0; u < BN_U; ++u) v[u] = load(xs + (g + u) * GROUP);
        for (; g + BN_U <= hi; g += BN_U) {
            uint4 w[BN_U];
            const long long next = g + 2 * BN_U <= hi ? g + BN_U : g;
#pragma unroll
            for (int u = 0; u < BN_U; ++u) w[u] = load(xs + (next + u) * GROUP);
#pragma unroll
            for (int u = 0; u < BN_U; ++u) add(v[u], p, s0, s1);
#pragma unroll
            for (int u = 0; u < BN_U; ++u) v[u] = w[u];
        }
    }
    for (; g < hi; ++g) add(load(xs + g * GROUP), p, s0, s1);
#pragma unroll
    for (int i = 0; i < NRC; ++i) add(kept[i], p, s0, s1);
    for (unsigned done = 0; !done;) {
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], 0; selp.u32 %0, 1, 0, q; }"
                     : "=r"(done) : "r"(mb) : "memory");
    }
    for (int i = 0; i < NSC; ++i) add(sx[i * GROUP + r * 32 + lane], p, s0, s1);
    mark(trace, 1, true);
    // the block's sums into accumulator copy b % SLOTS of this launch's parity
    double* sums = acc + (parity * SLOTS + b % SLOTS) * 512;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
#pragma unroll
        for (int j = 0; j < 8; ++j) scratch[r * 256 + lane * 8 + j] = k ? s1[j] : s0[j];
        __syncthreads();
        if (threadIdx.x < 256) {
            double t = 0.0;
            for (int i = 0; i < R; ++i) t += scratch[i * 256 + threadIdx.x];
            atomicAdd(sums + k * 256 + threadIdx.x, t);
        }
        __syncthreads();
    }
    // grid barrier: block 0 adds 2^31 - (NB - 1), the others 1; the top bit flips when the last arrives
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned old = atomicAdd(bar, b == 0 ? 0x80000000u - (NB - 1) : 1u);
        while (((old ^ acquire_load(bar)) & 0x80000000u) == 0) {
        }
    }
    __syncthreads();
    mark(trace, 2, true);
    if (threadIdx.x < 256) {
        const int c = threadIdx.x;
        const double* all = acc + parity * SLOTS * 512;
        double a0 = 0.0, a1 = 0.0;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            a0 += __ldcg(all + s * 512 + c);
            a1 += __ldcg(all + s * 512 + 256 + c);
        }
        const float pc = __uint_as_float((unsigned)reinterpret_cast<const unsigned short*>(x)[c] << 16);
        const double2 o = outputs(c, a0, a1, pc, BN_M, b == 0, mean, inv, wmean, winv, rm, rv, nrm, nrv);
        scratch[c] = (float)o.x;
        scratch[256 + c] = (float)o.y;
    }
    // the accumulator the last launch used is the one the next launch adds into
    for (int i = b * BN_T + threadIdx.x; i < SLOTS * 512; i += NB * BN_T) acc[(1 - parity) * SLOTS * 512 + i] = 0.0;
    __syncthreads();
    float mu[8], a[8], bb[8], sc[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        mu[j] = scratch[lane * 8 + j];
        a[j] = scratch[256 + lane * 8 + j];
    }
    unpack8(scale[lane], sc);
    unpack8(bias[lane], bb);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] *= sc[j];
    uint4* ys = y + r * 32 + lane;
#if ORDER == 1
#pragma unroll
    for (int i = 0; i < NRC; ++i) put(ys + ((long long)b * NRC + i) * GROUP, kept[i], mu, a, bb, first);
#endif
    // the streamed groups again, last first: the tail singly, then whole steps, the next loaded ahead
    long long top = lo + (hi - lo) / BN_U * BN_U;
    for (long long h = hi - 1; h >= top; --h) put(ys + h * GROUP, load(xs + h * GROUP), mu, a, bb, first);
    if (top - BN_U >= lo) {
        uint4 v[BN_U];
#pragma unroll
        for (int u = 0; u < BN_U; ++u) v[u] = load(xs + (top - BN_U + u) * GROUP);
        for (; top - BN_U >= lo; top -= BN_U) {
            uint4 w[BN_U];
            const long long next = top - 2 * BN_U >= lo ? top - 2 * BN_U : top - BN_U;
#pragma unroll
            for (int u = 0; u < BN_U; ++u) w[u] = load(xs + (next + u) * GROUP);
#pragma unroll
            for (int u = 0; u < BN_U; ++u) put(ys + (top - BN_U + u) * GROUP, v[u], mu, a, bb, first);
#pragma unroll
            for (int u = 0; u < BN_U; ++u) v[u] = w[u];
        }
    }
#if ORDER == 0
#pragma unroll
    for (int i = 0; i < NRC; ++i) put(ys + ((long long)b * NRC + i) * GROUP, kept[i], mu, a, bb, first);
#endif
    for (int i = 0; i < NSC; ++i)
        put(ys + (BASE_S + (long long)b * NSC + i) * GROUP, sx[i * GROUP + r * 32 + lane], mu, a, bb, first);
    mark(trace, 3, true);
}
"""

THREADS, SLOTS = 512, 8
LABEL = re.compile(r"one/r(?P<nrc>\d+)/s(?P<nsc>\d+)/u(?P<u>\d+)/o(?P<order>[01])/y(?P<y>[01])/c(?P<c>[01])$")
PHASES = {1: "statistics read", 2: "barrier passed", 3: "y written"}


@attrs.frozen
class OneLaunch:
    """One cooperative launch (see the module docstring for the label's fields)."""

    nrc: int
    nsc: int
    u: int
    order: int
    y: int
    c: int

    @classmethod
    def parse(cls, label: str) -> OneLaunch:
        found = LABEL.match(label)
        if found is None:
            raise ValueError(f"{label!r} is not a label (e.g. one/r12/s26/u4/o0/y1/c1)")
        return cls(**{key: int(v) for key, v in found.groupdict().items()})

    def smem(self) -> int:
        """Dynamic shared memory: the kept groups, the block's sums (R x 256 floats) and the mbarrier."""
        rows = THREADS // 32
        return self.nsc * rows * 512 + rows * 256 * 4 + 16

    def defines(self, sms: int, trace: bool) -> dict[str, object]:
        return {"BN_T": THREADS, "NRC": self.nrc, "NSC": self.nsc, "BN_U": self.u, "NB": sms, "BN_M": f"{ROWS}LL",
                "SLOTS": SLOTS, "ORDER": self.order, "Y_FIRST": self.y, "KEPT_FIRST": self.c,
                "TRACE": int(trace), "EPS": repr(EPS), "MOMENTUM": repr(MOMENTUM), "KEEP": repr(1.0 - MOMENTUM),
                "UNBIAS": repr(ROWS / (ROWS - 1))}  # fmt: skip


class State:
    """The launch's own memory, zeroed once: two accumulators of SLOTS (2, 256) float64 copies and the barrier."""

    def __init__(self) -> None:
        self.acc = torch.zeros(2 * SLOTS * 2 * C, device="cuda", dtype=torch.float64)
        self.bar = torch.zeros(1, device="cuda", dtype=torch.int32)

    def describe(self) -> str:
        parity = (self.bar.item() >> 31) & 1
        next_acc = self.acc.view(2, -1)[parity]
        return f"barrier {self.bar.item() & 0xFFFFFFFF:#010x}, next accumulator's largest |value| {next_acc.abs().max().item()}"


def one_run(node: Node, v: OneLaunch, sms: int, state: State, trace: torch.Tensor | None = None) -> Callable[[], None]:
    """The cooperative launch on the node's tensors (outputs where sigdnn's node writes them)."""
    assert ROWS % (THREADS // 32) == 0
    kernel = Kernel("bn_one", v.defines(sms, trace is not None), HELPERS + ONE, v.smem())
    scale, bias = (node.data[k].flatten() for k in ("scale", "bias"))
    node.keep = [*getattr(node, "keep", []), scale, bias]
    at = ctypes.c_void_p(0 if trace is None else trace.data_ptr())
    args = [_ptr(node.data["x"]), _ptr(node.y), _ptr(scale), _ptr(bias), *map(_ptr, node.vectors), _ptr(state.acc),
            _ptr(state.bar), at]  # fmt: skip
    launch = kernel.launch(sms, THREADS, args, pdl=False, cooperative=True)
    return lambda: launch(torch.cuda.current_stream().cuda_stream)


def traced(node: Node, v: OneLaunch, sms: int, state: State, label: str) -> None:
    """us from the first block's start to each phase's end in the first and the last block (median of 9 runs)."""
    trace = torch.zeros(8, device="cuda", dtype=torch.int64)
    run = one_run(node, v, sms, state, trace)
    spans = []
    for _ in range(10):
        trace.copy_(torch.tensor([2**62, 0, 0, 0, 0, 0, 0, 0], dtype=torch.int64))
        run()
        torch.cuda.synchronize()
        t = trace.cpu().double()
        spans.append([(t[k] - t[0]) / 1e3 for k in PHASES])
    med = torch.tensor(spans[1:]).median(0).values.tolist()
    print(f"{label} traced (last block, us): " + "; ".join(f"{n} {e:.1f}" for n, e in zip(PHASES.values(), med)))


DEFAULT = ["one/r12/s26/u4/o0/y1/c1", "one/r12/s26/u4/o1/y1/c1", "one/r8/s26/u4/o0/y1/c1", "one/r12/s26/u4/o0/y0/c0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="?", default=",".join(DEFAULT), help="comma-separated labels")
    parser.add_argument("--trace", action="store_true", help="also each phase's end within the launch")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    node = Node()
    whole = {"sigdnn": launcher(node.calls)}
    with node.stream():
        for label in args.labels.split(","):
            try:
                v = OneLaunch.parse(label)
                state = State()
                run = one_run(node, v, sms, state)
                for k in range(3):
                    print(f"{label} run {k}: {node.check(run)}; {torch_check(node)}; {state.describe()}", flush=True)
                if args.trace:
                    traced(node, v, sms, state, label)
            except Exception as e:  # report every variant
                print(f"{label}: FAILED {type(e).__name__}: {str(e)[:500]}", flush=True)
                continue
            whole[label] = run
        timed(whole, "node (rate: x read + y written)", NODE_BYTES)


if __name__ == "__main__":
    main()
