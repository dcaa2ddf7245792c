"""plan_gemm: how matmul operands map onto the Hopper GEMM's view (pure Python, runs without a GPU).

Every accepted case is checked by brute force: the kernel view (extents,
majors, leading and batch strides) must address exactly the elements the
node's own dims and strides address, for every (m, n, k, batch) index.
"""

from __future__ import annotations

import itertools

import attrs
import numpy as np
import pytest

from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.cute.gemm_layout import (
    GemmConfig,
    GemmProblem,
    GemmSpec,
    bias_once_a_tile,
    default_config,
    plan_gemm,
)
from sigdnn.plan_builders.cute.matmul import parse_config


def _offsets(dims, strides):
    """Element offset of every index of a strided view, as an array of ``dims``."""
    grids = np.indices(dims)
    return sum(g * s for g, s in zip(grids, strides, strict=True))


def _kernel_offsets(spec: GemmSpec, p: GemmProblem, which: str):
    """Offsets the kernel addresses for operand ``which`` as [batch, rows, cols] of the node's logical matrix."""
    if which == "a":
        rows, cols, inner, ld, bs, batched = p.m, p.k, spec.a_major == "k", p.lda, p.batch_stride_a, spec.a_batched
    elif which == "b":  # node's b is K x N; the kernel's B is N x K
        rows, cols, inner, ld, bs, batched = p.k, p.n, spec.b_major == "n", p.ldb, p.batch_stride_b, spec.b_batched
    else:
        rows, cols, inner, ld, bs, batched = p.m, p.n, spec.c_major == "n", p.ldc, p.batch_stride_c, True
    batch, r, c = np.indices((p.batch, rows, cols))
    off = (r * ld + c) if inner else (r + c * ld)
    return off + (batch * bs if batched else 0)


def _node_offsets(dims, strides, c_batch, fold_m: bool):
    """The node's offsets arranged as [batch, rows, cols] after broadcasting to ``c_batch``."""
    off = _offsets(dims, strides)
    full = np.broadcast_to(off, (*c_batch, *dims[-2:])) if c_batch else off
    mat = full.reshape(-1, *dims[-2:])
    if fold_m:
        mat = mat.reshape(1, -1, dims[-1])
    return mat


