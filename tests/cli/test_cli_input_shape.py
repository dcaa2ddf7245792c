"""--input-shape NAME=D0,D1,... on run, inspect, validate and import (#32): an exported model with a symbolic batch
dim runs from the command line; bad values are errors naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import add_graph, cli

import sigdnn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402


def symbolic_model(path: Path) -> Path:
    """y = x @ w + 1 with x ['batch', 4] (as torch.onnx.export writes a dynamic batch), w an initializer."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tolist())
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "one"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w, one],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_without_it_the_error_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "inspect", symbolic_model(tmp_path / "m.onnx"))
    assert code == 2 and "dim 0 is symbolic ('batch')" in err and "--input-shape x=D0,D1,..." in err


@pytest.mark.parametrize("command", ["run", "inspect", "validate", "import"])
def test_every_graph_command_takes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    model = symbolic_model(tmp_path / "m.onnx")
    extra = {"run": ["--json"], "inspect": ["--json"], "validate": ["--backend", "reference"]}.get(command, [])
    if command == "import":
        extra = ["-o", str(tmp_path / "m.sdg")]
    code, out, err = cli(capsys, command, model, "--input-shape", "x=5,4", *extra)
    assert code == 0, err
    if command == "import":
        graph = sigdnn.load(tmp_path / "m.sdg")
        assert graph.tensor_by_name("x").dims == (5, 4)
    elif command == "run":
        assert json.loads(out)["outputs"][0]["shape"] == [5, 3]


def test_the_run_agrees_with_onnxruntime_at_the_given_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = symbolic_model(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    out = tmp_path / "y.npz"
    code, _, err = cli(capsys, "run", model, "--input-shape", "x=7,4", "--inputs", tmp_path / "x.npz", "--out", out)
    assert code == 0, err
    theirs = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(out)["y"], theirs, rtol=4 * np.finfo(np.float32).eps, atol=1e-6)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("x=2.5,4", "dim '2.5' is not a whole number"),
        ("x=ab", "dim 'ab' is not a whole number"),
        ("x=0,4", "dim '0' is not a whole number"),
        ("x=-1,4", "dim '-1' is not a whole number"),
        ("x=", "dim '' is not a whole number"),
        ("=2,4", "is not NAME=D0,D1,..."),
        ("2,4", "is not NAME=D0,D1,..."),
    ],
)
def test_bad_values_are_refused_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, why: str
) -> None:
    code, _, err = cli(capsys, "run", symbolic_model(tmp_path / "m.onnx"), "--input-shape", value)
    assert code == 2 and "argument --input-shape" in err and why in err and err.count("\n") == 1


def test_a_name_no_input_has_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", symbolic_model(tmp_path / "m.onnx"), "--input-shape", "X=5,4")
    assert code == 2 and "--input-shape" in err and "['X'] name no graph input (its inputs: x)" in err


def test_a_name_given_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = symbolic_model(tmp_path / "m.onnx")
    code, _, err = cli(capsys, "run", model, "--input-shape", "x=5,4", "--input-shape", "x=6,4")
    assert code == 2 and "--input-shape names 'x' twice" in err


def test_a_graph_of_fixed_dims_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", add_graph(tmp_path / "g.sdg"), "--input-shape", "a=2,3")
    assert code == 2 and "--input-shape: input shapes fix an ONNX model's symbolic dims" in err and "g.sdg" in err
