"""Batchnorm walked in channel groups (``ChannelConfig.group_bytes``), run on the CPU through the emulator.

The group count by hand; then training (with and without running
statistics) and backward in 2, 3 and 5 groups, NHWC and NCHW, validated
against the reference step by step, with the launch count showing the
groups really ran; planted wrong group offsets must fail validation.
"""

from __future__ import annotations

import attrs
import pytest
from emulated import emulated_executor, make_available
from norm_cases import batchnorm, batchnorm_backward

import sigdnn
from sigdnn.plan_builders.cutile import batchnorm as bn
from sigdnn.plan_builders.cutile.batchnorm import channel_groups
from sigdnn.plan_builders.cutile.steps import Arg

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize(
    ("a", "c", "b", "itemsize", "budget", "groups"),
    [
        (200704, 256, 1, 2, None, 1),  # no budget: one group
        (200704, 256, 1, 2, 103 * MIB, 1),  # x (98 MiB) fits
        (200704, 256, 1, 2, 26 * MIB, 4),  # 24.5 MiB a group
        (200704, 256, 1, 2, 24 * MIB, 8),  # 24.5 MiB is over: 12.25 MiB
        (200704, 256, 1, 2, 12 * MIB, 1),  # 16 groups of 16 channels: 32-byte runs, under 64
        (200704, 256, 1, 4, 13 * MIB, 16),  # float32 (196 MiB): 16 channels are 64 bytes, 12.25 MiB
        (10, 7, 100, 2, 10_000, 7),  # 14000 bytes in 7 channels: only groups of one divide
        (10, 6, 100, 2, 6_000, 2),  # 12000 bytes, channels outside the pixels (b > 1): no run limit
        (10, 6, 100, 2, 5_999, 3),
        (10, 6, 100, 2, 2_000, 6),
        (10, 6, 100, 2, 1_999, 1),  # one channel is more than the budget
    ],
)
def test_channel_groups_are_the_fewest_that_fit(a, c, b, itemsize, budget, groups):
    assert channel_groups(a, c, b, itemsize, budget) == groups


GROUPED = [
    # (dims, layout, budget in bytes, groups): float32 x
    ((3, 40, 4, 5), "NHWC", 4800, 2),  # 9600 bytes; 20 channels = 80-byte runs (4 groups: 40, too short)
    ((2, 30, 5, 7), "NCHW", 2800, 3),  # 8400 bytes
    ((2, 5, 50, 50), "NCHW", 20000, 5),  # 100000 bytes: one channel a group, 50 x 50 pixels each
]


def _grouped(monkeypatch, name: str, budget: int) -> None:
    monkeypatch.setattr(bn, name, attrs.evolve(getattr(bn, name), group_bytes=budget))


def _launches(g: sigdnn.Graph) -> int:
    plan = emulated_executor().prepare(g)
    return sum(len(step.plan.launches) for step in plan.steps)


@pytest.mark.parametrize(("dims", "layout", "budget", "groups"), GROUPED, ids=[f"{c[1]}-{c[3]}" for c in GROUPED])
@pytest.mark.parametrize("running", [False, True], ids=["plain", "running"])
def test_training_in_channel_groups_matches_the_reference(monkeypatch, dims, layout, budget, groups, running):
    _grouped(monkeypatch, "TRAINING", budget)
    g = batchnorm(dims, layout, "float32", running)
    assert _launches(g) == 3 * groups
    report = sigdnn.validate(g, seed=groups, executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.batchnorm"}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize(("dims", "layout", "budget", "groups"), GROUPED, ids=[f"{c[1]}-{c[3]}" for c in GROUPED])
def test_backward_in_channel_groups_matches_the_reference(monkeypatch, dims, layout, budget, groups):
    _grouped(monkeypatch, "BACKWARD", budget)
    g = batchnorm_backward(dims, layout, "float32")
    assert _launches(g) == 3 * groups
    report = sigdnn.validate(g, seed=groups, executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.batchnorm_backward"}, report.builders
    assert report.passed, report.table()


PLANTS = {
    # every group's x (and y) at group 0's channels
    "x offset": ("x", lambda arg, lay: attrs.evolve(arg, offset=0)),
    # every group's per-channel tensors at group 0's channels
    "vector offset": ("vector", lambda arg, lay: attrs.evolve(arg, offset=0)),
    # a group's x one channel further on
    "x off by one": ("x", lambda arg, lay: attrs.evolve(arg, offset=arg.offset + (lay.b if not lay.flat else 1))),
}


@pytest.mark.parametrize("what", list(PLANTS))
@pytest.mark.parametrize("direction", ["TRAINING", "BACKWARD"])
def test_wrong_group_offsets_fail_validation(monkeypatch, what, direction):
    method, plant = PLANTS[what]
    right = getattr(bn._Layout, method)

    def planted(self, port: str, group: int) -> Arg:
        arg = right(self, port, group)
        return plant(arg, self) if group > 0 else arg

    dims, layout, budget, _ = GROUPED[0]
    _grouped(monkeypatch, direction, budget)
    monkeypatch.setattr(bn._Layout, method, planted)
    g = (
        batchnorm(dims, layout, "float32", True)
        if direction == "TRAINING"
        else batchnorm_backward(dims, layout, "float32")
    )
    report = sigdnn.validate(g, seed=3, executor=emulated_executor())
    assert not report.passed
