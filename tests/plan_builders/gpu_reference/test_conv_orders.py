"""The GPU reference's conv passes in both of their orders agree with the CPU reference.

A pass whose output stores channels innermost (NHWC, NDHWC, NWC; wgrad: whose x does) reads its inputs
channels-last and forms an im2col matrix with a row per position; any other output keeps the channel-major
order. Each case runs through the cuTile emulator and is compared with the CPU reference: within 1 ulp on
random inputs (the two orders sum each output's (channel, tap) terms in other orders than the CPU
reference's), and bit for bit on small integers, whose every sum is exact, so that any misplaced element
shows. Layouts, groups, strides, dilations, asymmetric padding, 1 to 3 spatial dims and outputs with
padded or unusual strides are covered, and which order each case takes is checked too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from gpu_reference_emulation import make_available, run_both, worst_ulps

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.gpu_reference import conv, tensors, windows
from sigdnn.plan_builders.gpu_reference.agreement import agreement_ulps


@pytest.fixture(autouse=True)
def _available(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)


def strided(dims: Sequence[int], order: str | tuple[int, ...]) -> tuple[int, ...]:
    """Packed strides: "last" channels-last, "first" NC-first, or an explicit axis order (outermost first)."""
    if order == "last":
        order = conv.channels_last(len(dims))
    elif order == "first":
        order = tuple(range(len(dims)))
    return packed_strides(dims, order)


def padded_last(dims: Sequence[int], extra: int) -> tuple[int, ...]:
    """Channels-last strides with ``extra`` unused elements after each position's channels."""
    _, c, *size = dims
    step = c + extra
    spatial = packed_strides(size)
    return (step * int(np.prod(size)), 1, *(s * step for s in spatial))


