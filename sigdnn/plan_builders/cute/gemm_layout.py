"""How a matmul node's operands map onto the Hopper GEMM kernel (pure Python, no DSL).

The kernel computes C[m, n, l] = sum_k A[m, k, l] * B[n, k, l] with each
operand contiguous along one of its two matrix dims (its "major" dim) and at
most one batch dim. This module turns a node's dims and element strides into
that form, or says why it cannot:

- batch dims broadcast as in the reference (a dim of extent 1, or a missing
  leading dim, repeats); they must collapse to one strided dim per operand,
  and an operand that does not vary along it is passed unbatched;
- when B is shared by the whole batch and A and C step through it as taller
  matrices (the usual ``x @ W`` with x of shape [..., M, K]), the batch is
  folded into M: one big GEMM with fewer partial tiles;
- the kernel loads and stores through TMA, which wants every non-unit stride
  (leading and batch) to be a multiple of 16 bytes;
- Hopper's wgmma reads 8-bit (fp8) operands only K-major: A row-major and B
  column-major (stored as B^T), as cuBLAS's and ``torch._scaled_mm``'s fp8
  paths also require.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

FP8_DTYPES = ("fp8_e4m3", "fp8_e5m2")
AB_DTYPES = ("float16", "bfloat16", *FP8_DTYPES)
C_DTYPES = ("float16", "bfloat16", "float32")
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}
BIAS_DTYPES = ("float16", "bfloat16", "float32")
SCALE_DTYPES = ("float16", "bfloat16", "float32")
MAX_SPLIT_K = 16  # K ranges per tile in the kernel's split-K
# CTAs of a cluster: 8 is the portable limit; cuDNN ran conv5_3x3 as 128x64 tiles in clusters of 8 along N
# on the H200, multicasting each A tile to all eight (Nsight Compute).
MAX_CLUSTER = 8
# Clusters of one kernel (one CTA a SM) resident at once on a 132-SM H100 / H200, by CTAs a cluster: fewer
# than 132 // size, since a cluster stays inside one GPC (cutlass.utils.HardwareInfo on the H200, same file).
RESIDENT_CLUSTERS_132 = {4: 30, 8: 15}


def resident_clusters(sm_count: int, size: int) -> int:
    """How many clusters of ``size`` CTAs a persistent grid launches: all of them run at once."""
    return RESIDENT_CLUSTERS_132.get(size, sm_count // size) if sm_count == 132 else sm_count // size


MAX_SCALES = 2  # per-tensor scale multiplies the epilogue applies (cuDNN's fp8 graphs: A's and B's descale)
# sigdnn pointwise mode -> the kernel's epilogue activation
ACTIVATIONS = {"relu_fwd": "relu", "gelu_fwd": "gelu", "gelu_approx_tanh_fwd": "gelu_tanh"}
_INT32_MAX = 2**31 - 1


@attrs.frozen
class GemmSpec:
    """What a compiled kernel is specialized on (everything but extents and strides)."""

    a_dtype: str
    b_dtype: str
    c_dtype: str
    a_major: str  # "k": A rows contiguous (row-major M x K); "m": column-major
    b_major: str  # "k": B^T rows contiguous (column-major K x N); "n": row-major K x N
    c_major: str  # "n": row-major M x N; "m": column-major
    a_batched: bool  # False: one A serves every batch entry
    b_batched: bool
    # Fused epilogue: C = act(round_y(s(round_x(A @ B)) + bias[n])) computed in float32, where s applies
    # each per-tensor scale in turn (x = round_s[i](x * scale_i)); round_x / round_s / round_y round to
    # the declared dtypes of the chain's intermediate tensors (a no-op for float32), so the fused result
    # rounds exactly where the node-by-node reference does.
    bias_dtype: str | None = None  # None: no bias
    activation: str = "none"  # "none" or a value of ACTIVATIONS
    round_x: str = "float32"  # dtype of the matmul's own output tensor
    round_y: str = "float32"  # dtype of the bias add's output tensor
    scale_dtypes: tuple[str, ...] = ()  # dtype of each per-tensor scale (one value read from memory)
    round_s: tuple[str, ...] = ()  # dtype of each scale multiply's output tensor
    bias_per: str = "n"  # "n": bias[n], one per output column; "m": bias[m], one per row (a transposed conv)

    @property
    def fp8(self) -> bool:
        return self.a_dtype in FP8_DTYPES


@attrs.frozen
class GemmConfig:
    """Kernel tuning knobs: CTA tile, consumer schedule, cluster, tile rasterization."""

    tile_m: int = 128
    tile_n: int = 256
    pingpong: bool = False
    cluster_m: int = 1
    cluster_n: int = 1
    swizzle: int = 1
    raster_along_m: bool = True
    # fp8 only: accumulate straight in the wgmma accumulator ("fast accumulation", as cuBLAS's
    # CUBLASLT_MATMUL_DESC_FAST_ACCUM). Off: each 128-deep K tile's products go into a fresh accumulator
    # that is then added to the float32 total, because Hopper's fp8 wgmma keeps fewer accumulator bits
    # than float32 (CUTLASS's default promotion interval). Ignored for 16-bit operands.
    fast_accum: bool = False
    # Split-K inside the kernel (conv fprop only): a tile's K loop is cut into ``split_k`` near-equal ranges
    # run by different CTAs; all but the last write float32 partial tiles to a workspace and the last adds
    # them before the epilogue (kernels/gemm_sm90.py). ``split_tail``: only the tiles past the last full
    # wave are split (the whole waves run unsplit), else every tile is.
    split_k: int = 1
    split_tail: bool = False
    # Stream-K (conv fprop only): the tiles past all but the last full wave are cut into one contiguous
    # range of K iterations per SM, crossing tile boundaries; a tile's parts are added by the CTA that
    # holds its first K tile.
    stream_k: bool = False

    def __attrs_post_init__(self) -> None:
        if self.pingpong:
            if self.tile_m not in (64, 128) or self.tile_n % 16 or not 16 <= self.tile_n <= 256:
                raise ValueError(f"pingpong tile {self.tile_m}x{self.tile_n}: M in (64, 128), N a multiple of 16")
        elif self.tile_m not in (128, 256) or self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            raise ValueError(f"cooperative tile {self.tile_m}x{self.tile_n}: M in (128, 256), N a multiple of 16")
        cluster = self.cluster_m * self.cluster_n
        if {self.cluster_m, self.cluster_n} - {1, 2, 4, 8} or cluster > MAX_CLUSTER:
            raise ValueError(f"cluster {self.cluster_m}x{self.cluster_n}: powers of two, {MAX_CLUSTER} CTAs at most")
        if self.swizzle < 1:
            raise ValueError("swizzle must be >= 1")
        if not 1 <= self.split_k <= MAX_SPLIT_K:
            raise ValueError(f"split_k {self.split_k}: 1 to {MAX_SPLIT_K}")
        if self.split and (self.pingpong or (self.cluster_m, self.cluster_n) != (1, 1) or self.swizzle != 1):
            raise ValueError("split-K needs the cooperative schedule, no cluster and swizzle 1")
        if self.split_tail and self.split_k == 1:
            raise ValueError("split_tail without split_k")
        if self.stream_k and self.split_k > 1:
            raise ValueError("stream-K sets its own split")
        # Accumulator registers per consumer thread; past ~208 the kernel spills.
        acc_regs = self.tile_m * self.tile_n // (128 if self.pingpong else 256)
        if acc_regs > 208:
            raise ValueError(f"tile {self.tile_m}x{self.tile_n} needs {acc_regs} accumulator registers per thread")

    @property
    def label(self) -> str:
        kind = "pp" if self.pingpong else "coop"
        raster = "" if self.raster_along_m else "n"
        fast = "f" if self.fast_accum else ""
        split = "" if self.split_k == 1 else f"{'t' if self.split_tail else 'k'}{self.split_k}"
        split += "x" if self.stream_k else ""
        return (
            f"{kind}{self.tile_m}x{self.tile_n}c{self.cluster_m}x{self.cluster_n}s{self.swizzle}{raster}{fast}{split}"
        )

    @property
    def split(self) -> bool:
        """Whether the K loop of a tile may be cut across CTAs (split-K or stream-K)."""
        return self.split_k > 1 or self.stream_k

    @property
    def kernel(self) -> GemmConfig:
        """What the compiled kernel depends on: the split count and policy are launch scalars, so every
        split-K and stream-K config of one tile shares one specialization."""
        return attrs.evolve(self, split_k=2 if self.split else 1, split_tail=False, stream_k=False)

    def accumulator_registers(self, fp8: bool) -> int:
        """Float32 accumulator registers per consumer thread (twice the tile's share when fp8 promotes)."""
        share = self.tile_m * self.tile_n // (128 if self.pingpong else 256)
        return share * (2 if fp8 and not self.fast_accum else 1)


@attrs.frozen
class GemmProblem:
    """The launch-time scalars: extents and element strides of the kernel's view."""

    m: int
    n: int
    k: int
    batch: int
    lda: int
    ldb: int
    ldc: int
    batch_stride_a: int
    batch_stride_b: int
    batch_stride_c: int


def bias_once_a_tile(bias_per: str, epi_rows: int, tile_m: int) -> bool:
    """Whether the epilogue loads its bias once a tile rather than once a subtile: a bias by row ("m") when
    every subtile spans the tile's rows, so all of them add the same bias values."""
    return bias_per == "m" and epi_rows == tile_m


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _major(rows: int, cols: int, s_rows: int, s_cols: int, align: int, what: str) -> tuple[bool, int]:
    """(cols contiguous?, leading stride) for a rows x cols matrix view, or ValueError.

    A dim of extent 1 may carry any stride: it is never stepped, so it gets a
    TMA-friendly one.
    """
    options = []
    if cols == 1 or s_cols == 1:
        options.append((True, s_rows if rows > 1 else _round_up(cols, align)))
    if rows == 1 or s_rows == 1:
        options.append((False, s_cols if cols > 1 else _round_up(rows, align)))
    if not options:
        raise ValueError(f"{what} has strides ({s_rows}, {s_cols}): neither matrix dim is contiguous")
    for cols_inner, ld in options:
        if ld > 0 and ld % align == 0:
            return cols_inner, ld
    raise ValueError(
        f"{what} has strides ({s_rows}, {s_cols}): its leading stride must be a positive multiple of "
        f"{align} elements (16 bytes) for TMA"
    )


def _batch_views(
    c_batch: Sequence[int], operands: Sequence[tuple[Sequence[int], Sequence[int]]]
) -> tuple[int, list[int]]:
    """Collapse the batch dims to (extent, one stride per operand), or ValueError.

    ``operands`` are (batch dims, batch strides) of each operand, right-aligned
    to ``c_batch``; a broadcast dim gets stride 0.
    """
    rank = len(c_batch)
    strides = []
    for dims, st in operands:
        pad = rank - len(dims)
        row = [0] * pad
        for d, s, full in zip(dims, st, c_batch[pad:], strict=True):
            if d not in (full, 1):
                raise ValueError(f"batch dims {list(dims)} do not broadcast to {list(c_batch)}")
            row.append(0 if d == 1 else int(s))
        strides.append(row)
    keep = [i for i, d in enumerate(c_batch) if d != 1]
    dims = [c_batch[i] for i in keep]
    strides = [[row[i] for i in keep] for row in strides]
    j = len(dims) - 2
    while j >= 0:
        if all(row[j] == row[j + 1] * dims[j + 1] for row in strides):
            dims[j + 1] *= dims[j]
            del dims[j]
            for row in strides:
                del row[j]
        j -= 1
    if not dims:
        return 1, [0] * len(operands)
    if len(dims) > 1:
        raise ValueError(f"batch dims {list(c_batch)} do not collapse to one strided dim for every operand")
    return dims[0], [row[0] for row in strides]


def plan_gemm(
    a: tuple[Sequence[int], Sequence[int], str],
    b: tuple[Sequence[int], Sequence[int], str],
    c: tuple[Sequence[int], Sequence[int], str],
) -> tuple[GemmSpec, GemmProblem]:
    """The kernel view of ``c = a @ b`` from (dims, element strides, dtype) of each, or ValueError."""
    (a_dims, a_st, a_dt), (b_dims, b_st, b_dt), (c_dims, c_st, c_dt) = a, b, c
    fp8 = a_dt in FP8_DTYPES
    if a_dt not in AB_DTYPES or not (b_dt == a_dt or (fp8 and b_dt in FP8_DTYPES)):
        raise ValueError(
            f"operand dtypes {a_dt} x {b_dt}: supported are float16 x float16, bfloat16 x bfloat16 and "
            "fp8 (e4m3 / e5m2, mixed) x fp8"
        )
    if c_dt not in C_DTYPES:
        raise ValueError(f"output dtype {c_dt}: supported are {', '.join(C_DTYPES)}")
    if min(len(a_dims), len(b_dims)) < 2 or len(c_dims) < 2:
        raise ValueError("operands need rank >= 2")
    m, k = int(a_dims[-2]), int(a_dims[-1])
    n = int(b_dims[-1])
    if int(b_dims[-2]) != k or tuple(c_dims[-2:]) != (m, n):
        raise ValueError(f"dims {list(a_dims)} @ {list(b_dims)} -> {list(c_dims)} are inconsistent")
    if min(m, n, k) == 0:
        raise ValueError(f"empty problem (M, N, K) = ({m}, {n}, {k})")
    if any(s < 0 for s in (*a_st, *b_st, *c_st)):
        raise ValueError("negative strides")

    batch, (bsa, bsb, bsc) = _batch_views(
        tuple(c_dims[:-2]),
        [(a_dims[:-2], a_st[:-2]), (b_dims[:-2], b_st[:-2]), (c_dims[:-2], c_st[:-2])],
    )
    sam, sak = int(a_st[-2]), int(a_st[-1])
    sbk, sbn = int(b_st[-2]), int(b_st[-1])
    scm, scn = int(c_st[-2]), int(c_st[-1])
    if batch > 1 and bsc == 0:
        raise ValueError("the output repeats along the batch (stride 0)")

    # x @ W: fold the batch into M when B is shared and A and C step through it as taller matrices.
    if batch > 1 and bsb == 0 and bsa == m * sam and bsc == m * scm and bsa and bsc:
        m, batch, bsa, bsc = m * batch, 1, 0, 0

    if fp8 and k > 1 and (sak != 1 or sbk != 1):
        which = " and ".join(x for x, s in (("a (M x K)", sak), ("b (K x N)", sbk)) if s != 1)
        raise ValueError(
            f"fp8 operands must be contiguous along K (wgmma reads 8-bit operands K-major only): {which} "
            "not; store a row-major and b column-major"
        )
    al, cl = 16 // ITEMSIZE[a_dt], 16 // ITEMSIZE[c_dt]
    a_k_inner, lda = _major(m, k, sam, sak, al, "a")
    b_k_inner, ldb = _major(n, k, sbn, sbk, al, "b")
    c_n_inner, ldc = _major(m, n, scm, scn, cl, "c")
    if fp8 and not (a_k_inner and b_k_inner):
        raise ValueError(f"fp8 operands' rows along K are not 16-byte aligned (lda {lda}, ldb {ldb})")
    if batch > 1:
        for name, s, align in (("a", bsa, al), ("b", bsb, al), ("c", bsc, cl)):
            if s and s % align:
                raise ValueError(f"{name}'s batch stride {s} is not a multiple of {align} elements (16 bytes)")
    if max(m, n, k, batch) > _INT32_MAX:
        raise ValueError("extents past 2^31 - 1")
    spec = GemmSpec(
        a_dtype=a_dt,
        b_dtype=b_dt,
        c_dtype=c_dt,
        a_major="k" if a_k_inner else "m",
        b_major="k" if b_k_inner else "n",
        c_major="n" if c_n_inner else "m",
        a_batched=batch > 1 and bsa != 0,
        b_batched=batch > 1 and bsb != 0,
    )
    problem = GemmProblem(
        m=m,
        n=n,
        k=k,
        batch=batch,
        lda=lda,
        ldb=ldb,
        ldc=ldc,
        batch_stride_a=bsa if spec.a_batched else 0,
        batch_stride_b=bsb if spec.b_batched else 0,
        batch_stride_c=bsc if batch > 1 else 0,
    )
    return spec, problem


def default_config(spec: GemmSpec, problem: GemmProblem, sm_count: int = 132) -> GemmConfig:
    """The configuration used without tuning (stated heuristic, measured by benchmarks/gpu_cute.py).

    Large problems: 128x256 cooperative tiles in 2x1 clusters, grouped 4
    clusters wide and rasterized along N (on the H200, 2026-11-30: 1.02-1.03x
    torch.matmul at 8192^3, 0.98-0.99x at 4096^3). When those tiles would
    leave SMs idle, 128x128 tiles without clusters. A gelu epilogue
    (erf or tanh form) runs pingpong 64x256 tiles instead, so one consumer
    warpgroup's epilogue overlaps the other's mainloop (2026-12-01: bias +
    gelu 10-13 % faster than cooperative 128x256 in the same run; the
    bias-only epilogue 2-4 % slower, so cheap epilogues stay cooperative).
    """
    tiles = math.ceil(problem.m / 128) * math.ceil(problem.n / 256) * problem.batch
    if tiles < sm_count:
        return GemmConfig(tile_m=128, tile_n=128)
    if spec.fp8:
        # Promotion doubles the accumulators: 128x256 tiles would need 256 registers per thread. On the
        # H200 (2026-12-01) 128x128 tiles in 1x2 clusters ran e4m3 GEMMs at 1.04x / 1.10x
        # torch._scaled_mm at 4096^3 / 8192^3, 2x1 clusters 1.00x / 1.09x, 128x192 tiles 0.86x / 0.99x.
        return GemmConfig(tile_m=128, tile_n=128, cluster_n=2, swizzle=4)
    if spec.activation in ("gelu", "gelu_tanh"):
        return GemmConfig(tile_m=64, tile_n=256, pingpong=True, cluster_m=2, swizzle=4, raster_along_m=False)
    return GemmConfig(tile_m=128, tile_n=256, cluster_m=2, swizzle=4, raster_along_m=False)
