"""Batchnorm training forward as hand-written CUDA C: how close two passes over x can come to #7's 2.5 TB/s.

sigdnn's cuTile batchnorm (NHWC 64x256x56x56 bf16) runs at 2.37-2.38 TB/s
(86 us); #7 asks 2.5 (82.2 us). Every cuTile and CuTe DSL form measured so
far (gpu_cutile_2026-12-02b.md, -02c.md) adds to about 85 us. Before another
DSL form, this asks what the device gives two passes at all, with every
lever a CUDA C programmer has (compiled by CuPy's NVRTC, launched through
the driver's ``cuLaunchKernelEx``):

* ``stats``: each thread owns 8 channels (one 16-byte vector) and keeps
  ``US`` loads in flight (``ld.global.nc.L1::no_allocate``, as the 4.15 TB/s
  read kernel of ``read_roofline.py``), summing d = x - x[0] and d^2 in
  float32; the block's rows meet in shared memory and one float64 row per
  block goes to a partial matrix;
* ``finalize``: ``CF`` channels a block (512 threads, every load issued
  before any is added) add the partial rows and write the node's per-channel
  outputs and the float32 mean and inv_variance the last pass reads; ``f0``:
  no finalize, the statistics pass adds into one (2, C) accumulator by
  float64 atomics and each elementwise block derives its coefficients (a
  ticket puts the accumulator back to zero);
* ``apply``: y = (x - mean) * (inv * scale) + bias, chunks of x last first
  (the statistics pass read them last), one chunk a block or ``GA`` blocks a
  SM walking chunks a grid apart;
* ``pdl``: the finalize and the apply pass as programmatic dependent
  launches (1: each triggers its dependent when its work is done; 2: at its
  start, so the elementwise pass's blocks load their first x while the
  statistics finish, then wait for the finalize);
* ``p``: the statistics pass loads its next step before adding this one;
* ``y``: y stored with an L2 evict-first policy; ``x``: the elementwise
  pass loads x evict-first; ``k``: the statistics pass loads the last K MiB
  of x evict-last and the rest evict-first.

``--trace`` also records each kernel's first block start and last block
end (globaltimer) within the node. A label composes the fields:
``s256u4b4/f8/a256u4g0/p1/pdl2/y1/x1/k24`` (stats 256
threads, 4 loads, 4 blocks a SM; finalize 8 channels a block; apply 256
threads, 4 loads, one chunk a block; ...). Each variant's per-channel outputs
and y are checked against sigdnn's node (``cutile_bn_stats_pass.Node``) and
against float64 torch, then timed interleaved with sigdnn's node and torch's
copy of x (median of 15 samples of 10 runs). On the H200 (cuTile and CuPy):

    python3 benchmarks/bn_train_cuda_c.py [--trace] [LABEL,...]
"""

from __future__ import annotations

import argparse
import ctypes
import re
from collections.abc import Callable

import attrs
import cupy as cp
import torch
from bn_reference import bf16_ulps, float64_batchnorm
from cuda.bindings import driver as cu
from cutile_bn_stats_pass import EPS, MOMENTUM, NODE_BYTES, ROWS, X_BYTES, C, Node, launcher, timed

