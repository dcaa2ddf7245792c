"""The CuTe batchnorm builder's host side, without a GPU: what it accepts, what it declines and why, and how its
spec cuts x among registers, shared memory and the stream."""

from __future__ import annotations

import sys
import types

import pytest

import sigdnn
from sigdnn.errors import NotSupported, VariantPackError
from sigdnn.plan_builders import gpu_properties
from sigdnn.plan_builders.cute import batchnorm as cute_batchnorm
from sigdnn.plan_builders.cute.batchnorm import (
    SHARED_BYTES,
    BatchnormSpec,
    CuteBatchnormBuilder,
    CuteBatchnormPlan,
    plan_batchnorm,
)
from sigdnn.registry import Registry
from sigdnn.registry.contracts import BuildContext
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import key_for


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
    assert (s.kept_registers, s.kept_shared) == (8, 26)
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


@pytest.mark.parametrize(
    ("dims", "layout", "io"),
    [((4, 8, 5, 7), "NHWC", "bfloat16"), ((2, 2048, 3, 1), "NHWC", "bfloat16"), ((4, 64, 3, 3), "NHWC", "float16")],
    ids=["one_vector", "256_vectors", "float16"],
)
def test_takes_every_power_of_two_of_vectors_up_to_256(dims, layout, io) -> None:
    g = batchnorm(dims, layout, io)
    assert plan_batchnorm(g.nodes[0], g)["channels"] == dims[1]


def test_two_elements_a_channel_are_enough_for_running_statistics() -> None:
    g = batchnorm((2, 64, 1, 1))
    assert plan_batchnorm(g.nodes[0], g)["rows"] == 2


@pytest.mark.parametrize(
    ("graph", "reason"),
    [
        (lambda: batchnorm((1, 8, 1 << 14, 1 << 14)), "2147483648 elements"),  # 2^31: one past int32
        (lambda: batchnorm((4, 1, 5, 7)), "1 channels"),
        (lambda: batchnorm(scale_dtype="float64"), "one dtype each"),
    ],
)
def test_declines_past_the_kernels_arithmetic_and_dtypes(graph, reason: str) -> None:
    assert reason in declined(graph())


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_accepted_row_width_fills_whole_rows_of_a_block(dtype: str) -> None:
    vec = 16 // {"bfloat16": 2, "float32": 4}[dtype]
    for lanes in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        s = spec(1000, channels=lanes * vec, dtype=dtype)
        assert s.lanes == lanes and s.group_rows * lanes == s.threads and s.group_rows >= 2


def test_plan_batchnorm_refuses_other_ops() -> None:
    g = sigdnn.Graph("ln", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 64))
    g.layernorm("training", x, g.tensor("s", dims=(1, 64)), g.tensor("b", dims=(1, 64)))[0].set_output(True)
    with pytest.raises(ValueError, match="layernorm is not a batchnorm training forward"):
        plan_batchnorm(g.nodes[0], g)


def test_sizes_are_whole_numbers() -> None:
    s = spec(1000, channels=128, dtype="float32")
    assert (s.vec, s.lanes, s.group_rows) == (4, 32, 16)
    assert all(type(v) is int for v in (s.vec, s.lanes, s.group_rows, s.groups, s.kept_shared))
    assert s.accumulator_elements == 2 * 8 * 2 * 128


def test_serves_batchnorm_keys_of_its_io_dtypes() -> None:
    builder = CuteBatchnormBuilder()
    ok, f64 = batchnorm(), batchnorm(io="float64")
    assert builder.serves(key_for(ok.nodes[0], ok))
    assert not builder.serves(key_for(f64.nodes[0], f64))
    other = sigdnn.Graph("ln", io_dtype="bfloat16", compute_dtype="float32")
    x = other.tensor("x", dims=(4, 64))
    other.layernorm("training", x, other.tensor("s", dims=(1, 64)), other.tensor("b", dims=(1, 64)))[0].set_output(True)
    assert not builder.serves(key_for(other.nodes[0], other))


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *args) -> None:
        self.calls.append(args)


def buf(ptr: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(ptr=ptr)


PORTS = {"x": 0x1000, "y": 0x2000, "scale": 0x3002, "bias": 0x4002, "mean": 0x5004, "inv_variance": 0x6004}
RUNNING = {"in_running_mean": 0x7004, "in_running_var": 0x8004, "next_running_mean": 0x9004, "next_running_var": 0xA004}


@pytest.mark.parametrize("running", [True, False])
def test_binds_the_node_pointers_in_the_kernels_order(running: bool) -> None:
    launch = Recorder()
    plan = CuteBatchnormPlan(launch, "node 'bn'")
    ports = {**PORTS, **(RUNNING if running else {})}
    bound = plan.bind({p: buf(v) for p, v in ports.items()}, ExecutionContext(stream=0x5EED))
    assert launch.calls == []
    bound()
    running_ptrs = list(RUNNING.values()) if running else [0, 0, 0, 0]
    assert launch.calls == [(*PORTS.values(), *running_ptrs, 0x5EED)]


def test_a_plan_keeps_its_state_out_of_the_shared_workspace() -> None:
    assert CuteBatchnormPlan(Recorder(), "node 'bn'").workspace_bytes == 0


def test_y_in_another_dtype_than_x_is_declined() -> None:
    g = batchnorm()
    g.tensors[g.nodes[0].op.y].set_data_type("float32")
    assert "y is float32 and x bfloat16" in declined(g)


def test_declines_a_gpu_other_than_sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_properties, "device_properties", lambda device_id: ((8, 0), 108))
    g = batchnorm()
    with pytest.raises(NotSupported, match="needs sm_90"):
        CuteBatchnormBuilder().check(g.nodes[0], g, Device("gpu"))


def test_build_compiles_the_view_for_every_sm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch (replaced here: it needs the DSL) gets the node's view with one block a SM."""
    monkeypatch.setattr(gpu_properties, "device_properties", lambda device_id: ((9, 0), 132))
    monkeypatch.setattr(cute_batchnorm, "device_properties", gpu_properties.device_properties)
    fake = types.ModuleType("batchnorm_launch")
    fake.BatchnormLaunch = lambda spec: spec
    monkeypatch.setitem(sys.modules, "sigdnn.plan_builders.cute.kernels.batchnorm_launch", fake)
    g = batchnorm()
    context = BuildContext(key_for(g.nodes[0], g), Device("gpu"), g)
    plan = CuteBatchnormBuilder().build(g.nodes[0], g, context)
    assert plan._launch == BatchnormSpec(**plan_batchnorm(g.nodes[0], g), blocks=132)


def test_the_registry_offers_it_first_for_gpu_batchnorm_keys() -> None:
    g = batchnorm()
    registry = Registry()
    names = [b.name for b in registry.ranker(registry.serving(key_for(g.nodes[0], g), "gpu"), g.nodes[0], g)]
    assert names.index("cute.batchnorm") < names.index("cutile.batchnorm")


def test_refuses_a_misaligned_x_when_binding() -> None:
    plan = CuteBatchnormPlan(Recorder(), "node 'bn'")
    with pytest.raises(VariantPackError, match="node 'bn': x not 16-byte aligned"):
        plan.bind({**{p: buf(v) for p, v in PORTS.items()}, "x": buf(0x1008)}, ExecutionContext(stream=1))
