"""Layernorm forward with mean and variance from one reduction (``RowConfig.variance``), through the emulator.

The one-pass kernels shift each row by its first element and then combine
per-lane (count, mean, M2) triples with Chan's update (``rowgen.CHAN``), or
add the shifted values and their squares, instead of reducing the mean and
then the squared deviations. They must stay within the reference's
layernorm tolerances where the shortcut E[x^2] - mean^2 cancels: rows of
1e4 plus small noise, rows whose first element is far from the rest,
constant rows, rows not a multiple of the tile and rows walked in chunks.
The same kernel with its shift planted to 0 (E[x^2] - mean^2) must fail on
those rows, or they prove nothing.
"""

from __future__ import annotations

import re

import attrs
import ml_dtypes
import numpy as np
import pytest
from emulated import emulated_executor, make_available
from norm_cases import layernorm

import sigdnn
from sigdnn.plan_builders.cutile import norms, opbase, rowgen
from sigdnn.plan_builders.cutile.opbase import RowConfig
from sigdnn.plan_builders.cutile.rowgen import KernelHints
from sigdnn.registry import Registry

# The benchmark's candidates (2 rows of 4096 a block at 16384 x 4096) and one row a block.
CONFIGS = {f"{tile}-{v}": RowConfig(tile, KernelHints(occupancy=4), variance=v)
           for tile in (8192, 64) for v in ("chan", "shifted_sums")}  # fmt: skip
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def awkward_rows(rows: int, n: int, dtype: str, seed: int = 0) -> np.ndarray:
    """Rows far from zero relative to their spread, with the cases a shortcut gets wrong mixed in.

    Row 0 is constant; row 1 is all but its first element zero (the first element is no estimate of the
    mean); row 2 starts six deviations out; the rest are an offset plus noise small beside it: 1e4 and a
    few ulps of it in 16 bits, 1e3 and std 1 in float32 (where 1e4 and std 1 already fail the two-pass
    default's y, one ulp of its float32 mean being 1e-3 of a deviation).
    """
    rng = np.random.default_rng(seed)
    offset, spread = (1e3, 1.0) if dtype == "float32" else (1e4, 200.0)
    x = offset + spread * rng.standard_normal((rows, n))
    x[0] = 3.7
    x[1] = 0.0
    x[1, 0] = 1e4
    x[2, 0] = offset + 6 * spread
    return x.astype(DTYPES[dtype])


def inputs(g: sigdnn.Graph, x: np.ndarray, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = x.shape[-1]
    return {"x": x, "scale": (1 + 0.1 * rng.standard_normal((1, n))).astype(x.dtype),
            "bias": (0.1 * rng.standard_normal((1, n))).astype(x.dtype)}  # fmt: skip


def one_pass_text(g: sigdnn.Graph) -> str:
    (launch,), _ = norms.CutileLayernormBuilder().launches(g.nodes[0], g)
    return launch.source.text


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("dims", [(6, 1000), (4, 4096), (3, 37), (3, 9000)], ids=lambda d: "x".join(map(str, d)))
def test_one_pass_layernorm_matches_the_reference_on_awkward_rows(monkeypatch, config, dtype, dims):
    monkeypatch.setattr(opbase, "ROW_FORWARD", CONFIGS[config])
    g = layernorm(dims, dtype, "training")
    text = one_pass_text(g)
    assert text.count("ct.reduce((") == 1 and "ct.sum(" not in text and "k0 = " in text, "not a one-pass kernel"
    report = sigdnn.validate(g, inputs(g, awkward_rows(*dims, dtype)), executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.layernorm"}, report.builders
    assert report.passed, report.table()


def test_the_default_stays_two_pass():
    g = layernorm((4, 4096), "bfloat16", "training")
    text = one_pass_text(g)
    assert opbase.ROW_FORWARD.variance == "two_pass" and "ct.reduce(" not in text and text.count("ct.sum(") == 2


def test_chan_combination_of_unequal_groups_is_exact_where_squares_cancel():
    """The combine alone, on groups of counts 3 and 5 (the emulator's pairwise tree only meets equal counts)."""
    chan = eval(rowgen.CHAN, {"ct": __import__("sigdnn.plan_builders.cutile.emulator", fromlist=["ct"])})
    x = (1e4 + np.random.default_rng(2).standard_normal(8)).astype(np.float32)
    a, b = x[:3].astype(np.float64), x[3:].astype(np.float64)
    group = [
        np.float32(v) for v in (3, a.mean(), ((a - a.mean()) ** 2).sum(), 5, b.mean(), ((b - b.mean()) ** 2).sum())
    ]
    n, mean, m2 = chan(*group)
    exact = x.astype(np.float64)
    assert n == 8 and abs(mean - exact.mean()) <= 1e-3
    assert m2 == pytest.approx(((exact - exact.mean()) ** 2).sum(), rel=1e-5)
    empty = chan(np.float32(0), np.float32(0), np.float32(0), *group[3:])  # a masked lane changes nothing
    assert empty == tuple(group[3:])


class NaiveLayernorm(norms.CutileLayernormBuilder):
    """The planted bug: a one-pass kernel shifted by 0 instead of each row's first element (E[x^2] - mean^2)."""

    name = "planted.naive_layernorm"
    engine_id = 30011
    library = "planted"

    def launches(self, node, graph):
        launches, nbytes = super().launches(node, graph)
        return [
            attrs.evolve(la, source=attrs.evolve(la.source, text=unshifted(la.source.text))) for la in launches
        ], nbytes


def unshifted(text: str) -> str:
    planted, count = re.subn(r"k0 = ct\.astype\(ct\.load\(x, index=\(bid, 0\), shape=\((\d+), 1\).*\n",
                             r"k0 = ct.full((\1, 1), 0.0, dtype=ct.float32)\n", text)  # fmt: skip
    assert count == 1, "nothing planted"
    return planted


@pytest.mark.parametrize("dims", [(6, 1000), (4, 4096)], ids=lambda d: "x".join(map(str, d)))
def test_a_naive_sum_of_squares_fails_on_the_offset_rows(monkeypatch, dims):
    monkeypatch.setattr(opbase, "ROW_FORWARD", CONFIGS["8192-shifted_sums"])
    g = layernorm(dims, "float32", "training")
    data = inputs(g, awkward_rows(*dims, "float32"))
    registry = Registry()
    registry.register(NaiveLayernorm())
    planted = sigdnn.validate(g, data, executor=emulated_executor(registry=registry, engine="planted.naive_layernorm"))
    assert set(planted.builders.values()) == {"planted.naive_layernorm"}
    assert not planted.passed, "E[x^2] - mean^2 went unnoticed on rows of 1e3 + noise"
    assert sigdnn.validate(g, data, executor=emulated_executor(registry=registry, engine="cutile.layernorm")).passed
