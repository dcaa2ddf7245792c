"""``cutile.conv_fprop_1x1`` through the emulator: 1x1 convs as GEMMs on cutile.matmul's kernel.

Its views, precision and split, its declines (what is not a stride-1
unpadded ungrouped 1x1 conv, with the reason) and its rank; the bit-exact
and validation cases it shares with the im2col conv are in
test_emulated_gemm_convs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_1x1_cases import CASES, one_by_one
from conv_grouped_cases import exact_inputs, graph, rounded_oracle
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.plan_builders.cutile import pointwise
from sigdnn.plan_builders.cutile.conv_1x1 import CutileConv1x1Builder
from sigdnn.plan_builders.cutile.matmul_codegen import MatmulConfig
from sigdnn.signature_keys import key_for

BUILDER = "cutile.conv_fprop_1x1"


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (MatmulConfig(16, 32, 16, 2),))  # 16-bit: partial tiles everywhere


def run(g: sigdnn.Graph, inputs: dict[str, np.ndarray]) -> np.ndarray:
    executor = emulated_executor(engine=BUILDER)
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == [BUILDER]
    return executor.execute(plan, inputs)["conv::y"]


def test_the_views_are_the_tensors_own_memory() -> None:
    """NCHW: a batched GEMM of transposed loads (x and y column-major); NHWC: the batch folds into one 2-D GEMM;
    a batch-1 conv of few tiles splits K: float32's 128 x 128 x 32 default turns 64 x 128, one tile of 49 x 48,
    10 K steps split in 2 (>= 4 each) over the 3 emulated SMs."""
    specs = {}
    for case in CASES:
        g = graph(case)
        specs[case.name] = emulated_executor(engine=BUILDER).prepare(g).steps[0].plan.spec
    nchw, nhwc = specs["nchw_f32_batched"], specs["nhwc_bf16_folds"]
    assert nchw.a.transposed and nchw.a.batched and not nchw.b.batched and nchw.c.transposed
    assert not (nhwc.a.transposed or nhwc.a.batched or nhwc.c.transposed or nhwc.c.batched)
    assert nhwc.mma == "native" and nchw.mma == "float32" and specs["nchw_bf16_x_f32_w"].mma == "float32"
    assert specs["batch1_nchw_f32_split_k"].config.label == "64x128x32g8s2"
    assert specs["nchw_f32_x_bf16_w_rows_of_2"].mma == "float32"  # two dtypes widen, whichever is 16-bit


def test_a_16_bit_compute_dtype_runs_float32_as_tf32() -> None:
    g = graph(CASES[0])
    sigdnn.allow_tf32(g)
    assert emulated_executor(engine=BUILDER).prepare(g).steps[0].plan.spec.mma == "tf32"


def conv(w_dims=(4, 8, 1, 1), stride=(1, 1), pre=(0, 0), post=(0, 0), gap=False, dtypes=("float32",) * 3,
         compute="float32") -> tuple[sigdnn.Graph, sigdnn.Node]:  # fmt: skip
    g = sigdnn.Graph("decline", io_dtype="float32", compute_dtype=compute)
    x = g.tensor("x", (2, 8, 6, 6)).set_data_type(dtypes[0])
    if gap:  # every image row followed by 2 unused elements: the pixels do not flatten
        x.set_stride((8 * 6 * 8, 6 * 8, 8, 1))
    w = g.tensor("w", w_dims).set_data_type(dtypes[1])
    y = g.conv_fprop(x, w, stride=stride, pre_padding=pre, post_padding=post, name="conv").set_output(True)
    y.set_data_type(dtypes[2])
    return g, g.nodes[-1]


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [({"w_dims": (4, 8, 3, 3)}, r"filter \[4, 8, 3, 3\] for 8 channels"),
     ({"w_dims": (4, 8, 1, 3)}, r"filter \[4, 8, 1, 3\]"),
     ({"w_dims": (4, 8, 3, 1)}, r"filter \[4, 8, 3, 1\]"),
     ({"w_dims": (4, 4, 1, 1)}, r"filter \[4, 4, 1, 1\] for 8 channels"),  # 2 groups
     ({"stride": (1, 2)}, r"stride \[1, 2\]"),
     ({"pre": (0, 1)}, r"padding \[0, 1\] / \[0, 0\]"),
     ({"post": (1, 0)}, r"padding \[0, 0\] / \[1, 0\]"),
     ({"gap": True}, "do not flatten into one pixel dim"),
     ({"dtypes": ("float64", "float32", "float32")}, "dtypes x float64, w float32, y float32"),
     ({"dtypes": ("float32", "float64", "float32")}, "dtypes x float32, w float64, y float32"),
     ({"dtypes": ("float32", "float32", "float64")}, "dtypes x float32, w float32, y float64"),
     ({"compute": "float64"}, "compute dtype float64")],
)  # fmt: skip
def test_declines_what_is_not_a_plain_1x1_conv_with_the_reason(kwargs, why) -> None:
    g, node = conv(**kwargs)
    with pytest.raises(NotSupported, match=rf"node 'conv': .*{why}"):
        CutileConv1x1Builder().check(node, g)


def test_a_node_not_a_conv_is_declined_and_only_conv_keys_are_served(monkeypatch) -> None:
    g = sigdnn.Graph("mm", io_dtype="float32")
    g.matmul(g.tensor("a", (4, 8)), g.tensor("b", (8, 3)), name="mm").set_output(True)
    builder = CutileConv1x1Builder()
    with pytest.raises(NotSupported, match=r"node 'mm': cutile\.conv_fprop_1x1 runs conv_fprop only"):
        builder.check(g.nodes[0], g)
    assert not builder.serves(key_for(g.nodes[0], g))
    assert builder.ops == ("conv_fprop",)
    for dtypes, served in ((("float32",) * 3, True), (("bfloat16", "float32", "float16"), True),
                           (("float64", "float32", "float32"), False), (("float32", "float64", "float32"), False),
                           (("float32", "float32", "float64"), False)):  # fmt: skip
        h, node = conv(dtypes=dtypes)
        assert builder.serves(key_for(node, h)) == served, dtypes
    h, node = conv(compute="float64")
    assert not builder.serves(key_for(node, h))
    monkeypatch.setattr(pointwise, "unavailable_reason", lambda: "no cuTile here")
    assert builder.available() == "no cuTile here"


def test_a_size_one_spatial_dim_may_have_any_stride() -> None:
    """Its only index is 0: a stride of 999 addresses nothing (as a sliced view may leave it)."""
    case = one_by_one("h_of_one", (2, 8, 1, 6), 5, "NHWC")
    g = graph(case)
    g.tensor_by_name("x").set_stride((48, 1, 999, 8))
    inputs = exact_inputs(g, seed=1)
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(run(g, inputs).astype(np.float64), want.astype(np.float64))


def test_it_ranks_below_the_cute_convs_and_above_the_implicit_gemm() -> None:
    from sigdnn.registry.registry import DEFAULT_REGISTRY

    ranks = {b.name: -b.priority for b in DEFAULT_REGISTRY.builders() if "conv_fprop" in b.name}
    assert all(ranks[BUILDER] > r for name, r in ranks.items() if name.startswith("cute."))
    assert ranks[BUILDER] < ranks["cutile.conv_fprop_gemm"]
