"""The cuTile pointwise kernels, run on the CPU through the emulator, against the reference.

Every mode of docs/ops.md, in every io dtype a kernel takes, goes through
``sigdnn.validate`` (node by node, the reference's tolerances) with the
generated kernel text executed block by block by
``sigdnn.plan_builders.cutile.emulator``: the code generator's formulas,
conversions, layouts and tails are checked here; tests/gpu/ runs the same
kernels on a GPU.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.dtypes import round_to
from sigdnn.errors import NoPlanError
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.plan_builders.cutile import emulator

FLOAT_MODES = [m for m in MODES if m != "gen_index"]
POSITIVE_ONLY = {"sqrt", "rsqrt", "log", "pow"}  # NaN on negatives is right, but leaves little to compare
N = 3000  # three blocks of 1024, the last one partial


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def single(mode: str, io_dtype: str, dims=(N,), compute: str = "float32", **params) -> sigdnn.Graph:
    info = MODES[mode]
    g = sigdnn.Graph(mode, io_dtype=io_dtype, compute_dtype=compute)
    ins = [g.tensor(f"x{k}", dims=dims) for k in range(info.arity)]
    g.pointwise(mode, *ins, **params).set_output(True).set_name("y")
    return g


def inputs(g: sigdnn.Graph, mode: str, seed: int, lo: float = -2.0, hi: float = 2.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = {}
    for t in g.inputs:
        dtype = g.dtype_of(t)
        values = rng.uniform(lo, hi, t.dims)
        if mode in POSITIVE_ONLY and t.name == "x0":
            values = np.abs(values)
        data[t.name] = round_to(values, dtype)
    return data


def check(g: sigdnn.Graph, data: dict[str, np.ndarray]) -> sigdnn.validation.ValidationReport:
    ex = emulated_executor()
    report = sigdnn.validate(g, data, executor=ex)
    assert all(b == "cutile.pointwise" for b in report.builders.values()), report.builders
    assert report.passed, report.table()
    return report


@pytest.mark.parametrize("io_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_every_mode_matches_the_reference(mode, io_dtype):
    g = single(mode, io_dtype)
    check(g, inputs(g, mode, seed=hash((mode, io_dtype)) % 2**32))


@pytest.mark.parametrize("mode", ["add", "mul", "gelu_fwd", "sigmoid_bwd", "relu_fwd", "exp", "cmp_lt"])
@pytest.mark.parametrize("io_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_io(mode, io_dtype):
    g = single(mode, io_dtype)
    check(g, inputs(g, mode, seed=3))


@pytest.mark.parametrize("mode", ["gelu_fwd", "gelu_bwd", "gelu_approx_tanh_fwd", "gelu_approx_tanh_bwd",
                                  "swish_bwd", "sigmoid_fwd", "softplus_fwd", "elu_fwd", "erf", "tanh_bwd"])  # fmt: skip
def test_wide_range_float32(mode):
    """Tails (where the textbook formulas cancel or underflow) within float32's normal range."""
    g = single(mode, "float32")
    check(g, inputs(g, mode, seed=4, lo=-9.0, hi=9.0))


@pytest.mark.parametrize(
    ("io_dtype", "dy"), itertools.product(["bfloat16", "float32"], [1.5, 12096.0, 1e8, 1e20, 1e36])
)
@pytest.mark.parametrize("mode", ["swish_bwd", "sigmoid_bwd", "tanh_bwd", "softplus_bwd", "elu_bwd", "gelu_bwd",
                                  "gelu_approx_tanh_bwd"])  # fmt: skip
def test_gradient_tails_keep_their_digits_under_large_gradients(mode, io_dtype, dy):
    """dy e^-|x| (...) far below 0 (x down to -150) is normal or a bfloat16 subnormal long after e^-|x| leaves
    float32: a Llama layer's dgate at gate -104, dy 12096 is -8.5e-40, which the fast formulas, forming e^-|x|
    first, flushed to 0 (and lost digits up to 1% from e^-|x|'s subnormals); they now raise the exponential and
    lower the product last, and only where the raised one is at most 1 (a dy of 1e36 would overflow before). The
    raised exponential ends at e^-174 (tanh's e^-2|x| at x = -87), which dy = 1e36 outlives: that case stops at
    x = -80."""
    g = single(mode, io_dtype)
    x = round_to(np.linspace(-80.0 if dy > 1e30 else -150.0, -40.0, N), g.dtype_of(g.inputs[1]))
    check(g, {"x0": round_to(np.full(N, dy), g.dtype_of(g.inputs[0])), "x1": x})


