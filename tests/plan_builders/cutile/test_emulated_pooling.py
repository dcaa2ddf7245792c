"""cuTile pooling and pooling_backward through the emulator, against the reference (``sigdnn.validate``).

Every mode over 1 to 3 spatial dims, channels first and last, odd sizes,
size-1 dims, padding, strides unlike the window, inputs laid out with gaps
(strided views), ties and NaN / -inf for the max's first-maximum rule; the
literal kernel text (``_window_kernels.py``) runs block by block in the
emulator. tests/gpu/test_cutile_pooling.py runs the same cases compiled by
cuTile. Planted bugs in the kernel text fail validation.
"""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest
from emulated import emulated_executor, make_available
from pooling_cases import CASES, MODES, Case, backward, forward, with_ties

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import ExecutionError, NotSupported
from sigdnn.plan_builders.cutile import pooling
from sigdnn.plan_builders.cutile.pooling import CutilePoolingBackwardBuilder, CutilePoolingBuilder
from sigdnn.plan_builders.cutile.steps import WORKSPACE


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_pooling_matches_the_reference(case: Case, mode: str, direction: str) -> None:
    graph = (forward if direction == "forward" else backward)(case, mode)
    seed = len(case.name) + len(mode)
    inputs = with_ties(graph, seed) if mode == "max" else random_inputs(graph, seed=seed)
    report = sigdnn.validate(graph, inputs, executor=emulated_executor())
    builder = "cutile.pooling" if direction == "forward" else "cutile.pooling_backward"
    assert set(report.builders.values()) == {builder}, report.builders
    assert report.passed, report.table()


def test_max_backward_sends_ties_to_the_first_real_maximum_and_nan_to_the_last_nan() -> None:
    """Hand-worked: one 1-D window of 4 over [pad, 2, 5, 5] and one over [nan, 1, nan, 1]."""
    case = Case("hand", (1, 1, 7), "NCW", (4,), (4,), (1,))
    g = backward(case, "max")
    x = np.array([[[2, 5, 5, np.nan, 1, np.nan, 1]]], np.float32)
    dy = np.array([[[10, 20]]], np.float32)
    got = emulated_executor().run(g, {"x": x, "dy": dy})["pool_bwd::dx"]
    np.testing.assert_array_equal(got, [[[0, 10, 0, 0, 0, 20, 0]]])


@pytest.mark.parametrize("stride", [pooling.LARGEST, pooling.LARGEST + 1, 2**62])
@pytest.mark.parametrize("builder", [CutilePoolingBuilder, CutilePoolingBackwardBuilder])
def test_a_stride_past_int32_is_declined_with_the_reason(builder, stride: int) -> None:
    """The buffer fuzzer's case 19,710,794: a stride of 2^62 over one output reached the kernel's int32 constants
    as a bare OverflowError; the builders decline one past their bound (the reference runs it)."""
    case = Case("huge", (2, 5, 1, 6), "NHWC", (1, 2), (stride, 2), (0, 0))
    graph = (forward if builder is CutilePoolingBuilder else backward)(case, "max")
    if stride == pooling.LARGEST:
        builder().check(graph.nodes[-1], graph)
        return
    with pytest.raises(NotSupported, match=f"stride or padding of {stride} is past the kernels' int32 scalars"):
        builder().check(graph.nodes[-1], graph)


class Planted(CutilePoolingBackwardBuilder):
    name = "planted.pooling_backward"
    engine_id = 30020
    library = "planted"
    plant = staticmethod(lambda text: text)

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        return [
            attrs.evolve(la, source=attrs.evolve(la.source, text=self.plant(la.source.text))) for la in launches
        ], nbytes


def validated_with(pattern: str, replacement: str, case: Case, mode: str) -> sigdnn.ValidationReport:
    """Validation of ``case``'s backward in ``mode`` run by the kernels with ``pattern`` replaced (a planted bug)."""
    registry = sigdnn.Registry(entry_point_group=None)
    planted = Planted()
    planted.plant = staticmethod(lambda text: re.sub(pattern, replacement, text))
    registry.register(planted)
    graph = backward(case, mode)
    inputs = with_ties(graph, 5) if mode == "max" else random_inputs(graph, seed=5)
    executor = emulated_executor(registry=registry, engine="planted.pooling_backward")
    return sigdnn.validate(graph, inputs, executor=executor)


