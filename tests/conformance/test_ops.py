"""What every op must satisfy, checked for every op that exists (a new op is tested by existing).

Each op's own ``sample`` gives a small valid node; from it: wire round
trip, key stability, missing ports named, hostile attribute values refused
cleanly, a reference builder that runs it, and its section in docs/ops.md.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from minimal_op import Axpb, ReferenceAxpb

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import GraphError, SigdnnError
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.graph.ops.base import Op
from sigdnn.registry import DEFAULT_REGISTRY, Registry

_LOCAL = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
_LOCAL.register(ReferenceAxpb)
OPS = sorted(OP_CLASSES.values(), key=lambda c: c.kind)
OPS_MD = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def registry_for(op: type[Op]) -> Registry:
    return _LOCAL if op is Axpb else DEFAULT_REGISTRY


def sample(op: type[Op], dtype: str = "float32") -> tuple[sigdnn.Graph, sigdnn.Node]:
    g = sigdnn.Graph(f"{op.kind}_sample", io_dtype=dtype, compute_dtype="float32")
    node = op.sample(g)
    assert isinstance(node.op, op)
    return g, node


@pytest.fixture(params=OPS, ids=lambda c: c.kind)
def op(request: pytest.FixtureRequest) -> type[Op]:
    return request.param


def test_the_test_op_is_among_the_ops() -> None:
    assert Axpb in OPS and {"pointwise", "matmul", "conv_fprop"} <= set(OP_CLASSES)


def test_wire_round_trip_is_exact(op: type[Op]) -> None:
    g, _ = sample(op)
    data = g.serialize()
    back = sigdnn.deserialize(data)
    assert back == g
    assert back.serialize() == data == g.serialize()


def test_key_is_stable_hashable_and_names_the_op(op: type[Op]) -> None:
    g, node = sample(op)
    back = sigdnn.deserialize(g.serialize())
    key, again = sigdnn.key_for(node, g), sigdnn.key_for(back.nodes[-1], back)
    assert key == again and hash(key) == hash(again)
    assert key.op == op.kind
    title = "".join(part.capitalize() for part in op.kind.split("_"))
    assert str(key).startswith(title)
    assert {p for p, _ in (*key.inputs, *key.outputs)} == set(node.op.ports())


def test_every_required_input_port_is_named_when_missing(op: type[Op]) -> None:
    g, node = sample(op)
    inputs = {p: g.tensors[u] for p, u in node.op.inputs().items()}
    attributes = {
        f.name: getattr(node.op, f.name)
        for f in attrs.fields(op)
        if f.name not in op.input_ports and f.name not in op.output_ports
    }
    required = [p for p in op.input_ports if p not in op.optional_ports()]
    for port in required:
        partial = {p: t for p, t in inputs.items() if p != port and p.rpartition("_")[0] != port}  # x_0, x_1 of x
        with pytest.raises(GraphError, match=rf"needs input port\(s\) \['{port}'\]"):
            g.add_node(op, partial, attributes, name=f"without_{port}")


def _hostile_values(kind: str) -> list[Any]:
    return {
        "i64": [0, -1, 2**62, -(2**62)],
        "i64?": [0, -1, 2**62, -(2**62)],
        "f64": [math.nan, math.inf, -math.inf, 0.0, -1e308],
        "f64?": [math.nan, math.inf, -math.inf, 0.0, -1e308],
        "i64[]": [(), (2**62,) * 3, (-5,) * 8, (0,) * 2],
        "f64[]": [(), (math.nan,) * 3],
        "bool": [True, False],
    }.get(kind, [])


def test_hostile_attribute_values_end_in_a_sigdnn_error_or_a_valid_plan(op: type[Op]) -> None:
    """Any attribute value a buffer can carry: the checks refuse it cleanly or the plan runs."""
    for field, kind in op.wire_fields:
        for value in _hostile_values(kind):
            g, node = sample(op)
            g.nodes[-1] = sigdnn.Node(node.name, attrs.evolve(node.op, **{field: value}), node.compute_dtype)
            try:
                data = g.serialize()
            except (SigdnnError, ValueError, TypeError, OverflowError):
                continue  # the IR refuses to write it; the wire cannot carry it either
            small = sigdnn.Limits(max_total_bytes=1 << 26, max_work=1 << 26)
            try:
                ex = sigdnn.Executor(registry=registry_for(op), limits=small)
                plan = ex.prepare(data)
                ex.execute(plan, random_inputs(plan.graph, seed=1))
            except SigdnnError:
                continue


def test_a_reference_builder_runs_the_sample(op: type[Op]) -> None:
    for dtype in ("float32", "float16"):
        g, node = sample(op, dtype)
        registry = registry_for(op)
        key = sigdnn.key_for(node, g)
        assert [b for b in registry.serving(key, "cpu") if b.library.endswith("reference")], key
        ex = sigdnn.Executor(registry=registry)
        plan = ex.prepare(g)
        out = ex.execute(plan, random_inputs(g, seed=0))
        assert set(out) == {t.name for t in g.outputs}
        for name, array in out.items():
            assert array.shape == g.tensor_by_name(name).dims
            assert np.isfinite(array.astype(np.float64)).any(), name


def test_docs_ops_md_has_the_ops_section(op: type[Op]) -> None:
    """docs/ops.md, which the code cites, has a section of its own for the op (not a mention in passing)."""
    if op is Axpb:
        pytest.skip("the test op lives in this test folder, not in docs/ops.md")
    sections = re.findall(r"^## (\S+)\s*$", OPS_MD.read_text(), re.MULTILINE)
    assert op.kind in sections, f"docs/ops.md has no '## {op.kind}' section"


def test_no_file_cites_what_users_do_not_have() -> None:
    """The package, docs and tests cite docs/ops.md and docs/architecture.md, never the brief's files."""
    root = OPS_MD.parents[1]
    paths = [*root.glob("sigdnn/**/*.py"), *root.glob("docs/*.md"), *root.glob("tests/**/*.py"), root / "README.md"]
    brief = re.compile(r"shared/|\bOPS\.md|\bDESIGN\.md")
    cited = [
        f"{p.relative_to(root)}:{i}"
        for p in paths
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if brief.search(line) and p != Path(__file__)
    ]
    assert not cited, f"cite docs/ops.md or docs/architecture.md instead: {cited}"
