"""The measured knobs of the cuTile kernels (tiles, cuTile hints, lane dtypes) keep every result right.

The defaults are chosen by timing on the H200 (benchmarks/gpu_cutile.py);
these tests run the alternatives the benchmark compares through the
emulator against the reference, so a faster configuration can never be a
wrong one, and check that hints reach the kernel text.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from emulated import emulated_executor, make_available
from norm_cases import all_cases

import sigdnn
from sigdnn.plan_builders.cutile import batchnorm, codegen, norms, row_kernel_source, softmax, tiling
from sigdnn.plan_builders.cutile.batchnorm import ChannelConfig
from sigdnn.plan_builders.cutile.pointwise import node_spec
from sigdnn.plan_builders.cutile.row_kernel_source import KernelHints
from sigdnn.plan_builders.cutile.tiling import RowConfig

CASES = {c[0]: c for c in all_cases()}
ROW_CASES = ["softmax-float32-33x64", "logsoftmax-bfloat16-5x37", "layernorm-train-float32-33x64",
             "rmsnorm-infer-bias-bfloat16-3x1x256", "layernorm-bwd-float32-33x64", "rmsnorm-bwd-dbias-bfloat16-33x64",
             "layernorm-train-float16-2x9000", "layernorm-bwd-float32-2x9000", "layernorm-train-float32-3x1100",
             "softmax-bfloat16-3x1100", "layernorm-bwd-float16-4x5120", "rmsnorm-bwd-dbias-float32-3x1100"]  # fmt: skip
ROW_CONFIGS = [RowConfig(64), RowConfig(128, KernelHints(occupancy=4)), RowConfig(1024, KernelHints(2, 8)),
               RowConfig(1024, KernelHints(2, 8), columns=16, paired=False),
               RowConfig(128, KernelHints(occupancy=4), variance="chan"),
               RowConfig(128, KernelHints(occupancy=4), variance="chan", blocks=3),
               RowConfig(64, blocks=2)]  # fmt: skip


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def _validate(name: str) -> None:
    _, builder, make = CASES[name]
    report = sigdnn.validate(make(), seed=len(name), executor=emulated_executor())
    assert set(report.builders.values()) == {builder}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize(
    "config",
    ROW_CONFIGS,
    ids=lambda c: (
        f"{c.tile}-{c.hints.occupancy}-{c.hints.num_worker_warps}-{c.columns}-{'p' if c.paired else 'u'}-{c.variance}"
        f"-b{c.blocks}"
    ),
)
@pytest.mark.parametrize("name", ROW_CASES)
def test_row_kernels_match_the_reference_at_every_tile_and_hint(monkeypatch, config, name):
    monkeypatch.setattr(tiling, "ROW_BACKWARD", config)
    for bands in ("LAYERNORM_FORWARD", "RMSNORM_FORWARD", "SOFTMAX_FORWARD"):
        monkeypatch.setattr(tiling, bands, ((None, config),))
    _validate(name)


@pytest.mark.parametrize("lanes", ["float32", "float64"])
@pytest.mark.parametrize(("name", "io"), [("train-NHWC", "float32"), ("bwd-NCHW", "bfloat16")])
def test_batchnorm_partial_sums_in_bands_of_tiles_match_the_reference(monkeypatch, lanes, name, io):
    """Small tiles and few split blocks: each block sums several A-tiles a band apart (its own trip count: the
    last band partial); the finalize takes 2 channels per block; the elementwise pass its own smaller tile."""
    config = ChannelConfig(64, lanes, KernelHints(occupancy=4), final_tile=2, apply_tile=16, apply_hints=KernelHints())
    monkeypatch.setattr(batchnorm, "TRAINING", config)
    monkeypatch.setattr(batchnorm, "BACKWARD", config)
    monkeypatch.setattr(batchnorm, "SPLIT_BLOCKS", 4)
    layout, dims = ("NHWC", (5, 4, 8, 5)) if "NHWC" in name else ("NCHW", (13, 2, 4, 4))
    g = sigdnn.Graph("bn", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout)
    c = (1, dims[1], 1, 1)
    if "bwd" in name:
        stats = [g.tensor(n, dims=c, dtype="float32") for n in ("mean", "inv_variance")]
        outs = g.batchnorm_backward(g.tensor("dy", dims=dims, layout=layout), x, g.tensor("scale", dims=c), *stats)
    else:
        running = [g.tensor(n, dims=c, dtype="float32") for n in ("rm", "rv")]
        outs = g.batchnorm(x, g.tensor("scale", dims=c), g.tensor("bias", dims=c), *running, 1e-5, 0.1)
    for t in outs:
        if t is not None:
            t.set_output(True)
    launches, _ = batchnorm.CutileBatchnormBackwardBuilder().launches(g.nodes[0], g) if "bwd" in name else (
        batchnorm.CutileBatchnormBuilder().launches(g.nodes[0], g))  # fmt: skip
    text = launches[0].source.text
    tiles, splits = map(int, re.search(r"for i in range\(\((\d+) - sp \+ \d+\) // (\d+)\)", text).groups())
    assert tiles > splits == launches[0].grid[1] == 4 and tiles % splits and f"ct.{lanes}" in text
    assert launches[1].grid == (dims[1] // 2,)
    assert launches[2].grid[0] > launches[0].grid[0] * tiles and "@ct.kernel\n" in launches[2].source.text
    report = sigdnn.validate(g, seed=3, executor=emulated_executor())
    assert report.passed, report.table()


def test_batchnorm_block_and_channel_caps_cut_the_passes_as_asked(monkeypatch):
    """``blocks``: the partial pass's split count; ``channels``: at most that many channels a tile (NHWC, 12
    channels in tiles of 4: three channel tiles in both passes), still matching the reference."""
    config = ChannelConfig(32, "float32", KernelHints(occupancy=4), final_tile=2, apply_tile=16, blocks=9, channels=4)
    monkeypatch.setattr(batchnorm, "TRAINING", config)
    g = sigdnn.Graph("bn", io_dtype="float32", compute_dtype="float32")
    dims, c = (3, 12, 5, 4), (1, 12, 1, 1)
    x = g.tensor("x", dims=dims, layout="NHWC")
    running = [g.tensor(n, dims=c, dtype="float32") for n in ("rm", "rv")]
    for t in g.batchnorm(x, g.tensor("scale", dims=c), g.tensor("bias", dims=c), *running, 1e-5, 0.1):
        if t is not None:
            t.set_output(True)
    launches, _ = batchnorm.CutileBatchnormBuilder().launches(g.nodes[0], g)
    # 60 rows in tiles of 8 x 4 channels: 8 row tiles, 3 channel tiles; 9 // 3 = 3 splits of the row tiles
    assert launches[0].grid == (3, 3) and "shape=(8, 4)" in launches[0].source.text
    assert launches[2].grid == (15 * 3,) and "shape=(4, 4)" in launches[2].source.text
    report = sigdnn.validate(g, seed=5, executor=emulated_executor())
    assert report.passed, report.table()


def test_row_kernels_in_persistent_blocks_walk_every_row_tile():
    """``blocks``: the forward kernels' grid is min(tiles, blocks) and each block walks tiles a grid apart; with
    as many blocks as tiles (or more) the kernel is the one-tile-a-block kernel."""
    walked = row_kernel_source.norm_forward(64, 2, 64, 1e-5, True, True, ("mean",), k=1, tiles=17, blocks=4)
    assert "    for bid in range(ct.bid(0), 17, 4):\n        x0 = " in walked and "bid = ct.bid(0)" not in walked
    assert "\n        ct.store(mean, index=(bid,)" in walked  # every line of the tile's body inside the walk
    assert row_kernel_source.norm_forward(
        64, 2, 64, 1e-5, True, True, ("mean",), k=1, tiles=4, blocks=4
    ) == row_kernel_source.norm_forward(64, 2, 64, 1e-5, True, True, ("mean",), k=1, tiles=4)
    soft = row_kernel_source.softmax_forward(64, 2, 64, False, True, k=1, tiles=9, blocks=2)
    assert "for bid in range(ct.bid(0), 9, 2):" in soft
    assert [row_kernel_source.grid_of(17, b) for b in (None, 4, 17, 40)] == [17, 4, 17, 17]


def test_emulated_reduction_of_a_pair_sums_each_member_over_an_odd_axis():
    """The emulator's ct.reduce (layernorm backward's paired row means): pairwise with identity padding."""
    from sigdnn.plan_builders.cutile import emulator

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 37)).astype(np.float32), rng.standard_normal((3, 37)).astype(np.float32)
    s1, s2 = emulator.reduce((a, b), axis=1, func=eval(row_kernel_source.ADD_PAIRS), identity=(0.0, 0.0), keepdims=True)
    assert s1.shape == s2.shape == (3, 1) and s1.dtype == np.float32
    np.testing.assert_allclose(s1[:, 0], a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(s2[:, 0], b.sum(axis=1), rtol=1e-5)
    assert emulator.reduce(a, axis=0, func=lambda u, v: u + v, identity=0.0).shape == (37,)


def test_backward_row_sums_skip_the_reduction_over_one_row():
    """A one-row tile is its own column sum (cuTile's sum over a length-1 axis cost shared memory and barriers)."""
    one = row_kernel_source.norm_backward(4096, 1, 4096, True, True, k=1)
    two = row_kernel_source.norm_backward(4096, 2, 4096, True, True, k=1)
    assert "axis=0" not in one and "ads0 = ads0 + (dyt0 * xh0)" in one
    assert "ct.sum(dyt0 * xh0, axis=0, keepdims=True)" in two
    assert "ct.reduce((g0, g0 * xh0), axis=1" in one
    assert "ct.reduce" not in row_kernel_source.norm_backward(4096, 1, 4096, True, True, paired=False, k=1)


def test_hints_are_written_into_the_kernel_decorator():
    text = row_kernel_source.norm_forward(
        64, 2, 64, 1e-5, True, False, (), KernelHints(occupancy=4, num_worker_warps=8), k=1, tiles=1
    )
    assert text.startswith("@ct.kernel(occupancy=4, num_worker_warps=8)\ndef kernel(")
    assert row_kernel_source.norm_forward(64, 2, 64, 1e-5, True, False, (), k=1, tiles=1).startswith(
        "@ct.kernel\ndef kernel("
    )


def test_forward_row_tiles_follow_the_configuration():
    assert tiling.row_tiles(16384, 4096, RowConfig(8192)) == (2, 4096, 1)
    assert tiling.row_tiles(3, 4096, RowConfig(32768)) == (4, 4096, 1)  # rows rounded up to a power of two
    assert tiling.row_tiles(10, 20000, RowConfig(4096)) == (1, tiling.ROW_MAX, 1)  # a row longer than a tile: walked
    assert tiling.row_tiles(16384, 5120, RowConfig(8192)) == (1, 1024, 5)  # held in five tiles, none padded
    assert tiling.row_tiles(16384, 2560, RowConfig(8192)) == (2, 512, 5)  # two rows of 2560 within 8192
    walking = RowConfig(4096, walk=2048)
    assert tiling.row_tiles(10, 20000, walking) == (2, 2048, 1)  # walked in the config's chunks, two rows a block
    assert tiling.row_tiles(10, tiling.ROW_MAX, walking) == (1, tiling.ROW_MAX, 1)  # the longest held row: held
    assert tiling.persistent_blocks(KernelHints(occupancy=3)) == 3 * tiling.SMS
    assert tiling.persistent_blocks(KernelHints()) == tiling.PERSISTENT_PER_SM * tiling.SMS
    capped = RowConfig(16384, rows=4)
    assert tiling.row_tiles(16384, 2048, capped) == (4, 2048, 1)  # 8 rows fit, 4 taken
    assert tiling.row_tiles(16384, 4096, capped) == (4, 4096, 1)
    assert tiling.row_tiles(3, 2048, capped) == (4, 2048, 1)  # the cap is no floor: rows still a power of two
    assert tiling.row_tiles(16384, 5120, capped) == (2, 1024, 5)  # 16384 // 5120 = 3 rows fit: 2


@pytest.mark.parametrize(
    ("n", "band"),
    [(1, 0), (1024, 0), (1025, 1), (4096, 1), (4097, 2), (tiling.ROW_MAX, 2), (tiling.ROW_MAX + 1, 3)],
)
def test_layernorm_forward_takes_the_narrowest_band_holding_its_rows(n, band):
    assert tiling.for_width(tiling.LAYERNORM_FORWARD, n) is tiling.LAYERNORM_FORWARD[band][1]


@pytest.mark.parametrize(("n", "band"), [(1, 0), (4095, 0), (4096, 1), (tiling.ROW_MAX, 1), (tiling.ROW_MAX + 1, 2)])
def test_softmax_takes_the_narrowest_band_holding_its_rows(n, band):
    assert tiling.for_width(tiling.SOFTMAX_FORWARD, n) is tiling.SOFTMAX_FORWARD[band][1]


@pytest.mark.parametrize(("n", "band"), [(1, 0), (4096, 0), (4097, 1), (6144, 1), (6145, 2), (tiling.ROW_MAX + 1, 2)])
def test_rmsnorm_forward_takes_the_narrowest_band_holding_its_rows(n, band):
    assert tiling.for_width(tiling.RMSNORM_FORWARD, n) is tiling.RMSNORM_FORWARD[band][1]


def test_rmsnorm_forward_walks_only_rows_of_4097_to_6144_columns_in_persistent_blocks():
    """One row a tile in two blocks a SM where that won (5120; 6144 even), one tile a block at 4096 and 8192 where
    it lost (docs/experiments.md), and the builder's grid and kernel text follow the band."""
    blocks = {n: tiling.for_width(tiling.RMSNORM_FORWARD, n).blocks for n in (4096, 5120, 6144, 8192, 16384)}
    assert blocks == {4096: None, 5120: 2 * tiling.SMS, 6144: 2 * tiling.SMS, 8192: None, 16384: None}
    assert tiling.row_tiles(16384, 5120, tiling.for_width(tiling.RMSNORM_FORWARD, 5120))[0] == 1
    for n, grid in ((5120, 2 * tiling.SMS), (8192, 16384)):
        g = sigdnn.Graph("rms", io_dtype="bfloat16", compute_dtype="float32")
        y = g.rmsnorm("training", g.tensor("x", dims=(16384, n)), g.tensor("scale", dims=(1, n)), epsilon=1e-5)[0]
        y.set_output(True)
        (launch,), _ = norms.CutileRmsnormBuilder().launches(g.nodes[0], g)
        assert launch.grid == (grid,) and ("for bid in range(ct.bid(0)" in launch.source.text) == (n == 5120)


def test_softmax_walks_rows_of_4096_columns_or_more_in_persistent_blocks():
    """One row a 4096-element tile, 528 blocks, from 4096 to ROW_MAX columns; narrower and walked rows one tile a
    block (docs/experiments.md), and a grid of fewer row tiles than blocks launches one block a tile."""
    blocks = {n: tiling.for_width(tiling.SOFTMAX_FORWARD, n).blocks for n in (2048, 4096, 8192, 16384)}
    assert blocks == {2048: None, 4096: 4 * tiling.SMS, 8192: 4 * tiling.SMS, 16384: None}
    for rows, grid in ((16384, 4 * tiling.SMS), (100, 100)):
        g = sigdnn.Graph("sm", io_dtype="bfloat16", compute_dtype="float32")
        g.softmax(g.tensor("x", dims=(rows, 4096)))[0].set_output(True)
        (launch,), _ = softmax.CutileSoftmaxBuilder().launches(g.nodes[0], g)
        assert launch.grid == (grid,) and ("for bid in range(ct.bid(0)" in launch.source.text) == (grid < rows)


def test_layernorm_forward_bands_cut_rows_as_measured():
    """Four rows a tile from 1025 to 4096 columns, one beyond, both in two persistent blocks a SM; rows of 1024 or
    fewer and walked rows one tile a block (the widths measured: docs/experiments.md)."""
    widths = (768, 1024, 2048, 3072, 4096, 5120, 6144, 8192)
    tiles = {n: tiling.row_tiles(16384, n, tiling.for_width(tiling.LAYERNORM_FORWARD, n))[0] for n in widths}
    assert tiles == {768: 8, 1024: 8, 2048: 4, 3072: 4, 4096: 4, 5120: 1, 6144: 1, 8192: 1}
    assert {tiling.for_width(tiling.LAYERNORM_FORWARD, n).blocks for n in (2048, 6144, 8192)} == {2 * tiling.SMS}
    assert {tiling.for_width(tiling.LAYERNORM_FORWARD, n).blocks for n in (1024, 32768)} == {None}
    g = sigdnn.Graph("ln", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(16384, 4096))
    for t in g.layernorm("training", x, g.tensor("scale", dims=(1, 4096)), g.tensor("bias", dims=(1, 4096))):
        if t is not None:
            t.set_output(True)
    (launch,), _ = norms.CutileLayernormBuilder().launches(g.nodes[0], g)
    assert launch.grid == (2 * tiling.SMS,) and "for bid in range(ct.bid(0), 4096, 264):" in launch.source.text


def test_a_block_holding_more_than_the_tile_keeps_its_registers_per_element():
    softmax, backward = RowConfig(4096, KernelHints(6)), RowConfig(4096, KernelHints(2, 8))
    assert tiling.row_hints(softmax, 4096, 1, 4096, 1) == KernelHints(6)  # the measured shape: unchanged
    assert tiling.row_hints(softmax, 5120, 1, 1024, 5) == KernelHints(4)  # 5120 elements: 6 * 4096 // 5120
    assert tiling.row_hints(backward, 5120, 1, 1024, 5) == KernelHints(1, 8)
    assert tiling.row_hints(RowConfig(64, KernelHints(2)), 8000, 1, 8192, 1) == KernelHints(1)  # never below one
    assert tiling.row_hints(RowConfig(64), 8000, 1, 8192, 1) == KernelHints()  # cuTile's own choice stays its own
    assert tiling.row_hints(softmax, 8193, 1, 8192, 1) == KernelHints(6)  # a walked row: the config's own
    assert tiling.row_hints(softmax, 8192, 1, 8192, 1) == KernelHints(3)  # the widest held row


@pytest.mark.parametrize(
    ("n", "split"),
    [(1, (1, 1)), (37, (64, 1)), (256, (256, 1)), (768, (256, 3)), (1000, (1024, 1)), (1100, (256, 5)),
     (1536, (512, 3)), (3072, (1024, 3)), (4096, (4096, 1)), (4608, (1024, 5)), (5120, (1024, 5)),
     (7168, (1024, 7)), (8000, (8192, 1)), (8192, (8192, 1)), (9000, (tiling.ROW_MAX, 1))],
)  # fmt: skip
def test_a_row_is_held_in_the_fewest_tiles_of_least_padded_width(n, split):
    """Least padding first (1100: 5 x 256 = 1280, not 2048), then fewer tiles (1536: 3 x 512, not 6 x 256);
    at most ROW_CHUNKS tiles (4608: 5 x 1024, since 9 x 512 is too many), none narrower than ROW_CHUNK_MIN."""
    assert tiling.row_split(n) == split


def test_held_rows_keep_every_tile_in_registers():
    """Five tiles of 1024, each loaded once and stored once; no chunk loop, no second load of x."""
    for text in (row_kernel_source.norm_forward(5120, 1, 1024, 1e-5, True, True, (), k=5, tiles=1),
                 row_kernel_source.softmax_forward(5120, 1, 1024, False, False, k=5, tiles=1)):  # fmt: skip
        assert text.count("ct.load(x,") == 5 and text.count("ct.store(y,") == 5 and "for c in" not in text
    back = row_kernel_source.norm_backward(5120, 1, 1024, True, True, k=5)
    assert back.count("ct.load(x,") == 5 and back.count("ct.store(dx,") == 5 and back.count("ct.store(pds,") == 5


@pytest.mark.parametrize(("mode", "io", "tile"), [("add", "bfloat16", codegen.DEFAULT_TILE),
                                                  ("gelu_fwd", "bfloat16", codegen.WIDE_TILE),
                                                  ("gelu_fwd", "float32", codegen.HEAVY_TILE),
                                                  ("sin", "bfloat16", codegen.HEAVY_TILE),
                                                  ("mod", "bfloat16", codegen.HEAVY_TILE),
                                                  ("relu_fwd", "bfloat16", codegen.DEFAULT_TILE)])  # fmt: skip
def test_heavy_modes_take_the_heavy_tile(mode, io, tile):
    """Wide tiles only for the measured modes' fast tier (16-bit results), heavy tiles for the other heavy ones."""
    g = sigdnn.Graph(mode, io_dtype=io, compute_dtype="float32")
    ins = [g.tensor(f"x{k}", dims=(5000,)) for k in range(2 if mode in ("add", "mod") else 1)]
    g.pointwise(mode, *ins).set_output(True)
    assert node_spec(g.nodes[0], g)[0].tile == tile


def test_a_fused_region_with_one_heavy_node_takes_the_heavy_tile():
    g = sigdnn.Graph("region", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 4096))
    g.pointwise("add", g.pointwise("gelu_fwd", g.pointwise("mul", x, x)), x).set_output(True).set_name("y")
    plan = emulated_executor().prepare(g)
    (step,) = plan.steps
    assert step.plan.launch.spec.tile == codegen.HEAVY_TILE, plan.describe()


