"""Tile sizes of the cuTile row, channel and reduction kernels: measured row configs by op and width, and the
tile arithmetic (powers of two, ceiling division, persistent and split block counts) their builders share."""

from __future__ import annotations

import attrs

from sigdnn.plan_builders.cutile.row_kernel_source import KernelHints


@attrs.frozen
class RowConfig:
    """How the row kernels of one direction are cut: elements of one (TM, TN) tile, and cuTile's hints.

    ``columns``: columns per block of the backward's partial-sum reduction (``row_kernel_source.column_sums``); few
    wide blocks leave that launch reading megabytes on a handful of SMs. ``paired``: layernorm backward's
    two row means as one reduction (``row_kernel_source.norm_backward``). ``variance``: how layernorm forward gets the
    mean and variance of a row held in one tile (``row_kernel_source.VARIANCES``): two dependent reductions, or one.
    ``walk``: the chunk a row longer than ``ROW_MAX`` is walked in (None: ``ROW_MAX``). ``blocks``
    (forward kernels): that many persistent blocks walk the row tiles (``row_kernel_source.walked_by``; None: one
    tile a block). ``rows``: most rows in one tile (None: as many as ``tile`` holds).
    """

    tile: int
    hints: KernelHints = attrs.field(factory=KernelHints)
    columns: int = 1024
    paired: bool = True
    variance: str = "two_pass"
    walk: int | None = None
    blocks: int | None = None
    rows: int | None = None


ROW_MAX = 8192  # longest row held in registers; longer rows are walked in chunks
ROW_CHUNKS = 8  # most column tiles one row is held in
ROW_CHUNK_MIN = 256  # narrowest of them
SMS = 132  # H200 SMs

# Tile sizes (elements) and hints, measured on the H200 (16384 x 4096 bf16; the
# sweeps: docs/experiments.md): forward rows two at a time with registers for 4 blocks per SM (5 for softmax) ran
# softmax 2.5x, layernorm 1.5x and rmsnorm 1.4x faster than cuTile's own choice (255 registers, 8 rows);
# backward rows one at a time in 8 worker warps, 2 blocks per SM, 1.2x (loading the next row before
# computing this one lost 5-10% there). Then softmax one row per block with
# registers for 6 blocks (its 2-row tile at 5 spilled: 3.04 -> 3.42 TB/s with loads through TMA); the
# backward's column sums over 32-column blocks (128 blocks, not 4: 32 -> 7 us of layernorm's 201). Then
# layernorm's one-pass mean and variance, 3.26 -> 3.39 TB/s.
# Rows past ROW_MAX (16384 x 32768 bf16): softmax with one running max and sum per
# row in 4096-column chunks 0.77 -> 2.46 TB/s (torch 2.32); layernorm forward merging each 4096-column chunk's
# mean and M2 (one read for the statistics) 1.19 -> 2.71 (torch 2.35); rmsnorm forward 2.67 in 2048-column
# chunks, 2.39 in 4096 (torch 2.53); the backward in 2048-column chunks, two rows a block, 0.47 -> 1.17
# (layernorm) and 0.58 -> 1.43 (rmsnorm; torch 1.48 both).
# Layernorm forward by row width (16384 rows bf16): rows held in registers walked by
# persistent blocks, two a SM, whose loop cuTile pipelines (the next tile's loads under this one's arithmetic):
# from 1025 to 4096 columns four rows a tile (3.41 -> 3.66 TB/s at 4096, 2.68 -> 3.31 at 3072, 3.11 -> 3.28 at
# 2048), wider rows one a tile (2.74 -> 3.35 at 5120, 3.08 -> 3.49 at 6144, 3.36 -> 3.74 at 8192). Two rows a
# tile lost at 5120 and 6144, eight at 2048. Rows of 1024 lost that way (2.03 -> 1.71) and rows walked past
# ROW_MAX too (2.72 -> 1.56 at 32768): both keep one tile a block.
Bands = tuple[tuple[int | None, RowConfig], ...]  # (widest row, config), narrowest band first; None: any row
ONE_TILE_A_BLOCK = RowConfig(8192, KernelHints(occupancy=4), variance="chan", walk=4096)
ONE_ROW_A_TILE = RowConfig(8192, KernelHints(occupancy=2), variance="chan", blocks=2 * SMS)  # rows of 4097-8192
LAYERNORM_FORWARD: Bands = (
    (1024, ONE_TILE_A_BLOCK),
    (4096, RowConfig(16384, KernelHints(occupancy=2), variance="chan", blocks=2 * SMS, rows=4)),
    (ROW_MAX, ONE_ROW_A_TILE),
    (None, ONE_TILE_A_BLOCK),
)
# Rmsnorm (16384 rows bf16): layernorm's one-row band, 264 persistent blocks at occupancy
# 2, against the config below it: 3.10 -> 3.38 TB/s at 5120 columns, 3.52 -> 3.53 at 6144, 3.88 -> 3.66 at 8192
# (lost); four rows a tile lost at 2048 and 4096. So only rows of 4097-6144 columns
# run in persistent blocks.
RMSNORM_ONE_TILE_A_BLOCK = attrs.evolve(ONE_TILE_A_BLOCK, walk=2048)
RMSNORM_FORWARD: Bands = ((4096, RMSNORM_ONE_TILE_A_BLOCK), (6144, ONE_ROW_A_TILE), (None, RMSNORM_ONE_TILE_A_BLOCK))
# Softmax (16384 rows bf16): rows of 4096-8192 columns, one a 4096-element tile, in 528
# persistent blocks (occupancy 4): 3.45 -> 3.64 TB/s at 4096, 3.07 -> 3.68 at 8192, 2.85 -> 2.86 at 5120; at 2048
# (two rows a tile) that lost (3.11 -> 2.60), so narrower rows, and walked ones (not measured), keep one tile a
# block.
SOFTMAX_ONE_TILE_A_BLOCK = RowConfig(4096, KernelHints(occupancy=6), walk=4096)
SOFTMAX_FORWARD: Bands = (
    (4095, SOFTMAX_ONE_TILE_A_BLOCK),
    (ROW_MAX, RowConfig(4096, KernelHints(occupancy=4), walk=4096, blocks=4 * SMS)),
    (None, SOFTMAX_ONE_TILE_A_BLOCK),
)
ROW_BACKWARD = RowConfig(4096, KernelHints(occupancy=2, num_worker_warps=8), columns=32, walk=2048)
PERSISTENT_PER_SM = (
    2  # blocks per SM of the backward kernels (each stores one partial-sum row) without an occupancy hint
)
SPLIT_BLOCKS = 528  # blocks a split reduction aims at (4 per H200 SM)


