"""Every cuTile pointwise mode on the GPU against the reference, through sigdnn.validate.

The same cases as tests/plan_builders/cutile/ (which run the generated
kernels through the CPU emulator), here compiled by cuTile and run on the
device: the GPU's own exp/log/sin/tanh/pow, FMA contraction, cuTile's
bounds-checked loads, gathers and stores. Sizes are not multiples of the
tile; outputs are poisoned first, so an element a kernel skips shows up.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sigdnn
from sigdnn.dtypes import round_to
from sigdnn.graph.ops.pointwise import MODES

pytestmark = pytest.mark.gpu

FLOAT_MODES = [m for m in MODES if m != "gen_index"]
POSITIVE_ONLY = {"sqrt", "rsqrt", "log", "pow"}
N = 100003  # whole tiles (1024 or, for heavy modes, 2048 elements) and a partial one


def single(mode: str, io_dtype: str, dims=(N,), compute: str = "float32", **params) -> sigdnn.Graph:
    g = sigdnn.Graph(mode, io_dtype=io_dtype, compute_dtype=compute)
    ins = [g.tensor(f"x{k}", dims=dims) for k in range(MODES[mode].arity)]
    g.pointwise(mode, *ins, **params).set_output(True).set_name("y")
    return g


def inputs(g: sigdnn.Graph, mode: str, seed: int, lo: float = -2.0, hi: float = 2.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = {}
    for t in g.inputs:
        values = rng.uniform(lo, hi, t.dims)
        if mode in POSITIVE_ONLY and t.name == "x0":
            values = np.abs(values)
        data[t.name] = round_to(values, g.dtype_of(t))
    return data


POISON = {"float32": np.uint32(0x7FC00001), "float16": np.uint16(0x7E01), "bfloat16": np.uint16(0x7FC1)}


def check(g: sigdnn.Graph, data: dict[str, np.ndarray], builder: str = "cutile.pointwise") -> None:
    report = sigdnn.validate(g, data)
    assert all(b == builder for b in report.builders.values()), report.builders
    assert report.passed, report.table()
    t = g.outputs[0]
    dtype = g.dtype_of(t)
    if str(dtype) in POISON:  # every element written: a NaN poison never survives where the reference has a number
        ex = sigdnn.Executor("gpu")
        out = ex.memory.context.to_device(np.full(t.dims, POISON[str(dtype)]).view(dtype.numpy))
        ex.execute(ex.prepare(g), {**data, "y": out}, to_host=False)
        got = ex.memory.context.to_host(out)
        want = sigdnn.Executor("reference").run(g, data)["y"]
        survived = np.isnan(got.astype(np.float64)) & ~np.isnan(want.astype(np.float64))
        assert not survived.any(), f"unwritten elements at {np.flatnonzero(survived)[:10]}"


@pytest.mark.parametrize("io_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_every_mode_matches_the_reference(mode, io_dtype):
    g = single(mode, io_dtype)
    check(g, inputs(g, mode, seed=abs(hash((mode, io_dtype))) % 2**32))


@pytest.mark.parametrize("mode", ["add", "mul", "gelu_fwd", "sigmoid_bwd", "relu_fwd", "exp", "cmp_lt"])
@pytest.mark.parametrize("io_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_io(mode, io_dtype):
    g = single(mode, io_dtype)
    check(g, inputs(g, mode, seed=3))


WIDE = ["gelu_fwd", "gelu_bwd", "gelu_approx_tanh_fwd", "gelu_approx_tanh_bwd", "swish_bwd", "sigmoid_fwd",
        "softplus_fwd", "elu_fwd", "erf", "tanh_bwd", "exp", "log", "sin", "tan", "pow"]  # fmt: skip


@pytest.mark.parametrize("mode", WIDE)
def test_wide_range_float32(mode):
    g = single(mode, "float32")
    check(g, inputs(g, mode, seed=4, lo=-9.0, hi=9.0))


@pytest.mark.parametrize(
    ("io_dtype", "dy"), itertools.product(["bfloat16", "float32"], [1.5, 12096.0, 1e8, 1e20, 1e36])
)
@pytest.mark.parametrize("mode", ["swish_bwd", "sigmoid_bwd", "tanh_bwd", "softplus_bwd", "elu_bwd", "gelu_bwd",
                                  "gelu_approx_tanh_bwd"])  # fmt: skip
def test_gradient_tails_keep_their_digits_under_large_gradients(mode, io_dtype, dy):
    """As the emulated test: the GPU's flushing exp2 and its products keep dy e^-|x| (...) where it is normal or
    a bfloat16 subnormal, x down to -150 (-80 for dy = 1e36, past which tanh's tail leaves the raised exp)."""
    g = single(mode, io_dtype)
    x = round_to(np.linspace(-80.0 if dy > 1e30 else -150.0, -40.0, N), g.dtype_of(g.inputs[1]))
    check(g, {"x0": round_to(np.full(N, dy), g.dtype_of(g.inputs[0])), "x1": x})


def test_gelu_derivatives_near_their_root():
    for mode in ("gelu_bwd", "gelu_approx_tanh_bwd"):
        g = single(mode, "float32")
        x = np.linspace(-0.80, -0.70, N).astype(np.float32)
        check(g, {"x0": np.ones(N, np.float32), "x1": x})


SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -3.0, 8.0, -8.0, 1e-30, 100.0, -100.0]
POW_SPECIALS = [(0.0, 2.0), (-0.0, -3.0), (-2.0, 3.0), (-2.0, 0.5), (np.inf, 2.0), (np.nan, 1.0), (1.0, np.inf),
                (1.0, np.nan), (2.0, -np.inf), (-1.0, np.inf), (0.5, np.inf)]  # fmt: skip


