"""The CuTe one-launch batchnorm training forward on a Hopper GPU, judged against the float64 reference.

Shapes reach every path of the kernel: x kept in registers and shared
memory with fewer streamed groups than blocks, x only streamed, a tail of
rows after the last whole group, fewer groups than blocks, 2048 channels
(groups of two rows), 16- and 32-bit io, 3-D x, no running statistics, and
a mean far from zero (the shifted sums). One prepared plan validates on
several inputs in a row: its accumulators and grid barrier must reset
themselves. A planted epsilon must fail. Skips (with the reason) without a
GPU, without nvidia-cutlass-dsl, or on a device other than sm_90.
"""

from __future__ import annotations

import pytest
from cute_skip import skip_unless_sm90
from norm_cases import batchnorm as batchnorm_graph

import sigdnn
from sigdnn.plan_builders.cute import batchnorm as cute_batchnorm
from sigdnn.validation import random_inputs

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe batchnorm")


CASES = {
    # name: (dims, layout, io, running)
    "kept_on_chip": ((32, 256, 48, 48), "NHWC", "bfloat16", True),  # 10 + 24 groups a block kept, 120 streamed
    "streamed": ((8, 256, 28, 28), "NHWC", "bfloat16", True),  # 392 groups: 2 a block in registers, no more
    "tail": ((3, 64, 7, 7), "NHWC", "bfloat16", False),  # 2 groups of 64 rows, then 19 rows
    "float16": ((10, 128, 10, 10), "NHWC", "float16", False),
    "float32_3d": ((2, 32, 6, 10, 11), "NDHWC", "float32", True),
    "wide": ((4, 2048, 3, 5), "NHWC", "bfloat16", True),  # 256 vectors a row: groups of 2 rows
}


def executor() -> sigdnn.Executor:
    return sigdnn.Executor("gpu", engine="cute.batchnorm")


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_reference(name: str) -> None:
    g = batchnorm_graph(*CASES[name])
    ex = executor()
    assert ex.prepare(g).steps[0].builder.name == "cute.batchnorm"
    report = sigdnn.validate(g, random_inputs(g, seed=7), executor=ex)
    assert report.passed, report.table()


def test_a_mean_far_from_zero() -> None:
    """x = 200 + u(-2, 2): without the shift by each channel's first element the variance would cancel."""
    g = batchnorm_graph((16, 256, 20, 20), "NHWC", "bfloat16", True)
    inputs = random_inputs(g, seed=3)
    inputs["x"] = (inputs["x"].astype("float32") + 200.0).astype(inputs["x"].dtype)
    report = sigdnn.validate(g, inputs, executor=executor())
    assert report.passed, report.table()


def test_one_plan_runs_again_and_again() -> None:
    """The plan is prepared once (the executor keeps it); each run must find its accumulators and barrier ready."""
    g = batchnorm_graph(*CASES["kept_on_chip"])
    ex = executor()
    plan = ex.prepare(g)
    for seed in (1, 2, 3):
        report = sigdnn.validate(g, random_inputs(g, seed=seed), executor=ex)
        assert report.passed, f"run with seed {seed}: {report.table()}"
    assert ex.prepare(g) is plan


def test_chosen_by_default_for_channels_last_x() -> None:
    g = batchnorm_graph(*CASES["streamed"])
    assert sigdnn.Executor("gpu").prepare(g).steps[0].builder.name == "cute.batchnorm"


def test_a_planted_wrong_epsilon_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cute_batchnorm.plan_batchnorm

    def planted(node, graph):
        view = real(node, graph)
        return {**view, "epsilon": view["epsilon"] * 1000}

    monkeypatch.setattr(cute_batchnorm, "plan_batchnorm", planted)
    g = batchnorm_graph((4, 64, 2, 3), "NHWC", "float32", True)  # 24 values a channel: epsilon matters
    report = sigdnn.validate(g, random_inputs(g, seed=5), executor=executor())
    assert set(report.builders.values()) == {"cute.batchnorm"}
    assert not report.passed, "a 1000x epsilon went unnoticed"
