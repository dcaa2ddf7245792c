"""cuTile pointwise kernels against NumPy float64 math rounded to the dtype.

Outputs are poisoned with NaN before every launch, and inputs never hold NaN
unless a test says so, so an element the kernel skipped shows up as NaN.
Skips (with the reason) where cuda.core, a GPU or cuda.tile is missing.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from sigdnn.plan_builders.cutile.pointwise import ReluParams, pointwise, prepare
from sigdnn.runtime.cuda import (
    BFLOAT16,
    DeviceArray,
    GpuContext,
    gpu_unavailable_reason,
)

pytestmark = pytest.mark.gpu


def _skip_reason() -> str | None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        return reason
    try:
        import cuda.tile  # noqa: F401
    except Exception as exc:
        return f"cuda.tile is not importable ({type(exc).__name__}: {exc})"
    return None


_REASON = _skip_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": BFLOAT16,
}
MODES = ("add", "mul", "relu_fwd", "tanh_fwd")
# Largest ulp distance allowed per mode for a 16-bit / float32 output: the
# kernels round a float32 result once more, and tanh is not correctly rounded.
MAX_ULP = {"add": (1, 0), "mul": (1, 0), "relu_fwd": (0, 0), "tanh_fwd": (1, 2)}


@pytest.fixture(scope="module")
def ctx() -> GpuContext:
    return GpuContext(0)


def round_to(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round float64 to ``dtype`` once (bfloat16 via round-to-odd float32, no double rounding)."""
    x = np.asarray(x, np.float64)
    if dtype == BFLOAT16:
        f32 = x.astype(np.float32)
        with np.errstate(invalid="ignore"):
            inexact = (f32.astype(np.float64) != x) & np.isfinite(x)
            over = np.abs(f32.astype(np.float64)) > np.abs(x)
        bits = np.where(over & inexact, np.nextafter(f32, np.float32(0)), f32).view(np.uint32)
        f32 = np.where(inexact, bits | 1, bits).view(np.float32)
        return f32.astype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def reference(mode: str, xs: list[np.ndarray], out_dtype: np.dtype, relu: ReluParams | None = None):
    a = [x.astype(np.float64) for x in xs]
    with np.errstate(all="ignore"):
        if mode == "add":
            r = a[0] + a[1]
        elif mode == "mul":
            r = a[0] * a[1]
        elif mode == "tanh_fwd":
            r = np.tanh(a[0])
        else:
            p = relu or ReluParams()
            x = a[0]
            hi = np.inf if p.upper is None else p.upper
            below = p.lower if p.slope == 0 else p.lower + p.slope * (x - p.lower)
            r = np.where(x <= p.lower, below, np.where(x >= hi, hi, x))
    return round_to(r, out_dtype)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between equal-dtype float arrays."""
    bits = a.dtype.itemsize * 8
    utype = {16: np.uint16, 32: np.uint32}[bits]

    def ordered(x: np.ndarray) -> np.ndarray:
        u = np.ascontiguousarray(x).view(utype).astype(np.int64)
        mag = u & ((1 << (bits - 1)) - 1)
        return np.where(u >> (bits - 1), -mag, mag)

    return np.abs(ordered(a) - ordered(b))


def assert_matches(got: np.ndarray, want: np.ndarray, max_ulp: int, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    nan_g, nan_w = np.isnan(g64), np.isnan(w64)
    assert np.array_equal(nan_g, nan_w), f"{what}: NaN at {np.flatnonzero(nan_g != nan_w)[:10]} (unwritten or wrong)"
    ok = ~nan_w
    d = ulp_distance(got[ok], want[ok])
    if d.size and d.max() > max_ulp:
        i = int(np.argmax(d))
        raise AssertionError(
            f"{what}: {int((d > max_ulp).sum())} elements off by > {max_ulp} ulp; worst "
            f"{d[i]} ulp: got {g64[ok][i]!r}, want {w64[ok][i]!r}"
        )


def random(rng: np.random.Generator, shape, dtype: np.dtype, scale: float = 3.0) -> np.ndarray:
    x = rng.standard_normal(shape) * scale
    x[x == 0] = 0.5  # never test on zeros
    return x.astype(np.float32).astype(dtype)


def poisoned(ctx: GpuContext, shape, dtype: np.dtype) -> DeviceArray:
    out = ctx.empty(shape, dtype)
    ctx.copy_into(out, np.full(shape, np.nan, dtype))
    return out


def run(ctx, mode, hosts, out_dtype, out_shape=None, relu=None, tile=None, views=None):
    ins = views or [ctx.to_device(h) for h in hosts]
    out = poisoned(ctx, out_shape or hosts[0].shape, out_dtype)
    pointwise(mode, ins, out, ctx.stream, relu=relu, tile=tile)
    return ctx.to_host(out)


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 1000, 1000003])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("mode", MODES)
def test_packed(ctx, mode, dtype, n):
    dt = DTYPES[dtype]
    rng = np.random.default_rng(n)
    arity = 2 if mode in ("add", "mul") else 1
    hosts = [random(rng, (n,), dt) for _ in range(arity)]
    got = run(ctx, mode, hosts, dt)
    max_ulp = MAX_ULP[mode][dt == np.float32]
    assert_matches(got, reference(mode, hosts, dt), max_ulp, f"{mode} {dtype} n={n}")


@pytest.mark.parametrize("tile", [1024, 4096, 16384])
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_tails(ctx, tile, extra):
    """Lengths one short of, equal to and one past a multiple of the tile."""
    n = 3 * tile + extra
    rng = np.random.default_rng(tile + extra)
    hosts = [random(rng, (n,), np.dtype(np.float16)) for _ in range(2)]
    got = run(ctx, "add", hosts, np.dtype(np.float16), tile=tile)
    assert_matches(got, reference("add", hosts, np.dtype(np.float16)), 1, f"tile={tile} n={n}")


def test_mixed_dtypes(ctx):
    rng = np.random.default_rng(1)
    a, b = random(rng, (4099,), np.dtype(np.float16)), random(rng, (4099,), BFLOAT16)
    for out_dt in DTYPES.values():
        got = run(ctx, "mul", [a, b], out_dt)
        assert_matches(got, reference("mul", [a, b], out_dt), 1, f"f16*bf16->{out_dt}")


def test_multidim_packed_is_dense(ctx):
    rng = np.random.default_rng(2)
    a, b = (random(rng, (4, 5, 6, 7), np.dtype(np.float32)) for _ in range(2))
    devs = [ctx.to_device(a), ctx.to_device(b)]
    out = ctx.empty(a.shape, np.float32)
    assert prepare("add", devs, out).layout.dense
    assert_matches(
        run(ctx, "add", [a, b], np.dtype(np.float32)),
        reference("add", [a, b], a.dtype),
        0,
        "4-d",
    )


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [
        ((8, 64, 7, 5), (1, 64, 1, 1)),  # bias over NCHW
        ((3, 1, 5), (1, 4, 1)),  # outer product
        ((1000,), (1,)),  # scalar-like
        ((6, 5), (5,)),  # rank-padded
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_broadcast(ctx, shape_a, shape_b, dtype):
    dt = DTYPES[dtype]
    rng = np.random.default_rng(3)
    a, b = random(rng, shape_a, dt), random(rng, shape_b, dt)
    out_shape = np.broadcast_shapes(shape_a, shape_b)
    got = run(ctx, "add", [a, b], dt, out_shape=out_shape)
    want = reference("add", [np.broadcast_to(a, out_shape), np.broadcast_to(b, out_shape)], dt)
    assert_matches(got, want, MAX_ULP["add"][dt == np.float32], f"{shape_a}+{shape_b}")


def test_declines_more_than_four_collapsed_dims(ctx):
    a = ctx.empty((2, 3, 4, 5, 6), np.float32)
    b = ctx.empty((2, 1, 4, 1, 6), np.float32)
    with pytest.raises(ValueError, match="collapsed dims"):
        prepare("add", [a, b], ctx.empty((2, 3, 4, 5, 6), np.float32))


def test_strided_input_and_permuted_layouts(ctx):
    rng = np.random.default_rng(4)
    x = random(rng, (33, 65), np.dtype(np.float16))
    dev = ctx.to_device(x)
    xt = dev.as_strided((65, 33), (1, 65))  # a transposed view: strided path
    got = run(ctx, "tanh_fwd", [x.T], np.dtype(np.float16), views=[xt])
    assert_matches(got, reference("tanh_fwd", [x.T], np.dtype(np.float16)), 1, "transposed")

    # Same-order NHWC-packed operands: still one dense index space.
    n, c, h, w = 2, 3, 4, 5
    nhwc = (h * w * c, 1, w * c, c)
    a = random(rng, (n, h, w, c), np.dtype(np.float32))
    b = random(rng, (n, h, w, c), np.dtype(np.float32))
    da, db = ctx.to_device(a), ctx.to_device(b)
    va = da.as_strided((n, c, h, w), nhwc)
    vb = db.as_strided((n, c, h, w), nhwc)
    out_buf = poisoned(ctx, (n, h, w, c), np.dtype(np.float32))
    out = out_buf.as_strided((n, c, h, w), nhwc)
    launch = prepare("mul", [va, vb], out)
    assert launch.layout.dense
    launch([va, vb], out, ctx.stream_handle)
    got = ctx.to_host(out_buf)
    assert_matches(got, reference("mul", [a, b], a.dtype), 0, "nhwc")
    assert np.array_equal(ctx.to_host(out), got.transpose(0, 3, 1, 2))


def test_special_values(ctx):
    vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 65504.0, 1e-8, -3.0]
    for dtype, dt in DTYPES.items():
        a = np.array(vals, dt)
        b = np.array(vals[::-1], dt)
        for mode in MODES:
            hosts = [a, b] if mode in ("add", "mul") else [a]
            got = run(ctx, mode, hosts, dt)
            max_ulp = MAX_ULP[mode][dt == np.float32]
            assert_matches(got, reference(mode, hosts, dt), max_ulp, f"{mode} {dtype} specials")


@pytest.mark.parametrize(
    "params",
    [
        ReluParams(0.0, 6.0, 0.0),
        ReluParams(-1.0, None, 0.1),
        ReluParams(0.5, 2.0, 0.25),
    ],
)
def test_relu_params(ctx, params):
    rng = np.random.default_rng(5)
    x = random(rng, (5000,), np.dtype(np.float32))
    got = run(ctx, "relu_fwd", [x], np.dtype(np.float32), relu=params)
    want = reference("relu_fwd", [x], x.dtype, relu=params)
    if not params.slope:
        assert_matches(got, want, 0, repr(params))
        return
    # L + s(x - L) rounds each step in float32 and cancels near 0: bound the
    # error by the ulps of the terms, not of the (small) result.
    scale = np.maximum(abs(params.lower), np.abs(x)).astype(np.float32)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(err <= 2 * np.spacing(scale)), f"{params!r}: worst {np.max(err / np.spacing(scale)):.1f} ulp"


def test_in_place(ctx):
    rng = np.random.default_rng(6)
    a, b = random(rng, (70001,), BFLOAT16), random(rng, (70001,), BFLOAT16)
    da, db = ctx.to_device(a), ctx.to_device(b)
    pointwise("add", [da, db], da, ctx.stream)
    assert_matches(ctx.to_host(da), reference("add", [a, b], BFLOAT16), 1, "in place")


def test_empty(ctx):
    a = ctx.empty((0, 3), np.float32)
    out = ctx.empty((0, 3), np.float32)
    pointwise("relu_fwd", [a], out, ctx.stream)
    assert ctx.to_host(out).shape == (0, 3)


def test_round_trip_and_strided_to_host(ctx):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    d = ctx.to_device(x)
    assert np.array_equal(ctx.to_host(d), x)
    t = d.as_strided((4, 3, 2), (1, 4, 12))
    assert np.array_equal(ctx.to_host(t), x.transpose(2, 1, 0))
    bcast = d.as_strided((5, 4), (0, 1))
    assert np.array_equal(ctx.to_host(bcast), np.broadcast_to(x[0, 0], (5, 4)))
    bf = np.array([1.5, -2.25, 3.0], BFLOAT16)
    assert np.array_equal(ctx.to_host(ctx.to_device(bf)), bf)
    cai = ctx.to_device(bf).__cuda_array_interface__
    assert cai["typestr"] == "<V2" and cai["version"] == 3


def test_wrap_torch(ctx):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    for tdt in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.randn(12345, device="cuda", dtype=tdt)
        b = torch.randn(12345, device="cuda", dtype=tdt)
        c = torch.full_like(a, float("nan"))
        torch.cuda.synchronize()
        pointwise("add", [ctx.wrap(a), ctx.wrap(b)], ctx.wrap(c), ctx.stream)
        ctx.synchronize()
        want = (a.float() + b.float()).to(tdt)
        diff = (c.float() - want.float()).abs().max().item()
        assert diff == 0.0, f"{tdt}: max diff {diff}"
    # And back: torch reads a DeviceArray through __cuda_array_interface__.
    x = ctx.to_device(np.arange(10, dtype=np.float32))
    ctx.synchronize()
    assert torch.as_tensor(x, device="cuda").sum().item() == 45.0


class _DlpackOnly:
    """Exposes only the DLPack protocol of a tensor (as JAX-like producers do)."""

    def __init__(self, t) -> None:
        self._t = t

    def __dlpack__(self, **kwargs):
        return self._t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_wrap_dlpack(ctx):
    torch = pytest.importorskip("torch")
    for tdt, ndt in ((torch.float16, np.float16), (torch.bfloat16, BFLOAT16)):
        t = torch.arange(12, device="cuda", dtype=tdt).reshape(3, 4)[:, 1:]
        torch.cuda.synchronize()
        d = ctx.wrap(_DlpackOnly(t))
        assert d.shape == (3, 3) and d.strides == (4, 1) and d.dtype == ndt, d
        want = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:].astype(ndt)
        assert np.array_equal(ctx.to_host(d), want)


def test_builder_plan(ctx):
    """The registry path: builder check/build, then NodePlan.execute on DeviceArrays."""
    import sigdnn
    from sigdnn.plan_builders.cutile import builders
    from sigdnn.registry.contracts import BuildContext, Device
    from sigdnn.signature_keys import key_for

    [builder] = builders()
    assert builder.available() is None
    g = sigdnn.Graph("bias_relu", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 32, 6, 5))
    b = g.tensor("b", dims=(1, 32, 1, 1))
    z = g.pointwise("relu_fwd", g.pointwise("add", x, b))
    z.set_output(True)
    rng = np.random.default_rng(7)
    xh, bh = random(rng, x.dims, BFLOAT16), random(rng, b.dims, BFLOAT16)
    dev = Device("gpu", ctx)
    arrays = {x.uid: ctx.to_device(xh), b.uid: ctx.to_device(bh)}
    for node in g.nodes:
        key = key_for(node, g)
        assert builder.serves(key), key
        builder.check(node, g, dev)
        ports = node.op.ports()
        tensors = {p: g.tensors[u] for p, u in ports.items()}
        plan = builder.build(node, g, BuildContext(key=key, device=dev, tensors=tensors, graph=g))
        out_t = tensors["out_0"]
        arrays[out_t.uid] = poisoned(ctx, out_t.dims, g.dtype_of(out_t).numpy)
        plan.execute({p: arrays[u] for p, u in ports.items()}, ctx.stream)
    # The virtual sum takes the graph's compute dtype (float32): cuDNN's rule.
    y = reference("add", [xh, np.broadcast_to(bh, x.dims)], np.dtype(np.float32))
    want = reference("relu_fwd", [y], BFLOAT16)
    assert_matches(ctx.to_host(arrays[z.uid]), want, 1, "bias + relu via plans")


def test_executor_gpu_matches_reference():
    """End to end through sigdnn.Executor: the gpu backend picks these builders."""
    import sigdnn
    from sigdnn.executor.executor import Executor

    g = sigdnn.Graph("bias_relu_tanh", io_dtype="float16", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 16, 9, 7))
    b = g.tensor("b", dims=(1, 16, 1, 1))
    s = g.scalar("s", 0.5)
    z = g.pointwise("tanh_fwd", g.pointwise("mul", g.pointwise("relu_fwd", g.pointwise("add", x, b)), s))
    z.set_output(True).set_name("z")
    rng = np.random.default_rng(8)
    pack = {"x": random(rng, x.dims, np.dtype(np.float16)), "b": random(rng, b.dims, np.dtype(np.float16))}
    data = g.serialize()
    ref = Executor("reference")
    gpu = Executor("gpu")
    plan = gpu.prepare(data)
    assert {step.builder.name for step in plan.steps} == {"cutile.pointwise"}
    want = ref.execute(ref.prepare(data), pack)["z"]
    got = gpu.execute(plan, pack)["z"]
    assert_matches(got, want, 1, "executor gpu vs reference")


def test_wrap_cupy(ctx):
    cp = pytest.importorskip("cupy")
    a = cp.arange(1, 1001, dtype=cp.float16)
    out = cp.full(1000, cp.nan, dtype=cp.float16)
    cp.cuda.runtime.deviceSynchronize()
    pointwise("relu_fwd", [ctx.wrap(a - 500)], ctx.wrap(out), ctx.stream)
    ctx.synchronize()
    want = np.maximum(np.arange(1, 1001, dtype=np.float16) - np.float16(500), 0)
    assert np.array_equal(cp.asnumpy(out), want)


def test_compile_once_per_specialization(ctx):
    """Launches of one specialization share the kernel and compile constants cuTile caches its compile by.

    (Launch time, which a recompile would inflate, is measured in benchmarks/gpu_pointwise.py, not here:
    a test must not fail because a runner is slow.)
    """
    a = ctx.to_device(np.ones(4096, np.float32))
    out = ctx.empty((4096,), np.float32)
    launch = prepare("add", [a, a], out)
    again = prepare("add", [a, a], out)
    assert again.kernel is launch.kernel and again.consts == launch.consts and again.grid == launch.grid
    assert prepare("mul", [a, a], out).consts != launch.consts
    for _ in range(100):
        launch([a, a], out, ctx.stream_handle)
    ctx.synchronize()
    assert math.isclose(float(ctx.to_host(out)[0]), 2.0)
