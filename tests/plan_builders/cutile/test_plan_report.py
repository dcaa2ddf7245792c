"""What a plan says about itself (``describe()``, ``as_dict()``: ``sigdnn inspect``), checked line by line.

The plan below has every kind of step: a node that fell back to the
reference and a fused region of two nodes; the expected text and data are
written out by hand from the graph (uids in declaration order, 8 x 16
float32 = 512 bytes for the one arena tensor).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.registry.engine_ids import IN_TREE

MATMUL, FUSION = IN_TREE["reference.matmul"], IN_TREE["cutile.fusion.pointwise"]


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    # matmul stands for a node the GPU builders do not take: the cuTile matmul is kept out (here and on a GPU)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "left out of this test")


def mlp() -> sigdnn.Graph:
    g = sigdnn.Graph("mlp", io_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", dims=(8, 16)), g.tensor("w", dims=(16, 16))
    act = g.pointwise("gelu_fwd", g.matmul(x, w, name="mm"), name="act")
    g.pointwise("relu_fwd", act, name="relu").set_output(True).set_name("y")
    return g


DECLINE = "node 'mm' Matmul(f32,f32->f32; f32): no plan: cutile.matmul (#2030): unavailable: left out of this test"


def test_describe_lists_tensors_steps_regions_and_memory() -> None:
    plan = emulated_executor(fallback="reference").prepare(mlp())
    want = [
        "graph 'mlp': 5 tensors, 3 nodes, backend gpu",
        "tensors:",
        "     1 x                            f32   dims=[8, 16] strides=[16, 1] io",
        "     2 w                            f32   dims=[16, 16] strides=[16, 1] io",
        "     3 mm::c                        f32   dims=[8, 16] strides=[16, 1] virtual",
        "     4 act::out_0                   f32   dims=[8, 16] strides=[16, 1] virtual",
        "     5 y                            f32   dims=[8, 16] strides=[16, 1] io",
        "execution order:",
        f"     0 mm                           {'Matmul(f32,f32->f32; f32)':<44} -> reference.matmul (fallback) (#{MATMUL})",
        f"     1 region(act..relu)            {'region of 2 nodes':<44} -> cutile.fusion.pointwise (#{FUSION})",
        "       - act                        Pointwise[gelu_fwd](f32->f32; f32)",
        "       - relu                       Pointwise[relu_fwd](f32->f32; f32)",
        "peak intermediate memory: 512 bytes (without reuse: 512); workspace: 0 bytes",
    ]
    assert plan.describe().split("\n") == want


def test_as_dict_is_the_same_plan_as_plain_data() -> None:
    plan = emulated_executor(fallback="reference").prepare(mlp())

    def tensor(uid: int, name: str, dims: list[int], kind: str) -> dict[str, Any]:
        return {"uid": uid, "name": name, "dtype": "float32", "dims": dims, "strides": [dims[1], 1], "kind": kind}

    assert plan.as_dict() == {
        "graph": "mlp",
        "backend": "gpu",
        "tensors": [
            tensor(1, "x", [8, 16], "io"),
            tensor(2, "w", [16, 16], "io"),
            tensor(3, "mm::c", [8, 16], "virtual"),
            tensor(4, "act::out_0", [8, 16], "virtual"),
            tensor(5, "y", [8, 16], "io"),
        ],
        "steps": [
            {
                "name": "mm",
                "nodes": ["mm"],
                "keys": ["Matmul(f32,f32->f32; f32)"],
                "builder": "reference.matmul (fallback)",
                "engine_id": MATMUL,
                "region": False,
                "declines": [DECLINE],
                "choice": None,  # no measured choice: autotune is off
            },
            {
                "name": "region(act..relu)",
                "nodes": ["act", "relu"],
                "keys": ["Pointwise[gelu_fwd](f32->f32; f32)", "Pointwise[relu_fwd](f32->f32; f32)"],
                "builder": "cutile.fusion.pointwise",
                "engine_id": FUSION,
                "region": True,
                "declines": [],
                "choice": None,
            },
        ],
        "memory": {
            "peak_intermediate_bytes": 512,
            "intermediate_bytes_without_reuse": 512,
            "workspace_bytes": 0,
            "intermediates_in_outputs": {},
        },
    }
    assert plan.peak_intermediate_bytes == 512
    assert [s.name for s in plan.regions] == ["region(act..relu)"]
    assert [(s.node.name, str(s.key)) for s in plan.steps] == [
        ("mm", "Matmul(f32,f32->f32; f32)"),
        ("act", "Pointwise[gelu_fwd](f32->f32; f32)"),
    ]


class ScratchPlan(NodePlan):
    def __init__(self, workspace_bytes: int) -> None:
        self.workspace_bytes = workspace_bytes

    def execute(self, buffers: Any, context: Any) -> None:
        assert context.workspace is not None and context.workspace.nbytes >= self.workspace_bytes
        buffers["out_0"][...] = -buffers["in_0"]


class ScratchNeg(PlanBuilder):
    """neg asking for 1000 bytes of workspace per character of the node's name: two nodes, two sizes."""

    name: ClassVar[str] = "plugin.scratch_neg"
    engine_id: ClassVar[int] = 31200
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    priority: ClassVar[int] = 10

    def serves(self, key: Any) -> bool:
        return key.trait("mode") == "neg"

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        return ScratchPlan(1000 * len(node.name))


def test_the_workspace_is_the_largest_any_step_asks_for() -> None:
    g = sigdnn.Graph("two", io_dtype="float32")
    t = g.pointwise("neg", g.tensor("x", (4,)), name="n")
    g.pointwise("neg", g.pointwise("exp", t, name="exp"), name="nnn").set_output(True).set_name("y")
    registry = Registry()
    registry.register(ScratchNeg())
    ex = sigdnn.Executor("reference", registry=registry, fusion=False)
    plan = ex.prepare(g)
    assert [s.plan.workspace_bytes for s in plan.steps] == [1000, 0, 3000]
    assert plan.workspace_bytes == 3000
    assert plan.as_dict()["memory"]["workspace_bytes"] == 3000
    assert plan.describe().endswith("workspace: 3000 bytes")
    x = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    np.testing.assert_array_equal(ex.execute(plan, {"x": x})["y"], -np.exp(-x.astype(np.float64)).astype(np.float32))


def test_a_plan_without_steps_asks_for_no_workspace() -> None:
    """A graph whose output is its input has no node, so no step: no workspace either (not a 1-byte one)."""
    g = sigdnn.Graph("passthrough", io_dtype="float32")
    g.tensor("x", (3,)).set_output(True)
    plan = sigdnn.Executor().prepare(g)
    assert plan.steps == () and plan.workspace_bytes == 0
    assert plan.as_dict()["memory"]["workspace_bytes"] == 0
