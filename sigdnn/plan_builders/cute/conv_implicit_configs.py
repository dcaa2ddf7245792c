"""The implicit-GEMM conv's tile configurations: the heuristic default and what autotune measures besides it.

Chosen from the conv's view (``conv_geometry.ImplicitConv``) and the SM
count alone; the figures behind each rule are in ``default_conv_config``.
"""

from __future__ import annotations

import math

import attrs

from sigdnn.plan_builders.cute.conv_geometry import ImplicitConv, unpack
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig

# Configurations autotune measures besides the default (``CuteConvImplicitBuilder.configs``): the wide
# cooperative tiles, cooperative and pingpong 128x128, each the default for some ResNet-50 layer shape on the
# H200 (benchmarks/gpu_cute.py --parts convi), then the wide tile's split-K /
# stream-K variants (``split_alternatives``). Clustered tiles, 128x64 and pingpong 64-row tiles ran 0.12-0.67x
# the default there and are not offered (pingpong 128x64 is the fused default's own choice on 256x64 tiles).
CONV_ALTERNATIVES = (
    "coop256x64c1x1s1",
    "coop256x128c1x1s1",
    "coop128x256c1x1s1",
    "coop128x128c1x1s1",
    "pp128x128c1x1s1",
)
SPLIT_MIN_K_TILES = 8  # split a tile's K loop only when each half keeps a pipeline's worth of K steps
SQUARE_TILE = (128, 128)

# A 128x128 tile's time per output element over a wide tile's on the H200's ResNet-50 layers: 1.15-1.33 with the
# K counters, 1.04-1.10 once the producer had no division left; 1.25 picks each
# layer's faster tile in both runs but conv4_1x1_expand's in the second (128x128 3 % faster there).
SQUARE_COST = 1.25


def _wide_tile(view: ImplicitConv) -> tuple[int, int]:
    k = view.k_out
    return (256, 64) if k <= 64 else (256, 128) if k <= 128 else (128, 256)


def _tiles(view: ImplicitConv, tile: tuple[int, int]) -> int:
    return math.ceil(view.m / tile[0]) * math.ceil(view.k_out / tile[1])


def _chosen_tile(view: ImplicitConv, sm_count: int) -> tuple[int, int]:
    """The wide tile, or 128x128 where its waves of tiles cost less: each wave costs its tile's area, a
    128x128 one SQUARE_COST times more per element (fewer products per operand byte)."""
    wide = _wide_tile(view)
    if view.k_out < 128:
        return wide

    def cost(tile: tuple[int, int], factor: float) -> float:
        return math.ceil(_tiles(view, tile) / sm_count) * tile[0] * tile[1] * factor

    return SQUARE_TILE if cost(SQUARE_TILE, SQUARE_COST) < cost(wide, 1.0) else wide


def default_conv_config(view: ImplicitConv, sm_count: int = 132) -> GemmConfig:
    """The tile config without tuning (a stated heuristic, measured by
    benchmarks/gpu_cute.py --parts convi).

    Cooperative tiles as wide as the output channels allow -- 256x64 for
    K <= 64, 256x128 for K <= 128, else 128x256 -- unless 128x128 tiles
    fill the SMs' waves better (_chosen_tile): on the H200 at batch 64,
    conv3_3x3 1.28x cuDNN in three waves of 128x128 against 1.08x in two
    of 256x128, conv5_3x3 and conv5_1x1_reduce one wave of 100 tiles
    instead of 50 (0.92x and 1.00x against 0.90x and 0.79x split in two),
    while conv4_3x3's one wave of 98 wide tiles beat two of 128x128 (1.10x
    against 0.92x). When the tiles would still leave more than half the SMs
    idle and the K loop is at least SPLIT_MIN_K_TILES deep, the same tiles
    with the K loop split in two (twice the CTAs); a shallow K loop takes
    pingpong 128x128 tiles instead. A unit-stride conv whose last wave of
    tiles is at most half full splits that wave's tiles in two (conv3_3x3
    in 256x128 tiles: 1.07x); strided ones ran slower so (0.96x), their
    input being 4x their output. A fused epilogue on 256x64 tiles runs
    pingpong 128x64 tiles instead.
    """
    tile_m, tile_n = _chosen_tile(view, sm_count)
    tiles = _tiles(view, (tile_m, tile_n))
    deep = view.k_tiles >= SPLIT_MIN_K_TILES
    if tiles < sm_count // 2:
        if deep:
            return GemmConfig(tile_m=tile_m, tile_n=tile_n, split_k=2)
        return GemmConfig(tile_m=128, tile_n=128, pingpong=True)
    unit_stride = all(st == 1 for st in unpack(view.geometry)["stride"])
    if deep and unit_stride and tiles > sm_count and 0 < tiles % sm_count <= sm_count // 2:
        return GemmConfig(tile_m=tile_m, tile_n=tile_n, split_k=2, split_tail=True)
    fused = view.spec.bias_dtype is not None or view.spec.activation != "none"
    if fused and (tile_m, tile_n) == (256, 64):
        # One consumer warpgroup's epilogue overlaps the other's mainloop: conv2_3x3 + bias + relu (9 K steps
        # a tile) 1.007x cuDNN-frontend's fused graph in pingpong 128x64 tiles against 0.984x cooperative
        # 256x64 in the same run; the plain conv stays cooperative (2 % faster).
        return GemmConfig(tile_m=128, tile_n=64, pingpong=True)
    return GemmConfig(tile_m=tile_m, tile_n=tile_n)


def split_alternatives(view: ImplicitConv, sm_count: int = 132) -> list[str]:
    """The wide tile split in two, its last wave split in two, and stream-K: what autotune may find faster
    where the default does not split (conv4_3x3 ran stream-K 1.04x faster; see default_conv_config)."""
    if view.k_tiles < 2:
        return []
    tile = _wide_tile(view)
    base = GemmConfig(tile_m=tile[0], tile_n=tile[1])
    found = [attrs.evolve(base, split_k=2), attrs.evolve(base, stream_k=True)]
    if _tiles(view, tile) > sm_count:
        found.insert(1, attrs.evolve(base, split_k=2, split_tail=True))
    return [config.label for config in found]
