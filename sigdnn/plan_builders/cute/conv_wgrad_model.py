"""The implicit conv wgrad's cost model: which tile configuration and how many reduction slices to run.

The implicit wgrad (``conv_wgrad.CuteConvWgradImplicitBuilder``) cuts dw's
K x RSC into tiles and the N*P*Q-deep reduction into slices; this module
ranks the (tile, slices) pairs a launch can take by a model of the H200
(tensor-core rate, L2 and HBM bandwidth, the reduction's launch), fitted
to timed runs of the ResNet-50 layers. Its constants and their provenance
are below; ``ranked_configs`` and ``best_splits`` are what the builder asks.
"""

from __future__ import annotations

import math

import attrs

from sigdnn.plan_builders.cute.gemm_layout import GemmConfig

MIN_SLICE = 512  # reduction depth per split: below this the partials cost more than the parallelism gains
TILE_N = 64  # the implicit wgrad's N tile (kernels/conv_wgrad_sm90.py)
TILE_K = 64  # and its K step: 64 output pixels (16-bit operands)


@attrs.frozen
class WgradShape:
    """What the model sees of a wgrad: dw's K x RSC, the reduction's depth N*P*Q, and x's and dy's bytes."""

    k: int
    rsc: int
    npq: int
    io_bytes: int = 0


# The H200 figures the implicit wgrad's tile and split choice is modelled with: the rate wgmma sustains per SM
# with one consumer warpgroup at a time (pingpong) and with two (cooperative); the L2 bandwidth all SMs' tile
# loads share (A's tile_m and B's tile_n 128-byte rows a K step); the bandwidth per SM the float32 partials leave
# at; the HBM bandwidth the split-K reduction streams at, and the one x and dy stream at into the SMs running
# tiles. First read off single runs (a pingpong 64x192 K step
# in 0.41 us on 84 or 96 SMs, Nsight Compute's L2 81% busy under 126 pingpong 64x64 tiles), then the pingpong
# rate, the L2 bandwidth, the reduction's launch and the streaming curve set where the choice they make loses
# least against the fastest of 198 timed tile / slice pairs over the eight ResNet-50 layers (call 4): 1.066x the
# fastest on average, the fastest itself on four. (A per-row TMA cost, fitted at first, never bound a tile these
# rates allow: it went.)
_PINGPONG_FLOPS = 5.0e12
_COOPERATIVE_FLOPS = 6.6e12
_L2_BYTES = 13e12  # the whole device
_SM_STORE_BYTES = 64e9
_HBM_BYTES = 3.45e12
# x and dy stream into n SMs at 3.8 TB/s * (1 - exp(-n / 24)): conv2_1x1's pingpong 64x64 slices drew 2.95 TB/s
# on 36 SMs, 3.44 on 48, 3.75 on 128.
_STREAM_BYTES = 3.8e12
_STREAM_SMS = 24
_ROW_BYTES = 128  # one pixel's 64 16-bit channels (A's rows are 64 pixels of one channel: as long)
_LAUNCH_US = 4.0  # a second kernel (the reduction) on the stream
ALTERNATIVES = 3  # tile configs autotune measures besides the default
MAX_SUB_TILES = 4  # B's N tile: up to four 64-column (channel block, tap) sub-tiles (256 columns)


def wgrad_tile_configs(k: int, rsc: int) -> list[GemmConfig]:
    """Tile configs the implicit wgrad can run for dw of K x RSC: N tiles of t 64-column sub-tiles with t
    dividing RSC / 64 (a tile never straddles dw's last column), M tiles of 64 (pingpong, each warpgroup its
    own tile), 128 or 256 (cooperative) rows within the accumulator register budget."""
    found = []
    for t in range(1, MAX_SUB_TILES + 1):
        if (rsc // TILE_N) % t:
            continue
        for tile_m, pingpong in ((64, True), (128, False), (256, False)):
            if tile_m > 64 and tile_m // 2 >= k:
                continue  # half the rows or more past K: a shorter tile does the same work
            try:
                found.append(GemmConfig(tile_m, TILE_N * t, pingpong))
            except ValueError:
                continue  # past the accumulator registers
    return found


def slice_steps(npq: int, splits: int) -> int:
    """K steps (of TILE_K pixels) in each of ``splits`` slices of the N*P*Q-deep reduction, the last one
    possibly shorter (its steps past the end load zeros)."""
    steps = -(-npq // TILE_K)
    return -(-steps // splits)


def split_choices(npq: int) -> list[int]:
    """Slice counts a launch can take: each slice ceil(T / S) K steps of the T = ceil(N*P*Q / 64), none empty
    (S slices of that many steps are needed to cover T), each at least MIN_SLICE pixels deep (one slice any)."""
    steps = -(-npq // TILE_K)
    found = [d for d in range(2, steps + 1) if -(-steps // slice_steps(npq, d)) == d]
    return [1, *(d for d in found if slice_steps(npq, d) * TILE_K >= MIN_SLICE)]


def modelled_us(shape: WgradShape, config: GemmConfig, splits: int, sm_count: int) -> float:
    """Microseconds the model gives a wgrad tiling: waves of tiles, each its slice's K steps (as slow as the
    tensor cores or the L2 feeding every running tile, whichever binds) and its float32 partials' store, but
    no faster than x and dy stream from HBM once (into as many SMs as run tiles); then the reduction reading
    every slice's partials. A ranking (it reads call 4's 198 times at a median 0.99x, but 0.6-1.6x over the
    middle 80%), not a prediction."""
    k, rsc, tm, tn = shape.k, shape.rsc, config.tile_m, config.tile_n
    tiles = math.ceil(k / tm) * math.ceil(rsc / tn) * splits
    steps = slice_steps(shape.npq, splits)
    flops = _PINGPONG_FLOPS if config.pingpong else _COOPERATIVE_FLOPS
    step_us = 2 * tm * tn * TILE_K / flops * 1e6
    store_us = tm * tn * 4 / _SM_STORE_BYTES * 1e6
    total = 0.0
    for wave in range(0, tiles, sm_count):
        running = min(tiles - wave, sm_count)
        l2_us = running * (tm + tn) * _ROW_BYTES / _L2_BYTES * 1e6
        total += steps * max(step_us, l2_us) + store_us
    reduce_us = 0.0 if splits == 1 else _LAUNCH_US + (splits * 4 + 2) * k * rsc / _HBM_BYTES * 1e6
    stream_bytes = _STREAM_BYTES * -math.expm1(-min(tiles, sm_count) / _STREAM_SMS)
    return max(total, shape.io_bytes / stream_bytes * 1e6) + reduce_us


def best_splits(shape: WgradShape, config: GemmConfig, sm_count: int) -> int:
    """The slice count the model ranks fastest for this tile config (fewer slices on a tie)."""
    return min(split_choices(shape.npq), key=lambda d: (modelled_us(shape, config, d, sm_count), d))


def ranked_configs(shape: WgradShape, sm_count: int = 132) -> list[GemmConfig]:
    """The tile configs the model ranks, fastest first, each with its best slice count."""
    return sorted(
        wgrad_tile_configs(shape.k, shape.rsc),
        key=lambda c: modelled_us(shape, c, best_splits(shape, c, sm_count), sm_count),
    )