HELPERS = r"""
typedef unsigned long long u64;

__device__ __forceinline__ void unpack8(const uint4& v, float f[8]) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint4 pack8(const float f[8]) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(f[2 * i + 1]), "f"(f[2 * i]));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ u64 evict_first() {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ u64 evict_last() {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ uint4 load(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 load_hinted(const uint4* p, u64 policy) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
    return v;
}

__device__ __forceinline__ void store(uint4* p, uint4 v, u64 policy) {
#if Y_FIRST
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy) : "memory");
#else
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#endif
}

// TRACE: t[2k] = the earliest block start of kernel k, t[2k + 1] = the latest block end (globaltimer, ns).
__device__ __forceinline__ void mark(u64* t, int slot, bool end) {
#if TRACE
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 now;
        asm volatile("mov.u64 %0, %globaltimer;" : "=l"(now));
        if (end) atomicMax(t + slot, now); else atomicMin(t + slot, now);
    }
#endif
}

__device__ __forceinline__ void add(const uint4& v, const float p[8], float s0[8], float s1[8]) {
    float f[8];
    unpack8(v, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float d = f[j] - p[j];
        s0[j] += d;
        s1[j] = fmaf(d, d, s1[j]);
    }
}

// A channel's outputs from its shifted sums (a0 = sum d, a1 = sum d^2 over m rows, d = x - p); returns mean and
// inv_variance, and stores the node's per-channel outputs where ``store`` is true.
__device__ __forceinline__ double2 outputs(int c, double a0, double a1, float p, long long m, bool store,
                                           float* mean, float* inv, float* wmean, float* winv, const float* rm,
                                           const float* rv, float* nrm, float* nrv) {
    const double count = (double)m;
    const double mu = (double)p + a0 / count;
    const double var = fmax((a1 - a0 * (a0 / count)) / count, 0.0);
    const double r = 1.0 / sqrt(var + EPS);
    if (store) {
        mean[c] = (float)mu;
        inv[c] = (float)r;
        wmean[c] = (float)mu;
        winv[c] = (float)r;
        nrm[c] = (float)(KEEP * (double)rm[c] + MOMENTUM * mu);
        nrv[c] = (float)(KEEP * (double)rv[c] + MOMENTUM * (var * UNBIAS));
    }
    return make_double2(mu, r);
}
"""

