"""cuTile resample forward through the emulator, against the reference (``sigdnn.validate``).

The cases of tests/resample_cases.py (every mode and coordinate convention,
1 to 3 spatial dims, both layouts, up- and downsampling, size-1 dims, a
gapped input); the literal kernel text runs block by block in the emulator.
A planted bug in the positions fails validation; float scales are declined.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from emulated import emulated_executor, make_available
from resample_cases import CASES, CONVENTIONS, backward_graph, graph

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NoPlanError
from sigdnn.plan_builders.cutile import resample
from sigdnn.plan_builders.cutile.resample import CutileResampleBuilder


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize("mode, coordinates", CONVENTIONS, ids=["-".join(c) for c in CONVENTIONS])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resample_matches_the_reference(case, mode: str, coordinates: str) -> None:
    g = graph(case, mode, coordinates)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.resample"}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("mode, coordinates", CONVENTIONS, ids=["-".join(c) for c in CONVENTIONS])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resample_backward_matches_the_reference(case, mode: str, coordinates: str) -> None:
    g = backward_graph(case, mode, coordinates)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.resample_backward"}, report.builders
    assert report.passed, report.table()


def test_the_longest_run_of_outputs_sampling_one_input_is_counted_from_the_positions() -> None:
    # 2 -> 7, linear half_pixel, positions (2o + 1) / 7 - 0.5 floored at 0: 0, 0, 0.21, 0.5, 0.79, 1.07, 1.36;
    # input 0 is sampled by outputs 0-4, input 1 by 2-6 (its run starts where position 0 is passed: o = 2)
    assert resample.span("bilinear", *resample.positions("bilinear", "half_pixel", 2, 7), 2, 7) == (4, 5)
    # 7 -> 2, nearest asymmetric: outputs 0 and 1 take inputs 0 and 3: runs of one
    assert resample.span("nearest", *resample.positions("nearest", "asymmetric", 7, 2), 7, 2) == (7, 1)


def test_positions_are_the_documented_fractions() -> None:
    assert resample.positions("nearest", "half_pixel", 5, 9) == (10, 5, 18)  # (o + 0.5) * 5 / 9
    assert resample.positions("bilinear", "half_pixel", 5, 9) == (10, -4, 18)  # (o + 0.5) * 5 / 9 - 0.5
    assert resample.positions("bilinear", "align_corners", 5, 1) == (4, 0, 1)
    assert resample.positions("bilinear", "asymmetric", 5, 9) == (5, 0, 9)


def test_float_scales_are_declined_naming_the_node() -> None:
    g = sigdnn.Graph("scaled", io_dtype="float32")
    g.resample(g.tensor("x", (1, 2, 4, 4)), "nearest", scales=(2.0, 2.0), name="up").set_output(True)
    with pytest.raises(NoPlanError, match=r"node 'up': scales \[2.0, 2.0\]: positions from float scales"):
        emulated_executor().prepare(g)


class Planted(CutileResampleBuilder):
    name = "planted.resample"
    engine_id = 30022
    library = "planted"

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        text = launches[0].source.text.replace("num = ct.maximum(o * scale + bias, 0)", "num = o * scale + bias")
        return [attrs.evolve(launches[0], source=attrs.evolve(launches[0].source, text=text))], nbytes


def test_a_planted_unclamped_position_fails_validation() -> None:
    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(Planted())
    g = graph(CASES[0], "bilinear", "half_pixel")  # upsampling: the first outputs sit before pixel 0
    executor = emulated_executor(registry=registry, engine="planted.resample")
    assert not sigdnn.validate(g, random_inputs(g, seed=2), executor=executor).passed


class PlantedBackward(resample.CutileResampleBackwardBuilder):
    name = "planted.resample_backward"
    engine_id = 30023
    library = "planted"

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        text = launches[0].source.text.replace("reach = (i - mode) * den - bias", "reach = i * den - bias")
        return [attrs.evolve(launches[0], source=attrs.evolve(launches[0].source, text=text))], nbytes


def test_a_planted_late_first_output_fails_validation() -> None:
    """The run started where the floor reaches i, not i - 1: the outputs blending i in as their high end are lost."""
    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(PlantedBackward())
    g = backward_graph(CASES[0], "bilinear", "align_corners")
    executor = emulated_executor(registry=registry, engine="planted.resample_backward")
    assert not sigdnn.validate(g, random_inputs(g, seed=2), executor=executor).passed


def test_a_weight_near_zero_keeps_its_own_precision() -> None:
    """12 -> 224 bilinear (a segmentation head's upsampling): output 214 blends inputs 10 and 11 with weights
    4/448 and 444/448. A low weight taken as 1 - t from a float32 t carries t's rounding (an ulp of 1) into
    4/448: 16 ulps of the result where input 10 is large and 11 small. Each weight must be its own division."""
    g = sigdnn.Graph("near_one", io_dtype="float32", compute_dtype="float32")
    g.resample(g.tensor("x", (1, 1, 12)), "bilinear", dims=(1, 1, 224), name="rs").set_output(True)
    x = np.full(12, 0.01, np.float32)
    x[10], x[11] = 1.157427, 0.0104383
    report = sigdnn.validate(g, {"x": x.reshape(1, 1, 12)}, executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.resample"}
    assert report.passed, report.table()


def test_the_backwards_weights_are_correctly_rounded() -> None:
    """dy one at output 214 alone: dx holds that output's two weights, 4/448 and 444/448, each within an ulp
    (1 - float32(444/448) is 48 ulps off 4/448)."""
    g = sigdnn.Graph("near_one", io_dtype="float32", compute_dtype="float32")
    g.resample_backward(g.tensor("dy", (1, 1, 224)), "bilinear", dims=(1, 1, 12), name="rs").set_output(True)
    dy = np.where(np.arange(224) == 214, 1.0, 0.0).astype(np.float32).reshape(1, 1, 224)
    dx = next(iter(emulated_executor().run(g, {"dy": dy}).values())).ravel()
    want = np.zeros(12)
    want[10], want[11] = 4 / 448, 444 / 448
    assert (np.abs(dx - want) <= np.spacing(want.astype(np.float32))).all(), dx[9:12]
