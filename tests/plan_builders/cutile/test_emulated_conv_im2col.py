"""``cutile.conv_fprop_im2col`` through the emulator: A gathered once into the workspace, then the GEMM kernel.

Its workspace layout, precision, bound on A, declines (what it cannot run,
with the reason: ``cutile.conv_fprop_gemm`` runs it) and rank. The
bit-exact and validation cases over the ungrouped cases of
tests/conv_gemm_cases.py and the 1x1 cases are in
test_emulated_gemm_convs.py.
"""

from __future__ import annotations

import pytest
from conv_1x1_cases import im2col_cases
from conv_grouped_cases import graph
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import conv_im2col, pointwise
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.plan_builders.cutile.conv_im2col import CutileConvIm2colBuilder
from sigdnn.plan_builders.cutile.matmul_codegen import MatmulConfig

BUILDER = "cutile.conv_fprop_im2col"
CASES = im2col_cases()


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (MatmulConfig(16, 32, 16, 2),))  # 16-bit: partial tiles everywhere


def test_a_and_split_k_partials_share_the_workspace_without_overlap() -> None:
    """A (49 x 603 float32, rounded up to 256 bytes) first, the split GEMM's partials after it."""
    case = next(c for c in CASES if c.name == "split_k_nchw_f32")
    step = emulated_executor(engine=BUILDER).prepare(graph(case)).steps[0].plan
    a_bytes = -(-49 * 603 * 4 // 256) * 256
    splits = step.gemm.config.split_k
    assert splits > 1 and step.workspace_bytes == a_bytes + splits * 49 * 40 * 4
    assert step.grid == (1, -(-603 // 32), 1)  # one block a (64 pixels, 32 indices) tile of A


def decline_graph(groups: int = 1, w_layout: str = "NCHW", dims=(2, 8, 6, 6)) -> tuple[sigdnn.Graph, sigdnn.Node]:
    g = sigdnn.Graph("decline", io_dtype="float32")
    x = g.tensor("x", dims)
    w = g.tensor("w", (4, dims[1] // groups, 3, 3), layout=w_layout)
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True)
    return g, g.nodes[-1]


def test_declines_groups_an_undense_filter_and_a_past_its_bound(monkeypatch) -> None:
    builder = CutileConvIm2colBuilder()
    g, node = decline_graph(groups=2)
    with pytest.raises(NotSupported, match=r"node 'conv': 2 groups; cutile\.conv_fprop_im2col runs ungrouped"):
        builder.check(node, g)
    g, node = decline_graph(w_layout="NHWC")
    with pytest.raises(NotSupported, match=r"filter 'w' strides \[72, 1, 24, 8\] are not dense in x's taps-fastest"):
        builder.check(node, g)
    g, node = decline_graph()
    builder.check(node, g)  # A: 72 pixels x 72 indices x 4 bytes
    monkeypatch.setattr(conv_im2col, "GRID_Y", 2)
    with pytest.raises(NotSupported, match="72 reduction indices need 3 im2col column tiles; a grid's second dim "):
        builder.check(node, g)
    monkeypatch.setattr(conv_im2col, "GRID_Y", 3)
    builder.check(node, g)
    monkeypatch.setattr(conv_im2col, "MAX_A_BYTES", 72 * 72 * 4 - 1)
    with pytest.raises(NotSupported, match="A of 72 x 72 is past the im2col bound"):
        builder.check(node, g)


def test_the_gemm_takes_matmul_s_precision_rules() -> None:
    bf16 = next(c for c in CASES if c.name == "stem_7x7_s2_nhwc_bf16")
    f32 = next(c for c in CASES if c.name == "nchw_f32_3x3")
    builder = CutileConvIm2colBuilder()
    assert builder.ops == ("conv_fprop",)
    g = graph(f32)
    assert builder.plan(g.nodes[0], g)[0].mma == "float32"
    sigdnn.allow_tf32(g)
    assert builder.plan(g.nodes[0], g)[0].mma == "tf32"
    g = graph(bf16)
    assert builder.plan(g.nodes[0], g)[0].mma == "native"


def test_declines_a_negative_stride() -> None:
    g, node = decline_graph()
    x = g.tensors[node.op.x]
    x.set_stride((x.strides[0], x.strides[1], x.strides[2], -1))
    with pytest.raises(NotSupported, match="node 'conv': tensor 'x' has negative strides"):
        CutileConvIm2colBuilder().check(node, g)


def test_a_is_bounded_at_1_gib() -> None:
    """A 1x1 stride-2 conv of 64 channels: 2048 x 2048 output pixels make A exactly 1 GiB of float32."""
    for out_w, accepted in ((2048, True), (2049, False)):
        g = sigdnn.Graph("big", io_dtype="float32")
        x = g.tensor("x", (1, 64, 4096, 2 * out_w))
        g.conv_fprop(x, g.tensor("w", (8, 64, 1, 1)), stride=(2, 2), name="conv").set_output(True)
        if accepted:
            CutileConvIm2colBuilder().check(g.nodes[0], g)
        else:
            with pytest.raises(NotSupported, match=f"A of {2048 * out_w} x 64 is past the im2col bound of 1024 MiB"):
                CutileConvIm2colBuilder().check(g.nodes[0], g)


def test_the_video_models_3d_convs_take_im2col_at_batch_1() -> None:
    """r3d_18's and mc3_18's widest 3 x 3 x 3 convs (64 channels, 16 x 56 x 56, float32: A of 347 MB) go to this
    builder, not the implicit GEMM."""
    g = sigdnn.Graph("r3d_layer1", io_dtype="float32")
    x = g.tensor("x", (1, 64, 16, 56, 56))
    w = g.tensor("w", (64, 64, 3, 3, 3))
    g.conv_fprop(x, w, padding=(1, 1, 1), name="conv").set_output(True)
    CutileConvIm2colBuilder().check(g.nodes[0], g)


@pytest.mark.parametrize(
    ("dtypes", "compute", "why"),
    [(("float64", "float32", "float32"), "float32", "dtypes x float64, w float32, y float32"),
     (("float32", "float64", "float32"), "float32", "dtypes x float32, w float64, y float32"),
     (("float32", "float32", "float64"), "float32", "dtypes x float32, w float32, y float64"),
     (("float32",) * 3, "float64", "compute dtype float64")],
)  # fmt: skip
def test_declines_dtypes_the_gemm_cannot_take(dtypes, compute, why) -> None:
    g = sigdnn.Graph("dtypes", io_dtype="float32", compute_dtype=compute)
    x, w = g.tensor("x", (1, 4, 5, 5)).set_data_type(dtypes[0]), g.tensor("w", (4, 4, 3, 3)).set_data_type(dtypes[1])
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True).set_data_type(dtypes[2])
    with pytest.raises(NotSupported, match=f"node 'conv': {why}"):
        CutileConvIm2colBuilder().check(g.nodes[0], g)


def test_declines_an_output_whose_pixels_do_not_flatten_a_huge_stride_and_a_node_not_a_conv(monkeypatch) -> None:
    builder = CutileConvIm2colBuilder()
    g, node = decline_graph()
    g.tensors[node.op.y].set_stride((8 * 6 * 8, 6 * 8, 8, 1))  # rows of y padded to 8: no one pixel dim
    with pytest.raises(NotSupported, match=r"node 'conv': tensor .* do not flatten into one pixel dim"):
        builder.check(node, g)
    g = sigdnn.Graph("stride", io_dtype="float32")
    g.conv_fprop(g.tensor("x", (1, 2, 5, 5)), g.tensor("w", (2, 2, 1, 1)), stride=(2**31, 1), name="conv")
    with pytest.raises(NotSupported, match=r"node 'conv': .*past int32"):
        builder.check(g.nodes[0], g)
    h = sigdnn.Graph("mm", io_dtype="float32")
    h.matmul(h.tensor("a", (4, 8)), h.tensor("b", (8, 3)), name="mm").set_output(True)
    with pytest.raises(NotSupported, match=r"node 'mm': cutile\.conv_fprop_im2col runs conv_fprop only"):
        builder.check(h.nodes[0], h)
    monkeypatch.setattr(pointwise, "unavailable_reason", lambda: "no cuTile here")
    assert builder.available() == "no cuTile here"


def test_it_ranks_between_the_1x1_gemm_and_the_implicit_gemm() -> None:
    from sigdnn.registry.ranking import rank
    from sigdnn.registry.registry import DEFAULT_REGISTRY

    names = [b.name for b in rank(DEFAULT_REGISTRY.builders(), None, None) if b.name.startswith("cutile.conv_fprop")]
    assert names.index("cutile.conv_fprop_1x1") < names.index(BUILDER) < names.index("cutile.conv_fprop_gemm")