EXPOSING = [
    c
    for c in CASES
    if c.name in ("2d_resnet_maxpool", "2d_nhwc_wide", "2d_gapped_rows", "1d_ncw", "2d_nhwc_narrow_output")
]


@pytest.mark.parametrize(
    "mode, bug",
    [
        ("max", (r"\(v > (best|acc)\)", r"(v >= \1)")),  # the last maximum instead of the first
        ("max", (r"\(e < kw\)", "(e < kw - 1)")),  # a window's last column never gets its gradient
        ("average_count_exclude_pad", (r"ct\.maximum\(o_w \* sw - pw, 0\)", "(o_w * sw - pw)")),  # padding counted
    ],
    ids=["last_max", "last_column", "count_padding"],
)
@pytest.mark.parametrize("case", EXPOSING, ids=[c.name for c in EXPOSING])  # phases, rows and flat, with padding
def test_a_planted_bug_fails_validation(mode: str, bug: tuple[str, str], case: Case) -> None:
    pattern, replacement = bug
    text = pooling.kernel_source("pool_forward").text
    functions = {part.split("(", 1)[0]: part for part in re.split(r"\n(?:@ct\.kernel\n)?def ", text)[1:]}
    paths = (("pool_forward", "pool_backward"), ("pool_forward_rows", "pool_backward_rows"),
             ("pool_forward_rows", "pool_backward_phases"))  # fmt: skip
    for path in paths:
        body = functions[path[0]] + functions[path[1]]
        called = "".join(f for name, f in functions.items() if f"{name}(" in body and name not in path)
        assert re.search(pattern, body + called), path  # the bug is planted in both paths (or a helper they call)
    assert not validated_with(pattern, replacement, case, mode).passed


def test_the_kernel_text_is_the_literal_file_below_its_marker() -> None:
    source = pooling.kernel_source("pool_forward")
    assert source.text.rstrip().endswith("kernel = pool_forward")
    assert "def pool_forward(" in source.text and "ct: Any = None" not in source.text
    assert CutilePoolingBuilder().ops == ("pooling",)


@pytest.mark.parametrize("dy_strides", [(160, 20, 4, 1), (160, 1, 32, 8)], ids=["nchw", "nhwc"])
def test_the_flat_argmax_is_laid_out_as_dy_is(dy_strides: tuple[int, ...]) -> None:
    """The flat backward's lanes walk dx in memory order and gather dy's neighbours: the argmax they gather beside
    them must be laid out as dy is (channels innermost for an NHWC dy beside an NCHW x), or each lane reads its
    own sector."""
    g = backward(Case("layout", (2, 8, 9, 7), "NCHW", (3, 3), (2, 2), (1, 1)), "max")
    node = g.nodes[0]
    g.tensors[node.op.dy].set_stride(dy_strides)
    launches, _ = CutilePoolingBackwardBuilder().launches(node, g)
    argmax = launches[0].args[1]  # what the argmax kernel writes
    assert "_rows" not in launches[0].source.name
    assert argmax.buffer == WORKSPACE and argmax.shape == (2, 8, 1, 5, 4)
    assert argmax.strides[:2] + argmax.strides[3:] == dy_strides  # (D, of size 1, has no place in memory)


def test_the_row_argmax_is_a_packed_row_per_output_pixel() -> None:
    g = backward(Case("layout", (2, 8, 9, 7), "NHWC", (3, 3), (2, 2), (1, 1)), "max")
    (argmax, *phases), nbytes = CutilePoolingBackwardBuilder().launches(g.nodes[0], g)
    written = argmax.args[1]
    assert written.buffer == WORKSPACE and written.dtype == "int32"
    assert written.shape == (2 * 5 * 4, 8) and written.strides == (8, 1)
    assert nbytes == 40 * 8 * 4  # (1,280 bytes: five whole 256-byte slices)
    for gradient in phases:  # the same memory as rows of windows: (n, h) rows of 4 windows along w
        runs = gradient.args[1]
        assert (runs.buffer, runs.offset, runs.dtype) == (WORKSPACE, written.offset, "int32")
        assert runs.shape == (2 * 5, 4, 8) and runs.strides == (32, 8, 1)


PHASED = [c for c in CASES if c.name in ("2d_resnet_maxpool", "2d_nhwc_long_rows", "2d_nhwc_uncovered_column")]


