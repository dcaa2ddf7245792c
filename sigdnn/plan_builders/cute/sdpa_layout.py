"""How an sdpa node maps onto the Hopper flash-attention kernel (pure Python, no DSL).

The kernel (kernels/fmha_sm90.py) reads q [B, Hq, Sq, D], k and v
[B, Hkv, Skv, D] and writes o [B, Hq, Sq, D] (and the float32 stats
[B, Hq, Sq, 1]) through element strides, so any order of the batch, head
and sequence dims serves (BHSD, BSHD, ...) as long as the head dim is the
contiguous one. q, k and v travel by TMA, which wants every other stride a
multiple of 16 bytes; o and stats are stored from registers and take any
strides.

What it does not handle is declined with the reason: an additive bias, a
head dim other than 64 or 128 (or v's differing from q's), a non-positive
attn_scale (the running row max is kept on the unscaled scores), 32-bit
inputs, a compute dtype other than float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

IO_DTYPES = ("float16", "bfloat16")
HEAD_DIMS = (64, 128)
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
_INT32_MAX = 2**31 - 1
_TMA_MAX_STRIDE_BYTES = 2**40
_LOG2E = 1.4426950408889634


@attrs.frozen
class FmhaSpec:
    """What one compiled kernel is specialized on (everything but extents, strides and the scale)."""

    dtype: str
    head_dim: int
    causal: bool
    stats: bool  # write the logsumexp of each score row


@attrs.frozen
class FmhaConfig:
    """Tiling: query rows per CTA (two consumer warpgroups of tile_m / 2 rows), keys per step, K/V stages."""

    tile_m: int = 128
    tile_n: int = 128
    stages: int = 2
    # The two consumer warpgroups take turns issuing their wgmma (named barriers), so one's softmax
    # runs while the other's products are on the tensor cores.
    pingpong: bool = False
    # One CTA per SM walking the work tiles (instead of one CTA per tile): the producer loads the next
    # tile's Q and first K / V while the consumers finish the current one. Chosen at launch: the
    # compiled kernel is the same.
    persistent: bool = False
    # Causal: a work unit is a pair of query blocks of one head, the longest and the shortest, so
    # every unit costs the same (m_blocks + 1 key tiles) and a static walk over units stays balanced.
    balanced: bool = False

    @property
    def label(self) -> str:
        flags = "".join(f for f, on in (("p", self.pingpong), ("b", self.balanced), ("x", self.persistent)) if on)
        return f"m{self.tile_m}n{self.tile_n}s{self.stages}{flags}"

    @property
    def kernel(self) -> FmhaConfig:
        """What the compiled kernel depends on (persistence only sizes the grid)."""
        return attrs.evolve(self, persistent=False)


@attrs.frozen
class FmhaProblem:
    """Extents and element strides of one launch; strides are (batch, head, sequence) per tensor."""

    batch: int
    heads: int
    kv_heads: int
    sq: int
    skv: int
    q_strides: tuple[int, int, int]
    k_strides: tuple[int, int, int]
    v_strides: tuple[int, int, int]
    o_strides: tuple[int, int, int]
    stats_strides: tuple[int, int, int]  # (0, 0, 0) when there is no stats output
    attn_scale: float

    def ctas(self, config: FmhaConfig, sm_count: int) -> int:
        """CTAs to launch: one per work unit (a query block of one head, or a balanced pair of them), or
        one per SM when persistent."""
        m_blocks = -(-self.sq // config.tile_m)
        units = (-(-m_blocks // 2) if config.balanced else m_blocks) * self.heads * self.batch
        return min(units, sm_count) if config.persistent else units

    @property
    def groups(self) -> int:
        """Query heads per kv head."""
        return self.heads // self.kv_heads

    @property
    def scale_log2(self) -> float:
        """attn_scale * log2(e): the kernel exponentiates with exp2."""
        return self.attn_scale * _LOG2E


def parse_config(label: str) -> FmhaConfig:
    """Inverse of ``FmhaConfig.label``, e.g. ``m128n128s2``."""
    import re

    m = re.fullmatch(r"m(\d+)n(\d+)s(\d+)(p?)(b?)(x?)", label)
    if m is None:
        raise ValueError(f"bad SDPA config label {label!r} (e.g. m128n128s2, m128n128s2pbx)")
    tm, tn, stages, pingpong, balanced, persistent = m.groups()
    return FmhaConfig(
        int(tm),
        int(tn),
        int(stages),
        pingpong=bool(pingpong),
        persistent=bool(persistent),
        balanced=bool(balanced),
    )


def default_config(spec: FmhaSpec) -> FmhaConfig:
    """128 x 128 tiles, two K/V stages (160 KiB of shared memory at head dim 128), from the H200 sweep in
    docs/experiments.md. Without the mask: persistent CTAs (0.99 / 1.06 of cuDNN
    at d128 S = 4096 / 16384, 0.95 at d64; turn-taking measured within 2 % either way). Causal:
    balanced pairs of query blocks, turn-taking, persistent (1.07 / 1.16 at d128, 0.97 at d64; the
    static walk over unpaired tiles of unequal length was 0.78 at 16384). Causal with stats: one CTA
    per tile, longest first; the balanced kernel with stats has its wgmma serialized by ptxas (C7511)."""
    if not spec.causal:
        return FmhaConfig(128, 128, 2, persistent=True)
    if spec.stats:
        return FmhaConfig(128, 128, 2)
    return FmhaConfig(128, 128, 2, pingpong=True, persistent=True, balanced=True)


def check_config(spec: FmhaSpec, config: FmhaConfig) -> None:
    """ValueError unless the tiles fit the kernel: two warpgroups of 64 rows, 16-key steps, shared memory."""
    if config.tile_m != 128:
        raise ValueError(f"tile_m {config.tile_m}: the kernel runs two 64-row warpgroups (tile_m 128)")
    if config.tile_n % 16 or not 16 <= config.tile_n <= 256:
        raise ValueError(f"tile_n {config.tile_n}: a multiple of 16 up to 256")
    itemsize = ITEMSIZE[spec.dtype]
    smem = (config.tile_m + 2 * config.stages * config.tile_n) * spec.head_dim * itemsize + 1024
    if config.balanced and not spec.causal:
        raise ValueError("balanced pairs of query blocks serve the causal mask only (other tiles are equal)")
    if config.stages < 2 or smem > 232448:
        raise ValueError(f"{config.stages} stages of {config.tile_n} keys need {smem} bytes of shared memory")


_UNIT_STRIDE = 8  # for a dim of extent 1: never stepped along, and 16 bytes apart as a TMA descriptor wants


def bhs_strides(dims: Sequence[int], strides: Sequence[int]) -> tuple[int, int, int]:
    """(batch, head, sequence) strides of a [B, H, S, D] tensor; a dim of extent 1 may carry any stride."""
    return tuple(_UNIT_STRIDE if dims[i] == 1 else int(strides[i]) for i in range(3))  # type: ignore[return-value]


def plan_sdpa(
    q: tuple[Sequence[int], Sequence[int], str],
    k: tuple[Sequence[int], Sequence[int], str],
    v: tuple[Sequence[int], Sequence[int], str],
    o: tuple[Sequence[int], Sequence[int], str],
    stats: tuple[Sequence[int], Sequence[int], str] | None,
    attn_scale: float,
    causal: bool,
) -> tuple[FmhaSpec, FmhaProblem]:
    """The kernel view of (dims, strides, dtype) of q, k, v, o and stats, or ValueError saying why not."""
    dtypes = {name: t[2] for name, t in (("q", q), ("k", k), ("v", v), ("o", o))}
    dtype = q[2]
    if dtype not in IO_DTYPES:
        raise ValueError(f"q is {dtype}; supported: {', '.join(IO_DTYPES)}")
    odd = [name for name, d in dtypes.items() if d != dtype]
    if odd:
        raise ValueError(f"q, k, v and o must share one dtype, got {dtypes}")
    b, hq, sq, d = q[0]
    _, hkv, skv, dk = k[0]
    dv = v[0][3]
    if d not in HEAD_DIMS or dk != d or dv != d:
        raise ValueError(f"head dims q {d}, k {dk}, v {dv}; supported: equal, one of {HEAD_DIMS}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"k's {hkv} heads do not divide q's {hq}")
    if not (attn_scale > 0 and math.isfinite(attn_scale)):
        raise ValueError(f"attn_scale {attn_scale}; supported: positive and finite")
    if min(b, hq, sq, skv) < 1:
        raise ValueError(f"empty problem: q {list(q[0])}, k {list(k[0])}")
    for name, (dims, strides, _) in (("q", q), ("k", k), ("v", v), ("o", o)):
        if strides[3] != 1 and dims[3] != 1:
            raise ValueError(f"{name}'s head dim is not contiguous (strides {list(strides)})")
        if name != "o" and any(s % (16 // ITEMSIZE[dtype]) for s, e in zip(strides[:3], dims[:3]) if e > 1):
            raise ValueError(f"{name} strides {list(strides)}: TMA needs multiples of 16 bytes")
        if name != "o" and any(s * ITEMSIZE[dtype] >= _TMA_MAX_STRIDE_BYTES for s in strides[:3]):
            raise ValueError(f"{name} strides {list(strides)}: TMA takes strides below 2^40 bytes")
    if max(sq, skv) > _INT32_MAX // 2:
        raise ValueError(f"sequence lengths {sq}, {skv} exceed the kernel's 32-bit indexing")
    stats_strides = (0, 0, 0)
    if stats is not None:
        if stats[2] != "float32":
            raise ValueError(f"stats is {stats[2]}; supported: float32")
        stats_strides = bhs_strides(stats[0], stats[1])
    spec = FmhaSpec(dtype, d, causal, stats is not None)
    problem = FmhaProblem(
        b,
        hq,
        hkv,
        sq,
        skv,
        bhs_strides(q[0], q[1]),
        bhs_strides(k[0], k[1]),
        bhs_strides(v[0], v[1]),
        bhs_strides(o[0], o[1]),
        stats_strides,
        float(attn_scale),
    )
    return spec, problem
