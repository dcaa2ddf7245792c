"""The cuTile row, channel and reduction builders on the GPU against the reference, through sigdnn.validate.

A subset of ``norm_cases`` (tests/plan_builders/cutile/test_emulated_norms.py
runs all of them through the CPU emulator): every builder on rows not
multiples of the tile, a row walked in chunks, size-1 dims, strided and
channels-last layouts, NCHW and NHWC batchnorm, every reduction mode; here
compiled by cuTile and run on the device. Planted bugs (a wrong epsilon,
bfloat16 accumulation) registered as builders must fail validation.
"""

from __future__ import annotations

import re

import attrs
import pytest
from norm_cases import (
    ROWS,
    awkward_rows,
    channel_cases,
    layernorm,
    layernorm_inputs,
    layout_cases,
    reduction_cases,
    row_cases,
)

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.plan_builders.cutile import norms, tiling
from sigdnn.plan_builders.cutile.row_kernel_source import KernelHints
from sigdnn.plan_builders.cutile.tiling import RowConfig
from sigdnn.registry import Registry

pytestmark = pytest.mark.gpu

ALL = (
    row_cases(("bfloat16",))
    + [c for c in row_cases(("float32", "float16")) if c[0].endswith("x".join(map(str, ROWS[0])))]
    + layout_cases()
    + channel_cases(("bfloat16",))
    + [c for c in channel_cases(("float32",)) if "NHWC" in c[0]]
    + [c for c in reduction_cases() if "3x5x7" in c[0] or "3000" in c[0] or "6x4x5" in c[0]]
)
# Round robin over builders: a run cut short still covered each of them.
_BY_BUILDER: dict[str, list] = {}
for _case in ALL:
    _BY_BUILDER.setdefault(_case[1], []).append(_case)
CASES = [
    group[i] for i in range(max(map(len, _BY_BUILDER.values()))) for group in _BY_BUILDER.values() if i < len(group)
]


class PlantedLayernorm(norms.CutileLayernormBuilder):
    name = "planted.layernorm"
    engine_id = 30010
    library = "planted"

    @staticmethod
    def plant(text: str) -> str:
        return text

    def launches(self, node, graph):
        launches, nbytes = super().launches(node, graph)
        return [
            attrs.evolve(la, source=attrs.evolve(la.source, text=self.plant(la.source.text))) for la in launches
        ], nbytes


PLANTS = {
    "wrong epsilon": lambda text: text.replace("+ 1e-05)", "+ 0.001)"),
    "bfloat16 accumulation": lambda text: re.sub(
        r"ct\.sum\((d0 \* d0[^,]*), axis=1", r"ct.sum(ct.astype(\1, ct.bfloat16), axis=1", text
    ),
}


@pytest.mark.parametrize("what", list(PLANTS))
def test_validation_catches_a_planted_layernorm_bug_on_the_gpu(what):
    g = layernorm((16, 768), "float32", "training", epsilon=1e-5)  # held in 3 tiles: the two-pass kernel
    data = random_inputs(g, seed=5)
    assert sigdnn.validate(g, data).passed
    ((launch,), _) = norms.CutileLayernormBuilder().launches(g.nodes[0], g)
    assert PLANTS[what](launch.source.text) != launch.source.text, "the plant changes nothing"
    registry = Registry()
    registry.register(type("Planted", (PlantedLayernorm,), {"plant": staticmethod(PLANTS[what])})())
    report = sigdnn.validate(g, data, executor=sigdnn.Executor("gpu", registry=registry, engine="planted.layernorm"))
    assert set(report.builders.values()) == {"planted.layernorm"}
    assert not report.passed, f"{what} went unnoticed"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_builder_matches_the_reference_on_the_gpu(case):
    name, builder, make = case
    # the builder under test by name: cute.batchnorm ranks above cutile.batchnorm where CuTe DSL is installed
    report = sigdnn.validate(make(), seed=len(name), executor=sigdnn.Executor("gpu", engine=builder))
    assert set(report.builders.values()) == {builder}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("variance", ["two_pass", "chan"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("dims", [(6, 1000), (4, 4096), (3, 9000)], ids=lambda d: "x".join(map(str, d)))
def test_layernorm_on_awkward_rows_at_both_variances_on_the_gpu(monkeypatch, variance, dtype, dims):
    """The one-pass variant (benchmark label 8192o4chan) compiled by cuTile, on the rows the emulator passed:
    offset, constant, a far first element, masked and chunked widths (its divisions and contractions are the
    GPU's here)."""
    monkeypatch.setattr(
        tiling, "LAYERNORM_FORWARD", ((None, RowConfig(8192, KernelHints(occupancy=4), variance=variance)),)
    )
    g = layernorm(dims, dtype, "training")
    report = sigdnn.validate(g, layernorm_inputs(g, awkward_rows(*dims, dtype)))
    assert set(report.builders.values()) == {"cutile.layernorm"}, report.builders
    assert report.passed, report.table()
