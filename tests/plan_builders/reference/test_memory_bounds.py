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


@pytest.mark.parametrize("cap", [200_000, 300_000])
def test_conv_tap_columns_stay_under_the_chunk_cap(monkeypatch: pytest.MonkeyPatch, cap: int) -> None:
    """x [1, 4, 64, 64], w [4, 4, 3, 3]: one tap's columns take 128 KiB; all nine would take 1.1 MiB."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 4, 64, 64)), rng.standard_normal((4, 4, 3, 3))
    g = sigdnn.Graph("c", io_dtype="float64")
    y = g.conv_fprop(g.tensor("x", x.shape), g.tensor("w", w.shape), padding=[1, 1], name="conv")
    op, out_dims = g.nodes[0].op, y.dims
    monkeypatch.setattr(conv_fprop, "_CHUNK_BYTES", cap)
    got = conv_fprop.conv_fprop(x, w, op, out_dims)
    peak = traced_peak(lambda: conv_fprop.conv_fprop(x, w, op, out_dims))
    padded, out = 4 * 66 * 66 * 8, 4 * 64 * 64 * 8
    # padded x, y, one product, and the columns twice: np.matmul copies its broadcast operand (measured:
    # each tap a chunk holds adds 2 x 128 KiB). Uncapped, the nine taps take 1.45 MB here.
    assert peak < padded + 2 * out + 2 * cap + (64 << 10), peak
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    want = sum(
        np.einsum("kc,nchw->nkhw", w[:, :, r, s], xp[:, :, r : r + 64, s : s + 64]) for r in range(3) for s in range(3)
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("c", "groups", "kernel", "products"),
    [
        (8, 8, (3, 3), 1),  # depthwise: all nine taps in one product
        (3, 1, (3, 3), 1),  # a 3-channel first layer: likewise
        (3, 1, (5, 5), 2),  # 25 taps of 3 channels: 22 taps reach a contraction of 64
        (16, 1, (3, 3), 3),  # 16 channels: 4 taps make 64, so 4 + 4 + 1
        (64, 1, (3, 3), 9),  # 64 channels are long enough alone: one tap per product
        (64, 2, (1, 3), 2),  # 32 channels per group: 2 taps, then 1
    ],
)
def test_conv_gathers_just_enough_taps_for_a_contraction_of_64(
    monkeypatch: pytest.MonkeyPatch, c: int, groups: int, kernel: tuple[int, ...], products: int
) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, c, 6, 6)), rng.standard_normal((groups * 2, c // groups, *kernel))
    g = sigdnn.Graph("c", io_dtype="float64")
    y = g.conv_fprop(g.tensor("x", x.shape), g.tensor("w", w.shape), padding=[k // 2 for k in kernel], name="conv")
    calls = []
    matmul = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b: calls.append(a.shape[-1]) or matmul(a, b))
    got = conv_fprop.conv_fprop(x, w, g.nodes[0].op, y.dims)
    monkeypatch.undo()
    assert len(calls) == products
    torch = pytest.importorskip("torch")
    pad = [k // 2 for k in kernel]
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=pad, groups=groups).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("cap", "products"), [(270_000, 5), (262_143, 9), (400_000, 3)])
def test_the_cap_counts_eight_bytes_per_gathered_value(
    monkeypatch: pytest.MonkeyPatch, cap: int, products: int
) -> None:
    """x [1, 4, 64, 64]: one tap gathers 4 x 4096 float64 values, 131072 bytes; 9 taps under ``cap``."""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((1, 4, 64, 64)), rng.standard_normal((2, 4, 3, 3))
    g = sigdnn.Graph("c", io_dtype="float64")
    y = g.conv_fprop(g.tensor("x", x.shape), g.tensor("w", w.shape), padding=[1, 1], name="conv")
    monkeypatch.setattr(conv_fprop, "_CHUNK_BYTES", cap)
    calls = []
    matmul = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b: calls.append(1) or matmul(a, b))
    conv_fprop.conv_fprop(x, w, g.nodes[0].op, y.dims)
    assert len(calls) == products


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
