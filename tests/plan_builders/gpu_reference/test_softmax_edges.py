"""GPU reference softmax (gpu_reference/softmax.py) where its formula's branches matter, on the emulator: an
entry holding nearly all the mass (log-sum-exp by log1p, not log of a sum that rounds to 1), maxima off zero,
rows of +inf, all -inf and NaN. Oracles: the float64 formulas by hand, and the CPU reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gpu_reference_emulation import make_available, run_both

import sigdnn

INF = math.inf
ROWS = np.array(
    [
        [0.0, -40.0, -INF],  # one entry holds all but e^-40 of the mass
        [5.0, -35.0, 5.0],  # two maxima, away from 0
        [-3.0, -43.0, -INF],  # one entry holding nearly all the mass, its maximum off 0
        [INF, 1.0, -INF],
        [-INF, -INF, -INF],
        [math.nan, 1.0, 2.0],
    ],
    np.float32,
)


def _expected(log: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row by row, in float64 by hand, rounded once to float32."""
    t = math.exp(-40.0)
    lse0 = math.log1p(t)  # log(1 + e^-40): 4.248e-18, where log(1.0 + t) is 0
    lse1 = math.log(2.0) + math.log1p(t / 2)  # log(2 + e^-40) with the shift 5
    nan = math.nan
    if log:
        y = [[-lse0, -40.0 - lse0, -INF], [-lse1, -40.0 - lse1, -lse1], [-lse0, -40.0 - lse0, -INF]]
    else:
        y = [[1 / (1 + t), t / (1 + t), 0.0], [1 / (2 + t), t / (2 + t), 1 / (2 + t)], [1 / (1 + t), t / (1 + t), 0.0]]
    y += [[nan] * 3] * 3
    stats = [[lse0], [5.0 + lse1], [-3.0 + lse0], [INF], [-INF], [nan]]
    return np.array(y).astype(np.float32), np.array(stats).astype(np.float32)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_rows_at_the_edges_of_its_formula(monkeypatch: pytest.MonkeyPatch, log: bool) -> None:
    make_available(monkeypatch)
    g = sigdnn.Graph("sm", io_dtype="float32", compute_dtype="float32")
    for t in g.softmax(g.tensor("x", ROWS.shape), (1,), log=log, generate_stats=True, name="sm"):
        t.set_output(True)
    got, cpu = run_both(g, {"x": ROWS})
    y, stats = _expected(log)
    if log:
        assert y[0, 0] < 0.0 and y[2, 0] < 0.0  # the log1p term survives the rounding to float32
    np.testing.assert_array_equal(got["sm::y"], y)
    np.testing.assert_array_equal(got["sm::stats"], stats)
    np.testing.assert_array_equal(cpu["sm::y"], y)
    np.testing.assert_array_equal(cpu["sm::stats"], stats)
