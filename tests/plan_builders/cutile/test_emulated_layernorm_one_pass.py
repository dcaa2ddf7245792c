"""Layernorm forward with mean and variance from one reduction (``RowConfig.variance``), through the emulator.

The one-pass kernel shifts each row by its first element and combines
per-lane (count, mean, M2) triples with Chan's update (``row_kernel_source.CHAN``)
instead of reducing the mean and then the squared deviations. It must stay
within the reference's layernorm tolerances where shortcuts cancel: rows
far from zero beside their spread, a row whose first element is far from
the rest, constant rows and rows not a multiple of the tile (rows held in
several tiles take the two-pass kernel, and must pass the same rows; rows
walked in chunks merge each chunk's mean and M2 by the same update). Two shortcuts planted into the same kernel must fail on those rows,
or they prove nothing: E[x^2] - mean^2, and the cheaper one-pass sums of
x - x0 and (x - x0)^2.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import attrs
import numpy as np
import pytest
from emulated import emulated_executor, make_available
from norm_cases import awkward_rows, layernorm, layernorm_inputs

import sigdnn
from sigdnn.plan_builders.cutile import emulator, norms, row_kernel_source, tiling
from sigdnn.plan_builders.cutile.row_kernel_source import KernelHints
from sigdnn.plan_builders.cutile.tiling import RowConfig
from sigdnn.registry import Registry

# The benchmark's candidates (2 rows of 4096 a block at 16384 x 4096), one row a block, and the default's walk
# (rows past ROW_MAX in chunks of 2048: 9000 is four whole chunks and a masked one).
CONFIGS = {"8192o4chan": RowConfig(8192, KernelHints(occupancy=4), variance="chan"),
           "64chan": RowConfig(64, variance="chan"),
           "8192o4chank2048": RowConfig(8192, KernelHints(occupancy=4), variance="chan", walk=2048)}  # fmt: skip
DTYPES = ("float32", "bfloat16", "float16")


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def one_pass_text(g: sigdnn.Graph) -> str:
    (launch,), _ = norms.CutileLayernormBuilder().launches(g.nodes[0], g)
    return launch.source.text


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "dims", [(6, 1000), (4, 4096), (3, 37), (3, 9000), (3, 1100), (4, 5120)], ids=lambda d: "x".join(map(str, d))
)  # 1100 and 5120: held in five column tiles (the last of 1100's masked)
def test_one_pass_layernorm_matches_the_reference_on_awkward_rows(monkeypatch, config, dtype, dims):
    monkeypatch.setattr(tiling, "LAYERNORM_FORWARD", ((None, CONFIGS[config]),))
    g = layernorm(dims, dtype, "training")
    text = one_pass_text(g)
    if tiling.row_split(dims[1]) == (tiling.pow2(dims[1]), 1):  # held in one tile
        assert text.count("ct.reduce((") == 1 and "ct.sum(" not in text and "k0 = " in text, "not a one-pass kernel"
    elif dims[1] > tiling.ROW_MAX:  # walked: one read of the row for the statistics, one to write (loop + tail)
        assert text.count("ct.load(x,") == 4 and "delta * delta" in text, "walked statistics in more than one read"
    else:
        assert "ct.reduce(" not in text and "k0 = " not in text, "one pass over a row held in several tiles"
    report = sigdnn.validate(g, layernorm_inputs(g, awkward_rows(*dims, dtype)), executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.layernorm"}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [(6, 1000), (3, 9000), (3, 1100)], ids=lambda d: "x".join(map(str, d)))
def test_the_two_pass_kernel_passes_the_same_rows(monkeypatch, dtype, dims):
    """The rows ask no more of the one-pass kernel than the two-pass one meets."""
    monkeypatch.setattr(
        tiling,
        "LAYERNORM_FORWARD",
        tuple((w, attrs.evolve(c, variance="two_pass")) for w, c in tiling.LAYERNORM_FORWARD),
    )
    g = layernorm(dims, dtype, "training")
    text = one_pass_text(g)
    assert "ct.reduce(" not in text and "k0 = " not in text
    report = sigdnn.validate(g, layernorm_inputs(g, awkward_rows(*dims, dtype)), executor=emulated_executor())
    assert report.passed, report.table()


def _off_by_ulps(ulps: int) -> SimpleNamespace:
    """The emulator's ct with a reciprocal ``ulps`` float32 ulps off (the GPU's approximate MUFU.RCP: ~1)."""

    def truediv(x, y, **_):
        q = np.float32(np.float32(x) / np.float32(y))
        for _ in range(abs(ulps)):
            q = np.nextafter(q, np.float32(np.inf if ulps > 0 else -np.inf), dtype=np.float32)
        return q

    return SimpleNamespace(truediv=truediv, maximum=emulator.maximum, RoundingMode=emulator.RoundingMode)


@pytest.mark.parametrize("ulps", [0, 2, -2])
def test_chan_combination_of_unequal_groups_is_exact_where_squares_cancel(ulps):
    """The combine alone, on groups of counts 3 and 5 of shifted values (the emulator's tree only meets equal
    counts; the GPU's may not), with its reciprocal exact or 2 ulps off either way."""
    chan = eval(row_kernel_source.CHAN, {"ct": _off_by_ulps(ulps)})
    x = (1e4 + np.random.default_rng(2).standard_normal(8)).astype(np.float32)
    shifted = (x - x[0]).astype(np.float64)  # exact in float32
    a, b = shifted[:3], shifted[3:]
    group = [
        np.float32(v) for v in (3, a.mean(), ((a - a.mean()) ** 2).sum(), 5, b.mean(), ((b - b.mean()) ** 2).sum())
    ]
    n, mean, m2 = chan(*group)
    exact = x.astype(np.float64)
    assert n == 8 and x[0] + mean == pytest.approx(exact.mean(), abs=1e-3)
    assert m2 == pytest.approx(((exact - exact.mean()) ** 2).sum(), rel=1e-6)
    if ulps == 0:  # a masked lane (count 0, mean 0) changes nothing, on either side
        assert chan(np.float32(0), np.float32(0), np.float32(0), *group[3:]) == tuple(group[3:])
        assert chan(*group[3:], np.float32(0), np.float32(0), np.float32(0)) == tuple(group[3:])


def _planted(text: str, what: str) -> str:
    """The Chan reduction swapped for var = E[xs^2] - E[xs]^2, xs = x (shift 0) or x - x0."""
    n = re.search(r"var = q / (\S+)", text).group(1)
    sums = (f"m = ct.sum(xs, axis=1, keepdims=True) / {n}\n"
            f"    var = ct.sum(xs * xs, axis=1, keepdims=True) / {n} - m * m\n")  # fmt: skip
    planted, count = re.subn(r"_, m, q = ct\.reduce\(.*\n", sums, text)
    planted, dropped = re.subn(r" *var = q / .*\n", "", planted)
    assert count == dropped == 1, "nothing planted"
    if what == "E[x^2] - mean^2":
        planted, count = re.subn(r"k0 = ct\.astype\(ct\.load\(x, index=\(bid, 0\), shape=\((\d+), 1\).*\n",
                                 r"k0 = ct.full((\1, 1), 0.0, dtype=ct.float32)\n", planted)  # fmt: skip
        assert count == 1, "no shift planted"
    return planted


@pytest.mark.parametrize("what", ["E[x^2] - mean^2", "shifted sums"])
@pytest.mark.parametrize("dims", [(6, 1000), (4, 4096)], ids=lambda d: "x".join(map(str, d)))
def test_one_pass_shortcuts_fail_on_the_awkward_rows(monkeypatch, what, dims):
    monkeypatch.setattr(tiling, "LAYERNORM_FORWARD", ((None, CONFIGS["8192o4chan"]),))

    class Planted(norms.CutileLayernormBuilder):
        name, engine_id, library = "planted.layernorm", 30011, "planted"

        def launches(self, node, graph):
            launches, nbytes = super().launches(node, graph)
            return [attrs.evolve(la, source=attrs.evolve(la.source, text=_planted(la.source.text, what)))
                    for la in launches], nbytes  # fmt: skip

    g = layernorm(dims, "float32", "training")
    data = layernorm_inputs(g, awkward_rows(*dims, "float32"))
    registry = Registry()
    registry.register(Planted())
    planted = sigdnn.validate(g, data, executor=emulated_executor(registry=registry, engine="planted.layernorm"))
    assert set(planted.builders.values()) == {"planted.layernorm"}
    assert not planted.passed, f"{what} went unnoticed"
    assert sigdnn.validate(g, data, executor=emulated_executor(registry=registry, engine="cutile.layernorm")).passed


def test_an_unknown_variance_is_refused():
    with pytest.raises(ValueError, match="variance 'welford'"):
        row_kernel_source.norm_forward(64, 1, 64, 1e-5, True, True, (), variance="welford", k=1, tiles=1)
