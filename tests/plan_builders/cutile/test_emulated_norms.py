"""The cuTile row, channel and reduction builders, run on the CPU through the emulator, against the reference.

Every case of ``norm_cases`` goes through ``sigdnn.validate`` (step by step,
the reference's tolerances from each op's reduction length) with the
generated kernel text executed block by block by the emulator; tests/gpu/
runs the same cases compiled by cuTile. Declines and a planted bug close it.
"""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest
from emulated import emulated_executor, make_available
from norm_cases import all_cases

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NoPlanError, NotSupported
from sigdnn.plan_builders.cutile import norms, tiling
from sigdnn.plan_builders.cutile.reduction import CutileReductionBuilder
from sigdnn.registry import Registry

CASES = all_cases()


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_builder_matches_the_reference(case):
    _, builder, make = case
    g = make()
    report = sigdnn.validate(g, seed=len(case[0]), executor=emulated_executor())
    assert set(report.builders.values()) == {builder}, report.builders
    assert report.passed, report.table()


def test_softmax_over_an_axis_not_innermost_is_declined_naming_the_node():
    g = sigdnn.Graph("softmax_outer", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(7, 33))
    g.softmax(x, axes=(0,), name="outer")[0].set_output(True)
    with pytest.raises(NoPlanError, match=r"node 'outer': axes \[0\] of 'x' are not its innermost"):
        emulated_executor().prepare(g)


def test_integer_reduction_is_declined_naming_the_port():
    g = sigdnn.Graph("int_reduction", io_dtype="int32", compute_dtype="int32")
    g.reduction(g.tensor("x", dims=(4, 5)), "add", (4, 1), name="sum").set_output(True)
    with pytest.raises(NotSupported, match=r"node 'sum': port 'x' \(tensor 'x'\) is int32"):
        CutileReductionBuilder().check(g.nodes[0], g)


def test_softmax_row_of_minus_infinity_gives_the_references_nan_and_minus_inf():
    g = sigdnn.Graph("softmax_inf", io_dtype="float32", compute_dtype="float32")
    outs = g.softmax(g.tensor("x", dims=(3, 20)), axes=(1,), generate_stats=True)
    for t in outs:
        t.set_output(True)
    x = np.random.default_rng(0).standard_normal((3, 20)).astype(np.float32)
    x[1] = -np.inf
    report = sigdnn.validate(g, {"x": x}, executor=emulated_executor())
    assert report.passed, report.table()


class PlantedLayernorm(norms.CutileLayernormBuilder):
    """layernorm with a planted bug: the generated text changed by ``plant``."""

    name = "planted.layernorm"
    engine_id = 30010
    library = "planted"
    plant = staticmethod(lambda text: text)

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
def test_validation_catches_a_planted_layernorm_bug(what):
    g = row_kernel_graph()
    data = random_inputs(g, seed=5)
    registry = Registry()
    assert sigdnn.validate(g, data, executor=_executor(registry, "cutile.layernorm")).passed
    planted = type("Planted", (PlantedLayernorm,), {"plant": staticmethod(PLANTS[what])})()
    ((launch,), _) = norms.CutileLayernormBuilder().launches(g.nodes[0], g)
    assert planted.plant(launch.source.text) != launch.source.text, "the plant changes nothing"
    registry.register(planted)
    report = sigdnn.validate(g, data, executor=_executor(registry, "planted.layernorm"))
    assert set(report.builders.values()) == {"planted.layernorm"}
    assert not report.passed, f"{what} went unnoticed"


def row_kernel_graph() -> sigdnn.Graph:
    from norm_cases import layernorm

    return layernorm((16, 768), "float32", "training", epsilon=1e-5)  # held in 3 tiles: the two-pass kernel


def _executor(registry, engine):
    return emulated_executor(registry=registry, engine=engine)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_a_row_held_in_tiles_shifts_by_the_max_of_every_tile(log):
    """Row j of 5120 (five tiles of 1024) peaks at 200 in tile j: a max that missed that tile overflows exp."""
    from norm_cases import softmax

    g = softmax((5, 5120), "float32", log, True)
    x = np.random.default_rng(3).standard_normal((5, 5120)).astype(np.float32)
    for j in range(5):
        x[j, 1024 * j + 17] = 200.0
    report = sigdnn.validate(g, {"x": x}, executor=emulated_executor())
    assert report.passed, report.table()


