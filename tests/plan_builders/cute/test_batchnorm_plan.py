"""The CuTe batchnorm builder's host side, without a GPU: what it accepts, what it declines and why, and how its
spec cuts x among registers, shared memory and the stream."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.batchnorm import SHARED_BYTES, BatchnormSpec, CuteBatchnormBuilder, plan_batchnorm
from sigdnn.registry import Registry


def batchnorm(
    dims: tuple[int, ...] = (4, 64, 5, 7),
    layout: str | None = "NHWC",
    io: str = "bfloat16",
    running: bool = True,
    *,
    running_dtype: str = "float32",
    scale_dtype: str | None = None,
    scale_strides: tuple[int, ...] | None = None,
    y_layout: str | None = None,
) -> sigdnn.Graph:
    g = sigdnn.Graph("bn", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout)
    cd = (1, dims[1], *(1,) * (len(dims) - 2))
    s = g.tensor("scale", dims=cd, strides=scale_strides, dtype=scale_dtype)
    b = g.tensor("bias", dims=cd, dtype=scale_dtype)
    rm, rv = (g.tensor(n, dims=cd, dtype=running_dtype) for n in ("rm", "rv")) if running else (None, None)
    outs = g.batchnorm(x, s, b, rm, rv, 1e-3, 0.2 if running else None)
    outs[0].set_output(True)
    if y_layout is not None:
        outs[0].set_stride(g.tensor("like", dims=dims, layout=y_layout).strides)
    for t in outs[1:]:
        if t is not None:
            t.set_output(True)
    return g


def declined(g: sigdnn.Graph) -> str:
    with pytest.raises(NotSupported) as info:
        CuteBatchnormBuilder().check(g.nodes[0], g, None)
    return str(info.value)


def test_takes_channels_last_x() -> None:
    g = batchnorm()
    CuteBatchnormBuilder().check(g.nodes[0], g, None)
    view = plan_batchnorm(g.nodes[0], g)
    assert view == {"dtype": "bfloat16", "channels": 64, "rows": 140, "param_dtype": "bfloat16",
                    "stat_dtype": "float32", "running": True, "epsilon": 1e-3, "momentum": 0.2}  # fmt: skip


def test_takes_3d_x_without_running_statistics_in_float32() -> None:
    g = batchnorm((2, 32, 3, 4, 5), "NDHWC", "float32", running=False)
    view = plan_batchnorm(g.nodes[0], g)
    assert (view["rows"], view["channels"], view["running"], view["momentum"]) == (120, 32, False, 0.0)


@pytest.mark.parametrize(
    ("graph", "reason"),
    [
        (lambda: batchnorm(layout="NCHW"), "channels are not innermost"),
        (lambda: batchnorm((4, 40, 5, 7)), "40 channels"),  # 5 vectors of 8: not a power of two
        (lambda: batchnorm((4, 4, 5, 7)), "4 channels"),  # half a vector
        (lambda: batchnorm((1, 4096, 2, 2)), "4096 channels"),  # 512 vectors: more than 256
        (lambda: batchnorm(io="float64"), "x is float64"),
        (lambda: batchnorm(running_dtype="bfloat16"), "one dtype each"),
        (lambda: batchnorm(scale_strides=(128, 2, 1, 1)), "not contiguous along its channels"),
        (lambda: batchnorm(y_layout="NCHW"), "laid out differently"),
        (lambda: batchnorm((1, 64, 1, 1)), "at least 2 elements"),
    ],
)
def test_declines_what_the_kernel_does_not_take(graph, reason: str) -> None:
    message = declined(graph())
    assert reason in message and "node 'batchnorm_0'" in message, message


def test_a_single_element_a_channel_is_fine_without_running_statistics() -> None:
    g = batchnorm((1, 64, 1, 1), running=False)
    assert plan_batchnorm(g.nodes[0], g)["rows"] == 1


def test_ranks_above_the_cutile_batchnorm() -> None:
    registry = Registry()
    cute, cutile = registry.find("cute.batchnorm"), registry.find("cutile.batchnorm")
    assert cute.engine_id == 3012 and cute.priority > cutile.priority


def spec(rows: int, channels: int = 256, dtype: str = "bfloat16", blocks: int = 132) -> BatchnormSpec:
    return BatchnormSpec(dtype, channels, rows, "bfloat16", "float32", True, 1e-5, 0.1, blocks)


def test_the_benchmark_shape_keeps_x_in_registers_and_shared_memory() -> None:
    s = spec(64 * 56 * 56)
    assert (s.vec, s.lanes, s.group_rows, s.groups) == (8, 32, 16, 12544)
    assert (s.kept_registers, s.kept_shared) == (10, 26)
    used = s.kept_shared * s.threads * 16 + s.scratch_bytes
    assert used <= SHARED_BYTES < used + s.threads * 16  # as many groups as fit


def test_a_small_x_is_streamed_and_its_tail_counted() -> None:
    s = spec(147, channels=64)  # 8 lanes: groups of 64 rows
    assert (s.group_rows, s.groups, s.kept_registers, s.kept_shared) == (64, 2, 0, 0)
    assert s.rows - s.groups * s.group_rows == 19


def test_kept_groups_never_outnumber_x() -> None:
    for rows in (1, 2111, 132 * 16 * 11, 132 * 16 * 40, 132 * 16 * 1000):
        s = spec(rows)
        assert s.blocks * (s.kept_registers + s.kept_shared) <= s.groups
