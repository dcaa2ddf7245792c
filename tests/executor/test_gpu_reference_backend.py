"""Executor("gpu-reference"): a whole graph on the GPU reference alone; the gpu backend never runs its builders.

On the CPU its kernels run through the cuTile emulator (host memory
presented as a GPU); without that stand-in, and without a GPU, the backend
says it cannot run, and every one of its builders is listed as unavailable
with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli
from gpu_reference_emulation import gpu_reference_executor, make_available, ulps

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import ExecutionError, NoPlanError
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.registry import DEFAULT_REGISTRY

sys.path.append(str(Path(__file__).resolve().parents[1] / "plan_builders" / "cutile"))
from emulated import emulated_executor
from emulated import make_available as make_cutile_available

LIBRARY = "gpu_reference"
SHIPPED = [k for k, c in OP_CLASSES.items() if c.__module__.startswith("sigdnn.")]  # not a test-registered op


def block() -> sigdnn.Graph:
    """conv + bias + relu, then layernorm and a matmul: several ops and a virtual tensor between each."""
    g = sigdnn.Graph("block", io_dtype="bfloat16", compute_dtype="float32")
    x, w, b = g.tensor("x", (2, 3, 6, 6), layout="NHWC"), g.tensor("w", (4, 3, 3, 3)), g.tensor("b", (1, 4, 1, 1))
    y = g.pointwise("relu_fwd", g.pointwise("add", g.conv_fprop(x, w, padding=(1, 1)), b))
    flat = g.reshape(y, (2, 4 * 36))
    s, t = g.tensor("s", (1, 144)), g.tensor("t", (1, 144))
    n, _, _ = g.layernorm("inference", flat, s, t, epsilon=1e-5)
    g.matmul(n, g.tensor("m", (144, 5))).set_output(True).set_name("z")
    return g


def test_a_whole_graph_runs_on_the_gpu_reference_and_matches_the_cpu_reference(monkeypatch) -> None:
    make_available(monkeypatch)
    g = block()
    inputs = random_inputs(g, 1)
    ex = gpu_reference_executor()
    plan = ex.prepare(g)
    assert {s.builder.library for s in plan.steps} == {LIBRARY}
    got = ex.execute(plan, inputs)["z"]
    cpu = sigdnn.Executor("reference")
    want = cpu.execute(cpu.prepare(g), inputs)["z"]
    assert int(ulps(got, want).max()) <= 1


def test_without_a_gpu_the_backend_says_it_cannot_run() -> None:
    with pytest.raises(ExecutionError, match="the gpu-reference backend cannot run here"):
        sigdnn.Executor("gpu-reference").prepare(block())


def test_its_builders_one_per_op_are_listed_unavailable_with_the_reason(capsys) -> None:
    ours = [b for b in DEFAULT_REGISTRY.builders() if b.library == LIBRARY]
    assert len(ours) == len(SHIPPED) and all(4000 <= b.engine_id < 5000 and b.device == "gpu" for b in ours)
    code, out, _ = cli(capsys, "builders", "--json")
    rows = [r for r in json.loads(out)["builders"] if r["library"] == LIBRARY]
    assert code == 0 and len(rows) == len(SHIPPED)
    assert all(not r["available"] and r["reason"] for r in rows), [r for r in rows if r["available"]][:2]


def test_the_gpu_backend_never_runs_a_gpu_reference_builder(monkeypatch) -> None:
    """A node no cuTile builder takes (a float64 convolution) has no plan, though the GPU reference takes it."""
    make_available(monkeypatch)
    make_cutile_available(monkeypatch)
    g = sigdnn.Graph("conv", io_dtype="float64", compute_dtype="float64")
    g.conv_fprop(g.tensor("x", (1, 2, 4, 4)), g.tensor("w", (2, 2, 3, 3)), name="conv").set_output(True)
    with pytest.raises(NoPlanError) as caught:
        emulated_executor().prepare(g)
    assert LIBRARY not in str(caught.value)
    with pytest.raises(NoPlanError, match="is not one the gpu backend runs"):
        emulated_executor(engine="gpu_reference.conv_fprop").prepare(g)
    with pytest.raises(NoPlanError, match="is not one the gpu-reference backend runs"):
        gpu_reference_executor(pins={"conv": "cutile.pointwise"}).prepare(g)


def test_the_gpu_reference_never_claims_regions(monkeypatch) -> None:
    """A pointwise chain the cuTile fusion builder would claim runs node by node on the GPU reference."""
    make_available(monkeypatch)
    make_cutile_available(monkeypatch)
    g = sigdnn.Graph("chain", io_dtype="float16", compute_dtype="float32")
    a = g.tensor("a", (4, 8))
    g.pointwise("exp", g.pointwise("mul", a, a)).set_output(True).set_name("y")
    steps = gpu_reference_executor().prepare(g).steps
    assert len(steps) == 2 and all(s.region is None and s.builder.library == LIBRARY for s in steps)
    inputs = {"a": np.linspace(-1, 1, 32, dtype=np.float16).reshape(4, 8)}
    got = gpu_reference_executor().execute(gpu_reference_executor().prepare(g), inputs)["y"]
    assert np.array_equal(got, np.exp(inputs["a"].astype(np.float64) ** 2).astype(np.float16))