CASES = [
    # (a dims, a strides, b dims, b strides, c dims)   strides None: packed
    ((256, 64), None, (64, 128), None, (256, 128)),
    ((256, 64), (1, 256), (64, 128), None, (256, 128)),  # A column-major
    ((256, 64), None, (64, 128), (1, 64), (256, 128)),  # B column-major (K contiguous)
    ((3, 40, 24), None, (3, 24, 16), None, (3, 40, 16)),  # batched
    ((2, 3, 40, 24), None, (24, 16), None, (2, 3, 40, 16)),  # x @ W: folds into M
    ((40, 24), None, (5, 24, 16), None, (5, 40, 16)),  # A shared by the batch
    ((4, 1, 40, 24), None, (1, 3, 24, 16), None, (4, 3, 40, 16)),  # broadcast both ways: no single batch dim
    ((1, 24), None, (24, 8), None, (1, 8)),  # M = 1
    ((33, 1), (1, 1), (1, 48), None, (33, 48)),  # K = 1
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("dtypes", [("bfloat16", "bfloat16"), ("float16", "float32")])
def test_kernel_view_addresses_the_same_elements(case, dtypes) -> None:
    a_dims, a_st, b_dims, b_st, c_dims = case
    a_st = a_st or packed_strides(a_dims)
    b_st = b_st or packed_strides(b_dims)
    c_st = packed_strides(c_dims)
    ab, c_dt = dtypes
    try:
        spec, p = plan_gemm((a_dims, a_st, ab), (b_dims, b_st, ab), (c_dims, c_st, c_dt))
    except ValueError as exc:
        assert "collapse" in str(exc) or "multiple of" in str(exc), exc
        return
    c_batch = tuple(c_dims[:-2])
    fold = p.batch == 1 and int(np.prod(c_batch, dtype=np.int64)) > 1
    a_mat = _node_offsets(a_dims, a_st, c_batch, fold)
    c_mat = _node_offsets(c_dims, c_st, c_batch, fold)
    b_mat = _node_offsets(b_dims, b_st, c_batch, False)
    if fold:
        b_mat = b_mat[:1]
    for want, which in ((a_mat, "a"), (b_mat, "b"), (c_mat, "c")):
        got = _kernel_offsets(spec, p, which)
        np.testing.assert_array_equal(got, want, err_msg=f"operand {which}: {spec} {p}")


def test_x_at_w_folds_the_batch_into_m() -> None:
    spec, p = plan_gemm(((2, 3, 40, 24), (2880, 960, 24, 1), "bfloat16"), ((24, 16), (16, 1), "bfloat16"),
                        ((2, 3, 40, 16), (1920, 640, 16, 1), "bfloat16"))  # fmt: skip
    assert (p.m, p.batch, spec.a_batched, spec.b_batched) == (240, 1, False, False)


def test_shared_a_is_passed_unbatched() -> None:
    spec, p = plan_gemm(((40, 24), (24, 1), "float16"), ((5, 24, 16), (384, 16, 1), "float16"),
                        ((5, 40, 16), (640, 16, 1), "float16"))  # fmt: skip
    assert (p.batch, spec.a_batched, spec.b_batched, p.batch_stride_b, p.batch_stride_c) == (5, False, True, 384, 640)


@pytest.mark.parametrize(
    ("a", "b", "c", "reason"),
    [
        (((64, 30), (30, 1), "bfloat16"), ((30, 64), (64, 1), "bfloat16"), ((64, 64), (64, 1), "bfloat16"), "16 bytes"),
        (((64, 32), (32, 1), "float32"), ((32, 64), (64, 1), "float32"), ((64, 64), (64, 1), "float32"), "dtypes"),
        (((64, 32), (32, 1), "float16"), ((32, 64), (64, 1), "bfloat16"), ((64, 64), (64, 1), "float16"), "dtypes"),
        (((64, 32), (32, 1), "float16"), ((32, 64), (64, 1), "float16"), ((64, 64), (64, 1), "int8"), "output"),
        (((64, 32), (64, 2), "float16"), ((32, 64), (64, 1), "float16"), ((64, 64), (64, 1), "float16"), "contiguous"),
        (((64, 0), (1, 1), "float16"), ((0, 64), (64, 1), "float16"), ((64, 64), (64, 1), "float16"), "empty"),
        (
            ((2, 8, 16), (0, 16, 1), "float16"),
            ((16, 8), (8, 1), "float16"),
            ((2, 8, 8), (0, 8, 1), "float16"),
            "repeats",
        ),
        # rank: a alone, then c alone, below 2
        (((32,), (1,), "float16"), ((32, 64), (64, 1), "float16"), ((1, 64), (64, 1), "float16"), "rank >= 2"),
        (((2, 32), (32, 1), "float16"), ((32, 64), (64, 1), "float16"), ((64,), (1,), "float16"), "rank >= 2"),
        # inconsistent dims: B's K alone, then C's N alone
        (
            ((8, 32), (32, 1), "float16"),
            ((40, 64), (64, 1), "float16"),
            ((8, 64), (64, 1), "float16"),
            r"dims \[8, 32\] @ \[40, 64\] -> \[8, 64\] are inconsistent",
        ),
        (((8, 32), (32, 1), "float16"), ((32, 64), (64, 1), "float16"), ((8, 56), (56, 1), "float16"), "inconsistent"),
        (((8, 32), (32, -1), "float16"), ((32, 64), (64, 1), "float16"), ((8, 64), (64, 1), "float16"), "negative"),
        # fp8 with A M-major: wgmma reads 8-bit operands K-major only
        (
            ((32, 64), (1, 32), "fp8_e4m3"),
            ((64, 32), (1, 64), "fp8_e4m3"),
            ((32, 32), (32, 1), "bfloat16"),
            r"contiguous along K .*: a \(M x K\) not;",
        ),
        # fp8 with K = 1 stored M-major: its rows along K cannot be K-major
        (
            ((16, 1), (1, 16), "fp8_e4m3"),
            ((1, 16), (16, 1), "fp8_e4m3"),
            ((16, 16), (16, 1), "bfloat16"),
            r"rows along K are not 16-byte aligned \(lda 16, ldb 16\)",
        ),
        # fp8, K = 1: A K-major, B not (either one is enough to decline)
        (
            ((16, 1), (16, 1), "fp8_e4m3"),
            ((1, 16), (16, 1), "fp8_e4m3"),
            ((16, 16), (16, 1), "bfloat16"),
            r"rows along K are not 16-byte aligned \(lda 16, ldb 16\)",
        ),
        # rows of A at stride 0: a leading stride must be positive
        (((8, 16), (0, 1), "float16"), ((16, 8), (8, 1), "float16"), ((8, 8), (8, 1), "float16"), "positive multiple"),
        (
            ((3, 8, 16), (128, 16, 1), "float16"),
            ((16, 8), (8, 1), "float16"),
            ((2, 8, 8), (64, 8, 1), "float16"),
            r"batch dims \[3\] do not broadcast to \[2\]",
        ),
        (
            ((2, 8, 16), (132, 16, 1), "float16"),
            ((2, 16, 8), (128, 8, 1), "float16"),
            ((2, 8, 8), (64, 8, 1), "float16"),
            r"a's batch stride 132 is not a multiple of 8 elements",
        ),
        (
            ((2**31, 16), (16, 1), "float16"),
            ((16, 16), (16, 1), "float16"),
            ((2**31, 16), (16, 1), "float16"),
            r"extents past 2\^31 - 1",
        ),
    ],
)
def test_declines_with_a_reason(a, b, c, reason) -> None:
    with pytest.raises(ValueError, match=reason):
        plan_gemm(a, b, c)


def test_config_labels_round_trip_and_reject_bad_tiles() -> None:
    for tm, tn, pp, (cm, cn), sw, rm in itertools.product(
        (128,), (128, 192, 208), (False, True), ((1, 1), (2, 1), (1, 2)), (1, 4), (True, False)
    ):
        cfg = GemmConfig(tm, tn, pp, cm, cn, sw, raster_along_m=rm)
        assert parse_config(cfg.label) == cfg
    with pytest.raises(ValueError):
        GemmConfig(256, 128, pingpong=True)
    with pytest.raises(ValueError):
        GemmConfig(128, 256, pingpong=True)  # 256 accumulator registers per thread
    with pytest.raises(ValueError):
        GemmConfig(128, 100)
    with pytest.raises(ValueError):
        GemmConfig(128, 128, cluster_m=4, cluster_n=4)  # 16 CTAs: past the portable 8
    with pytest.raises(ValueError):
        parse_config("coop128")


def test_default_config_uses_small_tiles_for_small_problems() -> None:
    small = GemmProblem(256, 256, 4096, 1, 4096, 4096, 256, 0, 0, 0)
    big = GemmProblem(8192, 8192, 8192, 1, 8192, 8192, 8192, 0, 0, 0)
    spec = GemmSpec("bfloat16", "bfloat16", "bfloat16", "k", "n", "n", False, False)
    assert default_config(spec, small).tile_n == 128
    assert default_config(spec, big).tile_n == 256


def test_gelu_epilogues_default_to_pingpong_on_large_problems() -> None:
    """The epilogue of one warpgroup hides behind the other's mainloop; cheap epilogues stay cooperative."""
    small = GemmProblem(256, 256, 4096, 1, 4096, 4096, 256, 0, 0, 0)
    big = GemmProblem(8192, 8192, 8192, 1, 8192, 8192, 8192, 0, 0, 0)
    plain = GemmSpec("bfloat16", "bfloat16", "bfloat16", "k", "n", "n", False, False, bias_dtype="bfloat16")
    for act in ("gelu", "gelu_tanh"):
        gelu = GemmSpec("bfloat16", "bfloat16", "bfloat16", "k", "n", "n", False, False, "bfloat16", act)
        assert default_config(gelu, big).label == "pp64x256c2x1s4n"
        assert not default_config(gelu, small).pingpong
    for act in ("none", "relu"):
        assert default_config(GemmSpec(*attrs.astuple(plain)[:8], "bfloat16", act), big).label == "coop128x256c2x1s4n"


@pytest.mark.parametrize(
    ("bias_per", "epi_rows", "tile_m", "once"),
    [
        ("m", 64, 64, True),  # the transposed and row convs: 64 x 32 subtiles of a 64 x 256 tile, one bias row set
        ("m", 64, 128, False),  # two row blocks of subtiles: each its own bias rows
        ("n", 64, 64, False),  # a bias by column changes from subtile to subtile along N
        ("n", 128, 128, False),
    ],
)
def test_the_bias_is_loaded_once_a_tile_only_when_every_subtile_adds_the_same(bias_per, epi_rows, tile_m, once):
    assert bias_once_a_tile(bias_per, epi_rows, tile_m) is once


def test_extents_up_to_int32_max_are_planned() -> None:
    big = 2**31 - 1
    _, p = plan_gemm(((big, 16), (16, 1), "float16"), ((16, 16), (16, 1), "float16"), ((big, 16), (16, 1), "float16"))
    assert p.m == big


def test_a_dim_of_one_gets_a_tma_aligned_leading_stride() -> None:
    """M = 1: A's leading stride is never stepped, so it is K rounded up to 16 bytes (20 -> 24 halves)."""
    spec, p = plan_gemm(((1, 20), (20, 1), "float16"), ((20, 8), (8, 1), "float16"), ((1, 8), (8, 1), "float16"))
    assert (spec.a_major, p.lda) == ("k", 24)


def test_two_batch_dims_that_step_as_one_collapse() -> None:
    spec, p = plan_gemm(((2, 3, 4, 8), (96, 32, 8, 1), "float16"), ((2, 3, 8, 8), (192, 64, 8, 1), "float16"),
                        ((2, 3, 4, 8), (96, 32, 8, 1), "float16"))  # fmt: skip
    assert (p.batch, p.batch_stride_a, p.batch_stride_b, p.batch_stride_c) == (6, 32, 64, 32)
    assert spec.a_batched and spec.b_batched


def test_default_config_takes_large_tiles_from_a_full_wave_on() -> None:
    """132 tiles of 128 x 256 (a batch of 2 counted) fill the 132 SMs: the large config; 131 do not."""
    spec = GemmSpec("bfloat16", "bfloat16", "bfloat16", "k", "n", "n", True, True)
    full = GemmProblem(128 * 66, 256, 4096, 2, 4096, 4096, 256, 0, 0, 0)
    short = GemmProblem(128 * 131, 256, 4096, 1, 4096, 4096, 256, 0, 0, 0)
    assert default_config(spec, full).label == "coop128x256c2x1s4n"
    assert default_config(spec, full, sm_count=133).tile_n == 128
    assert default_config(spec, short).tile_n == 128