@pytest.mark.parametrize("n", [1025, 16384])
def test_softmax_pads_only_what_lies_past_the_row_with_minus_infinity(n):
    """1025: five tiles of 256, the last holding one column (the other 255 read -inf); 16384: four whole walked
    chunks of 4096, nothing past the row (a zero read as a column would add exp(-max) to every sum)."""
    from norm_cases import softmax

    want = {1025: (2, 256, 5), 16384: (1, 4096, 1)}[n]
    assert tiling.row_tiles(3, n, tiling.for_width(tiling.SOFTMAX_FORWARD, n)) == want
    g = softmax((3, n), "float32", False, False)
    x = (np.random.default_rng(4).standard_normal((3, n)) - 30.0).astype(np.float32)  # sums far below exp(0) = 1
    report = sigdnn.validate(g, {"x": x}, executor=emulated_executor())
    assert report.passed, report.table()


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("spike", [0, 1, 3])
def test_walked_softmax_rescales_the_running_sum_when_a_later_chunk_holds_the_max(log, spike):
    """A row of 16384 walked in four chunks with its max (200) in chunk ``spike``: every chunk before it was
    summed against a smaller running max, and its sum must be scaled down by exp(old - new) (the stats too).
    Row 2 lies near -500, where exp(x) itself underflows."""
    from norm_cases import softmax

    g = softmax((3, 16384), "float32", log, True)
    x = np.random.default_rng(5).standard_normal((3, 16384)).astype(np.float32)
    x[:, 4096 * spike + 5] = 200.0
    x[1, 100] = 150.0  # a second, smaller peak: the running max grows twice in row 1 when spike > 0
    x[2] -= 500.0  # every exp(x) underflows: only a running max that starts below the row keeps the sums
    report = sigdnn.validate(g, {"x": x}, executor=emulated_executor())
    assert report.passed, report.table()


@pytest.mark.parametrize(("make", "port"), [("train", "y"), ("infer", "y"), ("bwd", "dx"), ("bwd", "dy")])
def test_batchnorm_declines_a_tensor_laid_out_unlike_x(make, port):
    """The elementwise pass reads and writes y (dy, dx) tile for tile as x: NCHW under an NHWC x is declined."""
    import attrs
    from norm_cases import batchnorm, batchnorm_backward, batchnorm_inference

    dims = (2, 4, 3, 3)
    g = {"train": lambda: batchnorm(dims, "NHWC", "float32", False),
         "infer": lambda: batchnorm_inference(dims, "NHWC", "float32"),
         "bwd": lambda: batchnorm_backward(dims, "NHWC", "float32")}[make]()  # fmt: skip
    t = g.tensors[g.nodes[0].op.ports()[port]]
    g.tensors[t.uid] = attrs.evolve(t, strides=(36, 9, 3, 1))
    with pytest.raises(sigdnn.SigdnnError, match=f"'{t.name}' is laid out differently"):
        emulated_executor().prepare(g)


@pytest.mark.parametrize(("n", "running"), [(2, True), (1, False)])
def test_batchnorm_training_at_the_fewest_elements_a_channel(n, running):
    """Two elements a channel are enough for the unbiased running variance; one is enough without it."""
    from norm_cases import batchnorm

    g = batchnorm((n, 3, 1, 1), "NCHW", "float32", running)
    data = {t.name: np.random.default_rng(n).uniform(0.5, 2.0, t.dims).astype(np.float32) for t in g.inputs}
    report = sigdnn.validate(g, data, executor=emulated_executor())
    assert report.passed, report.table()


@pytest.mark.parametrize("split", [True, False], ids=["mean_and_remainder", "float32_mean_alone"])
def test_batchnorm_training_where_the_mean_dwarfs_the_spread(split, monkeypatch):
    """x = 3000 + 0.01 N(0, 1): float32(mean) is off by up to 1.2e-4, 1% of std, which y = (x - mean) * inv
    would carry 1000-fold past its tolerance; the apply pass subtracts the mean's float32 remainder too. With
    the remainder dropped (float32(mean) alone), validation fails."""
    from norm_cases import batchnorm

    from sigdnn.plan_builders.cutile import channel_kernel_source

    if not split:
        apply = channel_kernel_source.apply
        apply = channel_kernel_source.apply  # the same kernel, its low parameter taken and ignored

        def float32_mean_alone(*args):  # type: ignore[no-untyped-def]
            return apply(*args[:6], False).replace("(x, mean, inv", "(x, mean, low, inv")

        monkeypatch.setattr(channel_kernel_source, "apply", float32_mean_alone)
    g = batchnorm((4, 8, 5, 5), "NHWC", "float32", False)
    rng = np.random.default_rng(3)
    data = {t.name: rng.uniform(0.5, 2.0, t.dims).astype(np.float32) for t in g.inputs}
    data["x"] = (3000 + 0.01 * rng.standard_normal(g.tensor_by_name("x").dims)).astype(np.float32)
    report = sigdnn.validate(g, data, executor=emulated_executor())
    assert report.passed == split, report.table()