@pytest.mark.parametrize(
    "mode, bug",
    [
        ("max", (r"start = first - j_w", "start = first - j_w + 1")),  # each candidate's run one window late
        ("average_count_include_pad", (r"first = \(phase \+ pw\) // sw", "first = (phase + pw + 1) // sw")),
    ],
    ids=["run_late", "first_window"],
)
@pytest.mark.parametrize("case", PHASED, ids=[c.name for c in PHASED])
def test_a_bug_planted_in_the_phase_kernel(mode: str, bug: tuple[str, str], case: Case) -> None:
    """Bugs only the phase kernel can have (the run of windows one late, the first window of a phase): each fails
    validation."""
    pattern, replacement = bug
    assert re.search(pattern, pooling.kernel_source("pool_backward_phases").text)
    assert not validated_with(pattern, replacement, case, mode).passed


def test_a_run_starting_before_the_rows_first_window_is_never_sliced() -> None:
    """The first block of a phase whose first pixel's candidate windows start before ow's first (padding 1,
    stride 2) gathers those rows; sliced instead, cuTile's Array.slice would start at -1 (undefined on a GPU,
    refused by the emulator)."""
    registry = sigdnn.Registry(entry_point_group=None)
    planted = Planted()
    planted.plant = staticmethod(lambda text: text.replace("if (start >= 0) & (start", "if (start >= -1) & (start"))
    registry.register(planted)
    graph = backward(next(c for c in CASES if c.name == "2d_resnet_maxpool"), "max")
    executor = emulated_executor(registry=registry, engine="planted.pooling_backward")
    with pytest.raises(ExecutionError, match=r"Array.slice\(-1"):
        executor.run(graph, random_inputs(graph, seed=5))


def test_the_backward_takes_phases_where_each_pixels_windows_along_w_are_a_run() -> None:
    """Along w a dx pixel's windows are the ceil(kw / sw) before its last: a run of dy's windows for a run of
    one phase's pixels, unless ow has fewer windows than that (a narrow output), where the row kernel clamps, or
    a phase holds one pixel a row (a global average: ResNet-50's took 0.36 ms in seven phase launches on an H100)."""
    kernels = {}
    for case in CASES:
        if case.name in ("2d_resnet_maxpool", "2d_global", "2d_nhwc_narrow_output"):
            g = backward(case, "average_count_include_pad")
            kernels[case.name] = {
                la.source.name.split("_")[3] for la in CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0]
            }
    assert kernels == {"2d_resnet_maxpool": {"phases"}, "2d_global": {"rows"}, "2d_nhwc_narrow_output": {"rows"}}
    g = backward(Case("as_many", (1, 4, 3, 5), "NHWC", (1, 3), (1, 1), (0, 0)), "max")  # 3 candidates, ow 3
    assert "phases" in CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0][-1].source.name
    for width, kernel in ((7, "rows"), (14, "phases")):  # a stride of 7: one pixel a phase's row, or two
        g = backward(Case("strided", (1, 4, 7, width), "NHWC", (7, 7), (7, 7), (0, 0)), "average_count_include_pad")
        assert {la.source.name.split("_")[3] for la in CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0]} == {
            kernel
        }


def test_the_row_backwards_launch_by_hand() -> None:
    """x 1 x 70 x 3 x 2 NHWC, 3 x 3 windows of stride 1, padding 1: ow is 2, three windows could cover a pixel, so
    the row kernel: 6 pixels in one block of [8, 64] tiles, two channel blocks."""
    g = backward(Case("hand_rows", (1, 70, 3, 2), "NHWC", (3, 3), (1, 1), (1, 1)), "max")
    argmax, gradient = CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0]
    assert "pool_forward_rows" in argmax.source.name and argmax.constants[-3] == 3  # the ARGMAX mode
    assert "pool_backward_rows" in gradient.source.name and gradient.grid == (1, 2, 1)
    assert gradient.constants[:7] == (6, 1, 3, 2, 1, 3, 2)  # pixels, x's (D, H, W), y's
    assert gradient.constants[-6:] == (1, 3, 2, 0, 8, 64)  # candidates (clamped to y's extents), MAX, tile


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_collapsible_channels_innermost_takes_the_row_kernels(case: Case) -> None:
    """NHWC and kin whose pixels share one row stride run the row kernels, every other layout the flat ones;
    the backward of an average needs only dy and dx to be rows (it never reads x)."""
    row_layout = case.layout in ("NHWC", "NDHWC", "NWC") and case.dims[1] > 1
    for mode in ("max", "average_count_include_pad"):
        for build, builder in ((forward, CutilePoolingBuilder()), (backward, CutilePoolingBackwardBuilder())):
            g = build(case, mode)
            x_rows = row_layout and case.strides is None
            expected = x_rows or (row_layout and build is backward and mode != "max")
            names = [launch.source.name for launch in builder.launches(g.nodes[0], g)[0]]
            assert all(("_rows" in name or "_phases" in name) == expected for name in names), (mode, names)