SOURCE = (
    HELPERS
    + r"""
// x: (m, 256) bf16 rows as 32 uint4 each; part: (gridDim.x, 2, 256) float64.
extern "C" __global__ void __launch_bounds__(TS) bn_stats(const uint4* __restrict__ x, long long m, double* part,
                                                          u64* trace) {
    mark(trace, 0, false);
    constexpr int R = TS / 32, CH = R * US;
    const int lane = threadIdx.x & 31, r = threadIdx.x >> 5;
    float p[8], s0[8], s1[8];
    unpack8(x[lane], p);
#pragma unroll
    for (int j = 0; j < 8; ++j) s0[j] = s1[j] = 0.0f;
    const long long chunks = m / CH;
#if KEEP_ROWS
    const u64 first = evict_first(), last = evict_last();
#endif
    long long k = blockIdx.x;
#if PREFETCH  // the next chunk's loads issued before this one's sums
    uint4 v[US];
    if (k < chunks) {
#pragma unroll
        for (int u = 0; u < US; ++u) v[u] = load(x + (k * CH + r + u * R) * 32 + lane);
    }
    for (; k < chunks; k += gridDim.x) {
        uint4 w[US];
        const long long next = k + gridDim.x < chunks ? k + gridDim.x : k;
#pragma unroll
        for (int u = 0; u < US; ++u) w[u] = load(x + (next * CH + r + u * R) * 32 + lane);
#pragma unroll
        for (int u = 0; u < US; ++u) add(v[u], p, s0, s1);
#pragma unroll
        for (int u = 0; u < US; ++u) v[u] = w[u];
    }
#else
    for (; k < chunks; k += gridDim.x) {
        const uint4* base = x + (k * CH + r) * 32 + lane;
        uint4 v[US];
#if KEEP_ROWS
        const u64 policy = k * CH >= m - KEEP_ROWS ? last : first;
#pragma unroll
        for (int u = 0; u < US; ++u) v[u] = load_hinted(base + u * R * 32, policy);
#else
#pragma unroll
        for (int u = 0; u < US; ++u) v[u] = load(base + u * R * 32);
#endif
#pragma unroll
        for (int u = 0; u < US; ++u) add(v[u], p, s0, s1);
    }
#endif
    if (k == chunks) {  // the rows after the last whole chunk
        for (int u = 0; u < US; ++u) {
            const long long row = chunks * CH + u * R + r;
            if (row < m) add(x[row * 32 + lane], p, s0, s1);
        }
    }
#if PDL
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    __shared__ float sums[2][R][256];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        sums[0][r][lane * 8 + j] = s0[j];
        sums[1][r][lane * 8 + j] = s1[j];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 256; c += TS) {
        double t0 = 0.0, t1 = 0.0;
        for (int i = 0; i < R; ++i) {
            t0 += sums[0][i][c];
            t1 += sums[1][i][c];
        }
#if DERIVE  // one (2, 256) float64 accumulator
        atomicAdd(part + c, t0);
        atomicAdd(part + 256 + c, t1);
#else
        part[(long long)blockIdx.x * 512 + c] = t0;
        part[(long long)blockIdx.x * 512 + 256 + c] = t1;
#endif
    }
    mark(trace, 1, true);
}

// CF channels a block, TF threads: TF / CF groups of the PART_ROWS partial rows a channel, every load issued
// before any is added, then added in float64.
extern "C" __global__ void __launch_bounds__(TF) bn_finalize(
    const double* part, const unsigned short* x, long long m, float* mean, float* inv, float* wmean,
    float* winv, const float* rm, const float* rv, float* nrm, float* nrv, u64* trace) {
    mark(trace, 2, false);
#if PDL == 2
    asm volatile("griddepcontrol.launch_dependents;");
#endif
#if PDL
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    constexpr int G = TF / CF, Q = (PART_ROWS + G - 1) / G;
    const int j = threadIdx.x % CF, g = threadIdx.x / CF, c = blockIdx.x * CF + j;
    double v0[Q], v1[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const int i = g + q * G;
        v0[q] = i < PART_ROWS ? __ldcg(part + (long long)i * 512 + c) : 0.0;
        v1[q] = i < PART_ROWS ? __ldcg(part + (long long)i * 512 + 256 + c) : 0.0;
    }
    double t0 = 0.0, t1 = 0.0;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        t0 += v0[q];
        t1 += v1[q];
    }
    __shared__ double sums[2][G][CF];
    sums[0][g][j] = t0;
    sums[1][g][j] = t1;
    __syncthreads();
    if (threadIdx.x < CF) {
        double a0 = 0.0, a1 = 0.0;
        for (int i = 0; i < G; ++i) {
            a0 += sums[0][i][j];
            a1 += sums[1][i][j];
        }
        outputs(c, a0, a1, __uint_as_float((unsigned)x[c] << 16), m, true, mean, inv, wmean, winv, rm, rv, nrm, nrv);
    }
#if PDL == 1
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    mark(trace, 3, true);
}

// Chunks of CH = TA / 32 * UA rows, last first: GA == 0, one a block; else blocks walk chunks a grid apart.
// DERIVE: each block derives its coefficients from the statistics pass's accumulator ``acc`` (block 0 stores the
// node's outputs) and the last block out, by a ticket, puts the accumulator back to zero.
extern "C" __global__ void __launch_bounds__(TA) bn_apply(
    const uint4* __restrict__ x, uint4* y, long long m, const float* wmean, const float* winv, const uint4* scale,
    const uint4* bias, u64* trace, double* acc, unsigned* ticket, float* mean, float* inv, const float* rm,
    const float* rv, float* nrm, float* nrv) {
    mark(trace, 4, false);
    constexpr int R = TA / 32, CH = R * UA;
    const int lane = threadIdx.x & 31, r = threadIdx.x >> 5;
    const long long chunks = m / CH, head = m - chunks * CH;
    const u64 first = evict_first();
    long long k = blockIdx.x;
    uint4 v[UA];
    if (k < chunks) {
        const uint4* src = x + (head + (chunks - 1 - k) * CH + r) * 32 + lane;
#pragma unroll
        for (int u = 0; u < UA; ++u) v[u] = X_FIRST ? load_hinted(src + u * R * 32, first) : load(src + u * R * 32);
    }
#if PDL
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    mark(trace, 6, false);
    float mu[8], a[8], b[8], s[8];
#if DERIVE
    {
        double a0[8], a1[8];
        float p[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            a0[j] = __ldcg(acc + lane * 8 + j);
            a1[j] = __ldcg(acc + 256 + lane * 8 + j);
        }
        unpack8(x[lane], p);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const double2 o = outputs(lane * 8 + j, a0[j], a1[j], p[j], m, blockIdx.x == 0 && r == 0, mean, inv,
                                      (float*)wmean, (float*)winv, rm, rv, nrm, nrv);
            mu[j] = (float)o.x;
            a[j] = (float)o.y;
        }
    }
#else
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        mu[j] = wmean[lane * 8 + j];
        a[j] = winv[lane * 8 + j];
    }
#endif
    unpack8(scale[lane], s);
    unpack8(bias[lane], b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] *= s[j];
    while (k < chunks) {
        uint4* dst = y + (head + (chunks - 1 - k) * CH + r) * 32 + lane;
#pragma unroll
        for (int u = 0; u < UA; ++u) {
            float f[8];
            unpack8(v[u], f);
#pragma unroll
            for (int j = 0; j < 8; ++j) f[j] = fmaf(f[j] - mu[j], a[j], b[j]);
            store(dst + u * R * 32, pack8(f), first);
        }
        k += gridDim.x;
        if (k < chunks) {
            const uint4* src = x + (head + (chunks - 1 - k) * CH + r) * 32 + lane;
#pragma unroll
            for (int u = 0; u < UA; ++u) v[u] = X_FIRST ? load_hinted(src + u * R * 32, first) : load(src + u * R * 32);
        }
    }
    if (blockIdx.x == 0) {  // the rows before the first whole chunk
        for (int u = 0; u < UA; ++u) {
            const long long row = u * R + r;
            if (row < head) {
                float f[8];
                unpack8(x[row * 32 + lane], f);
                for (int j = 0; j < 8; ++j) f[j] = fmaf(f[j] - mu[j], a[j], b[j]);
                store(y + row * 32 + lane, pack8(f), first);
            }
        }
    }
#if DERIVE
    __shared__ unsigned last;
    __syncthreads();  // every thread has read the accumulator
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last) {
        for (int i = threadIdx.x; i < 512; i += TA) acc[i] = 0.0;
        if (threadIdx.x == 0) *ticket = 0;
    }
#endif
    mark(trace, 5, true);
}
"""
)

