"""cuTile implicit-GEMM conv fprop through the emulator, against torch's float64 conv and the reference.

The cases of tests/conv_gemm_cases.py: small-integer inputs must give
torch's float64 conv rounded once to y's dtype bit for bit (every float32
sum of them is exact); normal inputs must stay within float32 summation's
bound of it and pass ``sigdnn.validate``. Planted bugs in the kernel text
fail both. tests/gpu/test_cutile_conv_gemm.py runs the same cases compiled
by cuTile.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conv_gemm_cases import CASES
from conv_grouped_cases import Case, exact_inputs, graph, rounded_oracle, within_float32_bound
from emulated import emulated_executor, make_available, planted, run_blocks_in_reverse
from onnx import TensorProto, helper

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.importers import onnx as onnx_import
from sigdnn.plan_builders.cutile import conv_gemm
from sigdnn.plan_builders.cutile.conv_gemm import CutileConvGemmBuilder
from sigdnn.registry.ranking import rank
from sigdnn.registry.registry import DEFAULT_REGISTRY
from sigdnn.signature_keys import key_for

BUILDER = "cutile.conv_fprop_gemm"


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def pinned() -> sigdnn.Executor:
    """The emulated GPU executor held to this builder (grouped cases would otherwise go to the direct one)."""
    return emulated_executor(engine=BUILDER)


def run(g: sigdnn.Graph, inputs: dict[str, np.ndarray], executor: sigdnn.Executor | None = None) -> np.ndarray:
    executor = executor or pinned()
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
    assert within_float32_bound(case, run(g, inputs), inputs["x"], inputs["w"]).all()


@pytest.mark.parametrize("case", CASES[:4], ids=[c.name for c in CASES[:4]])
def test_validation_against_the_reference_passes(case: Case) -> None:
    g = graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=pinned())
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize(("name", "split"), [("split_k_nchw_f32", 2), ("split_k_g2_nhwc_bf16", 5), ("nchw_f32_3x3", 1)])
def test_few_output_tiles_split_k_into_the_workspace(name: str, split: int) -> None:
    case = next(c for c in CASES if c.name == name)
    g = graph(case)
    launches, workspace = CutileConvGemmBuilder().launches(g.nodes[0], g)
    assert launches[0].constants[-2] == split and len(launches) == (2 if split > 1 else 1)
    if split > 1:
        pixels = case.dims[0] * case.dims[2] * case.dims[3]  # stride 1, "same" padding
        assert workspace == 4 * split * pixels * case.w_dims[0]  # groups x splits x pixels x K/G float32 sums
        assert launches[0].grid[2] == case.groups * split and launches[1].grid[2] == case.groups


@pytest.mark.parametrize(
    ("name", "tiles"),
    [("nchw_f32_3x3", True), ("stem_7x7_s2_nhwc_bf16", True), ("g2_c20_nchw", True), ("3d_ndhwc_f32", True),
     ("bf16_x_f32_w", True), ("g4_c3_nchw_stride2", False)],  # the last: NHWC w under NCHW x, not in x's j order
)  # fmt: skip
def test_a_filter_dense_in_the_j_order_is_read_by_tile_loads(name: str, tiles: bool) -> None:
    from conv_grouped_cases import CASES as GROUPED

    case = next(c for c in CASES + GROUPED if c.name == name)
    g = graph(case)
    (launch, *_), _ = CutileConvGemmBuilder().launches(g.nodes[0], g)
    assert launch.constants[-1] is tiles
    k, c_g, taps = case.w_dims[0], case.w_dims[1], int(np.prod(case.w_dims[2:]))
    if tiles:  # (groups, K/G, C/G x taps), row-major
        assert (launch.args[1].shape, launch.args[1].strides) == ((case.groups, k // case.groups, c_g * taps),
                                                                  (k // case.groups * c_g * taps, c_g * taps, 1))  # fmt: skip


def test_splits_fill_the_sms_only_where_the_blocks_cannot() -> None:
    assert conv_gemm.splits(66, 100) == 2  # exactly half of 132 SMs: split, 12 steps of 8 allow 12
    assert conv_gemm.splits(67, 1000) == 1  # past half
    assert conv_gemm.splits(10, 15) == 1  # under 16 K steps: one split would run fewer than 8
    assert conv_gemm.splits(10, 1000) == 14


def test_the_split_counts_every_block_of_the_grid() -> None:
    """196 pixels (4 tiles) x 128 channels (2 tiles of 64), 288 K steps: 8 blocks, 17 splits (not 33 or 132)."""
    g, node = node_of((1, 1024, 14, 14), (128, 1024, 3, 3))
    first, second = CutileConvGemmBuilder().launches(node, g)[0]
    assert first.grid == (4, 2, 17) and second.grid == (4, 2, 1) and first.constants[-2] == 17


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_dense_non_square_filter_is_tiled_and_a_strided_one_is_not(layout: str) -> None:
    g = sigdnn.Graph("w", io_dtype="float32")
    w = g.tensor("w", (5, 4, 2, 3), layout=layout)
    assert conv_gemm.filter_tiles(w, 1, layout == "NHWC") == ((1, 5, 24), (120, 24, 1))
    assert conv_gemm.filter_tiles(w, 1, layout != "NHWC") is None  # dense, but not in that j order
    w.set_stride(tuple(s * 2 for s in w.strides))
    assert conv_gemm.filter_tiles(w, 1, layout == "NHWC") is None


def test_a_hand_worked_conv() -> None:
    """x [1 2 3 4] (one channel), filters [1 1] and [1 -1]: neighbours' sums and differences."""
    case = Case("hand", (1, 1, 4), (2, 1, 2), "NCW", (0,), (0,), (1,), (1,))
    x = np.array([[[1, 2, 3, 4]]], np.float32)
    w = np.array([[[1, 1]], [[1, -1]]], np.float32)
    np.testing.assert_array_equal(run(graph(case), {"x": x, "w": w}), [[[3, 5, 7], [-1, -1, -1]]])


