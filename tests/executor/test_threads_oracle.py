"""One plan run from several threads at once, each result checked against torch float64, not a serial run.

A race (a shared arena, a shared temporary) would mix threads' values; a
serial run of the same code would share any bug in the math, so the oracle
is independent: torch in float64, rounded once per tensor as the reference
rounds.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import sigdnn

torch = pytest.importorskip("torch")


def graph() -> sigdnn.Graph:
    g = sigdnn.Graph("threads", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x, b = g.tensor("x", (64, 300)), g.tensor("b", (1, 300))
    t = g.pointwise("mul", x, x, name="sq")
    t = g.pointwise("add", t, b, name="bias")
    t = g.pointwise("tanh_fwd", t, name="tanh")
    g.pointwise("sub", t, x, name="out").set_output(True).set_name("y")
    return g


def oracle(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    def f32(t: torch.Tensor) -> torch.Tensor:
        return t.to(torch.float32).to(torch.float64)

    tx, tb = torch.from_numpy(x).double(), torch.from_numpy(b).double()
    t = f32(tx * tx)
    t = f32(t + tb)
    t = f32(torch.tanh(t))
    return (t - tx).to(torch.float32).numpy()


def test_threads_share_a_plan_and_each_gets_its_own_right_answer() -> None:
    ex = sigdnn.Executor()
    plan = ex.prepare(graph())
    rng = np.random.default_rng(7)
    packs = [
        {"x": rng.uniform(-2, 2, (64, 300)).astype(np.float32), "b": rng.uniform(-1, 1, (1, 300)).astype(np.float32)}
        for _ in range(8)
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda p: [ex.execute(plan, p)["y"] for _ in range(5)], packs))
    for pack, runs in zip(packs, results):
        want = oracle(pack["x"], pack["b"])
        for got in runs:
            np.testing.assert_array_equal(got, want)