LABEL = re.compile(
    r"s(?P<ts>\d+)u(?P<us>\d+)b(?P<bs>\d+)/f(?P<cf>\d+)/a(?P<ta>\d+)u(?P<ua>\d+)g(?P<ga>\d+)"
    r"(?:/p(?P<p>[01]))?(?:/pdl(?P<pdl>[012]))?(?:/y(?P<y>[01]))?(?:/x(?P<x>[01]))?(?:/k(?P<k>\d+))?$"
)


@attrs.frozen
class Variant:
    """One composition of the three kernels (see the module docstring for the label's fields)."""

    ts: int
    us: int
    bs: int
    cf: int
    ta: int
    ua: int
    ga: int
    p: int = 0
    pdl: int = 0
    y: int = 0
    x: int = 0
    k: int = 0

    @classmethod
    def parse(cls, label: str) -> Variant:
        found = LABEL.match(label)
        if found is None:
            raise ValueError(f"{label!r} is not a label (e.g. s256u4b4/f8/a256u4g0/pdl2/y1/x1/k24)")
        return cls(**{key: int(v) for key, v in found.groupdict().items() if v is not None})

    def defines(self, sms: int, trace: bool = False) -> dict[str, object]:
        keep_rows = self.k * (1 << 20) // (2 * C)
        return {"TS": self.ts, "US": self.us, "TF": 512, "CF": max(self.cf, 1), "TA": self.ta, "UA": self.ua,
                "PART_ROWS": sms * self.bs, "DERIVE": int(self.cf == 0), "PREFETCH": self.p, "TRACE": int(trace),
                "PDL": self.pdl, "Y_FIRST": self.y, "X_FIRST": self.x, "KEEP_ROWS": keep_rows,
                "EPS": repr(EPS), "MOMENTUM": repr(MOMENTUM), "KEEP": repr(1.0 - MOMENTUM),
                "UNBIAS": repr(ROWS / (ROWS - 1))}  # fmt: skip