PLANTED = {
    "last_k_step_dropped": ("steps = ct.cdiv(reduction, TK)", "steps = reduction // TK"),
    "last_split_dropped": ("min(s * per + per, steps)", "min(s * per + per, steps - 1)"),
    "one_split_summed": ("acc = acc + ct.reshape(part, (TM, TN))", "acc = ct.reshape(part, (TM, TN))"),
    "splits_overlap": ("range(s * per, min(", "range(s * per - s, min("),
    "filter_tile_of_group_0": ("index=(g, ct.bid(1), kt), shape=(1, TN, TK)", "index=(0, ct.bid(1), kt), shape=(1, TN, TK)"),
    "filter_tile_not_transposed": ("wb = ct.transpose(ct.reshape(wb, (TN, TK)))", "wb = ct.reshape(wb, (TK, TN))"),
    "right_edge_read": ("(i_w < xw)", "(i_w <= xw)"),
    "taps_order_in_channels_last": ("t = j // c_per_group", "t = j // (kd * kh * kw)"),
    "group_offset_dropped": ("pixel_at = pixel_at + g * c_per_group * c_stride", "pixel_at = pixel_at"),
    "partial_channel_tile_written": ("ct.where(k_local < k_per_group, g * k_per_group + k_local, k_total)",
                                     "g * k_per_group + k_local"),
    "padding_not_masked": ("ct.gather(x, ct.where(inside, at, -1))", "ct.gather(x, at)"),
}  # fmt: skip
PLANT_CASES = {  # a case each bug shows on
    "last_k_step_dropped": "nchw_f32_3x3",  # 45 reduction indices: one full step and a partial one
    "right_edge_read": "nchw_f32_3x3",
    "taps_order_in_channels_last": "stem_7x7_s2_nhwc_bf16",
    "group_offset_dropped": "g2_c20_nchw",
    "partial_channel_tile_written": "g2_c20_nchw",  # 12 channels a group in a 16-wide tile: group 0 writes 12-15
    "padding_not_masked": "nchw_f32_3x3",
    "last_split_dropped": "split_k_nchw_f32",
    "one_split_summed": "split_k_g2_nhwc_bf16",
    "splits_overlap": "split_k_nchw_f32",
    "filter_tile_of_group_0": "g2_c20_nchw",
    "filter_tile_not_transposed": "nchw_f32_3x3",
}


