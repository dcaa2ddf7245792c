"""--tf32 on the graph commands: the graph's float32 matmuls and convs compute at TF32's precision (float16), the
rest as they were; without it nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli

import sigdnn
from sigdnn.dtypes import DataType


def matmul_relu(path: Path) -> Path:
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    y = g.matmul(g.tensor("a", (4, 8)), g.tensor("b", (8, 3)), name="mm")
    g.pointwise("relu_fwd", y, name="relu").set_output(True)
    path.write_bytes(g.serialize())
    return path


@pytest.mark.parametrize("flag", [[], ["--tf32"]], ids=["without", "with"])
def test_import_writes_the_compute_dtypes_it_asks_for(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag) -> None:
    code, _, err = cli(capsys, "import", matmul_relu(tmp_path / "g.sdg"), "-o", tmp_path / "out.sdg", *flag)
    assert code == 0, err
    graph = sigdnn.load(tmp_path / "out.sdg")
    compute = {n.name: graph.compute_dtype_of(n) for n in graph.nodes}
    assert compute == {"mm": DataType.FLOAT16 if flag else DataType.FLOAT32, "relu": DataType.FLOAT32}


@pytest.mark.parametrize("command", ["inspect", "run", "validate"])
def test_the_graph_commands_plan_the_changed_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   command: str) -> None:  # fmt: skip
    extra = ["--backend", "reference"] + (["--json"] if command != "inspect" else [])
    code, out, err = cli(capsys, command, matmul_relu(tmp_path / "g.sdg"), "--tf32", *extra)
    assert code == 0, err
    if command == "inspect":
        assert "Matmul(f32,f32->f32; f16)" in out and "Pointwise[relu_fwd](f32->f32; f32)" in out
    if command == "validate":  # the matmul judged at float16's rtol (4 ulps of 2^-10 + the output's 2^-23)
        tolerance = {n["node"]: n["tolerance"] for n in json.loads(out)["runs"][0]["nodes"]}
        assert " rtol 0.00391 " in tolerance["mm"] and " rtol 5.96e-07" in tolerance["relu"]