def test_batchnorm_partial_loads_take_the_configured_options():
    """TMA off and a latency hint reach the partial pass's loads of x (the emulator ignores both)."""
    from sigdnn.plan_builders.cutile import channel_kernel_source

    assert channel_kernel_source.load_options() == ""
    assert channel_kernel_source.load_options(tma=False, latency=10) == ", allow_tma=False, latency=10"
    assert channel_kernel_source.load_options(latency=3) == ", latency=3"
    text = channel_kernel_source.partials(
        (8, 256), 64, 1, 4, False, "float32", None, channel_kernel_source.load_options(False), True
    )
    assert "shape=(8, 256), check_bounds=False, allow_tma=False)" in text


def _pow2(n: object) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


@pytest.mark.parametrize("config", ["TRAINING", "INFERENCE", "BACKWARD"])
@pytest.mark.parametrize(
    ("dims", "layout"),
    [((64, 256, 56, 56), "NHWC"), ((2, 3, 32, 64), "NCHW"), ((1, 2, 3, 683), "NCHW"), ((8, 1000, 1, 1), "NCHW"),
     ((3, 40, 4, 5), "NHWC"), ((2, 5, 50, 50), "NCHW"), ((4, 1, 3, 3), "NHWC"), ((16384, 1, 1, 1), "NCHW"),
     ((2, 5000, 1, 1), "NCHW")],
)  # fmt: skip  # one channel, one channel of many rows, more channels than one tile holds
def test_batchnorm_tiles_are_powers_of_two(config, dims, layout):
    """cuTile tiles are powers of two: every pass's tile and the finalize's (channels, rows), for each config."""
    from norm_cases import batchnorm as graph

    g = graph(dims, layout, "float32", False)
    lay = batchnorm._Layout(g.nodes[0], g, "x", ("y",), getattr(batchnorm, config))
    assert all(_pow2(n) for n in (*lay.tile, *lay.apply_tile)), (lay.tile, lay.apply_tile)
    for splits in (1, 3, 523, 2048):
        assert all(_pow2(n) for n in lay.finalize_tiles(splits)), lay.finalize_tiles(splits)