@pytest.mark.parametrize("bug", PLANTED)
def test_a_planted_bug_fails_the_oracle_and_validation(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run_blocks_in_reverse(monkeypatch)
    old, new = PLANTED[bug]
    assert old in conv_gemm.kernel_source().text
    registry, name = planted(CutileConvGemmBuilder, lambda text: text.replace(old, new))
    case = next(c for c in CASES if c.name == PLANT_CASES[bug])
    g = graph(case)
    inputs = random_inputs(g, seed=5)
    executor = emulated_executor(registry=registry, engine=name)
    try:
        got = executor.run(g, inputs)["conv::y"]
    except IndexError:  # a read past x's span is itself a failure the emulator reports
        return
    assert not within_float32_bound(case, got, inputs["x"], inputs["w"]).all()
    assert not sigdnn.validate(g, inputs, executor=executor).passed


def node_of(
    x_dims, w_dims, layout="NCHW", dtype="float32", compute="float32", pad=1
) -> tuple[sigdnn.Graph, sigdnn.Node]:
    g = sigdnn.Graph("decline", io_dtype=dtype, compute_dtype=compute)
    x = g.tensor("x", x_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    spatial = len(x_dims) - 2
    g.conv_fprop(x, w, padding=(pad,) * spatial, name="conv").set_output(True)
    return g, g.nodes[-1]


def test_a_float64_compute_dtype_is_declined() -> None:
    """float32 sums are not float64 compute (a 16-bit compute dtype runs as TF32: test_emulated_conv_tf32.py)."""
    g, node = node_of((1, 4, 5, 5), (4, 4, 3, 3), compute="float64")
    with pytest.raises(NotSupported, match=r"node 'conv'.*compute dtype float64"):
        CutileConvGemmBuilder().check(node, g)


def test_tensors_past_int32_indices_are_declined_without_allocating() -> None:
    g, node = node_of((2**16, 2**6, 2**5, 2**5), (8, 2**6, 1, 1))  # x 2^32 elements
    with pytest.raises(NotSupported, match=r"tensor 'x'.*2\^31"):
        CutileConvGemmBuilder().check(node, g)


def launch_of(g: sigdnn.Graph, node: sigdnn.Node):  # type: ignore[no-untyped-def]
    (launch,), workspace = CutileConvGemmBuilder().launches(node, g)
    assert workspace == 0  # the tiles are gathered in the kernel: nothing is staged
    return launch


def test_tiles_are_powers_of_two_ct_mma_takes() -> None:
    """(TM, TN, TK): cuTile's tiles are powers of two, an MMA's sides at least 16 (the emulator takes any)."""
    for k in (1, 24, 200):
        g, node = node_of((1, 4, 5, 5), (k, 4, 3, 3))
        tm, tn, tk = launch_of(g, node).constants[-8:-5]
        assert all(t >= 16 and t & (t - 1) == 0 for t in (tm, tn, tk)), (tm, tn, tk)


def test_x_is_handed_over_as_exactly_its_span() -> None:
    """A flat view no longer than x's elements from the first to the last (a gapped view: its own span)."""
    g, node = node_of((2, 3, 4, 5), (6, 3, 3, 3))
    assert launch_of(g, node).args[0].shape == (120,)
    g.tensors[node.op.x].set_stride((200, 60, 12, 2))  # every other element of rows 12 wide
    assert launch_of(g, node).args[0].shape == (1 * 200 + 2 * 60 + 3 * 12 + 4 * 2 + 1,)


def test_the_mma_widens_unless_x_and_w_share_a_16_bit_dtype() -> None:
    g = sigdnn.Graph("w", io_dtype="float32")
    pairs = {("float16", "float16"): False, ("bfloat16", "bfloat16"): False, ("float32", "float32"): True,
             ("bfloat16", "float32"): True, ("float16", "bfloat16"): True}  # fmt: skip
    for (dx, dw), widened in pairs.items():
        x, w = g.tensor(f"x{dx}{dw}", (1, 1, 1, 1)), g.tensor(f"w{dx}{dw}", (1, 1, 1, 1))
        x.set_data_type(dx)
        w.set_data_type(dw)
        assert conv_gemm.widens(g, x, w) is widened, (dx, dw)


@pytest.mark.parametrize(
    ("x_dims", "w_dims", "accepted"),
    [
        ((1, 65535, 1, 1), (65535, 1, 1, 1), True),  # 65,535 groups: the grid's third dim is full
        ((1, 65536, 1, 1), (65536, 1, 1, 1), False),
        ((1, 1, 1, 1), (65535 * 64, 1, 1, 1), True),  # 65,535 tiles of 64 output channels
        ((1, 1, 1, 1), (65535 * 64 + 1, 1, 1, 1), False),
    ],
)
def test_grids_past_cudas_limits_are_declined(x_dims, w_dims, accepted: bool) -> None:
    g, node = node_of(x_dims, w_dims, pad=0)
    if accepted:
        CutileConvGemmBuilder().check(node, g)
    else:
        with pytest.raises(NotSupported, match=r"output channels a group in .* groups need a grid"):
            CutileConvGemmBuilder().check(node, g)


@pytest.mark.parametrize("stride", [2**31 - 1, 2**31])
def test_scalars_past_int32_are_declined(stride: int) -> None:
    """A stride of 2^31 over a one-pixel output: no tensor is large, the scalar alone is past int32."""
    g = sigdnn.Graph("big", io_dtype="float32", compute_dtype="float32")
    g.conv_fprop(g.tensor("x", (1, 1, 1, 1)), g.tensor("w", (1, 1, 1, 1)), stride=(1, stride), padding=(0, 0),
                 name="conv").set_output(True)  # fmt: skip
    if stride < 2**31:
        CutileConvGemmBuilder().check(g.nodes[-1], g)
    else:
        with pytest.raises(NotSupported, match="int32 scalars"):
            CutileConvGemmBuilder().check(g.nodes[-1], g)


def test_a_reduction_whose_last_tile_passes_int32_is_declined() -> None:
    """C x taps = 2^31 - 11 fits every tensor, but the last K step's indices run 32 past it."""
    c = 2**31 - 11
    g, node = node_of((1, c, 1, 1), (1, c, 1, 1), pad=0)
    with pytest.raises(NotSupported, match="int32 scalars"):
        CutileConvGemmBuilder().check(node, g)


def test_tiles_cover_the_groups_channels_between_16_and_64() -> None:
    assert [conv_gemm.tile_channels(k) for k in (1, 16, 17, 64, 65, 2048)] == [16, 16, 32, 64, 64, 64]


def test_it_ranks_below_the_cute_and_direct_conv_builders() -> None:
    """The GPU builders a bf16 NHWC grouped conv's key serves, in the registry's order: this one last."""
    g, node = node_of((2, 16, 9, 9), (16, 4, 3, 3), layout="NHWC", dtype="bfloat16")
    serving = [b for b in DEFAULT_REGISTRY.serving(key_for(node, g), "gpu") if b.library != "gpu_reference"]
    names = [b.name for b in rank(serving, node, g)]
    assert names.index(BUILDER) == len(names) - 1 and "cutile.conv_fprop_grouped" in names
    assert any(n.startswith("cute.") for n in names)


def resnet_block_onnx() -> bytes:
    """A float32 NCHW ONNX Conv + BatchNormalization + Relu, then a 1x1 Conv: how torchvision's ResNet exports."""
    rng = np.random.default_rng(0)

    def init(name, *dims):  # type: ignore[no-untyped-def]
        return helper.make_tensor(name, TensorProto.FLOAT, dims, rng.standard_normal(int(np.prod(dims))))

    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 5, 8, 1, 1)]
    inits += [helper.make_tensor(n, TensorProto.FLOAT, (8,), v) for n, v in
              (("s", rng.uniform(0.5, 2, 8)), ("o", rng.standard_normal(8)), ("m", rng.standard_normal(8)),
               ("v", rng.uniform(0.5, 2, 8)))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "s", "o", "m", "v"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], kernel_shape=[1, 1]),
    ]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 5, 5])], inits)  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_onnx_float32_nchw_block_runs_strict_on_the_gpu_and_validates() -> None:
    data = resnet_block_onnx()
    onnx.checker.check_model(onnx.load_from_string(data))
    g = onnx_import.load(data)
    executor = emulated_executor()  # strict: a node no GPU builder takes raises
    plan = executor.prepare(g)
    convs = [s.builder.name for s in plan.steps if s.node is not None and s.node.op.kind == "conv_fprop"]
    assert convs == ["cutile.conv_fprop_im2col", "cutile.conv_fprop_1x1"]  # GEMMs with tile loads, A gathered once
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)
    report = sigdnn.validate(g, {"x": x}, executor=executor)
    assert report.passed, report.table()