def test_batchnorm_running_variance_of_one_element_a_channel_is_declined():
    """The unbiased running variance divides by count - 1: one element a channel is declined, saying so."""
    from norm_cases import batchnorm

    with pytest.raises(sigdnn.SigdnnError, match="1 element per channel"):
        emulated_executor().prepare(batchnorm((1, 3, 1, 1), "NCHW", "float32", True))


@pytest.mark.parametrize(
    ("make", "port"),
    [("layernorm", "y"), ("rmsnorm", "y"), ("layernorm_backward", "dy"), ("rmsnorm_backward", "dx"), ("softmax", "y")],
)
def test_row_norms_decline_a_tensor_laid_out_unlike_x(make, port):
    """Rows of y (dy, dx) are read and written tile for tile as x's: a transposed one is declined, named."""
    import attrs
    import norm_cases

    g = {"layernorm": lambda: norm_cases.layernorm((4, 8), "float32", "training"),
         "rmsnorm": lambda: norm_cases.rmsnorm((4, 8), "float32", "training", False),
         "layernorm_backward": lambda: norm_cases.layernorm_backward((4, 8), "float32"),
         "rmsnorm_backward": lambda: norm_cases.rmsnorm_backward((4, 8), "float32", False),
         "softmax": lambda: norm_cases.softmax((4, 8), "float32", False, False)}[make]()  # fmt: skip
    t = g.tensors[g.nodes[0].op.ports()[port]]
    g.tensors[t.uid] = attrs.evolve(t, strides=(1, 4))
    with pytest.raises(sigdnn.SigdnnError, match=f"'{t.name}' is laid out differently"):
        emulated_executor().prepare(g)


@pytest.mark.parametrize("make", ["layernorm", "layernorm_backward", "rmsnorm_backward", "softmax"])
def test_row_statistics_every_other_element_are_read_and_written_at_their_stride(make):
    """A statistic per row (mean, inv_variance, softmax's stats) strided over the batch axes (every other float of a (2, 3)
    grid): its stride follows the rows' batch axes, not the normalized one."""
    import attrs
    import norm_cases

    g = {"layernorm": lambda: norm_cases.layernorm((2, 3, 8), "float32", "training"),
         "layernorm_backward": lambda: norm_cases.layernorm_backward((2, 3, 8), "float32"),
         "rmsnorm_backward": lambda: norm_cases.rmsnorm_backward((2, 3, 8), "float32", False),
         "softmax": lambda: norm_cases.softmax((2, 3, 8), "float32", False, True)}[make]()  # fmt: skip
    ports = g.nodes[0].op.ports()
    for port in ("mean", "inv_variance", "stats"):
        if port in ports:
            t = g.tensors[ports[port]]
            g.tensors[t.uid] = attrs.evolve(t, strides=(6, 2, 1))
    rng = np.random.default_rng(3)
    data = {t.name: rng.uniform(0.5, 2.0, t.dims).astype(np.float32) for t in g.inputs}
    report = sigdnn.validate(g, data, executor=emulated_executor())
    assert report.passed, report.table()


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_a_scale_of_x_s_last_dim_alone_runs_in_the_row_kernel(kind):
    """x [B, S, D] with scale and bias [D] (docs/ops.md's rank rule): the cuTile row kernel reads them as vectors."""
    g = sigdnn.Graph(f"{kind}_vector_scale", io_dtype="float32", compute_dtype="float32")
    x, s, b = g.tensor("x", dims=(3, 5, 40)), g.tensor("scale", dims=(40,)), g.tensor("bias", dims=(40,))
    outs = getattr(g, kind)("training", x, s, b, epsilon=1e-5)
    for t in outs:
        t.set_output(True)
    report = sigdnn.validate(g, seed=7, executor=emulated_executor())
    assert set(report.builders.values()) == {f"cutile.{kind}"}, report.builders
    assert report.passed, report.table()
