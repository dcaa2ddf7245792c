"""`sigdnn validate`: the per-step table, --engine, --fallback and --plot, with a planted wrong builder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from cli_helpers import cli

import sigdnn
from sigdnn.executor import executor as executor_module
from sigdnn.registry import NodePlan, PlanBuilder, Registry


class SkewedExp(NodePlan):
    """exp, then 64 float32 ulps too big where the element's index is odd: a kernel wrong on half its lanes."""

    def execute(self, buffers: Any, context: Any = None) -> None:
        y = np.exp(buffers["in_0"].astype(np.float64)).astype(np.float32)
        flat = y.reshape(-1)
        flat[1::2] += 64 * np.spacing(flat[1::2])
        buffers["out_0"][...] = y


class SkewedExpBuilder(PlanBuilder):
    name: ClassVar[str] = "plugin.skewed_exp"
    engine_id: ClassVar[int] = 30510
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    priority: ClassVar[int] = 10

    def serves(self, key: Any) -> bool:
        return key.trait("mode") == "exp"

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return SkewedExp()


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Executor the CLI makes sees the wrong exp builder before the reference."""
    registry = Registry()
    registry.register(SkewedExpBuilder())
    monkeypatch.setattr(executor_module, "DEFAULT_REGISTRY", registry)


def exp_graph(path: Path) -> Path:
    g = sigdnn.Graph("exp_then_add", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(6, 5))
    g.pointwise("add", g.pointwise("exp", x, name="e"), x, name="plus").set_output(True).set_name("y")
    path.write_bytes(g.serialize())
    return path


def test_the_table_names_the_failing_step_its_builder_ulps_and_worst_element(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: None
) -> None:
    code, out, _ = cli(capsys, "validate", exp_graph(tmp_path / "g.sdg"), "--backend", "reference")
    assert code == 1
    assert "graph 'exp_then_add' against the CPU reference: FAIL" in out
    header = next(line for line in out.splitlines() if "max ulp" in line)
    assert all(h in header for h in ("step", "builder", "tensor", "max rel", "mismatches", "verdict"))
    row = next(line for line in out.splitlines() if line.lstrip().startswith("e "))
    assert "plugin.skewed_exp" in row and "15/30" in row and row.rstrip().endswith("FAIL")
    assert any(line.startswith("e e::out_0: worst at (") and "tolerance atol" in line for line in out.splitlines())
    assert row.split()[5] == "64"  # max ulp
    plus = next(line for line in out.splitlines() if line.lstrip().startswith("plus "))
    assert plus.rstrip().endswith("PASS")  # the add is right for the inputs it got


def test_engine_pins_every_node_to_the_builder_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: None
) -> None:
    path = exp_graph(tmp_path / "g.sdg")
    code, out, _ = cli(capsys, "validate", path, "--backend", "reference", "--engine", "reference.pointwise")
    assert code == 0 and "plugin.skewed_exp" not in out and "FAIL" not in out


def test_fallback_needs_the_gpu_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "validate", exp_graph(tmp_path / "g.sdg"), "--backend", "reference", "--fallback")
    assert code == 2 and "--fallback needs --backend gpu" in err


def test_plot_writes_one_png_per_failing_step_and_none_for_passing_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: None
) -> None:
    pytest.importorskip("matplotlib")
    path = exp_graph(tmp_path / "g.sdg")
    plots = tmp_path / "plots"
    code, out, _ = cli(capsys, "validate", path, "--backend", "reference", "--seeds", "2", "--plot", plots)
    assert code == 1
    written = sorted(p.name for p in plots.iterdir())
    assert written == ["g.sdg_seed0_e_e_out_0.png", "g.sdg_seed1_e_e_out_0.png"]
    for name in written:
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote '{plots / name}'" in out
    clean = tmp_path / "clean"
    code, _, _ = cli(capsys, "validate", path, "--backend", "reference", "--engine", "1000", "--plot", clean)
    assert code == 0 and not clean.exists()  # nothing failed: no directory, no plot


def test_plot_without_matplotlib_says_how_to_install_it_before_validating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    ran: list[Any] = []
    monkeypatch.setattr(sigdnn, "validate", lambda *a, **k: ran.append(a))
    code, _, err = cli(capsys, "validate", exp_graph(tmp_path / "g.sdg"), "--backend", "reference", "--plot", tmp_path)
    assert code == 2 and "pip install 'sigdnn[plot]'" in err and not ran


def test_the_table_fits_120_columns_with_long_onnx_names_and_json_keeps_them_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: None
) -> None:
    long = "/encoder/layers.11/self_attention/out_projection/Exp_output_0"
    g = sigdnn.Graph("an_exported_model_with_a_long_name", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("/embeddings/patch_embedding/Flatten_output_0", dims=(600, 500))
    e = g.pointwise("exp", x, name="/encoder/layers.11/self_attention/out_projection/Exp").set_name(long)
    g.pointwise("add", e, x, name="/encoder/layers.11/self_attention/Add").set_output(True).set_name("last_hidden")
    path = tmp_path / ("model_" * 3 + ".sdg")
    path.write_bytes(g.serialize())
    code, out, _ = cli(capsys, "validate", path, "--backend", "reference")
    assert code == 1 and "FAIL" in out
    lines = out.splitlines()
    table = lines[1:]  # the title names the file, as long as its path
    assert max(len(line) for line in table) <= 120, "\n".join(line for line in table if len(line) > 120)
    row = next(line for line in table if "plugin.skewed_exp" in line)
    assert "/encoder/l…jection/Exp" in row and "150000/300000" in row  # cut in the middle, the numbers whole
    assert any(line.startswith(f"/encoder/layers.11/self_attention/out_projection/Exp {long}:") for line in table)
    code, out, _ = cli(capsys, "validate", path, "--backend", "reference", "--json")
    nodes = json.loads(out)["runs"][0]["nodes"]
    assert {n["node"] for n in nodes} >= {"/encoder/layers.11/self_attention/out_projection/Exp"}
    assert {n["name"] for n in nodes} >= {long} and all("tolerance" in n and "worst_index" in n for n in nodes)
