"""Campaign recipes of the convolutions and norms: the graph a swept shape makes, checked against torch.

A conv case's shape is the forward convolution's [N, C, K, R, S_1, ..., S_n]; its dgrad and wgrad cases are the
gradients of that same forward, so each is checked against torch's autograd of the forward it names (float64,
on the CPU reference). Norms normalize x's last dim (batchnorm: dim 1). Shapes no graph can be made of are
skipped with the reason, as every recipe's are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sigdnn
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.recipes import GraphRecipe
from sigdnn.campaign.spec import parse_spec
from sigdnn.graph.limits import GPU_LIMITS

torch = pytest.importorskip("torch")
functional = torch.nn.functional

CONVS = [  # shape, attributes
    ((2, 4, 6, 3, 9, 8), (("stride", 2), ("padding", 1))),
    ((3, 6, 4, 2, 7), (("groups", 2), ("dilation", 2))),  # 1-D, grouped, dilated
    ((1, 3, 5, 1, 4, 4), ()),
]


def run(recipe: GraphRecipe, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Random inputs (float64, or float32 where the graph says: a norm's scale and bias) and the reference's y."""
    graph = recipe.build()
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.dims).astype(graph.dtype_of(t).numpy) for t in graph.inputs}
    return inputs, sigdnn.Executor("reference").run(graph, inputs)["y"]


def torch_conv(x: object, w: object, rank: int, attributes: dict[str, int]) -> object:
    conv = {1: functional.conv1d, 2: functional.conv2d}[rank]
    return conv(x, w, stride=attributes.get("stride", 1), padding=attributes.get("padding", 0),
                dilation=attributes.get("dilation", 1), groups=attributes.get("groups", 1))  # fmt: skip


@pytest.mark.parametrize(("shape", "attributes"), CONVS)
@pytest.mark.parametrize("op", ["conv_fprop", "conv_dgrad", "conv_wgrad"])
def test_conv_recipes_are_the_forward_convolution_and_its_gradients(
    op: str, shape: tuple[int, ...], attributes: tuple
) -> None:
    recipe = GraphRecipe(op, None, "float64", shape, "packed", attributes, compute_dtype="float64")
    inputs, got = run(recipe, 3)
    n, c, k, size, *spatial = shape
    groups, rank = dict(attributes).get("groups", 1), len(spatial)
    x = torch.tensor(inputs["x"] if "x" in inputs else np.zeros((n, c, *spatial)), requires_grad=True)
    w = torch.tensor(inputs["w"] if "w" in inputs else np.zeros((k, c // groups, *(size,) * rank)), requires_grad=True)
    y = torch_conv(x, w, rank, dict(attributes))
    if op == "conv_fprop":
        want = y.detach().numpy()
    else:
        y.backward(torch.tensor(inputs["dy"]))
        want = (x if op == "conv_dgrad" else w).grad.numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv_recipes_lay_out_every_operand_as_asked() -> None:
    graph = GraphRecipe("conv_wgrad", None, "bfloat16", (2, 8, 16, 3, 9, 9), "NHWC", (("stride", 2),)).build()
    assert [(t.name, t.dims, t.strides) for t in graph.inputs] == [
        ("dy", (2, 16, 4, 4), (256, 1, 64, 16)),
        ("x", (2, 8, 9, 9), (648, 1, 72, 8)),
    ]
    assert graph.tensor_by_name("y").dims == (16, 8, 3, 3) and graph.nodes[0].op.stride == (2, 2)
    assert graph.nodes[0].name == "conv"  # what a failing case's report names


def test_norm_recipes_normalize_the_last_dim_or_each_channel() -> None:
    eps = 1e-3
    for op, shape in (("layernorm", (3, 16)), ("rmsnorm", (2, 5, 12)), ("batchnorm", (4, 3, 5, 2))):
        recipe = GraphRecipe(op, None, "float64", shape, "packed", (("epsilon", eps),), compute_dtype="float64")
        inputs, got = run(recipe, 4)
        x, scale, bias = (inputs[name].astype(np.float64) for name in ("x", "scale", "bias"))
        axes = (0, *range(2, len(shape))) if op == "batchnorm" else (len(shape) - 1,)
        mean = 0.0 if op == "rmsnorm" else x.mean(axis=axes, keepdims=True)
        want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps) * scale + bias
        assert scale.shape == tuple(d if a in {1 if op == "batchnorm" else len(shape) - 1} else 1 for a, d in
                                    enumerate(shape))  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=op)


def test_inference_phase_norms_write_no_statistics() -> None:
    graph = GraphRecipe("layernorm", None, "float32", (4, 8), "packed", (("phase", "inference"),)).build()
    assert graph.nodes[0].op.phase == "inference" and [t.name for t in graph.outputs] == ["y"]
    assert graph.nodes[0].name == "norm"
    assert GraphRecipe("batchnorm", None, "float32", (4, 8), "packed").build().nodes[0].name == "norm"
    for op in ("conv_fprop", "conv_dgrad"):
        assert GraphRecipe(op, None, "float32", (1, 2, 3, 1, 4), "packed").build().nodes[0].name == "conv"


def test_shapes_no_conv_or_norm_can_be_made_of_are_skipped_with_the_reason() -> None:
    spec = parse_spec(
        '[[generate]]\nop = "conv_fprop"\nshapes = [[2, 4, 6, 3], [2, 4, 6, 3, 8], [2, 4, 6, 9, 8, 20], [2, 3, 6, 1, 8], '
        "[2, 4, 6, 8, 8]]\n"
        'attributes = { groups = [2] }\n[[generate]]\nop = "batchnorm"\nshapes = [[5], [2, 3]]\n',
        Path("/tmp"),
    )
    plan = generate_cases(spec)
    assert [c.recipe.shape for c in plan.cases] == [(2, 4, 6, 3, 8), (2, 4, 6, 8, 8), (2, 3)]  # an output of 1: made
    reasons = [why for _, why in plan.skipped]
    assert len(reasons) == 4
    assert "is not [N, C, K, R, S_1, ..., S_n]" in reasons[0]
    assert "a 9-wide filter leaves no output" in reasons[1]
    assert "2 groups do not divide C 3" in reasons[2]
    assert "has no batch dim" in reasons[3]


def test_the_model_scale_campaign_makes_every_case_it_names() -> None:
    """examples/campaigns/model_scale.toml (issue #31's full-size campaign): every table's shapes make graphs, none
    skipped, each within the GPU executor's limits."""
    path = Path(__file__).resolve().parents[2] / "examples" / "campaigns" / "model_scale.toml"
    plan = generate_cases(parse_spec(path.read_text(), path.parent), limits=GPU_LIMITS)
    assert plan.skipped == () and len(plan.cases) == 28
    stem = next(c for c in plan.cases if c.recipe.shape == (64, 3, 64, 7, 224, 224))
    assert sigdnn.deserialize(stem.graph).tensor_by_name("y").dims == (64, 64, 112, 112)
