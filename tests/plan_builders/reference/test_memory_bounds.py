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


# -- narrow plans: no float64 copy of a whole input or output -------------------------------------------


def _steady_peak(g: sigdnn.Graph, pack: dict[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]]:
    """Peak traced bytes of a second run into preallocated outputs (the first run's allocations, the plan's
    scratch and the table of a tabulated op, are not the node's working memory), and its results."""
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    outs = ex.execute(plan, pack)
    pack = {**pack, **{name: np.empty_like(a) for name, a in outs.items()}}
    ex.execute(plan, pack)
    return traced_peak(lambda: ex.execute(plan, pack)), pack


def _rows_f32(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)


def test_softmax_and_layernorm_keep_float64_to_blocks() -> None:
    """2048 x 1024 float32 (8 MiB): one float64 copy of x or y is 16 MiB (staging both: 32 MiB); a block is
    1 MiB (2^17 elements), a few per core in flight."""
    x = _rows_f32(2048, 1024)
    full64 = x.size * 8
    g = sigdnn.Graph("sm", io_dtype="float32")
    g.softmax(g.tensor("x", x.shape))[0].set_output(True).set_name("y")
    peak, got = _steady_peak(g, {"x": x})
    assert peak < full64 / 2, (peak, full64)
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(got["y"], (e / e.sum(axis=1, keepdims=True)).astype(np.float32))

    g = sigdnn.Graph("ln", io_dtype="float32")
    s, b = np.full((1, 1024), 1.5, np.float32), np.full((1, 1024), 0.25, np.float32)
    y = g.layernorm("inference", g.tensor("x", x.shape), g.tensor("s", s.shape), g.tensor("b", b.shape))[0]
    y.set_output(True).set_name("y")
    peak, got = _steady_peak(g, {"x": x, "s": s, "b": b})
    assert peak < full64 / 2, (peak, full64)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.layer_norm(torch.from_numpy(wide), (1024,), None, None, 1e-5).numpy() * 1.5 + 0.25
    np.testing.assert_allclose(got["y"], want, rtol=2**-23, atol=2**-24)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batchnorm_writes_y_by_blocks(layout: str) -> None:
    x = np.random.default_rng(2).standard_normal((8, 64, 64, 64)).astype(np.float32)  # 8 MiB f32, 16 MiB f64
    g = sigdnn.Graph("bn", io_dtype="float32")
    ps = [g.tensor(n, (1, 64, 1, 1)) for n in ("s", "b")]
    y = g.batchnorm(g.tensor("x", x.shape, layout=layout), *ps, epsilon=1e-5)[0]
    y.set_output(True).set_name("y")
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    pack = {"x": x, "s": np.ones((1, 64, 1, 1), np.float32), "b": np.zeros((1, 64, 1, 1), np.float32)}
    peak, got = _steady_peak(g, pack)
    assert peak < x.size * 8 / 2, (peak, x.size * 8)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.batch_norm(torch.from_numpy(x.astype(np.float64)), None, None, training=True).numpy()
    np.testing.assert_allclose(got["y"], want, rtol=2**-23, atol=2**-24)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kernel", [1, 3])