# (name, x dims, w dims, stride, dilation, pre, post)
GEOMETRIES = [
    ("2d", (2, 4, 7, 6), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ("2d_strided_dilated", (2, 6, 9, 8), (4, 3, 3, 2), (2, 1), (1, 2), (1, 0), (2, 1)),
    ("2d_groups", (3, 6, 5, 5), (4, 3, 3, 3), (1, 2), (1, 1), (1, 2), (0, 1)),
    ("2d_depthwise", (2, 4, 6, 5), (8, 1, 3, 3), (1, 1), (2, 1), (2, 1), (1, 1)),
    ("1x1", (2, 5, 4, 3), (7, 5, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
    ("1d", (2, 3, 11), (5, 3, 4), (2,), (1,), (2,), (1,)),
    ("1d_groups", (1, 4, 9), (6, 2, 3), (1,), (3,), (3,), (0,)),
    ("3d", (1, 4, 4, 5, 3), (4, 2, 2, 3, 2), (1, 2, 1), (1, 1, 2), (1, 1, 0), (0, 1, 1)),
]


def out_dims(x: Sequence[int], w: Sequence[int], *window: Sequence[int]) -> tuple[int, ...]:
    stride, dilation, pre, post = window
    spatial = [windows.out_size(*a) for a in zip(x[2:], pre, post, w[2:], stride, dilation, strict=True)]
    return (x[0], w[0], *spatial)


def graph(op: str, geometry: tuple, layouts: dict[str, object]) -> sigdnn.Graph:
    """One conv node of ``op``; ``layouts`` gives each tensor's strides ("last", "first", an axis order, or
    explicit strides)."""
    _, x, w, stride, dilation, pre, post = geometry
    y = out_dims(x, w, stride, dilation, pre, post)
    dims = {"x": x, "w": w, "y": y, "dy": y, "dx": x, "dw": w}

    def strides_of(name: str) -> tuple[int, ...]:
        given = layouts.get(name, "first")
        if isinstance(given, tuple) and len(given) == len(dims[name]) and sorted(given) != list(range(len(given))):
            return given
        return strided(dims[name], given)

    g = sigdnn.Graph(op, io_dtype="float32", compute_dtype="float32")
    window = {"stride": stride, "dilation": dilation, "pre_padding": pre, "post_padding": post}
    if op == "conv_fprop":
        ins = [g.tensor("x", x, strides_of("x")), g.tensor("w", w, strides_of("w"))]
        out, name = g.conv_fprop(*ins, name="conv", **window), "y"
    elif op == "conv_dgrad":
        ins = [g.tensor("dy", y, strides_of("dy")), g.tensor("w", w, strides_of("w"))]
        out, name = g.conv_dgrad(*ins, dims=x, name="conv", **window), "dx"
    else:
        ins = [g.tensor("x", x, strides_of("x")), g.tensor("dy", y, strides_of("dy"))]
        out, name = g.conv_wgrad(*ins, dims=w, name="conv", **window), "dw"
    out.set_stride(strides_of(name)).set_output(True)
    return g


def integer_inputs(g: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    """Small integers in float32: every product and sum exact, whatever the order."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.integers(-3, 4, t.dims).astype(np.float32) for t in g.inputs}


def check(g: sigdnn.Graph) -> None:
    found = worst_ulps(g, random_inputs(g, 0))
    assert all(worst <= 1 for worst, _ in found.values()), found
    got, want = run_both(g, integer_inputs(g, 1))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


OPS = ("conv_fprop", "conv_dgrad", "conv_wgrad")
OUTPUT = {"conv_fprop": "y", "conv_dgrad": "dx", "conv_wgrad": "dw"}


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", ["last", "first"])
def test_every_pass_agrees_in_both_layouts(op: str, geometry: tuple, layout: str) -> None:
    check(graph(op, geometry, dict.fromkeys(("x", "w", "y", "dy", "dx", "dw"), layout)))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("inputs", ["first", "last"])
def test_inputs_in_the_other_layout_than_the_output(op: str, inputs: str) -> None:
    other = "first" if inputs == "last" else "last"
    layouts = {"x": inputs, "w": inputs, "dy": inputs, OUTPUT[op]: other}
    if op == "conv_wgrad":  # wgrad's order follows x
        layouts = {"x": other, "dy": inputs, "dw": inputs}
    check(graph(op, GEOMETRIES[2], layouts))


@pytest.mark.parametrize("op", OPS)
def test_outputs_with_padded_channels_last_strides(op: str) -> None:
    _, x, w, stride, dilation, pre, post = geometry = GEOMETRIES[1]
    dims = {"y": out_dims(x, w, stride, dilation, pre, post), "dx": x, "dw": w}[OUTPUT[op]]
    layouts = dict.fromkeys(("x", "w", "dy"), "last")
    layouts[OUTPUT[op]] = padded_last(dims, 3)
    check(graph(op, geometry, layouts))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("order", [(0, 2, 1, 3), (1, 0, 2, 3), (3, 2, 0, 1)])
def test_outputs_in_unusual_axis_orders(op: str, order: tuple[int, ...]) -> None:
    layouts = dict.fromkeys(("x", "w", "dy"), "last")
    layouts[OUTPUT[op]] = order
    check(graph(op, GEOMETRIES[2], layouts))


@pytest.mark.parametrize(
    ("dims", "strides", "innermost"),
    [
        ((2, 4, 3, 3), (36, 1, 12, 4), True),  # NHWC
        ((2, 4, 3, 3), (36, 9, 3, 1), False),  # NCHW
        ((2, 1, 3, 3), (9, 9, 3, 1), False),  # one channel: no order to follow
        ((2, 4, 1, 1), (4, 1, 4, 4), True),  # NHWC, 1 x 1: the positions' strides tie the channels' span
        ((2, 4, 1, 3), (12, 1, 12, 4), True),  # a unit axis' stride is not compared
        ((1, 4, 3, 3), (1, 9, 3, 1), False),  # a unit batch of stride 1 is not compared either
        ((2, 4, 3, 3), (36, 3, 12, 1), False),  # channels in the middle
        ((2, 4, 5), (20, 1, 4), True),  # NWC
        ((2, 4, 5), (20, 5, 1), False),
        ((2, 4, 3), (12, 1, 1), False),  # a tie with a spatial axis: not innermost
        ((2, 2, 3, 3), (18, 1, 6, 2), True),  # two channels, padded
        ((2, 1, 3, 3), (18, 1, 6, 2), False),  # one channel, though of the smallest stride
        ((2, 4, 2, 3), (24, 3, 1, 6), False),  # an axis of 2 below the channels
        ((2, 4, 1, 3), (12, 1, 1, 4), True),  # a unit axis' stride ties the channels'
    ],
)
def test_channels_innermost(dims: tuple[int, ...], strides: tuple[int, ...], innermost: bool) -> None:
    assert conv.channels_innermost(dims, strides) is innermost


def reads_and_writes(monkeypatch: pytest.MonkeyPatch, g: sigdnn.Graph) -> tuple[list[bool], list[bool]]:
    """Whether each read and each write of one GPU reference run was dense (a packed copy, no index map)."""
    reads: list[bool] = []
    writes: list[bool] = []
    honest_gather, honest_scatter = tensors.gather, tensors.scatter

    def gather(gpu: Any, src: Any, index: Any, out: Any, pad: float, decode: str) -> None:
        reads.append(isinstance(index, int))
        return honest_gather(gpu, src, index, out, pad, decode)

    def scatter(gpu: Any, value: Any, raw: Any, index: Any, target: Any) -> None:
        writes.append(isinstance(index, int))
        return honest_scatter(gpu, value, raw, index, target)

    monkeypatch.setattr(tensors, "gather", gather)
    monkeypatch.setattr(tensors, "scatter", scatter)
    got, want = run_both(g, integer_inputs(g, 2))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    return reads, writes


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[2], GEOMETRIES[5], GEOMETRIES[7]], ids=str)
def test_channels_last_passes_read_and_write_packed_copies(
    monkeypatch: pytest.MonkeyPatch, op: str, geometry: tuple
) -> None:
    """NHWC everywhere: every read is a plain copy, and the output is written in its storage order where the
    conv has one group (a grouped fprop's or dgrad's GEMMs give (G, N*O, Kg), written through a map)."""
    g = graph(op, geometry, dict.fromkeys(("x", "w", "y", "dy", "dx", "dw"), "last"))
    _, x, w, *_ = geometry
    reads, writes = reads_and_writes(monkeypatch, g)
    assert reads == [True, True] and writes == [op == "conv_wgrad" or x[1] == w[1]]


@pytest.mark.parametrize("op", OPS)
def test_nchw_passes_read_packed_copies_and_write_through_maps(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """NCHW everywhere: the inputs are read as they are stored; the output is written in the GEMM's order
    (channel-major) through its strides."""
    g = graph(op, GEOMETRIES[2], dict.fromkeys(("x", "w", "y", "dy", "dx", "dw"), "first"))
    reads, writes = reads_and_writes(monkeypatch, g)
    assert reads == [True, True] and writes == [False]


def test_the_order_follows_the_tensor_each_pass_names() -> None:
    layouts = {"x": "last", "w": "first", "y": "first", "dy": "first", "dx": "last", "dw": "first"}
    registry = sigdnn.registry.DEFAULT_REGISTRY
    for op, rows in (("conv_fprop", False), ("conv_dgrad", True), ("conv_wgrad", True)):
        g = graph(op, GEOMETRIES[0], layouts)
        builder = registry.find(f"gpu_reference.{op}")
        node = g.node_by_name("conv")
        assert builder.rows(node, g) is rows
        want = {p: (0, 2, 3, 1) for p in node.op.inputs()} if rows else {}
        assert builder.input_orders(node, g) == want


def test_a_split_output_axis_needs_its_parts_to_fill_it() -> None:
    from sigdnn.plan_builders.gpu_reference.arrays import Array, Permuted

    value = Permuted(Array(None, np.zeros(12), (2, 3, 2), np.float64), (1, 0, 1))
    assert tensors.permuted_view(value, (3, 4), (4, 1)) == ((2, 3, 2), (2, 4, 1))
    with pytest.raises(ValueError, match=r"axis 1 of \(3, 5\) split into parts of 4 elements"):
        tensors.permuted_view(value, (3, 5), (5, 1))


def test_a_float64_pass_agrees_after_rounding_to_float32() -> None:
    g = graph("conv_fprop", GEOMETRIES[3], dict.fromkeys(("x", "w", "y"), "last"))
    for t in g.tensors.values():
        t.set_data_type("float64")
    got, want = run_both(g, random_inputs(g, 3))
    assert int(agreement_ulps(got["conv::y"], want["conv::y"]).max()) <= 1


@pytest.mark.parametrize("layout", ["last", "first"])
@pytest.mark.parametrize("op", OPS)
def test_a_second_run_uploads_no_map(monkeypatch: pytest.MonkeyPatch, op: str, layout: str) -> None:
    """The passes' window and channel maps are made when the plan is built and frozen, so the device keeps their
    uploads by identity, however large: a plan's second run sends none of them up (validation runs each plan many
    times; the stem's maps, 600,000 entries, went up on every run)."""
    from gpu_reference_emulation import gpu_reference_executor

    from sigdnn.plan_builders.gpu_reference import backend
    from sigdnn.plan_builders.gpu_reference.backend import Gpu

    uploads = []
    real = Gpu.upload
    monkeypatch.setattr(Gpu, "upload", lambda self, host: uploads.append(host.size) or real(self, host))
    monkeypatch.setattr(backend, "KEPT_UPLOAD_ELEMENTS", 4)  # every map "large": only identity keeps it
    g = graph(op, GEOMETRIES[0], dict.fromkeys(("x", "w", "y", "dy", "dx", "dw"), layout))
    ex = gpu_reference_executor()
    plan = ex.prepare(g)
    inputs = random_inputs(g, 0)
    first = ex.execute(plan, inputs)
    assert uploads
    uploads.clear()
    again = ex.execute(plan, inputs)
    assert uploads == []
    for name in first:
        np.testing.assert_array_equal(again[name], first[name])


@pytest.mark.parametrize(
    ("x", "w", "stride", "pre", "identity"),
    [
        ((2, 5, 4, 3), (7, 5, 1, 1), (1, 1), (0, 0), True),  # 1 x 1 over every pixel: the source itself
        ((2, 5, 4, 3), (7, 5, 1, 1), (2, 1), (0, 0), False),  # strided: every other row of pixels
        ((2, 5, 4, 3), (7, 5, 1, 1), (1, 1), (1, 0), False),  # padded: a row of padding first
        ((2, 5, 4, 3), (7, 5, 1, 2), (1, 1), (0, 0), False),  # two taps a position
        ((2, 1, 4, 3), (7, 1, 1, 1), (1, 1), (0, 0), True),  # one channel
        ((2, 4, 3, 3), (6, 2, 1, 1), (1, 1), (0, 0), True),  # two groups: still gathered, a matrix per group
    ],
)
def test_a_1x1_window_over_every_pixel_reads_the_source_as_its_matrix(x, w, stride, pre, identity) -> None:
    """Its im2col matrix is the channels-last source itself, (N * P, C): no gather, the same product."""
    window = windows.forward(x[2:], w[2:], pre, (0, 0), stride, (1, 1))
    rows = conv.Rows.of(x, conv.read_strides(x, True), window)
    assert rows.identity is identity
    geometry = ("case", x, w, stride, (1, 1), pre, (0, 0))
    for op in OPS:
        check(graph(op, geometry, dict.fromkeys(("x", "w", "y", "dy", "dx", "dw"), "last")))
