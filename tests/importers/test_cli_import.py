"""`sigdnn import` and `sigdnn run / inspect` on foreign formats, in process."""

from __future__ import annotations

import numpy as np
import pytest
from cudnn_json_writer import graph_json, node
from hipdnn_writer import graph_buffer

import sigdnn
from sigdnn.cli import main


def conv_graph() -> tuple[sigdnn.Graph, int]:
    g = sigdnn.Graph("conv", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", (1, 2, 5, 5), uid=1), g.tensor("w", (3, 2, 3, 3), uid=2)
    y = g.conv_fprop(x, w, name="conv").set_output(True).set_name("y")
    return g, y.uid


def files(tmp_path) -> dict[str, object]:
    g, y = conv_graph()
    json_path = tmp_path / "conv.json"
    json_path.write_bytes(
        graph_json(
            g,
            [
                node(
                    "CONV_FPROP",
                    "conv",
                    {"X": 1, "W": 2},
                    {"Y": y},
                    pre_padding=[0, 0],
                    post_padding=[0, 0],
                    stride=[1, 1],
                    dilation=[1, 1],
                )
            ],
        )
    )
    hip_path = tmp_path / "conv.hipdnn"
    hip_path.write_bytes(
        graph_buffer(g, [("conv", None, "ConvolutionFwd", {0: ("long", 1), 1: ("long", 2), 2: ("long", y)})])
    )
    return {"graph": g, "json": json_path, "hipdnn": hip_path}


@pytest.mark.parametrize("kind", ["json", "hipdnn"])
def test_import_writes_a_sdg_equal_to_the_source(tmp_path, kind: str, capsys) -> None:
    f = files(tmp_path)
    out = tmp_path / "out.sdg"
    assert main(["import", str(f[kind]), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert sigdnn.load(out) == f["graph"]


@pytest.mark.parametrize("kind", ["json", "hipdnn"])
def test_run_and_inspect_take_the_foreign_file_directly(tmp_path, kind: str, capsys) -> None:
    f = files(tmp_path)
    assert main(["run", str(f[kind]), "--out", str(tmp_path / "y.npz")]) == 0
    assert np.load(tmp_path / "y.npz")["y"].shape == (1, 3, 3, 3)
    assert main(["inspect", str(f[kind])]) == 0
    assert "conv_fprop" in capsys.readouterr().out


def test_onnx_model_runs_and_imports_from_the_command_line(tmp_path, capsys) -> None:
    pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")
    from onnx_models import export

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    path = tmp_path / "m.onnx"
    path.write_bytes(export(model, torch.zeros(1, 3, 6, 6)))
    assert main(["import", str(path), "-o", str(tmp_path / "m.sdg")]) == 0
    graph = sigdnn.load(tmp_path / "m.sdg")
    assert [t.name for t in graph.inputs] == ["x"]
    assert main(["run", str(path)]) == 0
    assert main(["validate", str(path), "--backend", "reference"]) == 0
    capsys.readouterr()


def test_an_unimportable_file_is_one_error_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"json_version": "2.0", "nodes": [{"tag": "RNG", "name": "r"}]}')
    assert main(["import", str(bad), "-o", str(tmp_path / "o.sdg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RNG (1 node, first 'r')" in err
    assert not (tmp_path / "o.sdg").exists()