class Kernel:
    """A kernel of CUDA C ``source`` compiled with defines, launched by ``cuLaunchKernelEx``."""

    def __init__(self, name: str, defines: dict[str, object], source: str = SOURCE, smem: int = 0) -> None:
        options = ("--std=c++17", *(f"-D{k}={v}" for k, v in defines.items()))
        fn = cp.RawModule(code=source, options=options).get_function(name)
        self.handle = cu.CUfunction(fn.kernel.ptr if hasattr(fn, "kernel") else fn.ptr)
        self.name, self.smem = name, smem
        if smem:
            attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            (err,) = cu.cuFuncSetAttribute(self.handle, attribute, smem)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"{name}: {smem} bytes of shared memory: {err}")

    def launch(self, grid: int, block: int, args: list, pdl: bool, cooperative: bool = False) -> Callable[[int], None]:
        """A call enqueueing the kernel on a stream handle with these arguments (ctypes values, kept alive)."""
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
        config.sharedMemBytes = self.smem
        attrs = []
        if pdl:
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        if cooperative:  # every block resident at once, or the launch fails
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attr.value.cooperative = 1
            attrs.append(attr)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        cells = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])

        def run(stream: int, config=config, cells=cells, args=args) -> None:
            config.hStream = cu.CUstream(stream)
            (err,) = cu.cuLaunchKernelEx(config, self.handle, ctypes.addressof(cells), 0)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"{self.name}: {err}")

        return run


def _ptr(t) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr() if isinstance(t, torch.Tensor) else t.ptr)


TRACE_SLOTS = 8  # see SOURCE's ``mark``; slot 6: the earliest elementwise block past its wait
PHASES = (("statistics", 0, 1), ("finalize", 2, 3), ("elementwise", 4, 5), ("elementwise past its wait", 6, 5))


