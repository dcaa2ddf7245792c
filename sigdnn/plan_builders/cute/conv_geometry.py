"""A conv fprop in the implicit-GEMM kernel's terms (``ImplicitConv``), what the TMA can express of it,
and how a split-K or stream-K launch cuts its work (``split_k_plan``).

Pure Python, decided at build time: the builders (``conv_implicit``, and
dgrad / wgrad / the transposed conv, which run it too) plan with it, the
kernel's launch (``kernels/conv_launch.py``) sizes its workspace with it.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.gemm_layout import ITEMSIZE, GemmConfig, GemmSpec

_INT32_MAX = 2**31 - 1

# TMA im2col box corners by conv rank: a rank-4 tensor takes [-128, 127], rank 5 [-16, 15] (cuTensorMapEncodeIm2col)
_CORNERS = {2: (-128, 127), 3: (-16, 15)}
_MAX_STRIDE = 8  # the im2col traversal stride (the conv stride) is at most 8
_MAX_OFFSET = 2**16 - 1  # a load's filter-tap offset is a 16-bit value
K_TILE = 64  # channels per K step of the 16-bit kernel (kernels/gemm_sm90.py's tile_k)


@attrs.frozen
class ImplicitConv:
    """A conv fprop in the kernel's terms: its spec (dtypes, epilogue) and the launch scalars.

    ``geometry`` is, for spatial dims ``sp`` (H, W in 2-D; D, H, W in 3-D):
    n, *input extents, c, k, *filter taps, *output extents, *pre padding,
    *post padding, *stride, *dilation -- 17 scalars in 2-D, 24 in 3-D.
    """

    spec: GemmSpec
    geometry: tuple[int, ...]

    @property
    def rank(self) -> int:
        return (len(self.geometry) - 3) // 7

    @property
    def m(self) -> int:
        return self.geometry[0] * math.prod(unpack(self.geometry)["out"])

    @property
    def k_out(self) -> int:
        return self.geometry[2 + self.rank]

    @property
    def k_tiles(self) -> int:
        """K steps of the GEMM: 64-channel blocks times filter taps."""
        g = unpack(self.geometry)
        return math.ceil(g["c"] / K_TILE) * math.prod(g["taps"])


def unpack(geometry: tuple[int, ...]) -> dict[str, Any]:
    """The named parts of a geometry tuple (see ImplicitConv)."""
    rank = (len(geometry) - 3) // 7
    if len(geometry) != 3 + 7 * rank or rank not in (2, 3):
        raise ValueError(f"a conv geometry has 17 (2-D) or 24 (3-D) scalars, got {len(geometry)}")
    parts = {"n": geometry[0], "c": geometry[1 + rank], "k": geometry[2 + rank]}
    parts["in"] = geometry[1 : 1 + rank]
    rest = geometry[3 + rank :]
    for i, name in enumerate(("taps", "out", "pre", "post", "stride", "dilation")):
        parts[name] = tuple(rest[i * rank : (i + 1) * rank])
    return parts


def row_kernel_reason(geometry: tuple[int, ...], kernel: str) -> str | None:
    """Why a row kernel (x read a row at a time, a filter row's taps as shifted views of it: 3x3 on 64
    channels, padding 1, unit stride and dilation) cannot run a 2-D conv of this geometry, or None."""
    parts = unpack(geometry)
    if parts["c"] != 64 or parts["taps"] != (3, 3):
        r, s = parts["taps"]
        return f"{parts['c']} input channels, a {r}x{s} filter; the {kernel} takes 64 channels, 3x3"
    if any(v != 1 for name in ("pre", "post", "stride", "dilation") for v in parts[name]):
        return f"padding, stride or dilation other than 1; the {kernel} takes padding 1, unit stride and dilation"
    return None


@attrs.frozen
class SplitK:
    """How a split-K or stream-K launch cuts the work (kernels/gemm_sm90.py): launch scalars and workspace.

    The first ``whole`` tiles run unsplit. Split-K: each later tile's K loop
    is cut into ``splits`` ranges, all but the last of which park a float32
    partial tile. Stream-K (``sk_segments`` > 0, the most tiles one SM's
    range touches): the later tiles' K iterations are cut into one range per
    SM, and each range that starts inside a tile parks that part. ``slots``
    partial tiles of ``tile_elems`` floats, one int32 counter per split tile.
    """

    splits: int
    whole: int
    sk_segments: int
    slots: int
    counters: int
    tile_elems: int

    @property
    def partial_bytes(self) -> int:
        return self.slots * self.tile_elems * 4

    @property
    def workspace_bytes(self) -> int:
        """Partials, then the counters (which must start at zero; the kernel leaves them at zero)."""
        return self.partial_bytes + 4 * self.counters


def split_k_plan(geometry: tuple[int, ...], config: GemmConfig, sm_count: int) -> SplitK:
    """The split of a conv fprop under a split config: split-K has at most one range per K tile and, with
    ``split_tail``, splits only the tiles past the last full wave of ``sm_count``; stream-K leaves all but
    the last full wave whole (as CUTLASS's data-parallel + stream-K hybrid) and spreads the rest over
    ``sm_count`` ranges. ValueError past the kernel's 32-bit index arithmetic."""
    g = unpack(geometry)
    m = g["n"] * math.prod(g["out"])
    tiles = math.ceil(m / config.tile_m) * math.ceil(g["k"] / config.tile_n)
    k_tiles = math.ceil(g["c"] / K_TILE) * math.prod(g["taps"])
    elems = config.tile_m * config.tile_n
    if config.stream_k:
        whole = max(0, tiles // sm_count - 1) * sm_count
        total = (tiles - whole) * k_tiles
        longest = -(-total // min(total, sm_count))
        segments = (longest + k_tiles - 2) // k_tiles + 1
        plan = SplitK(0, whole, segments, sm_count, tiles - whole, elems)
        if total * sm_count > _INT32_MAX:
            raise ValueError(f"{config.label}: {total} stream-K iterations, past the kernel's 32-bit arithmetic")
    else:
        splits = min(config.split_k, k_tiles)
        whole = tiles // sm_count * sm_count if config.split_tail else 0
        split_tiles = tiles - whole if splits > 1 else 0
        plan = SplitK(splits, whole, 0, split_tiles * (splits - 1), split_tiles, elems)
    if plan.slots * plan.tile_elems > _INT32_MAX:
        raise ValueError(f"{config.label}: {plan.slots} partial tiles, past the kernel's 32-bit workspace offsets")
    return plan


def check_geometry(where: str, geometry: tuple[int, ...], out_dtype: str, *sizes: int) -> None:
    """NotSupported unless the kernel's TMA loads and stores can express this conv (see conv_sm90.py)."""
    g = unpack(geometry)
    c, k, rank = g["c"], g["k"], len(g["in"])
    if c % 8:
        raise NotSupported(f"{where}: {c} input channels; supported: multiples of 8 (16-byte rows for the TMA)")
    align = 16 // ITEMSIZE[out_dtype]
    if k % align:
        raise NotSupported(f"{where}: {k} output channels; a {out_dtype} output needs a multiple of {align} "
                           "(16-byte rows)")  # fmt: skip
    if max(*sizes, g["n"] * math.prod(g["out"])) > _INT32_MAX:
        raise NotSupported(f"{where}: tensors past 2^31 - 1 elements")
    if max(g["stride"]) > _MAX_STRIDE:
        raise NotSupported(f"{where}: stride {g['stride']}; the TMA's im2col mode takes strides up to {_MAX_STRIDE}")
    # The output extents the TMA walks: the box from -pad to (extent - 1 + post_pad - (taps - 1) * dilation).
    reach = [(t - 1) * d for t, d in zip(g["taps"], g["dilation"], strict=True)]
    low, high = _CORNERS[rank]
    for corner in (*(-x for x in g["pre"]), *(x - r for x, r in zip(g["post"], reach, strict=True))):
        if not low <= corner <= high:
            raise NotSupported(f"{where}: padding {g['pre']} / {g['post']} with filter {g['taps']} and dilation "
                               f"{g['dilation']} puts an im2col box corner at {corner}, outside [{low}, {high}] "
                               f"(the TMA's range for a {rank}-D convolution)")  # fmt: skip
    if max(reach) > _MAX_OFFSET:
        raise NotSupported(f"{where}: filter taps reach past the TMA's 16-bit im2col offsets")
    want = tuple(
        (x + a + b - r - 1) // st + 1
        for x, a, b, r, st in zip(g["in"], g["pre"], g["post"], reach, g["stride"], strict=True)
    )
    if g["out"] != want:
        raise NotSupported(f"{where}: output spatial dims {g['out']}, the TMA's im2col walk gives {want}")


def channels_last_nd(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Packed [N, C, spatial...] dims stored N, spatial..., C (a dim of extent 1 may carry any stride)."""
    c, spatial = dims[1], dims[2:]
    want = [c * math.prod(spatial), 1]
    want += [c * math.prod(spatial[i + 1 :]) for i in range(len(spatial))]
    return all(d == 1 or s == e for d, s, e in zip(dims, strides, want, strict=True))
