"""Every example graph (examples/*.sdg) runs strict on the GPU backend, cuTile builders emulated, and validates.

What a user runs first must not fall back: each step has a GPU builder
(the CuTe ones are unavailable here, so the cuTile builders take every
node, the transformer block's mixed float32 x bf16 projections included),
and sigdnn.validate passes step by step and end to end against the CPU
reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from emulated import assert_fast_path_gives, emulated_executor, make_available

import sigdnn
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.validation import random_inputs

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.sdg"))


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)


def test_every_example_is_found() -> None:
    assert len(EXAMPLES) == 8


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_example_runs_strict_on_the_gpu_backend_and_validates(path: Path) -> None:
    graph = sigdnn.deserialize(path.read_bytes())
    executor = emulated_executor()
    plan = executor.prepare(graph)  # strict: NoPlanError names a node no GPU builder takes
    assert {s.builder.library for s in plan.steps} <= {"cutile", "executor"}, [s.builder.name for s in plan.steps]
    inputs, got = random_inputs(graph, seed=1), {}
    report = sigdnn.validate(graph, inputs, executor=executor, got=got)
    assert report.passed, report.table()
    assert_fast_path_gives(graph, inputs, got)