def node_run(node: Node, v: Variant, sms: int, trace: torch.Tensor | None = None) -> Callable[[], None]:
    """The three launches of variant ``v`` on the node's tensors (outputs where sigdnn's node writes them);
    with ``trace``, compiled to record each kernel's first block start and last block end there."""
    d = v.defines(sms, trace is not None)
    stats, final, apply = (Kernel(name, d) for name in ("bn_stats", "bn_finalize", "bn_apply"))
    x = node.data["x"]
    blocks = sms * v.bs
    # partial rows; with ``f0`` the (2, C) accumulator and the ticket the elementwise pass's blocks take
    part = torch.zeros((blocks, 2, C) if v.cf else (2 * C + 1,), device="cuda", dtype=torch.float64)
    mean, inv, wmean, winv, rm, rv, nrm, nrv = node.vectors
    for t in node.vectors:
        assert t.dtype == torch.float32 and t.is_contiguous(), t.dtype
    scale, bias = (node.data[k].flatten() for k in ("scale", "bias"))
    assert scale.dtype == bias.dtype == torch.bfloat16
    m, at = ctypes.c_longlong(ROWS), ctypes.c_void_p(0 if trace is None else trace.data_ptr())
    chunk = v.ta // 32 * v.ua
    grid = ROWS // chunk if v.ga == 0 else sms * v.ga
    outs = [*map(_ptr, (mean, inv, wmean, winv, rm, rv, nrm, nrv))]
    runs = [stats.launch(blocks, v.ts, [_ptr(x), m, _ptr(part), at], False)]
    if v.cf:
        runs.append(final.launch(C // v.cf, 512, [_ptr(part), _ptr(x), m, *outs, at], v.pdl > 0))
    ticket = ctypes.c_void_p(part.data_ptr() + 16 * C)
    apply_args = [_ptr(x), _ptr(node.y), m, outs[2], outs[3], _ptr(scale), _ptr(bias), at, _ptr(part), ticket,
                  outs[0], outs[1], *outs[4:]]  # fmt: skip
    runs.append(apply.launch(grid, v.ta, apply_args, v.pdl > 0))
    node.state = part
    node.keep = [*getattr(node, "keep", []), part, scale, bias]

    def run() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for launch in runs:
            launch(stream)

    return run


def stats_run(node: Node, v: Variant, sms: int) -> Callable[[], None]:
    """The statistics kernel alone."""
    kernel = Kernel("bn_stats", attrs.evolve(v, cf=8).defines(sms))
    part = torch.zeros((sms * v.bs, 2, C), device="cuda", dtype=torch.float64)
    node.keep = [*getattr(node, "keep", []), part]
    args = [_ptr(node.data["x"]), ctypes.c_longlong(ROWS), _ptr(part), ctypes.c_void_p(0)]
    launch = kernel.launch(sms * v.bs, v.ts, args, False)
    return lambda: launch(torch.cuda.current_stream().cuda_stream)


def traced(node: Node, v: Variant, sms: int, label: str) -> None:
    """Each kernel's span in the node (us from the statistics pass's first block), median of 9 runs after one."""
    trace = torch.zeros(TRACE_SLOTS, device="cuda", dtype=torch.int64)
    run = node_run(node, v, sms, trace)
    spans = []
    for _ in range(10):
        trace.copy_(torch.tensor([2**62, 0] * (TRACE_SLOTS // 2), dtype=torch.int64))
        run()
        torch.cuda.synchronize()
        t = trace.cpu().double()
        spans.append([((t[a] - t[0]) / 1e3, (t[b] - t[0]) / 1e3) for _, a, b in PHASES])
    med = torch.tensor(spans[1:]).median(0).values.tolist()
    print(f"{label} traced: " + "; ".join(f"{n} {a:.1f}-{b:.1f}" for (n, _, _), (a, b) in zip(PHASES, med)))


def torch_check(node: Node) -> str:
    """The node's outputs (as last written) against float64 torch: mean and inv relative, y in bf16 ulps."""
    x = node.data["x"].permute(0, 2, 3, 1).reshape(ROWS, C)
    scale, bias = (node.data[k].flatten() for k in ("scale", "bias"))
    mu, _, inv, want = float64_batchnorm(x, scale, bias, EPS)
    worst = bf16_ulps(node.y.permute(0, 2, 3, 1).reshape(ROWS, C), want, bias)
    rel = max(((node.vectors[0].double() - mu).abs() / mu.abs().clamp_min(1e-3)).max().item(),
              ((node.vectors[1].double() - inv).abs() / inv).max().item())  # fmt: skip
    return f"against float64 torch: mean / inv relative {rel:.1e}, y within {worst:.2f} bf16 ulps"


DEFAULT = [
    "s256u4b4/f8/a256u4g0",
    "s256u4b4/f8/a256u4g0/pdl1",
    "s256u4b4/f8/a256u4g0/pdl2",
    "s256u4b4/f8/a256u4g0/pdl2/y1",
    "s256u4b4/f8/a256u4g0/pdl2/y1/x1/k24",
    "s256u4b4/f8/a256u4g0/pdl2/y1/x1/k40",
    "s256u4b4/f4/a256u4g0/pdl2",
    "s256u4b4/f8/a256u2g0/pdl2",
    "s256u4b4/f8/a512u4g0/pdl2",
    "s256u4b4/f8/a256u4g8/pdl2",
    "s512u4b2/f8/a256u4g0/pdl2",
    "s256u8b2/f8/a256u4g0/pdl2",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="?", default=",".join(DEFAULT), help="comma-separated labels")
    parser.add_argument("--trace", action="store_true", help="also each kernel's span within the node")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    node = Node()
    y_copy = torch.empty_like(node.data["x"])
    alone = {"sigdnn": launcher(node.calls[:1])}
    whole = {"sigdnn": launcher(node.calls), "torch copy of x": lambda: y_copy.copy_(node.data["x"])}
    with node.stream():
        for label in args.labels.split(","):
            try:
                v = Variant.parse(label)
                run = node_run(node, v, sms)
                print(f"{label}: {node.check(run)}; {torch_check(node)}", flush=True)
                if v.cf == 0:  # the accumulator and ticket come back to zero
                    print(f"{label}: state left {node.state.abs().max().item()}; again: {node.check(run)}", flush=True)
                if args.trace:
                    traced(node, v, sms, label)
            except Exception as e:  # report every variant
                print(f"{label}: FAILED {type(e).__name__}: {str(e)[:500]}", flush=True)
                continue
            whole[label] = run
            stats_label = label.split("/")[0] + (f"/k{v.k}" if v.k else "")
            if stats_label not in alone:
                alone[stats_label] = stats_run(node, v, sms)
        timed(alone, "statistics kernel alone (rate: x read)", X_BYTES)
        timed(whole, "node in sequence (rate: x read + y written)", NODE_BYTES)


if __name__ == "__main__":
    main()
