"""cuTile grouped / depthwise conv fprop through the emulator, against torch's float64 conv and the reference.

The cases of tests/conv_grouped_cases.py (depthwise with multiplier 1 and 2,
G = 2 / 3 / 4 with C/G = 2 or 3, 1 to 3 spatial dims, both layouts, odd and
size-1 dims, asymmetric padding, stride 2, dilation 2, gapped x, more
channels than one tile): small-integer inputs must give torch's float64 conv
rounded once to y's dtype bit for bit (every float32 sum of them is exact);
normal inputs must stay within float32 summation's bound of it and pass
``sigdnn.validate``. Planted bugs in the kernel text fail both.
tests/gpu/test_cutile_conv_grouped.py runs the same cases compiled by cuTile.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conv_grouped_cases import CASES, Case, exact_inputs, graph, rounded_oracle, within_float32_bound
from emulated import emulated_executor, make_available, planted
from onnx import TensorProto, helper

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.importers import onnx as onnx_import
from sigdnn.plan_builders.cutile import conv_grouped
from sigdnn.plan_builders.cutile.conv_grouped import CutileConvGroupedBuilder
from sigdnn.registry.ranking import rank
from sigdnn.registry.registry import DEFAULT_REGISTRY
from sigdnn.signature_keys import key_for

BUILDER = "cutile.conv_fprop_grouped"


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def run(g: sigdnn.Graph, inputs: dict[str, np.ndarray], executor: sigdnn.Executor | None = None) -> np.ndarray:
    executor = executor or emulated_executor()
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == [BUILDER]
    return executor.execute(plan, inputs)["conv::y"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_small_integers_give_torchs_conv_rounded_once(case: Case) -> None:
    g = graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    got = run(g, inputs)
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_normal_inputs_stay_within_float32_summation_of_torchs_conv(case: Case) -> None:
    g = graph(case)
    inputs = random_inputs(g, seed=3 + len(case.name))
    got = run(g, inputs)
    assert within_float32_bound(case, got, inputs["x"], inputs["w"]).all()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_validation_against_the_reference_passes(case: Case) -> None:
    g = graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=emulated_executor())
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


def test_a_hand_worked_two_group_conv() -> None:
    """x's two channels [1 2 3] and [4 5 6], filters [1 1] and [1 -1], one per group: sums and differences."""
    case = Case("hand", (1, 2, 3), (2, 1, 2), "NCW", (0,), (0,), (1,), (1,))
    x = np.array([[[1, 2, 3], [4, 5, 6]]], np.float32)
    w = np.array([[[1, 1]], [[1, -1]]], np.float32)
    np.testing.assert_array_equal(run(graph(case), {"x": x, "w": w}), [[[3, 5], [-1, -1]]])


PLANTED = {
    "last_tap_dropped": ("for e in range(kw):", "for e in range(kw - 1):"),
    "right_edge_read": ("(i_w < xw)", "(i_w <= xw)"),
    "group_by_input_channels": ("real_k // k_per_group", "real_k // c_per_group"),
    "first_channel_of_group_only": ("(first_channel + c) * c_stride", "first_channel * c_stride"),
}
PLANT_CASES = {  # a case each bug shows on: any, right padding (the next row read), K/G != C/G, C/G > 1
    "last_tap_dropped": "depthwise_3x3_nhwc",
    "right_edge_read": "depthwise_x2_nchw_stride2",
    "group_by_input_channels": "g2_c3_dilation2",
    "first_channel_of_group_only": "g4_c3_nchw_stride2",
}


@pytest.mark.parametrize("bug", PLANTED)
def test_a_planted_bug_fails_the_oracle_and_validation(bug: str) -> None:
    old, new = PLANTED[bug]
    assert old in conv_grouped.kernel_source().text
    registry, name = planted(CutileConvGroupedBuilder, lambda text: text.replace(old, new))
    case = next(c for c in CASES if c.name == PLANT_CASES[bug])
    g = graph(case)
    inputs = random_inputs(g, seed=5)
    executor = emulated_executor(registry=registry, engine=name)
    got = executor.run(g, inputs)["conv::y"]
    assert not within_float32_bound(case, got, inputs["x"], inputs["w"]).all()
    assert not sigdnn.validate(g, inputs, executor=executor).passed