def test_gelu_derivatives_near_their_root():
    """Both gelu derivatives cross 0 near x = -0.752, where Phi + x phi cancels: dense points there."""
    for mode in ("gelu_bwd", "gelu_approx_tanh_bwd"):
        g = single(mode, "float32")
        x = np.linspace(-0.80, -0.70, N).astype(np.float32)
        check(g, {"x0": np.ones(N, np.float32), "x1": x})


@pytest.mark.parametrize("io_dtype", ["float16", "bfloat16"])
def test_fast_formulas_near_the_roots(io_dtype):
    """16-bit results take the fast formulas; their roots still need the window (every representable x there)."""
    for mode, centre in (("gelu_bwd", -0.7518), ("gelu_approx_tanh_bwd", -0.7525), ("swish_bwd", -1.2785)):
        g = single(mode, io_dtype)
        x = round_to(np.linspace(centre - 0.02, centre + 0.02, N), g.dtype_of(g.inputs[1]))
        check(g, {"x0": round_to(np.full(N, 1.5), g.dtype_of(g.inputs[0])), "x1": x})


MUFU_REL_ERROR = 2.0**-21  # PTX: ex2.approx within 2 ulps, rcp.approx within 1; twice the larger


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("io_dtype", ["float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("mode", ["erf", "gelu_fwd", "gelu_bwd", "softplus_fwd", "log"])
def test_fast_tier_on_every_narrow_input(mode, io_dtype, sign, monkeypatch):
    """Every bit pattern of a 16- or 8-bit input (x of gelu_bwd, dy = 1), with every approximate exp2 / exp /
    reciprocal off by MUFU_REL_ERROR in one direction: the short fast-tier formulas keep the reference's tolerance."""
    off = np.float32(1.0 + sign * MUFU_REL_ERROR)

    def skewed(fn):
        def apply(*args, **kw):
            r = fn(*args, **kw)
            approx = fn is emulator.exp2 or kw.get("rounding_mode") == emulator.RoundingMode.APPROX
            return (r * off).astype(r.dtype) if approx and r.dtype == np.float32 else r

        return apply

    for name in ("exp2", "exp", "truediv"):
        monkeypatch.setattr(emulator, name, skewed(getattr(emulator, name)))
    bits = np.uint16 if io_dtype in ("float16", "bfloat16") else np.uint8
    n = int(np.iinfo(bits).max) + 1
    g = single(mode, io_dtype, dims=(n,))
    x = np.arange(n, dtype=bits).view(g.dtype_of(g.inputs[0]).numpy)
    check(g, {"x0": x} if mode != "gelu_bwd" else {"x0": np.ones_like(x), "x1": x})


POW_EXPONENTS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 7.0, -7.0, 1.5,
                 10.0, -10.0, 100.0, -100.0]  # fmt: skip


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("io_dtype", ["float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"])
def test_fast_pow_on_every_base(io_dtype, sign, monkeypatch):
    """Every base against IEEE pow's special exponents and a sample (every pair for fp8), exp2 skewed as above;
    docs/experiments.md records a 2020-exponent run."""
    off = np.float32(1.0 + sign * MUFU_REL_ERROR)
    exact = emulator.exp2
    monkeypatch.setattr(emulator, "exp2", lambda x, **kw: (exact(x, **kw) * off).astype(np.float32))
    probe = single("pow", io_dtype, dims=(1,))
    dtype = probe.dtype_of(probe.inputs[0]).numpy
    bits = np.uint16 if io_dtype in ("float16", "bfloat16") else np.uint8
    every = np.arange(int(np.iinfo(bits).max) + 1, dtype=bits).view(dtype)
    if bits is np.uint8:
        y = every.astype(np.float64)
    else:
        rng = np.random.default_rng(11)
        y = np.concatenate([POW_EXPONENTS, every[rng.choice(every.size, 16)].astype(np.float64),
                            rng.uniform(-160.0, 160.0, 12)])  # fmt: skip
    y = round_to(y, probe.dtype_of(probe.inputs[1]))
    g = single("pow", io_dtype, dims=(every.size * y.size,))
    check(g, {"x0": np.tile(every, y.size), "x1": np.repeat(y, every.size)})


def _ordinary_pow_inputs(io_dtype: str) -> tuple[sigdnn.Graph, np.ndarray, np.ndarray]:
    """Every normal, finite, positive base against finite exponents: tiles that all take fast_pow's short way."""
    probe = single("pow", io_dtype, dims=(1,))
    dtype = probe.dtype_of(probe.inputs[0]).numpy
    bits = np.uint16 if io_dtype in ("float16", "bfloat16") else np.uint8
    every = np.arange(int(np.iinfo(bits).max) + 1, dtype=bits).view(dtype)
    wide = every.astype(np.float64)
    bases = every[np.isfinite(wide) & (wide >= np.finfo(np.float32).tiny)]
    rng = np.random.default_rng(12)
    y = round_to(np.concatenate([[0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -7.0], rng.uniform(-160.0, 160.0, 9)]),
                 probe.dtype_of(probe.inputs[1]))  # fmt: skip
    g = single("pow", io_dtype, dims=(bases.size * y.size,))
    return g, np.tile(bases, y.size), np.repeat(y, bases.size)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("io_dtype", ["float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"])
def test_fast_pow_on_ordinary_tiles(io_dtype, sign, monkeypatch):
    """Tiles of ordinary bases and exponents only (the usual tile: one branch, no special cases), exp2 skewed."""
    off = np.float32(1.0 + sign * MUFU_REL_ERROR)
    exact = emulator.exp2
    monkeypatch.setattr(emulator, "exp2", lambda x, **kw: (exact(x, **kw) * off).astype(np.float32))
    g, x, y = _ordinary_pow_inputs(io_dtype)
    check(g, {"x0": x, "x1": y})


@pytest.mark.parametrize(
    ("base", "exponent"),
    [(0.0, 2.0), (-0.0, -3.0), (-2.0, 3.0), (-2.0, 0.5), (np.inf, 2.0), (np.nan, 1.0), (1e-40, 0.5),
     (1.0, np.inf), (1.0, np.nan), (2.0, -np.inf), (0.5, np.inf), (-1.0, np.inf)],
)  # fmt: skip
def test_fast_pow_sends_a_tile_with_one_odd_element_the_long_way(base, exponent):
    """One special element among ordinary ones: its whole tile must take fast_pow_any (IEEE pow's cases)."""
    g, x, y = _ordinary_pow_inputs("bfloat16")
    x, y = x.copy(), y.copy()
    for k in range(5, x.size, 4099):  # one element in most tiles, at varying lanes
        x[k], y[k] = base, exponent
    check(g, {"x0": x, "x1": y})


def _fmod_near_multiples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 (a, b) with a within an ulp or two of k b (k up to 2^20, any sign, b over 60 binades): the
    quotients where an approximate quotient lands one off either way, and a few a < b."""
    rng = np.random.default_rng(seed)
    b = (rng.uniform(1.0, 2.0, n) * 2.0 ** rng.integers(-30, 30, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    k = rng.integers(0, 2**20, n).astype(np.float64) * rng.choice([1.0, -1.0], n)
    a = (k * b.astype(np.float64)).astype(np.float32)
    a = np.nextafter(a, a + rng.choice([-1.0, 0.0, 1.0], n).astype(np.float32) * np.abs(a) + 1.0)
    a[::17] = (b[::17] * rng.uniform(0.0, 1.0, b[::17].size)).astype(np.float32)  # a < b: the quotient 0 or 1
    return a, b


def _emulated_y(g: sigdnn.Graph, data: dict[str, np.ndarray]) -> np.ndarray:
    ex = emulated_executor()
    return ex.execute(ex.prepare(g), data)["y"]


def test_fmod_is_exact_on_usual_tiles():
    """float32 mod of near-multiples, every tile usual (one quotient and one correction): equal to C's fmod, bit
    for bit (the reference's tolerance would hide a last-bit slip)."""
    a, b = _fmod_near_multiples(3 * 1024, seed=21)
    g = single("mod", "float32", dims=a.shape)
    got = _emulated_y(g, {"x0": a, "x1": b})
    np.testing.assert_array_equal(got, np.fmod(a, b))  # == : exact, -0 and 0 alike


@pytest.mark.parametrize(
    ("a", "b"),
    [(3e30, 1e-3), (1.0, 0.0), (np.inf, 2.0), (2.0, np.inf), (np.nan, 2.0), (2.0, np.nan), (5.0, 1e-40), (-0.0, 3.0)],
)  # fmt: skip
def test_fmod_sends_a_tile_with_one_odd_element_the_long_way(a, b):
    """A huge quotient, b zero, subnormal or infinite, a infinite, NaNs: that element's tile takes cuTile's mod."""
    x, y = _fmod_near_multiples(3 * 1024, seed=22)
    x[5::1031], y[5::1031] = a, b
    g = single("mod", "float32", dims=x.shape)
    got = _emulated_y(g, {"x0": x, "x1": y})
    want = np.fmod(x, y)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{np.flatnonzero(~same)[:5]}: got {got[~same][:5]}, want {want[~same][:5]}"


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("quotient", [2.0**21, 2.0**22.5, 2.0**23.9])
def test_fmod_with_quotients_past_2_21_takes_the_long_way(monkeypatch, sign, quotient):
    """Past 2^21 an approximate reciprocal (here skewed by 2^-21) puts floor(|a| rcp|b|) more than one from the
    quotient: such a tile must take cuTile's mod, exact."""
    off = np.float32(1.0 + sign * MUFU_REL_ERROR)
    exact = emulator.truediv

    def skewed(x, y, **kw):
        r = exact(x, y, **kw)
        return (r * off).astype(r.dtype) if kw.get("rounding_mode") == emulator.RoundingMode.APPROX else r

    monkeypatch.setattr(emulator, "truediv", skewed)
    a, b = _fmod_near_multiples(3 * 1024, seed=23)
    a[7::1021] = (b[7::1021].astype(np.float64) * (quotient + 0.5)).astype(np.float32)
    g = single("mod", "float32", dims=a.shape)
    np.testing.assert_array_equal(_emulated_y(g, {"x0": a, "x1": b}), np.fmod(a, b))


@pytest.mark.parametrize("beta", [0.3, 2.5, -1.5])
@pytest.mark.parametrize("io_dtype", ["float16", "bfloat16"])
def test_fast_softplus_beta_on_every_16_bit_input(io_dtype, beta):
    """The fast softplus multiplies by 1/beta: every input, beta's of either sign."""
    g = single("softplus_fwd", io_dtype, dims=(65536,), softplus_beta=beta)
    check(g, {"x0": np.arange(65536, dtype=np.uint16).view(g.dtype_of(g.inputs[0]).numpy)})


@pytest.mark.parametrize("n", [1, 1023, 1024, 1025, 3 * 1024])
def test_whole_and_partial_tiles(n):
    """Whole tiles go unchecked, the last partial one checked: every split of a size."""
    g = single("gelu_fwd", "bfloat16", dims=(n,))
    check(g, inputs(g, "gelu_fwd", seed=n))


def test_swish_derivative_near_its_root():
    g = single("swish_bwd", "float32", swish_beta=1.7)
    z0 = -1.2784645427610738 / 1.7
    x = np.linspace(z0 - 0.05, z0 + 0.05, N).astype(np.float32)
    check(g, {"x0": np.ones(N, np.float32), "x1": x})


SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -3.0, 8.0, -8.0, 1e-30]


@pytest.mark.parametrize("io_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_special_values(mode, io_dtype):
    """inf, NaN, signed zeros: NaN/inf positions must match the reference's exactly (every combination)."""
    arity = MODES[mode].arity
    grid = np.array(list(itertools.product(SPECIALS, repeat=arity))).T
    g = single(mode, io_dtype, dims=(grid.shape[1],))
    check(g, {f"x{k}": round_to(grid[k], g.dtype_of(g.inputs[k])) for k in range(arity)})


@pytest.mark.parametrize(
    "params",
    [
        {"relu_lower_clip": 0.0, "relu_upper_clip": 6.0},
        {"relu_lower_clip": -1.0, "relu_lower_clip_slope": 0.1},
        {"relu_lower_clip": 0.5, "relu_upper_clip": 1.5, "relu_lower_clip_slope": 0.25},
    ],
)
@pytest.mark.parametrize("mode", ["relu_fwd", "relu_bwd"])
def test_relu_parameters(mode, params):
    g = single(mode, "float32", **params)
    check(g, inputs(g, mode, seed=5))


@pytest.mark.parametrize(("mode", "param"), [("elu_fwd", "elu_alpha"), ("elu_bwd", "elu_alpha"),
                                             ("softplus_fwd", "softplus_beta"), ("softplus_bwd", "softplus_beta"),
                                             ("swish_fwd", "swish_beta"), ("swish_bwd", "swish_beta")])  # fmt: skip
def test_activation_parameters(mode, param):
    g = single(mode, "float32", **{param: 0.3})
    check(g, inputs(g, mode, seed=6, lo=-6.0, hi=6.0))


INTEGER_MODES = ["add", "sub", "mul", "add_square", "max", "min", "div", "mod", "abs", "neg", "identity",
                 "cmp_eq", "cmp_lt", "cmp_ge", "logical_and", "logical_or", "logical_not", "binary_select"]  # fmt: skip


@pytest.mark.parametrize("io_dtype", ["int32", "int8", "int64"])
@pytest.mark.parametrize("mode", INTEGER_MODES)
def test_integer_compute(mode, io_dtype):
    g = single(mode, io_dtype, compute=io_dtype if io_dtype != "int8" else "int32")
    rng = np.random.default_rng(7)
    data = {t.name: rng.integers(-9, 10, t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}
    data["x1" if "x1" in data else "x0"][:10] = 0  # division and remainder by zero give 0
    check(g, data)


@pytest.mark.parametrize("mode", ["logical_and", "logical_or", "logical_not", "cmp_neq", "binary_select"])
def test_bool_io(mode):
    g = sigdnn.Graph(mode, io_dtype="bool", compute_dtype="float32")
    ins = [g.tensor(f"x{k}", dims=(N,)) for k in range(MODES[mode].arity)]
    g.pointwise(mode, *ins).set_output(True).set_name("y")
    rng = np.random.default_rng(8)
    check(g, {t.name: rng.random(N) < 0.5 for t in g.inputs})


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gen_index(axis):
    g = sigdnn.Graph("gen_index", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(3, 40, 50), layout="ROW_MAJOR")
    y = g.pointwise("gen_index", x, axis=axis)
    y.set_output(True).set_name("y").set_data_type("int32")
    check(g, {"x": np.zeros((3, 40, 50), np.float32)})


def test_float_compute_declines_int32_io():
    g = single("add", "int32", compute="float32")
    with pytest.raises(NoPlanError, match="inexactly in float32"):
        emulated_executor().prepare(g)


def test_float64_compute_is_declined_with_the_reason():
    g = single("exp", "float32", compute="float64")
    with pytest.raises(NoPlanError, match="compute dtype float64"):
        emulated_executor().prepare(g)


def test_one_kernel_text_per_key_across_sizes():
    """Sizes that split alike share a kernel; sizes that split differently (whole tiles, a partial one) never do."""
    from sigdnn.plan_builders.cutile.codegen import generate
    from sigdnn.plan_builders.cutile.pointwise import node_spec

    def spec(n, dims=None):
        g = single("exp", "float16", dims=dims or (n,))
        return node_spec(g.nodes[0], g)[0]

    t = spec(1).tile
    assert t == 2048  # exp is one of the heavy modes (codegen.HEAVY_TILE)
    assert spec(t - 48).text_key() == spec(0, dims=(40, 50)).text_key()
    assert spec(2 * t).text_key() == spec(0, dims=(4, t // 2)).text_key()
    keys = {spec(n).text_key() for n in (t - 48, t, 2 * t, 2 * t + 1)}
    assert len(keys) == 3  # tail only; whole tiles only (t and 2t); both
    texts = {generate(spec(n)) for n in (t - 48, t, 2 * t + 1)}
    assert len(texts) == 3


@pytest.mark.parametrize(
    ("x_dims", "b_dims", "read"),
    [
        ((3, 2048), (1, 2048), "row"),  # a row bias: each tile one aligned run of it
        ((2, 3, 32, 32), (1, 3, 1, 1), "constant"),  # per channel over NCHW with H*W a multiple of the tile
        ((2, 3, 5, 7), (1, 3, 1, 1), "gather"),
    ],
)
def test_broadcast_reads_by_tile_shape(x_dims, b_dims, read):
    from sigdnn.plan_builders.cutile.codegen import generate
    from sigdnn.plan_builders.cutile.pointwise import node_spec

    g = sigdnn.Graph("bias", io_dtype="bfloat16", compute_dtype="float32")
    g.pointwise("mul", g.tensor("x0", dims=x_dims), g.tensor("x1", dims=b_dims)).set_output(True).set_name("y")
    text = generate(node_spec(g.nodes[0], g)[0])
    assert {"row": "// 1024,), shape=(1024,)", "constant": "shape=(1,))", "gather": "ct.gather(x1"}[read] in text
    check(g, inputs(g, "mul", seed=11))


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_stores_round_past_the_range_as_the_reference(dtype: str) -> None:
    """cuTile's fp8 conversion saturates; the stores must give the reference's NaN (e4m3) and inf (e5m2)."""
    edges = [448.0, 449.0, 463.99, 464.0, 464.01, 480.0, 1e3, 57344.0, 61439.99, 61440.0, 65536.0, 1e30]
    values = np.array(edges + [-v for v in edges] + [np.inf, -np.inf, np.nan, 0.0], np.float32)
    g = sigdnn.Graph("store", io_dtype=dtype, compute_dtype="float32")
    g.pointwise("identity", g.tensor("x", values.shape, dtype="float32")).set_output(True).set_name("y")
    ex = emulated_executor()
    got = np.asarray(ex.execute(ex.prepare(g), {"x": values})["y"])
    want = round_to(values.astype(np.float64), sigdnn.dtypes.as_data_type(dtype))
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True), (got, want)
