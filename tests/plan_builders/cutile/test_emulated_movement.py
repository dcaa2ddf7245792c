"""cuTile copies for reshape / transpose / slice / concatenate through the emulator: bit-identical to the reference.

A copy does no arithmetic, so the literal kernel (``_movement_kernels.py``,
run block by block by the emulator) must give exactly the reference's
values: random graphs of every op over random shapes (size-1 and odd dims),
random layouts (permuted, with gaps), random slices and concatenates whose
pieces are laid out unlike the output; plus a conversion between float
widths, an integer copy, a rank the kernel cannot take, and planted bugs.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from emulated import emulated_executor, make_available
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from movement_cases import movement_graphs

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NoPlanError
from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.cutile import movement
from sigdnn.plan_builders.cutile.movement import CutileMovementBuilder


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(movement_graphs(), st.integers(0, 1000))
def test_copies_are_bit_identical_to_the_reference(graph: sigdnn.Graph, seed: int) -> None:
    inputs = random_inputs(graph, seed=seed)
    plan = emulated_executor().prepare(graph)
    assert [s.builder.name for s in plan.steps] == ["cutile.movement"]
    got = emulated_executor().execute(plan, inputs)
    for name, want in sigdnn.Executor().run(graph, inputs).items():
        np.testing.assert_array_equal(got[name], want)


def test_a_float_copy_converts_to_the_outputs_dtype_as_the_reference_does() -> None:
    g = sigdnn.Graph("widen", io_dtype="bfloat16")
    y = g.transpose(g.tensor("x", (3, 5), dtype="float32"), (1, 0)).set_output(True)
    y.set_data_type("bfloat16")
    inputs = random_inputs(g, seed=3)
    got = emulated_executor().run(g, inputs)[y.name]
    np.testing.assert_array_equal(got, sigdnn.Executor().run(g, inputs)[y.name])
    assert got.dtype == sigdnn.DataType.BFLOAT16.numpy


def test_axes_merge_before_the_rank_limit_and_an_unmergeable_rank_is_declined() -> None:
    g = sigdnn.Graph("deep", io_dtype="float32")
    g.reshape(g.tensor("x", (2,) * 8), (16, 16)).set_output(True)  # packed: merges to one axis
    assert [s.builder.name for s in emulated_executor().prepare(g).steps] == ["cutile.movement"]
    g = sigdnn.Graph("scattered", io_dtype="float32")
    dims = (2,) * 7
    x = g.tensor("x", dims, tuple(3**k for k in reversed(range(7))))  # every axis gapped: nothing merges
    g.reshape(x, (128,), name="flatten").set_output(True)
    with pytest.raises(NoPlanError, match="node 'flatten': 7 axes after merging contiguous ones; the copy kernel"):
        emulated_executor().prepare(g)
    assert movement.merged((4, 1, 3, 2), (6, 99, 2, 1)) == ((24,), (1,))
    assert movement.merged((4, 1, 3, 2), (8, 99, 2, 1)) == ((4, 6), (8, 1))


def test_bool_and_mixed_integer_copies_stay_with_the_reference() -> None:
    g = sigdnn.Graph("flags", io_dtype="bool")
    g.transpose(g.tensor("x", (2, 3)), (1, 0), name="t").set_output(True)
    with pytest.raises(NoPlanError):
        emulated_executor().prepare(g)


class Planted(CutileMovementBuilder):
    name = "planted.movement"
    engine_id = 30021
    library = "planted"
    plant = staticmethod(lambda launch: launch)

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        return [self.plant(la) for la in launches], nbytes


def concat_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("cat", io_dtype="float32")
    a, b = g.tensor("a", (2, 3, 4), layout="ROW_MAJOR"), g.tensor("b", (2, 2, 4), (1, 8, 2))
    g.concatenate([a, b], 1, name="cat").set_output(True).set_stride(packed_strides((2, 5, 4), (1, 2, 0)))
    return g


def reshape_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("flatten", io_dtype="float32")
    g.reshape(g.tensor("x", (3, 4, 5), (30, 6, 1)), (5, 12), name="cat").set_output(True)
    return g


@pytest.mark.parametrize(
    "plant, graph",
    [
        (lambda la: attrs.evolve(la, source=attrs.evolve(la.source, text=la.source.text.replace("% s5", "% d5"))),
         reshape_graph),
        (lambda la: attrs.evolve(la, args=(la.args[0], attrs.evolve(la.args[1], offset=0))), concat_graph),
    ],
    ids=["src_dims_mixed_up", "piece_offsets_lost"],
)  # fmt: skip
def test_a_planted_bug_changes_the_copy(plant, graph) -> None:
    registry = sigdnn.Registry(entry_point_group=None)
    planted = Planted()
    planted.plant = staticmethod(plant)
    registry.register(planted)
    g = graph()
    inputs = random_inputs(g, seed=1)
    want = sigdnn.Executor().run(g, inputs)["cat::y"]
    np.testing.assert_array_equal(emulated_executor().run(g, inputs)["cat::y"], want)
    got = emulated_executor(registry=registry, engine="planted.movement").run(g, inputs)["cat::y"]
    assert not np.array_equal(got, want)
