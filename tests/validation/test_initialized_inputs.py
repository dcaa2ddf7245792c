"""sigdnn.validation.initialized_inputs: weights at N(0, 1 / fan-in), norm scales near 1, every other input validation's own draw,
and the point of it: activations through a wide layer stay near unit scale where validation's draw grows them."""

from __future__ import annotations

import numpy as np

import sigdnn
from sigdnn.accuracy.inputs import fan_in, initialized_inputs, random_inputs
from sigdnn.models import llama_layer, resnet50_training


def test_weights_take_one_over_their_fan_in_as_variance() -> None:
    g = llama_layer(seq=8, dim=256, heads=2, hidden=1024, backward=True, dtype="float32")
    inputs = initialized_inputs(g)
    for name, fan in (("wq", 256), ("w_up", 256), ("w_down", 1024)):
        assert fan_in(g.tensor_by_name(name)) == fan
        assert abs(np.std(inputs[name]) * np.sqrt(fan) - 1.0) < 0.02, name
        assert abs(np.mean(inputs[name]) * np.sqrt(fan)) < 0.02, name


def test_a_conv_weight_counts_its_channels_and_window() -> None:
    g = resnet50_training(batch=1, image=32, classes=10, width=16, blocks=(1, 1, 1, 1), dtype="float32")
    conv = next(t for t in g.inputs if t.name.endswith(".w") and t.rank == 4 and t.dims[2] == 3)
    assert fan_in(conv) == conv.dims[1] * 9
    values = initialized_inputs(g)[conv.name]
    assert abs(np.std(values) * np.sqrt(fan_in(conv)) - 1.0) < 0.1


def test_norm_scales_sit_near_one_and_everything_else_is_validations_draw() -> None:
    g = llama_layer(seq=8, dim=256, heads=2, hidden=512, backward=True)
    ours, theirs = initialized_inputs(g, seed=3), random_inputs(g, seed=3)
    scale = ours["attn_norm.scale"].astype(np.float64)
    assert abs(scale.mean() - 1.0) < 0.03 and 0.07 < scale.std() < 0.13
    for name in ("x", "dy"):
        assert np.array_equal(ours[name], theirs[name])
        assert np.array_equal(initialized_inputs(g)[name], random_inputs(g)[name])  # both default to seed 0
    assert all(ours[t.name].dtype == g.dtype_of(t).numpy and ours[t.name].shape == t.dims for t in g.inputs)


def test_activations_stay_near_unit_scale_where_validations_draw_grows_them() -> None:
    """A layer at d 512 on the reference: the output y (x plus both residual branches) stays within a few units;
    with every input in [-2, 2) the branches grow it by two orders of magnitude."""
    g = llama_layer(seq=16, dim=512, heads=4, hidden=1024, dtype="float32")
    executor = sigdnn.Executor("reference")
    plan = executor.prepare(g)
    initialized = np.abs(executor.execute(plan, initialized_inputs(g))["y"]).max()
    drawn = np.abs(executor.execute(plan, random_inputs(g))["y"]).max()
    assert initialized < 20 and drawn > 100 * initialized


def test_torch_and_onnx_weight_names_count_too() -> None:
    """A linear layer's ``*.weight`` (torch's and ONNX's names, as importers keep them) is a weight: [in, out]."""
    g = sigdnn.Graph("fc", io_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", (4, 512)), g.tensor("fc.weight", (512, 64))
    g.matmul(x, w, name="fc").set_output(True)
    assert abs(np.std(initialized_inputs(g)["fc.weight"]) * np.sqrt(512) - 1.0) < 0.05