def test_launch_grids_and_sizes_by_hand() -> None:
    """Hand-worked: x 2 x 70 x 5 x 6 NHWC, 3 x 3 windows, stride 2, padding 1, so y is 2 x 70 x 3 x 3. Tiles
    of 512 elements: [8 pixels, 64 channels]; two column blocks for 70 channels; 18 output pixels, 60 input
    pixels. The flat kernels (NCHW) take 256 elements a block."""
    case = Case("hand", (2, 70, 5, 6), "NHWC", (3, 3), (2, 2), (1, 1))
    g = forward(case, "max")
    (launch,) = CutilePoolingBuilder().launches(g.nodes[0], g)[0]
    assert launch.grid == (3, 2, 1)
    assert [(a.buffer, a.shape, a.strides) for a in launch.args] == [("x", (60, 70), (70, 1)), ("y", (18, 70), (70, 1))]
    assert launch.constants[:7] == (18, 1, 3, 3, 1, 5, 6)  # pixels, y's (D, H, W), x's (D, H, W)
    assert launch.constants[7:] == (1, 3, 3, 1, 2, 2, 0, 1, 1, 0, 8, 64)  # window, stride, padding, MAX, tile
    g = backward(case, "max")
    argmax, *phases = CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0]
    assert argmax.grid == (3, 2, 1) and argmax.constants[-3:] == (3, 8, 64)  # the forward's ARGMAX mode
    for phase, gradient in enumerate(phases):  # dx's even columns, then its odd ones: 3 pixels a row each
        assert gradient.grid == (10, 1, 2)  # (n, h) rows, blocks of 8 pixels, channel blocks
        dx = gradient.args[2]
        assert (dx.shape, dx.strides, dx.offset) == ((10, 3, 70), (420, 140, 1), 70 * phase)
        assert gradient.constants[:7] == (phase, 1, 5, 6, 1, 3, 3)  # phase, x's and y's (D, H, W)
        assert gradient.constants[7:] == (1, 3, 3, 1, 2, 2, 0, 1, 1, 1, 2, 2, 0, 8, 64)  # window, candidates, MAX
    assert len(phases) == 2
    g = backward(Case("flat", (2, 3, 5, 6), "NCHW", (3, 3), (2, 2), (1, 1)), "average_count_include_pad")
    (flat,) = CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0]
    assert flat.grid == (1, 1, 1) and flat.constants[0] == 180 and flat.constants[-2:] == (1, 256)


@pytest.mark.parametrize(
    ("channels", "tile"), [(1, (512, 1)), (5, (64, 8)), (8, (64, 8)), (64, (8, 64)), (70, (8, 64)), (2048, (8, 64))]
)
def test_channel_tiles(channels: int, tile: tuple[int, int]) -> None:
    assert pooling.channel_tiles(channels) == tile


def test_tensors_past_int32_indices_or_with_negative_strides_are_refused() -> None:
    g = sigdnn.Graph("big", io_dtype="bfloat16", compute_dtype="float32")
    huge = g.tensor("huge", (1, 2, 2**15, 2**15), layout="NHWC")  # 2^31 elements
    with pytest.raises(ValueError, match="2\\^31"):
        pooling.fits(huge)
    wide = g.tensor("wide", (1, 1, 2, 2), strides=(1, 1, 2**31, 1))  # 4 elements spanning past 2^31
    with pytest.raises(ValueError, match="2\\^31"):
        pooling.fits(wide)
    pooling.fits(g.tensor("edge", (1, 1, 1, pooling.LARGEST)))
    backwards = g.tensor("backwards", (1, 1, 2, 3), strides=(6, 6, 3, -1))
    with pytest.raises(ValueError, match="negative strides"):
        pooling.fits(backwards)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_flat_and_tiled_launches_ask_for_no_more_than_they_use(layout: str) -> None:
    """The forward needs no workspace; max pooling's backward one int32 per output (2 x 3 x 3 x 3 here, in 256-byte
    slices); the flat kernels' grids are one block per 256 elements along x only."""
    case = Case("ws", (2, 3, 5, 6), layout, (3, 3), (2, 2), (1, 1))
    g = forward(case, "max")
    launches, nbytes = CutilePoolingBuilder().launches(g.nodes[0], g)
    assert nbytes == 0
    g = backward(case, "max")
    argmax, *gradients = CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[0]
    assert CutilePoolingBackwardBuilder().launches(g.nodes[0], g)[1] == 256
    if layout == "NCHW":
        assert launches[0].grid == (1, 1, 1) and argmax.grid == (1, 1, 1) and gradients[0].grid == (1, 1, 1)