def conv_node(x_dims, w_dims, layout="NHWC", dtype="bfloat16", stride=1) -> tuple[sigdnn.Graph, sigdnn.Node]:
    g = sigdnn.Graph("decline", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", x_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    spatial = len(x_dims) - 2
    g.conv_fprop(x, w, padding=(0,) * spatial, stride=(stride,) * spatial, name="conv").set_output(True)
    return g, g.nodes[-1]


def decline_reason(g: sigdnn.Graph, node: sigdnn.Node) -> str:
    with pytest.raises(NotSupported) as e:
        CutileConvGroupedBuilder().check(node, g)
    return str(e.value)


def test_ungrouped_convs_are_declined_for_the_cute_builders() -> None:
    reason = decline_reason(*conv_node((1, 8, 5, 5), (8, 8, 3, 3)))
    assert "node 'conv'" in reason and "1 group" in reason and "CuTe" in reason


def test_float64_io_is_declined() -> None:
    reason = decline_reason(*conv_node((1, 4, 5, 5), (4, 1, 3, 3), dtype="float64"))
    assert "float64" in reason and "tensor 'x'" in reason


def test_tensors_past_int32_indices_are_declined_without_allocating() -> None:
    """The check reads dims only: 2^32-element tensors cost nothing here."""
    g, node = conv_node((1, 2, 2**16, 2**15), (2, 1, 1, 1), stride=2**8)  # x 2^32 elements, y 2^15
    assert "tensor 'x'" in decline_reason(g, node) and "2^31" in decline_reason(g, node)
    g, node = conv_node((2**16, 2, 2**7, 2**8), (2, 1, 1, 1))  # y as large as x
    assert "tensor 'conv::y'" in decline_reason(g, node)


def test_it_is_the_first_gpu_builder_whose_check_takes_a_grouped_conv() -> None:
    """The CuTe builders decline groups; the implicit GEMM takes them too, ranked after this one."""
    g, node = conv_node((2, 16, 9, 9), (16, 1, 3, 3))
    takers = []
    for builder in rank(DEFAULT_REGISTRY.serving(key_for(node, g), "gpu"), node, g):
        if builder.library == "gpu_reference":
            continue
        try:
            builder.check(node, g, None)
        except NotSupported as e:
            assert "group" in str(e)
            continue
        takers.append(builder.name)
    assert takers == [BUILDER, "cutile.conv_fprop_gemm"]


def mobilenet_block(channels: int = 16, size: int = 9) -> bytes:
    """An ONNX depthwise 3x3 stride-2 Conv with a bias, then HardSwish, as torchvision's MobileNetV3 exports it."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, (channels, 1, 3, 3), rng.standard_normal((channels, 9)).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, (channels,), rng.standard_normal(channels))
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], group=channels, kernel_shape=[3, 3], pads=[1] * 4,
                            strides=[2, 2])  # fmt: skip
    nodes = [conv, helper.make_node("HardSwish", ["c"], ["y"])]
    shape = [1, channels, size, size]
    out = [1, channels, (size + 1) // 2, (size + 1) // 2]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], [w, b])  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_onnx_depthwise_conv_runs_on_it_and_validates() -> None:
    data = mobilenet_block()
    onnx.checker.check_model(onnx.load_from_string(data))
    g = onnx_import.load(data)
    executor = emulated_executor()
    plan = executor.prepare(g)
    convs = [s.builder.name for s in plan.steps if s.node is not None and s.node.op.kind == "conv_fprop"]
    assert convs == [BUILDER]
    x = np.random.default_rng(1).standard_normal((1, 16, 9, 9)).astype(np.float32)
    report = sigdnn.validate(g, {"x": x}, executor=executor)
    assert report.passed, report.table()


def test_tiles_follow_ys_layout() -> None:
    """Channels innermost: up to 64 channels a tile; otherwise 4, the rest pixels (512 elements)."""
    nhwc = sigdnn.Graph("t").tensor("y", (2, 72, 5, 5), layout="NHWC")
    nchw = sigdnn.Graph("t").tensor("y", (2, 72, 5, 5), layout="NCHW")
    narrow = sigdnn.Graph("t").tensor("y", (2, 3, 5, 5), layout="NHWC")
    size_one = sigdnn.Graph("t").tensor("y", (2, 6, 5, 1), layout="NCHW")  # W = 1: C is not innermost among H, C
    assert conv_grouped.tile(nhwc) == (8, 64)
    assert conv_grouped.tile(nchw) == (128, 4)
    assert conv_grouped.tile(narrow) == (128, 4)
    assert conv_grouped.tile(size_one) == (128, 4)
    assert conv_grouped.channels_innermost(sigdnn.Graph("t").tensor("y", (1, 6, 1, 1), layout="NCHW"))


def test_the_offset_bound_is_each_axis_reach_times_its_stride() -> None:
    """Hand-worked: N 2, C 6, H 5 padded 1 + 0, W 7 padded 2 + 3 (NCHW strides 210, 35, 7, 1)."""
    g = sigdnn.Graph("bound", io_dtype="float32")
    x = g.tensor("x", (2, 6, 5, 7), layout="NCHW")
    w = g.tensor("w", (6, 1, 2, 3), layout="NCHW")
    g.conv_fprop(x, w, pre_padding=(1, 2), post_padding=(0, 3), name="conv")
    assert conv_grouped.offset_bound(x, g.nodes[-1].op) == 1 * 210 + 5 * 35 + (1 + 4 + 0) * 7 + (2 + 6 + 3) * 1


def strided(x_dims, x_strides=None, w_strides=None, y_strides=None, layout="NCHW") -> tuple:
    """A 1x1 depthwise conv node with the given strides set afterwards (the check reads them, nothing is allocated)."""
    g, node = conv_node(x_dims, (x_dims[1], 1, 1, 1), layout=layout)
    for port, strides in (("x", x_strides), ("w", w_strides), ("y", y_strides)):
        if strides is not None:
            g.tensors[getattr(node.op, port)].set_stride(strides)
    return g, node


def accepts(g: sigdnn.Graph, node: sigdnn.Node) -> bool:
    try:
        CutileConvGroupedBuilder().check(node, g)
    except NotSupported:
        return False
    return True


LARGEST = 2**31 - 1


def test_int32_bounds_are_exact() -> None:
    assert accepts(*strided((1, 2, 1, 1), x_strides=(2 * LARGEST, LARGEST, 1, 1)))  # offset bound LARGEST
    assert "tensor 'x'" in decline_reason(*strided((1, 2, 1, 1), x_strides=(0, LARGEST + 1, 1, 1)))
    assert accepts(*strided((1, 2, 1, 1), w_strides=(LARGEST - 1, 1, 1, 1)))  # span LARGEST
    assert "tensor 'w'" in decline_reason(*strided((1, 2, 1, 1), w_strides=(LARGEST, 1, 1, 1)))
    assert accepts(*strided((1, 2, 1, 1), y_strides=(1, LARGEST - 1, 1, 1)))
    assert "tensor 'conv::y'" in decline_reason(*strided((1, 2, 1, 1), y_strides=(1, LARGEST, 1, 1)))


def test_pixels_past_int32_with_a_tiles_tail_are_declined() -> None:
    """y's N stride 0 keeps its span small, so only the pixel count decides: 2 channels, tiles of 256 pixels."""
    n = LARGEST - 256
    assert accepts(*strided((n, 2, 1, 1), x_strides=(0, 1, 1, 1), y_strides=(0, 1, 1, 1)))
    reason = decline_reason(*strided((n + 1, 2, 1, 1), x_strides=(0, 1, 1, 1), y_strides=(0, 1, 1, 1)))
    assert "output pixels" in reason


@pytest.mark.parametrize("port", ["x", "w", "y"])
def test_negative_strides_are_declined(port: str) -> None:
    strides = {f"{port}_strides": (-2, 1, 1, 1)}
    assert "negative strides" in decline_reason(*strided((1, 2, 1, 1), **strides))


def test_channel_tiles_up_to_a_grids_limit_are_taken() -> None:
    """NCHW: tiles of 4 channels, so 4 x 65535 channels fill the grid's second dim and one more overflows it."""
    assert accepts(*strided((1, 4 * 65535, 2, 2)))
    assert "channel tiles" in decline_reason(*strided((1, 4 * 65535 + 1, 2, 2)))


def test_the_launch_of_a_hand_worked_conv() -> None:
    """x [2, 6, 5, 7] NHWC, 2 groups of 3 -> 2 channels, 3x3, padding (1, 0) + (0, 2), stride (2, 1), dilation (1, 2):
    y [2, 4, 2, 5]; 20 pixels in one tile of 128 x 4; sizes over (D, H, W), x's strides, no workspace."""
    g = sigdnn.Graph("hand", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (2, 6, 5, 7), layout="NHWC")
    w = g.tensor("w", (4, 3, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, stride=(2, 1), dilation=(1, 2), pre_padding=(1, 0), post_padding=(0, 2), name="conv")
    assert y.dims == (2, 4, 2, 5)
    (launch,), workspace = CutileConvGroupedBuilder().launches(g.nodes[-1], g)
    assert workspace == 0 and launch.grid == (1, 1, 1)
    assert [(a.buffer, a.shape, a.strides, a.offset) for a in launch.args] == [
        ("x", (420,), (1,), 0),  # the whole span of x: 2 * 6 * 5 * 7 elements
        ("w", (4, 3, 1, 3, 3), (27, 1, 1, 9, 3), 0),
        ("y", (2, 4, 1, 2, 5), (40, 1, 1, 20, 4), 0),
    ]
    assert launch.constants == (
        20, 1, 2, 5,  # pixels, od, oh, ow
        1, 5, 7,  # xd, xh, xw
        4, 2, 3,  # K, K/G, C/G
        210, 1, 1, 42, 6,  # x's strides over (N, C, D, H, W)
        1, 3, 3,  # taps
        1, 2, 1,  # stride
        0, 1, 0,  # pre-padding
        1, 1, 2,  # dilation
        128, 4,  # the tile
    )  # fmt: skip
    assert launch.source == conv_grouped.kernel_source()


def test_a_grid_covers_every_pixel_and_channel_tile() -> None:
    """NCHW y [3, 10, 9, 11]: 297 pixels in tiles of 128, 10 channels in tiles of 4."""
    g, node = conv_node((3, 10, 9, 11), (10, 1, 1, 1), layout="NCHW")
    (launch,), _ = CutileConvGroupedBuilder().launches(node, g)
    assert launch.grid == (3, 3, 1)


def test_size_one_axes_never_decide_the_tile() -> None:
    """A size-1 axis may carry any stride (here 0): channels stay innermost; a size-2 axis still counts."""
    for dims, strides in (((2, 6, 4, 1), (24, 1, 6, 0)), ((2, 6, 1, 4), (24, 1, 0, 6))):
        y = sigdnn.Graph("t").tensor("y", dims, layout="NHWC").set_stride(strides)
        assert conv_grouped.tile(y) == (64, 8)
    y = sigdnn.Graph("t").tensor("y", (1, 6, 1, 2), layout="NCHW")  # W (2 long, stride 1) is innermost
    assert conv_grouped.tile(y) == (128, 4)


def test_the_kernel_text_is_the_literal_file_below_its_marker() -> None:
    source = conv_grouped.kernel_source()
    assert source.text.rstrip().endswith("kernel = conv_grouped")
    assert "def conv_grouped(" in source.text and "ct: Any = None" not in source.text
    assert source.name.startswith("conv_grouped_")  # compiled kernels' cache files say what they are


def test_size_one_axes_may_carry_strides_past_int32() -> None:
    """N = 1 and H = 1 at stride 2^40 address nothing beyond index 0: taken, and right (small-integer inputs)."""
    case = Case("huge_unit_strides", (1, 4, 1, 6), (4, 2, 1, 3), "NCHW", (0, 1), (0, 1), (1, 1), (1, 1))
    g = graph(case)
    g.tensor_by_name("x").set_stride((2**40, 6, 2**40, 1))
    inputs = exact_inputs(g, seed=2)
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(run(g, inputs), want)
    (launch,), _ = CutileConvGroupedBuilder().launches(g.nodes[-1], g)
    assert launch.args[0].shape == (1 + 3 * 6 + 5,) and max(launch.constants) < 2**31


def test_attributes_past_int32_scalars_are_declined() -> None:
    """A stride or dilation that no output position multiplies (one output, a one-tap kernel) still goes in
    as an int32 launch scalar: up to 2^31 - 1 is taken."""
    g, node = conv_node((1, 2, 4, 4), (2, 1, 1, 1), stride=LARGEST)
    assert accepts(g, node) and g.tensors[node.op.y].dims == (1, 2, 1, 1)
    assert "int32 scalars" in decline_reason(*conv_node((1, 2, 4, 4), (2, 1, 1, 1), stride=LARGEST + 1))
    g = sigdnn.Graph("dilated", io_dtype="float32")
    x, w = g.tensor("x", (1, 2, 4, 4), layout="NHWC"), g.tensor("w", (2, 1, 1, 1), layout="NHWC")
    g.conv_fprop(x, w, padding=(0, 0), dilation=(1, 2**31), name="conv")
    assert "2147483648" in decline_reason(g, g.nodes[-1])
