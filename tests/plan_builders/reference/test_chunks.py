"""Block-wise execution of the reference: every element written once, same result as whole-tensor math; only
elementwise nodes are split by output block, and narrow plans round each block once into the outputs."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.reference.base import chunks


@pytest.mark.parametrize(
    "shape", [(5,), (1 << 16,), (200_001,), (3, 170, 257), (2, 3, 70_001), (1, 1, 300_000), (7, 1, 1, 40_000)]
)
def test_chunks_cover_each_element_exactly_once(shape: tuple[int, ...]) -> None:
    hits = np.zeros(shape, dtype=np.int32)
    blocks = chunks(shape, target=1 << 14)
    for block in blocks:
        hits[block] += 1
        assert hits[block].size <= max(1 << 14, shape[-1])
    assert (hits == 1).all()
    assert len(blocks) >= hits.size // max(1 << 14, shape[-1])


@pytest.mark.parametrize("layout", [None, "NHWC"])
def test_large_broadcast_pointwise_matches_ieee_float32(layout: str | None) -> None:
    """f32 + f32 computed in float64 and rounded once is IEEE float32 addition, exactly."""
    rng = np.random.default_rng(0)
    g = sigdnn.Graph("big", io_dtype="float32")
    a = g.tensor("a", dims=(3, 64, 33, 129), layout=layout)
    b = g.tensor("b", dims=(1, 64, 1, 129))
    c = g.tensor("c", dims=(3, 1, 33, 1))
    s = g.pointwise("add", a, b, name="add")
    g.pointwise("mul", s, c, name="mul").set_output(True).set_name("y")
    xa, xb, xc = (rng.standard_normal(t.dims).astype(np.float32) for t in (a, b, c))
    y = sigdnn.Executor().run(g, {"a": xa, "b": xb, "c": xc})["y"]
    np.testing.assert_array_equal(y, (xa + xb) * xc)


def test_large_three_input_select_with_strided_output() -> None:
    rng = np.random.default_rng(1)
    g = sigdnn.Graph("sel", io_dtype="float16", compute_dtype="float32")
    a = g.tensor("a", dims=(2, 3, 70_001))
    b = g.tensor("b", dims=(1, 3, 1))
    m = g.tensor("m", dims=(2, 1, 70_001), dtype="bool")
    sel = g.pointwise("binary_select", a, b, m, name="sel")
    sel.set_stride((3 * 70_010, 70_010, 1))  # a virtual tensor with padded rows, in the executor's arena
    g.pointwise("identity", sel, name="copy").set_output(True).set_name("y")
    xa = rng.standard_normal(a.dims).astype(np.float16)
    xb = rng.standard_normal(b.dims).astype(np.float16)
    xm = rng.random(m.dims) < 0.5
    padded = np.full((2, 3, 70_010), np.nan, dtype=np.float16)
    y = padded[:, :, :70_001]  # the caller's output: a strided view
    sigdnn.Executor().run(g, {"a": xa, "b": xb, "m": xm, "y": y})
    np.testing.assert_array_equal(y, np.where(xm, xa, xb))
    assert np.isnan(padded[:, :, 70_001:]).all()


def test_large_nodes_that_are_not_elementwise_run_whole() -> None:
    """Outputs past one block (2^16 elements) of nodes whose outputs read more than the same-index inputs:
    cut into output blocks, gen_index along axis 0 would count from 0 in every block and a matmul would
    pair blocks of a and b that do not belong together. Integer-valued inputs make the float64 sums exact."""
    g = sigdnn.Graph("big", io_dtype="float32")
    idx = g.pointwise("gen_index", g.tensor("x", dims=(400, 300)), axis=0, name="idx")
    idx.set_output(True).set_name("i").set_data_type("int32")
    g.matmul(g.tensor("a", dims=(256, 64)), g.tensor("b", dims=(64, 512)), name="mm").set_output(True).set_name("c")
    rng = np.random.default_rng(6)
    a, b = (rng.integers(-8, 9, size=d).astype(np.float32) for d in ((256, 64), (64, 512)))
    got = sigdnn.Executor().run(g, {"x": np.zeros((400, 300), np.float32), "a": a, "b": b})
    np.testing.assert_array_equal(got["i"], np.broadcast_to(np.arange(400, dtype=np.int32)[:, None], (400, 300)))
    np.testing.assert_array_equal(got["c"], (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


# -- narrow plans: inputs read in their own dtype, outputs rounded block by block into the caller's array --


def _bfloat16_nearest_even(v: np.ndarray) -> np.ndarray:
    """float64 -> bfloat16 rounded once, to nearest even, in exact float64 arithmetic (normal range): the
    8-bit significand m * 2^8 rounded by rint is exactly representable, so nothing rounds twice."""
    import ml_dtypes

    m, e = np.frexp(v)
    return np.ldexp(np.rint(m * 256.0), e - 8).astype(ml_dtypes.bfloat16)


def test_a_narrow_plan_rounds_bfloat16_outputs_once() -> None:
    """float32 x, bfloat16 y: softmax's float64 values rounded once to bfloat16 (a ufunc writing into the
    bfloat16 output, ml_dtypes' cast, goes through float32 and misses ~2^-16 of them)."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal((256, 1024)).astype(np.float32)
    g = sigdnn.Graph("sm", io_dtype="float32")
    g.softmax(g.tensor("x", x.shape))[0].set_output(True).set_name("y").set_data_type("bfloat16")
    y = sigdnn.Executor().run(g, {"x": x})["y"]
    want = torch.softmax(torch.from_numpy(x.astype(np.float64)), dim=1).numpy()
    assert np.any(want.astype(np.float32).astype(y.dtype) != _bfloat16_nearest_even(want))  # rounding twice shows
    np.testing.assert_array_equal(y.view(np.uint16), _bfloat16_nearest_even(want).view(np.uint16))


def test_a_narrow_plan_stores_the_values_its_math_returns() -> None:
    """Softmax writes y through its Sink and returns stats (logsumexp, keepdims) for the plan to store."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(7).standard_normal((64, 100)).astype(np.float32)
    g = sigdnn.Graph("sm", io_dtype="float32")
    y, stats = g.softmax(g.tensor("x", x.shape), generate_stats=True)
    y.set_output(True).set_name("y")
    stats.set_output(True).set_name("stats")
    got = sigdnn.Executor().run(g, {"x": x})
    wide = torch.from_numpy(x.astype(np.float64))
    np.testing.assert_array_equal(got["y"], torch.softmax(wide, dim=1).numpy().astype(np.float32))
    np.testing.assert_array_equal(got["stats"], torch.logsumexp(wide, dim=1, keepdim=True).numpy().astype(np.float32))