@pytest.mark.parametrize(
    ("dims", "strides", "view"),
    [
        ((2, 3, 4, 5), (60, 1, 15, 3), ((40, 3), (3, 1))),  # NHWC
        ((2, 3, 4, 5), (92, 1, 23, 4), None),  # a gap after each row of pixels: no single pixel stride
        ((2, 3, 4, 5), (61, 1, 15, 3), None),  # a gap after each image (an axis of two)
        ((2, 3, 4, 5), (80, 1, 20, 4), ((40, 3), (4, 1))),  # a gap after each pixel's channels
        ((1, 3, 1, 5), (999, 1, 777, 3), ((5, 3), (3, 1))),  # size-1 axes: any stride
        ((2, 3, 4, 5), (60, 20, 5, 1), None),  # NCHW
        ((2, 1, 4, 5), (20, 1, 5, 1), None),  # one channel
        ((2, 3, 4, 5), (40, 1, 10, 2), None),  # pixels overlapping each other's channels
        ((2, 3, 1, 1), (3, 1, 1, 1), ((2, 3), (3, 1))),  # only N left: its stride is the row's
        ((1, 4, 1, 1), (4, 1, 1, 1), ((1, 4), (4, 1))),  # a single pixel
        ((2, 3, 5), (15, 1, 3), ((10, 3), (3, 1))),  # NWC
        ((2, 3, 2, 4, 5), (120, 1, 60, 15, 3), ((80, 3), (3, 1))),  # NDHWC
    ],
)
def test_rows_views_only_collapsible_channels_innermost_tensors(dims, strides, view) -> None:
    g = sigdnn.Graph("rows", io_dtype="float32")
    found = pooling.rows("t", g.tensor("t", dims, strides=strides))
    assert (found if found is None else (found.shape, found.strides)) == view


def test_the_int32_bound_is_exact_and_zero_strides_pass() -> None:
    """The largest tensor taken spans 2^31 - 1 - 256 elements (a block's lanes past the end stay in int32)."""
    g = sigdnn.Graph("edges", io_dtype="bfloat16")
    pooling.fits(g.tensor("largest", (1, 1, 1, 2**31 - 1 - 256)))
    with pytest.raises(ValueError, match="2\\^31"):
        pooling.fits(g.tensor("past", (1, 1, 1, 2**31 - 256)))
    pooling.fits(g.tensor("broadcast", (1, 1, 2, 3), strides=(0, 0, 3, 1)))  # a zero stride is no negative one
    huge = sigdnn.Graph("huge", io_dtype="bfloat16", compute_dtype="float32")
    y = huge.pooling(huge.tensor("x", (1, 2, 2**15, 2**15), layout="NHWC"), "max", (2, 2), (2, 2), (0, 0), name="p")
    y.set_output(True)
    with pytest.raises(ValueError, match="2\\^31"):  # the builder checks before it launches (check declines)
        CutilePoolingBuilder().launches(huge.nodes[0], huge)


def test_the_backward_checks_its_tensors_before_it_launches() -> None:
    g = sigdnn.Graph("huge_bwd", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (1, 2, 2**15, 2**15), layout="NHWC")
    dy = g.tensor("dy", (1, 2, 2**14, 2**14), layout="NHWC")
    g.pooling_backward(dy, x, "max", (2, 2), (2, 2), (0, 0), name="pb").set_output(True)
    with pytest.raises(ValueError, match="2\\^31"):
        CutilePoolingBackwardBuilder().launches(g.nodes[0], g)