def test_fmod_is_exact_on_near_multiples():
    """float32 mod where a lies within an ulp or two of k b (k up to 2^20): the one-quotient way must equal C's
    fmod bit for bit (it relies on the FMA being contracted), and tiles with huge quotients, b zero, subnormal
    or infinite, or NaNs (one in every 1031 elements) take cuTile's mod."""
    rng = np.random.default_rng(31)
    n = N
    b = (rng.uniform(1.0, 2.0, n) * 2.0 ** rng.integers(-30, 30, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    k = rng.integers(0, 2**20, n).astype(np.float64) * rng.choice([1.0, -1.0], n)
    a = (k * b.astype(np.float64)).astype(np.float32)
    a = np.nextafter(a, a + rng.choice([-1.0, 0.0, 1.0], n).astype(np.float32) * np.abs(a) + 1.0)
    odd = [(3e30, 1e-3), (1.0, 0.0), (np.inf, 2.0), (2.0, np.inf), (np.nan, 2.0), (5.0, 1e-40)]
    for j, i in enumerate(range(5, n, 1031 * 7)):
        a[i], b[i] = odd[j % len(odd)]
    g = single("mod", "float32", dims=(n,))
    ex = sigdnn.Executor("gpu")
    got = ex.execute(ex.prepare(g), {"x0": a, "x1": b})["y"]
    np.testing.assert_array_equal(got, np.fmod(a, b))


@pytest.mark.parametrize("io_dtype", ["float16", "bfloat16"])
def test_fast_pow_tiles_with_one_special_element(io_dtype):
    """16-bit pow: a tile of ordinary bases and exponents takes the short formula, one with a special element
    (one in most tiles here, at varying lanes) IEEE pow's cases; both kinds in one launch."""
    g = single("pow", io_dtype)
    data = inputs(g, "pow", seed=7, lo=0.25, hi=2.0)
    x, y = data["x0"].copy(), data["x1"].copy()
    for j, k in enumerate(range(5, N, 4099)):
        x[k], y[k] = POW_SPECIALS[j % len(POW_SPECIALS)]
    check(g, {"x0": x, "x1": y})


@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_special_values(mode):
    arity = MODES[mode].arity
    values = SPECIALS if arity == 1 else SPECIALS[:12]
    grid = np.array(list(itertools.product(values, repeat=arity))).T
    g = single(mode, "float32", dims=(grid.shape[1],))
    check(g, {f"x{k}": grid[k].astype(np.float32) for k in range(arity)})


@pytest.mark.parametrize(
    "params",
    [{"relu_lower_clip": 0.0, "relu_upper_clip": 6.0}, {"relu_lower_clip": 0.5, "relu_upper_clip": 1.5,
                                                        "relu_lower_clip_slope": 0.25}],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["relu_fwd", "relu_bwd"])
def test_relu_parameters(mode, params):
    g = single(mode, "float32", **params)
    check(g, inputs(g, mode, seed=5))


@pytest.mark.parametrize("mode", ["add", "mul", "div", "mod", "max", "cmp_lt", "logical_and", "binary_select", "abs"])
@pytest.mark.parametrize("io_dtype", ["int32", "int8"])
def test_integer_compute(mode, io_dtype):
    g = single(mode, io_dtype, compute="int32")
    rng = np.random.default_rng(7)
    data = {t.name: rng.integers(-9, 10, t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}
    data["x1" if "x1" in data else "x0"][:10] = 0
    check(g, data)


@pytest.mark.parametrize("mode", ["logical_or", "logical_not", "binary_select"])
def test_bool_io(mode):
    g = sigdnn.Graph(mode, io_dtype="bool", compute_dtype="float32")
    ins = [g.tensor(f"x{k}", dims=(N,)) for k in range(MODES[mode].arity)]
    g.pointwise(mode, *ins).set_output(True).set_name("y")
    rng = np.random.default_rng(8)
    check(g, {t.name: rng.random(N) < 0.5 for t in g.inputs})


def test_gen_index():
    g = sigdnn.Graph("gen_index", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(3, 40, 50), layout="ROW_MAJOR")
    g.pointwise("gen_index", x, axis=1).set_output(True).set_name("y").set_data_type("int32")
    check(g, {"x": np.zeros((3, 40, 50), np.float32)})


LAYOUTS = [
    # (x dims, x layout or strides, y dims, y layout or strides)
    ((8, 64, 7, 5), "NCHW", (1, 64, 1, 1), None),  # bias over NCHW
    ((8, 64, 7, 5), "NHWC", (1, 64, 1, 1), None),  # bias over channels-last
    ((8, 64, 7, 5), "NHWC", (8, 64, 7, 5), "NCHW"),  # mixed layouts: a gather
    ((3, 1, 5), None, (1, 4, 1), None),  # outer product
    ((1000,), None, (1,), None),  # scalar-like
    ((6, 1025), None, (1025,), None),  # rank-padded row
    ((65, 33), None, (65, 33), (1, 65)),  # transposed
    ((4, 1024), None, (1, 1024), None),  # whole tiles only (of 1024 and of 2048)
]


@pytest.mark.parametrize(("xd", "xl", "yd", "yl"), LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_broadcast_and_strided_layouts(xd, xl, yd, yl, dtype):
    g = sigdnn.Graph("layout", io_dtype=dtype, compute_dtype="float32")

    def tensor(name, dims, layout):
        if isinstance(layout, tuple):
            return g.tensor(name, dims=dims, strides=layout)
        return g.tensor(name, dims=dims, layout=layout) if layout else g.tensor(name, dims=dims)

    x, y = tensor("x", xd, xl), tensor("y", yd, yl)
    g.pointwise("gelu_fwd", g.pointwise("add", x, y)).set_output(True).set_name("z")
    report = sigdnn.validate(g, seed=9, executor=sigdnn.Executor("gpu", fusion=False))
    assert report.passed, report.table()


def test_torch_buffers_in_and_out():
    torch = pytest.importorskip("torch")
    g = single("swish_fwd", "bfloat16", dims=(4, 5000), swish_beta=1.5)
    x = torch.randn(4, 5000, device="cuda", dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    ex = sigdnn.Executor("gpu")
    got = ex.execute(ex.prepare(g), {"x0": x, "y": y}, to_host=False)
    torch.cuda.synchronize()
    assert got["y"] is y
    want = sigdnn.Executor("reference").run(g, {"x0": x.float().cpu().numpy().astype(g.dtype_of(g.inputs[0]).numpy)})
    got_host = y.view(torch.int16).cpu().numpy().view(want["y"].dtype)
    assert np.abs(got_host.astype(np.float64) - want["y"].astype(np.float64)).max() <= 2**-7 * 8


def test_kernels_are_shared_across_sizes_and_nodes():
    from sigdnn.plan_builders.cutile.kernels import CUTILE

    a, b = single("exp", "float16", dims=(1000,)), single("exp", "float16", dims=(77, 5))
    ex = sigdnn.Executor("gpu")
    pa, pb = ex.prepare(a), ex.prepare(b)
    assert pa.steps[0].plan.launch.kernel is pb.steps[0].plan.launch.kernel
    assert CUTILE.kernel(pa.steps[0].plan.launch.spec) is pa.steps[0].plan.launch.kernel