@pytest.mark.parametrize("center", [True, False])
def test_row_backward_kernels_have_integer_tile_shapes_on_a_large_input(center):
    """cuTile takes only integer tile shapes (the emulator takes floats too): on 16384 x 4096 the column sums'
    tile is 128 partial rows of 32 columns."""
    g = sigdnn.Graph("bwd", io_dtype="bfloat16", compute_dtype="float32")
    dims, stats = (16384, 4096), (16384, 1)
    dy, x, s = g.tensor("dy", dims=dims), g.tensor("x", dims=dims), g.tensor("scale", dims=(1, 4096))
    inv = g.tensor("inv", dims=stats, dtype="float32")
    if center:
        outs = g.layernorm_backward(dy, x, s, g.tensor("mean", dims=stats, dtype="float32"), inv)
    else:
        outs = g.rmsnorm_backward(dy, x, s, inv)
    for t in outs:
        if t is not None:
            t.set_output(True)
    builder = norms.CutileLayernormBackwardBuilder() if center else norms.CutileRmsnormBackwardBuilder()
    launches, _ = builder.launches(g.nodes[0], g)
    shapes = [s for la in launches for s in re.findall(r"shape=\(([^)]*)\)", la.source.text)]
    assert shapes and all(re.fullmatch(r"\d+(, \d+)*,?", s) for s in shapes), shapes
    assert "shape=(128, 32)" in launches[-1].source.text
