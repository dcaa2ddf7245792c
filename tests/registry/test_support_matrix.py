"""The support matrix: read off the builders' ``serves``, without GPU libraries, and the README's copy is current."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from cli_helpers import cli

from sigdnn.errors import NotSupported
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.registry import Registry
from sigdnn.registry.contracts import NodePlan, PlanBuilder
from sigdnn.registry.support_matrix import DTYPES, REGENERATE, markdown_table, support_rows
from sigdnn.signature_keys import SignatureKey

README = Path(__file__).resolve().parents[2] / "README.md"
IN_TREE = sorted(k for k, c in OP_CLASSES.items() if c.__module__.startswith("sigdnn."))  # not the tests' own ops
BEGIN, END = "<!-- support-matrix:", "<!-- end support-matrix -->"


def readme_matrix() -> str:
    text = README.read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return block.split("\n", 1)[1]  # past the marker's own line


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, tuple[str, ...] | None]]:
    return dict(support_rows(kinds=IN_TREE))


def test_the_readme_copy_is_the_generated_matrix() -> None:
    assert readme_matrix() == markdown_table(kinds=IN_TREE), (
        f"README.md's support matrix is stale: regenerate it with {REGENERATE}"
    )


def test_a_row_per_op_and_a_cell_per_dtype(rows) -> None:
    assert list(rows) == IN_TREE and "softmax" in IN_TREE
    assert [op for op, _ in support_rows()] == sorted(OP_CLASSES)  # by default every defined op, plugins' too
    assert all(list(cells) == list(DTYPES) for cells in rows.values())


def test_cells_the_builders_scope_states(rows) -> None:
    """Hand-read from the builders' docstrings and docs/gpu.md, not from the matrix code."""
    assert rows["matmul"]["fp8_e4m3"] == ("reference", "cute")  # the CuTe GEMM takes fp8, cuTile's does not
    assert rows["matmul"]["bfloat16"] == ("reference", "cutile", "cute")
    assert rows["matmul"]["float32"] == ("reference", "cutile")  # cuTile: exact or TF32; CuTe: 16-bit and fp8
    assert rows["conv_fprop"]["float32"] == ("reference", "cutile")  # CuTe convs take bf16 / f16 only; cuTile any
    assert rows["conv_fprop"]["float16"] == ("reference", "cutile", "cute")
    assert rows["conv_dgrad"]["float32"] == ("reference", "cutile")  # cutile.conv_dgrad_gemm
    assert rows["conv_wgrad"]["bfloat16"] == ("reference", "cutile", "cute")
    assert rows["batchnorm"]["bfloat16"] == ("reference", "cutile", "cute")  # cute.batchnorm: training forward
    assert rows["batchnorm_backward"]["bfloat16"] == ("reference", "cutile")
    assert rows["softmax"]["float64"] == ("reference",)  # cuTile reads and writes 32- and 16-bit floats
    assert rows["pooling"]["float16"] == ("reference", "cutile")  # cutile.pooling: 32- and 16-bit floats
    assert rows["pooling"]["float64"] == ("reference",)


def test_sdpa_counts_a_builder_that_takes_it_only_without_its_optional_bias(rows) -> None:
    assert rows["sdpa"]["bfloat16"] == (
        "reference",
        "cutile",
        "cute",
    )  # the sample has a bias; neither GPU one takes it


def test_an_op_that_refuses_a_dtype_has_no_cell(rows) -> None:
    for op in ("softmax", "conv_fprop", "layernorm", "sdpa"):
        assert rows[op]["int32"] is None and rows[op]["bool"] is None
    assert rows["reshape"]["bool"] == ("reference",)


def test_the_reference_serves_every_cell_that_exists(rows) -> None:
    assert all(c and c[0] == "reference" for cells in rows.values() for c in cells.values() if c is not None)


class _HalfGemm(PlanBuilder):
    name = "plugin.half_gemm"
    engine_id = 30123
    library = "plugin"
    device = "gpu"
    ops: ClassVar[tuple[str, ...]] = ("matmul",)

    def available(self) -> str | None:
        return "never here"  # the matrix says what a builder is written for, available or not

    def serves(self, key: SignatureKey) -> bool:
        return key.op == "matmul" and str(key.dtype("a")) == "float16" and str(key.dtype("c")) == "float32"

    def check(self, node, graph, device) -> None:
        raise NotSupported("not here")

    def build(self, node, graph, context) -> NodePlan:
        raise AssertionError("never built")


def test_a_plugin_library_gets_its_cells_and_only_those() -> None:
    registry = Registry(packages=(), entry_point_group=None)
    registry.register(_HalfGemm)
    found = dict(support_rows(registry))
    assert found["matmul"]["float16"] == ("plugin",)  # its float32 output is one of the widened variants
    assert found["matmul"]["bfloat16"] == ()
    assert found["softmax"]["float16"] == () and found["softmax"]["int8"] is None
    table = markdown_table(registry)
    assert "| matmul | - | plugin | - |" in table
    assert "| softmax | - | - | - | - | - | - |  |  |  |  |  |" in table


def test_the_regenerate_hint_is_a_command_that_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    program, *args = REGENERATE.split(" (")[0].split()
    assert program == "sigdnn"
    code, out, _ = cli(capsys, *args)
    assert code == 0 and out == markdown_table()


def test_cli_prints_the_matrix_and_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "builders", "--matrix", "--json")
    rows = {r["op"]: r["dtypes"] for r in json.loads(out)}
    assert code == 0 and rows["matmul"]["fp8_e5m2"] == ["reference", "cute"] and rows["softmax"]["int8"] is None