def test_conv_fprop_and_dgrad_round_y_by_chunks(layout: str, kernel: int) -> None:
    """x and dx [8, 32, 48, 48] float32 (2.25 MiB; 4.5 MiB in float64): neither is ever staged in float64.

    A 3x3 conv still makes its padded float64 copy of the input (the widening happens there) and one
    im2col chunk of up to CHUNK_BYTES; staging x and y in float64 would add 9 MiB to that."""
    from sigdnn.plan_builders.reference.math import windows

    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 32, 48, 48)).astype(np.float32)
    w = rng.standard_normal((32, 32, kernel, kernel)).astype(np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        w = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    full64 = x.size * 8
    pad = kernel // 2
    bound = full64 / 2 + (8 * 32 * 50 * 50 * 8 + windows.CHUNK_BYTES if kernel == 3 else 0)
    g = sigdnn.Graph("f", io_dtype="float32")
    y = g.conv_fprop(g.tensor("x", x.shape, layout=layout), g.tensor("w", w.shape, layout=layout), padding=[pad] * 2)
    y.set_output(True).set_name("y")
    peak, got = _steady_peak(g, {"x": x, "w": w})
    assert peak < bound, (peak, bound)
    torch = pytest.importorskip("torch")
    xt, wt = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64))
    want = torch.nn.functional.conv2d(xt, wt, padding=pad).numpy().astype(np.float32)
    np.testing.assert_allclose(got["y"], want, rtol=2**-23, atol=1e-6)

    g = sigdnn.Graph("d", io_dtype="float32")
    dx = g.conv_dgrad(
        g.tensor("dy", x.shape, layout=layout), g.tensor("w", w.shape, layout=layout), padding=[pad] * 2, dims=x.shape
    )
    dx.set_output(True).set_name("dx")
    peak, got = _steady_peak(g, {"dy": x, "w": w})
    assert peak < bound, (peak, bound)
    want = torch.nn.grad.conv2d_input(x.shape, wt, xt, padding=pad).numpy().astype(np.float32)
    np.testing.assert_allclose(got["dx"], want, rtol=2**-23, atol=1e-6)


def test_a_tabulated_unary_op_allocates_no_float64_blocks() -> None:
    """The float64 path holds several float64 blocks per core (gelu's erfc temporaries: 6.6 MB here);
    the lookup holds each block's indices (512 KiB of intp) and nothing else of that size."""
    x = np.random.default_rng(4).standard_normal(1 << 20).astype(np.float16)  # 2 MiB; a float64 block is 512 KiB
    g = sigdnn.Graph("gelu", io_dtype="float16")
    g.pointwise("gelu_fwd", g.tensor("x", x.shape)).set_output(True).set_name("y")
    peak, got = _steady_peak(g, {"x": x})
    assert peak < 3 * base.CHUNK_ELEMENTS * 8, peak  # one block's indices per core
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64))).numpy().astype(np.float16)
    np.testing.assert_allclose(got["y"].astype(np.float64), want.astype(np.float64), rtol=2**-10, atol=2**-24)


def _round_into(out: np.ndarray, values: np.ndarray) -> None:
    np.copyto(out, values, casting="unsafe")


@pytest.mark.parametrize(("kernel", "layout"), [(1, "NCHW"), (1, "NHWC"), (3, "NCHW"), (3, "NHWC")])
def test_a_conv_into_a_sink_holds_one_float64_piece_of_y_at_a_time(
    kernel: int, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """conv_forward with a Sink rounds each float64 piece of y (an image for a 1x1 conv, a chunk of
    positions otherwise) into the output and lets it go before the next. Pieces here are 0.45-0.6 MiB;
    everything else traced is x's widened image (1x1) or the im2col scratch (3x3, unpadded), so a second
    live piece of y breaks the bound."""
    from sigdnn.plan_builders.reference.math import windows
    from sigdnn.plan_builders.reference.math.conv_forward import conv_forward
    from sigdnn.plan_builders.reference.math.sink import Sink

    monkeypatch.setattr(windows, "CHUNK_BYTES", 1 << 16)  # 3x3: chunks of 2048 positions, one image each
    rng = np.random.default_rng(8)
    c, k, size = (32, 32, 48) if kernel == 1 else (4, 36, 42)
    x = rng.standard_normal((4, c, size, size)).astype(np.float32)
    w = rng.standard_normal((k, c, kernel, kernel)).astype(np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    out = size - kernel + 1
    y = Sink(np.empty((4, k, out, out), np.float32), _round_into)
    geometry = ((0, 0), (0, 0), (1, 1), (1, 1))
    conv_forward(x, w, *geometry, y)  # warm
    piece = k * out * out * 8  # one image of y in float64 (a chunk is one image here too)
    other = c * size * size * 8 if kernel == 1 else windows.chunk_bytes(c * kernel * kernel * 8)
    peak = traced_peak(lambda: conv_forward(x, w, *geometry, y))
    assert peak < other + 1.5 * piece, (peak, other, piece)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)))
    np.testing.assert_allclose(y.array, want.numpy().astype(np.float32), rtol=2**-23, atol=1e-6)
