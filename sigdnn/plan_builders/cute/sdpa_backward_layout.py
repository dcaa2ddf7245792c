"""How an sdpa_backward node maps onto the Hopper flash-attention backward kernels (pure Python, no DSL).

Three kernels run per node (kernels/fmha_bwd_sm90.py): a preprocess (per
query row: D = rowsum(d_o * o), the stats in base 2, and the float32 dq
accumulator zeroed), the main kernel (one CTA per block of keys of one kv
head: dk and dv in registers, dq added into the accumulator), and the
conversion of dq to its dtype. q, k, v and d_o travel by TMA and o is read
in 16-byte pieces, so each wants every stride but the head dim's a multiple
of 16 bytes; stats and the three gradients are read or written element by
element and take any strides with the head dim contiguous.

Declined with the reason: an additive bias, a head dim other than 64 or
128 (or v's differing from q's), a non-positive attn_scale, io dtypes other
than float16 / bfloat16 (all of q, k, v, o, d_o, dq, dk, dv alike), stats
other than float32, a compute dtype other than float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from sigdnn.plan_builders.cute.sdpa_layout import HEAD_DIMS, IO_DTYPES, ITEMSIZE, bhs_strides

TILE_M = 64  # query rows per step of the main kernel
TILE_N = 128  # keys per CTA of the main kernel
_INT32_MAX = 2**31 - 1
_TMA_MAX_STRIDE_BYTES = 2**40
_LOG2E = 1.4426950408889634

View = tuple[Sequence[int], Sequence[int], str]


@attrs.frozen
class BwdSpec:
    """What the compiled kernels are specialized on (everything but extents, strides and the scale)."""

    dtype: str
    head_dim: int
    causal: bool


@attrs.frozen
class BwdProblem:
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
    do_strides: tuple[int, int, int]
    stats_strides: tuple[int, int, int]
    dq_strides: tuple[int, int, int]
    dk_strides: tuple[int, int, int]
    dv_strides: tuple[int, int, int]
    attn_scale: float
    head_dim: int

    @property
    def groups(self) -> int:
        """Query heads per kv head."""
        return self.heads // self.kv_heads

    @property
    def sq_pad(self) -> int:
        """Query rows rounded up to the main kernel's step: the workspace's rows per head."""
        return -(-self.sq // TILE_M) * TILE_M

    @property
    def scale_log2(self) -> float:
        """attn_scale * log2(e): the kernel exponentiates with exp2."""
        return self.attn_scale * _LOG2E

    @property
    def rows(self) -> int:
        """Workspace rows: every (batch, query head, padded query row)."""
        return self.batch * self.heads * self.sq_pad

    @property
    def workspace_bytes(self) -> int:
        """The float32 dq accumulator, then the base-2 stats and D, one float32 per row each."""
        return self.rows * (self.head_dim + 2) * 4


def _check_strides(name: str, dims: Sequence[int], strides: Sequence[int], dtype: str, tma: bool) -> None:
    if strides[3] != 1 and dims[3] != 1:
        raise ValueError(f"{name}'s head dim is not contiguous (strides {list(strides)})")
    if not tma:
        return
    if any(s % (16 // ITEMSIZE[dtype]) for s, e in zip(strides[:3], dims[:3]) if e > 1):
        raise ValueError(f"{name} strides {list(strides)}: TMA needs multiples of 16 bytes")
    if any(s * ITEMSIZE[dtype] >= _TMA_MAX_STRIDE_BYTES for s in strides[:3]):
        raise ValueError(f"{name} strides {list(strides)}: TMA takes strides below 2^40 bytes")


def plan_sdpa_backward(
    tensors: dict[str, View],
    attn_scale: float,
    causal: bool,
) -> tuple[BwdSpec, BwdProblem]:
    """The kernel view of (dims, strides, dtype) of q, k, v, o, d_o, stats, dq, dk, dv, or ValueError saying why."""
    io = ("q", "k", "v", "o", "d_o", "dq", "dk", "dv")
    dtype = tensors["q"][2]
    if dtype not in IO_DTYPES:
        raise ValueError(f"q is {dtype}; supported: {', '.join(IO_DTYPES)}")
    odd = {name: tensors[name][2] for name in io if tensors[name][2] != dtype}
    if odd:
        raise ValueError(f"q, k, v, o, d_o, dq, dk and dv must share q's dtype {dtype}, got {odd}")
    if tensors["stats"][2] != "float32":
        raise ValueError(f"stats is {tensors['stats'][2]}; supported: float32")
    b, hq, sq, d = tensors["q"][0]
    _, hkv, skv, dk = tensors["k"][0]
    dv = tensors["v"][0][3]
    if d not in HEAD_DIMS or dk != d or dv != d:
        raise ValueError(f"head dims q {d}, k {dk}, v {dv}; supported: equal, one of {HEAD_DIMS}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"k's {hkv} heads do not divide q's {hq}")
    if not (attn_scale > 0 and math.isfinite(attn_scale)):
        raise ValueError(f"attn_scale {attn_scale}; supported: positive and finite")
    if min(b, hq, sq, skv) < 1:
        raise ValueError(f"empty problem: q {list(tensors['q'][0])}, k {list(tensors['k'][0])}")
    for name in io:
        dims, strides, _ = tensors[name]
        _check_strides(name, dims, strides, dtype, tma=name in ("q", "k", "v", "o", "d_o"))
    if max(sq, skv) > _INT32_MAX // 2 or b * hq * (sq + TILE_M) * d > _INT32_MAX:
        raise ValueError(f"q {list(tensors['q'][0])}: beyond the kernels' 32-bit indexing")
    strides = {name: bhs_strides(*tensors[name][:2]) for name in (*io, "stats")}
    problem = BwdProblem(
        b,
        hq,
        hkv,
        sq,
        skv,
        strides["q"],
        strides["k"],
        strides["v"],
        strides["o"],
        strides["d_o"],
        strides["stats"],
        strides["dq"],
        strides["dk"],
        strides["dv"],
        float(attn_scale),
        d,
    )
    return BwdSpec(dtype, d, causal), problem