def persistent_blocks(hints: KernelHints) -> int:
    """Blocks of a persistent row kernel: as many as cuTile keeps resident (its occupancy hint) on every SM."""
    return SMS * (hints.occupancy or PERSISTENT_PER_SM)


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_split(n: int) -> tuple[int, int]:
    """(TN, K): a row of N up to ``ROW_MAX`` held as K column tiles of TN, the padded width K * TN least.

    Tiles are powers of two, so one tile of pow2(N) pads a row of 5120 to 8192 (60 % more lanes and
    registers: softmax, layernorm and rmsnorm fell below torch there on the H200); five tiles of 1024
    pad nothing. Ties go to fewer, wider tiles; tiles stay at least ``ROW_CHUNK_MIN`` wide (or the
    whole row) and at most ``ROW_CHUNKS`` of them. Longer rows: one ``ROW_MAX`` tile, walked.
    """
    if n > ROW_MAX:
        return ROW_MAX, 1
    best = (pow2(n), 1)
    narrowest = max(min(ROW_CHUNK_MIN, best[0]), pow2(cdiv(n, ROW_CHUNKS)))
    tn = best[0] // 2
    while tn >= narrowest:
        k = cdiv(n, tn)
        if k * tn < best[0] * best[1]:
            best = (tn, k)
        tn //= 2
    return best


def row_hints(config: RowConfig, n: int, tm: int, tn: int, k: int) -> KernelHints:
    """The config's hints, its occupancy lowered in proportion when a block holds rows of N in more than
    ``config.tile`` elements, so each thread keeps the registers the hints were measured with.

    Compiled for sm_90 at rows of 5120: softmax at the default occupancy 6 spilled, at 4 it did not;
    layernorm backward spilled at 2 and not at 1. Walked rows (N > ROW_MAX) keep the config's hints:
    at 32768 the lowered occupancy cut softmax's spills (640 -> 120 bytes of stack) but made layernorm
    backward spill (0 -> 200), and neither was timed.
    """
    held = tm * tn * k
    occupancy = config.hints.occupancy
    if occupancy is None or held <= config.tile or held < n:
        return config.hints
    return attrs.evolve(config.hints, occupancy=max(1, occupancy * config.tile // held))


def for_width(bands: Bands, n: int) -> RowConfig:
    """The config for rows of N: that of the narrowest band holding N."""
    return next(config for widest, config in bands if widest is None or n <= widest)


def row_tiles(m: int, n: int, config: RowConfig) -> tuple[int, int, int]:
    """(TM, TN, K) for M rows of N: each row as K tiles of TN (``row_split``), rows stacked up to ``config.tile``
    elements (and ``config.rows``); K * TN < N means the row is walked in TN chunks."""
    tn, k = row_split(n)
    if n > ROW_MAX and config.walk:
        tn = config.walk
    fit = max(1, min(config.tile // (tn * k), config.rows or config.tile))
    return min(pow2(m), 1 << (fit.bit_length() - 1)), tn, k  # tiles are powers of two: rows too
