"""Examples: each script rebuilds its committed .sdg byte for byte, and it runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import sigdnn
from sigdnn.validation import random_inputs

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def load(script: Path) -> object:
    spec = importlib.util.spec_from_file_location(script.stem, script)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("script", EXAMPLES, ids=[s.stem for s in EXAMPLES])
def test_example_matches_its_committed_graph_and_runs(script: Path) -> None:
    graph = load(script).build()  # type: ignore[attr-defined]
    committed = script.with_suffix(".sdg").read_bytes()
    assert graph.serialize() == committed, f"{script.name}: rerun it to refresh {script.stem}.sdg"
    plan = sigdnn.Executor().prepare(committed)
    outputs = sigdnn.Executor().execute(plan, random_inputs(plan.graph, seed=0))
    assert outputs
    for name, array in outputs.items():
        assert np.isfinite(array.astype(np.float64)).all(), name


def test_conv_bias_relu_matches_a_direct_computation() -> None:
    torch = pytest.importorskip("torch")
    path = EXAMPLES[0].with_name("conv_bias_relu.sdg")
    graph = sigdnn.deserialize(path.read_bytes())
    inputs = random_inputs(graph, seed=3)
    z = sigdnn.Executor().run(graph, inputs)["z"]
    x, w, b = (torch.from_numpy(inputs[k].astype(np.float64)) for k in ("x", "w", "b"))
    y = torch.nn.functional.conv2d(x, w, padding=1).float()  # f32 intermediate, as the graph declares
    want = torch.relu((y.double() + b).float()).half().numpy()
    np.testing.assert_array_equal(z, want)
