"""Memory bounds of the reference, tested by traced peak allocation rather than by results.

Block-wise elementwise execution keeps a node's float64 temporaries to a few
blocks of CHUNK_ELEMENTS, whatever the tensor size; the conv keeps its
gathered tap columns under its chunk cap. Both can be broken with every
result unchanged, so only the allocation peak can catch it.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.reference import base, conv_fprop


def traced_peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_elementwise_nodes_run_in_blocks() -> None:
    n = 1 << 20  # 1M float32 elements: one float64 temporary of the whole tensor is 8 MiB
    g = sigdnn.Graph("big", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (n,)), g.tensor("b", (n,))
    g.pointwise("gelu_fwd", g.pointwise("add", a, b, name="sum"), name="gelu").set_output(True).set_name("y")
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    pack = {"a": np.linspace(-4, 4, n, dtype=np.float32), "b": np.full(n, 0.5, np.float32)}
    pack["y"] = np.empty(n, np.float32)
    ex.execute(plan, pack)  # warm: first-call allocations are not the node's working memory
    arena = plan.memory.peak_bytes  # the virtual tensor "sum": 4 MiB
    peak = traced_peak(lambda: ex.execute(plan, pack))
    block = base.CHUNK_ELEMENTS * 8
    assert peak < arena + 12 * block, (peak, arena, block)  # a few float64 blocks (1/32 of one full temporary)
    x = pack["a"].astype(np.float64) + 0.5
    sum32 = x.astype(np.float32).astype(np.float64)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.gelu(torch.from_numpy(sum32)).numpy().astype(np.float32)
    np.testing.assert_allclose(pack["y"], want, rtol=2**-23, atol=2**-149 * 2)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_columns_stay_under_the_chunk_cap(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """x [2, 16, 64, 64], w [16, 16, 3, 3]: the full im2col matrix takes 9.4 MB; a 256 KiB cap keeps it to chunks."""
    from sigdnn.plan_builders.reference.math import windows

    rng = np.random.default_rng(0)
    g = sigdnn.Graph("c", io_dtype="float64")
    x = g.tensor("x", (2, 16, 64, 64), layout=layout)
    w = g.tensor("w", (16, 16, 3, 3), layout=layout)
    g.conv_fprop(x, w, padding=[1, 1], name="conv").set_output(True).set_name("y")
    pack = {"x": rng.standard_normal(x.dims), "w": rng.standard_normal(w.dims)}
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    full_columns = 2 * 64 * 64 * 16 * 9 * 8
    tensors = (2 * 16 * 66 * 66 + 2 * 16 * 64 * 64 + 16 * 16 * 9) * 8  # padded x, y, w in float64
    cap = 256 << 10
    monkeypatch.setattr(windows, "CHUNK_BYTES", cap)
    monkeypatch.setattr(windows, "MAX_CHUNK_BYTES", cap)
    monkeypatch.setattr(windows, "MIN_CHUNK_POSITIONS", 1)
    got = ex.execute(plan, pack)["y"]
    peak = traced_peak(lambda: ex.execute(plan, pack))
    # the caller's y, padded x and its transposes, a chunk of columns and its product: far below the full matrix
    assert peak < 2 * tensors + 4 * cap, (peak, tensors, full_columns)
    assert peak < full_columns
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.conv2d(torch.from_numpy(pack["x"]), torch.from_numpy(pack["w"]), padding=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_reference_conv_declines_integer_tensors() -> None:
    from sigdnn.errors import NotSupported
    from sigdnn.runtime import Device

    g = sigdnn.Graph("c", io_dtype="float32")
    g.conv_fprop(g.tensor("x", (1, 2, 4, 4)), g.tensor("w", (2, 2, 3, 3)), padding=[1, 1], name="conv")
    builder = conv_fprop.ReferenceConvFprop()
    builder.check(g.nodes[0], g, Device())  # floats: accepted
    g.tensor_by_name("w").set_data_type("int8")
    with pytest.raises(NotSupported, match=r"node 'conv': port 'w' \(tensor 'w'\) is int8"):
        builder.check(g.nodes[0], g, Device())
