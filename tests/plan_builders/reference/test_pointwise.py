"""The reference pointwise is exact: torch float64, rounded once, agrees within 1 ulp.

Every mode of sigdnn.graph.ops.pointwise.MODES is built through the public
API (sigdnn.Graph -> Executor("reference")) and compared with torch on the
same inputs upcast to float64, rounded once to the output dtype by the
independent ``round_exact`` (tests/oracles.py; torch's own float64 ->
bfloat16 cast goes through float32 and double-rounds). Floats must be within
1 ulp, NaN and inf exactly where torch has them; bool, index and integer
outputs must match exactly.

Where torch's float64 formula itself loses the answer (gelu for x << 0 takes
1 + erf(x/sqrt2) ~ 0; tanh/sigmoid backward take 1 - y with y ~ 1) the
oracle evaluates a cancellation-free rewrite *in torch*, and
``test_stable_oracles_agree_with_torch`` shows each rewrite equals torch's
function / autograd where torch is accurate. Backward modes are dx = dy *
f'(x) with f' from torch.autograd (grad_outputs = 1) or those rewrites.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import hypothesis.strategies as st
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp
from oracles import FORMATS, assert_ulp_close, round_exact

import sigdnn
from sigdnn.graph.ops.pointwise import MODES

torch = pytest.importorskip("torch")
F = torch.nn.functional

IO_DTYPES = ("float32", "float16", "bfloat16")
EXECUTOR = sigdnn.Executor("reference")
SQRT2 = math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
GELU_K = math.sqrt(2.0 / math.pi)
GELU_C = 0.044715
Tensor = Any  # torch.Tensor; torch is imported lazily so the module skips without it


# -- oracles (torch, float64) -------------------------------------------------


def _p(params: Mapping[str, float], name: str, default: float) -> float:
    return float(params.get(name, default))


def _relu_limits(p: Mapping[str, float]) -> tuple[float, float, float]:
    return _p(p, "relu_lower_clip", 0.0), _p(p, "relu_upper_clip", math.inf), _p(p, "relu_lower_clip_slope", 0.0)


def relu_fwd(x: Tensor, p: Mapping[str, float]) -> Tensor:
    """docs/ops.md: x <= L -> L + s(x - L); x >= U -> U; else x. s = 0 is plain relu (L, even at -inf)."""
    lo, hi, s = _relu_limits(p)
    below = torch.full_like(x, lo) if s == 0 else lo + s * (x - lo)
    return torch.where(x <= lo, below, torch.where(x >= hi, torch.full_like(x, hi), x))


def relu_grad(x: Tensor, p: Mapping[str, float]) -> Tensor:
    """docs/ops.md: s if x <= L; 0 if x >= U; else 1 (NaN falls to "else")."""
    lo, hi, s = _relu_limits(p)
    # Tensors, not Python scalars: torch.where of two scalars is float32, which would round s.
    one, zero, slope = (torch.full_like(x, v) for v in (1.0, 0.0, s))
    return torch.where(x <= lo, slope, torch.where(x >= hi, zero, one))


def autograd(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """f'(x) by torch.autograd in float64; the derivative at NaN is NaN.

    (torch's elu backward returns the incoming gradient for a NaN input.)
    """

    def fprime(x: Tensor) -> Tensor:
        with torch.enable_grad():
            xx = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(f(xx), xx, grad_outputs=torch.ones_like(xx))
        return torch.where(torch.isnan(x), math.nan, g)

    return fprime


def gelu_stable(x: Tensor) -> Tensor:
    """0.5 x (1 + erf(x/sqrt2)) as 0.5 x erfc(-x/sqrt2): no cancellation for x << 0."""
    return 0.5 * x * torch.special.erfc(-x / SQRT2)


def gelu_grad_stable(x: Tensor) -> Tensor:
    return 0.5 * torch.special.erfc(-x / SQRT2) + x * INV_SQRT_2PI * torch.exp(-0.5 * x * x)


def _gelu_tanh_u(x: Tensor) -> Tensor:
    return GELU_K * (x + GELU_C * x * x * x)


def gelu_tanh_stable(x: Tensor) -> Tensor:
    """0.5 x (1 + tanh u) = x sigmoid(2u)."""
    return x * torch.sigmoid(2 * _gelu_tanh_u(x))


def gelu_tanh_grad_stable(x: Tensor) -> Tensor:
    """d/dx x sigmoid(2u) = s + 2 x u' s (1 - s), s = sigmoid(2u), 1 - s = sigmoid(-2u)."""
    u = _gelu_tanh_u(x)
    du = GELU_K * (1 + 3 * GELU_C * x * x)
    s, t = torch.sigmoid(2 * u), torch.sigmoid(-2 * u)
    return s + 2 * x * du * s * t


def tanh_grad_stable(x: Tensor) -> Tensor:
    """1 - tanh^2 x as 1 / cosh^2 x (1 - y*y cancels for |x| > ~9)."""
    return 1.0 / torch.cosh(x) ** 2


def sigmoid_grad_stable(x: Tensor) -> Tensor:
    """sigma (1 - sigma) as sigma(x) sigma(-x) (1 - y cancels for x > ~20)."""
    return torch.sigmoid(x) * torch.sigmoid(-x)


def swish(x: Tensor, beta: float) -> Tensor:
    return x * torch.sigmoid(beta * x)


def _grad_mode(fprime: Callable[[Tensor, Mapping[str, float]], Tensor]) -> Callable[..., Tensor]:
    """A backward mode: (dy, x) -> dy * f'(x), as docs/ops.md defines it."""
    return lambda dy, x, p: dy * fprime(x, p)


Oracle = Callable[..., Tensor]
ORACLES: dict[str, Oracle] = {
    "add": lambda a, b, p: a + b,
    "sub": lambda a, b, p: a - b,
    "mul": lambda a, b, p: a * b,
    "div": lambda a, b, p: a / b,
    "add_square": lambda a, b, p: a + b * b,
    "max": lambda a, b, p: torch.maximum(a, b),
    "min": lambda a, b, p: torch.minimum(a, b),
    "mod": lambda a, b, p: torch.fmod(a, b),
    "pow": lambda a, b, p: torch.pow(a, b),
    "cmp_eq": lambda a, b, p: torch.eq(a, b),
    "cmp_neq": lambda a, b, p: torch.ne(a, b),
    "cmp_gt": lambda a, b, p: torch.gt(a, b),
    "cmp_ge": lambda a, b, p: torch.ge(a, b),
    "cmp_lt": lambda a, b, p: torch.lt(a, b),
    "cmp_le": lambda a, b, p: torch.le(a, b),
    "logical_and": lambda a, b, p: torch.logical_and(a, b),
    "logical_or": lambda a, b, p: torch.logical_or(a, b),
    "logical_not": lambda a, p: torch.logical_not(a),
    "abs": lambda a, p: torch.abs(a),
    "neg": lambda a, p: torch.neg(a),
    "ceil": lambda a, p: torch.ceil(a),
    "floor": lambda a, p: torch.floor(a),
    "sqrt": lambda a, p: torch.sqrt(a),
    "rsqrt": lambda a, p: torch.rsqrt(a),
    "reciprocal": lambda a, p: torch.reciprocal(a),
    "exp": lambda a, p: torch.exp(a),
    "log": lambda a, p: torch.log(a),
    "sin": lambda a, p: torch.sin(a),
    "cos": lambda a, p: torch.cos(a),
    "tan": lambda a, p: torch.tan(a),
    "erf": lambda a, p: torch.erf(a),
    "identity": lambda a, p: a.clone(),
    "relu_fwd": relu_fwd,
    "relu_bwd": _grad_mode(relu_grad),
    "tanh_fwd": lambda x, p: torch.tanh(x),
    "tanh_bwd": _grad_mode(lambda x, p: tanh_grad_stable(x)),
    "sigmoid_fwd": lambda x, p: torch.sigmoid(x),
    "sigmoid_bwd": _grad_mode(lambda x, p: sigmoid_grad_stable(x)),
    "elu_fwd": lambda x, p: F.elu(x, alpha=_p(p, "elu_alpha", 1.0)),
    "elu_bwd": _grad_mode(lambda x, p: autograd(lambda v: F.elu(v, alpha=_p(p, "elu_alpha", 1.0)))(x)),
    "gelu_fwd": lambda x, p: gelu_stable(x),
    "gelu_bwd": _grad_mode(lambda x, p: gelu_grad_stable(x)),
    "gelu_approx_tanh_fwd": lambda x, p: gelu_tanh_stable(x),
    "gelu_approx_tanh_bwd": _grad_mode(lambda x, p: gelu_tanh_grad_stable(x)),
    "softplus_fwd": lambda x, p: F.softplus(x, beta=_p(p, "softplus_beta", 1.0)),
    "softplus_bwd": _grad_mode(lambda x, p: autograd(lambda v: F.softplus(v, beta=_p(p, "softplus_beta", 1.0)))(x)),
    "swish_fwd": lambda x, p: swish(x, _p(p, "swish_beta", 1.0)),
    "swish_bwd": _grad_mode(lambda x, p: autograd(lambda v: swish(v, _p(p, "swish_beta", 1.0)))(x)),
    "binary_select": lambda a, b, mask, p: torch.where(mask != 0, a, b),
}
BOOL_OUT = {m for m, info in MODES.items() if info.category in ("compare", "logical")}

# Every mode once with its defaults, plus the attribute variants worth a look.
CASES: list[tuple[str, dict[str, float]]] = [(m, {}) for m in MODES if m != "gen_index"]
CASES += [
    (m, p)
    for m in ("relu_fwd", "relu_bwd")
    for p in (
        {"relu_upper_clip": 6.0},
        {"relu_lower_clip_slope": 0.01},
        {"relu_lower_clip": -1.0, "relu_upper_clip": 6.0, "relu_lower_clip_slope": 0.125},
        {"relu_lower_clip": 0.3, "relu_upper_clip": 0.7, "relu_lower_clip_slope": 0.3},
    )
]
CASES += [(m, {"elu_alpha": a}) for m in ("elu_fwd", "elu_bwd") for a in (0.3, 1.5)]
CASES += [(m, {"softplus_beta": b}) for m in ("softplus_fwd", "softplus_bwd") for b in (0.5, 2.5)]
CASES += [(m, {"swish_beta": b}) for m in ("swish_fwd", "swish_bwd") for b in (1.702, 0.25)]


def test_every_mode_has_an_oracle() -> None:
    assert set(ORACLES) | {"gen_index"} == set(MODES)
    for mode, info in MODES.items():
        if mode != "gen_index":
            assert ORACLES[mode].__code__.co_argcount == info.arity + 1, mode


# -- running graphs -----------------------------------------------------------


def run_pointwise(
    mode: str,
    inputs: Sequence[np.ndarray],
    io_dtype: str,
    *,
    params: Mapping[str, float] | None = None,
    out_dtype: str | None = None,
    compute_dtype: str = "float32",
    tensor_kw: Sequence[Mapping[str, Any]] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """One pointwise node through the public builder API and the reference executor."""
    g = sigdnn.Graph(f"pw_{mode}", io_dtype=io_dtype, compute_dtype=compute_dtype)
    tensors = [g.tensor(f"in{i}", dims=a.shape, **(tensor_kw[i] if tensor_kw else {})) for i, a in enumerate(inputs)]
    y = g.pointwise(mode, *tensors, **(params or {})).set_output(True).set_name("y")
    if out_dtype is not None:
        y.set_data_type(out_dtype)
    pack: dict[str, np.ndarray] = {f"in{i}": a for i, a in enumerate(inputs)}
    if out is not None:
        pack["y"] = out
    result = EXECUTOR.execute(EXECUTOR.prepare(g), pack)["y"]
    if out is not None:
        assert result is out or np.shares_memory(result, out)
    return result


def expected(mode: str, inputs: Sequence[np.ndarray], params: Mapping[str, float] | None = None) -> np.ndarray:
    """torch's float64 (or bool) answer on the inputs' exact values."""
    ts = [torch.from_numpy(np.ascontiguousarray(a).astype(np.float64)) for a in inputs]
    ts = list(torch.broadcast_tensors(*ts))
    with torch.no_grad():
        want = ORACLES[mode](*ts, dict(params or {}))
    return want.numpy()


def check(
    mode: str,
    inputs: Sequence[np.ndarray],
    got: np.ndarray,
    out_dtype: str,
    params: Mapping[str, float] | None = None,
) -> None:
    want = expected(mode, inputs, params)
    names = {f"in{i}": a for i, a in enumerate(inputs)}
    what = f"{mode}{dict(params or {})} -> {out_dtype}"
    if want.dtype == np.bool_:
        assert got.dtype == np.bool_, f"{what}: dtype {got.dtype}"
        bad = np.argwhere(got != want)
        assert bad.size == 0, f"{what}: {len(bad)} mismatches, first at {tuple(bad[0])}"
        return
    assert_ulp_close(got, round_exact(want, out_dtype), out_dtype, 1, names, what)


# -- input values -------------------------------------------------------------


def specials(dtype: str) -> np.ndarray:
    """Zeros, infinities, NaN, extremes, subnormals and the activations' interesting points."""
    fi = ml_dtypes.finfo(FORMATS[dtype][0])
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 0.75, -0.7518, 1e-3, -1e-3, 0.1, 1 / 3]
    vals += [10.0, -10.0, 12.0, -12.0, 20.0, -20.0, 40.0, -40.0, 88.5, -88.5, 100.0, -100.0, 710.0, -710.0]
    vals += [math.pi, -math.pi / 2, 1e4, -1e4, 1e-7, -1e-7, 1e30, -1e30, 1e-30, -1e-30]
    vals += [float(fi.max), -float(fi.max), float(fi.smallest_normal), -float(fi.smallest_normal)]
    vals += [float(fi.smallest_subnormal), -float(fi.smallest_subnormal), math.inf, -math.inf, math.nan]
    with np.errstate(over="ignore"):
        return np.array(vals, dtype=np.float64).astype(FORMATS[dtype][0])


def random_values(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """A third each: log-uniform over the whole finite range, uniform on [-12, 12], N(0, 3)."""
    fi = ml_dtypes.finfo(FORMATS[dtype][0])
    k = n // 3
    lo, hi = math.log2(float(fi.smallest_subnormal)), math.log2(float(fi.max))
    mag = np.exp2(rng.uniform(lo, hi, size=k)) * rng.choice([-1.0, 1.0], size=k)
    v = np.concatenate([mag, rng.uniform(-12, 12, size=k), rng.normal(0, 3, size=n - 2 * k)])
    return v.astype(FORMATS[dtype][0])


def mode_inputs(mode: str, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """Inputs for one mode: specials (crossed, for two inputs) and 3000 random values / pairs."""
    rng = np.random.default_rng(seed)
    arity = MODES[mode].arity
    sp = specials(dtype)
    if arity == 1:
        return [np.concatenate([sp, random_values(rng, dtype, 3000)])]
    a, b = (x.ravel() for x in np.meshgrid(sp, sp, indexing="ij"))
    a = np.concatenate([a, random_values(rng, dtype, 3000)])
    b = np.concatenate([b, random_values(rng, dtype, 3000)])
    if MODES[mode].category == "activation_bwd":
        # dy = +-inf only says "inf * f'(x)"; which zero f' underflows to decides NaN vs inf. Keep dy finite.
        a = np.where(np.isinf(a), np.array(1.5, dtype=a.dtype), a)
    if arity == 2:
        return [a, b]
    mask = rng.choice(np.array([0.0, -0.0, 1.0, -2.5, math.nan, math.inf, 1e-30]), size=a.size)
    return [a, b, mask.astype(a.dtype)]


# -- every mode, every io dtype -----------------------------------------------


@pytest.mark.parametrize("dtype", IO_DTYPES)
@pytest.mark.parametrize(
    ("mode", "params"), CASES, ids=[f"{m}{''.join(f'-{v}' for v in p.values())}" for m, p in CASES]
)
def test_mode_matches_torch(mode: str, params: dict[str, float], dtype: str) -> None:
    inputs = mode_inputs(mode, dtype)
    out_dtype = "bool" if mode in BOOL_OUT else dtype
    got = run_pointwise(mode, inputs, dtype, params=params, out_dtype=out_dtype if mode in BOOL_OUT else None)
    check(mode, inputs, got, out_dtype, params)


@pytest.mark.parametrize("dtype", IO_DTYPES)
def test_truth_values_in_a_float_output(dtype: str) -> None:
    """A comparison stored in the io dtype is 1.0 / 0.0."""
    a, b = mode_inputs("cmp_lt", dtype)
    for mode in ("cmp_lt", "cmp_neq", "logical_or"):
        got = run_pointwise(mode, [a, b], dtype)
        assert got.dtype == FORMATS[dtype][0]
        assert np.array_equal(got.astype(np.float64), expected(mode, [a, b]).astype(np.float64))


def test_logical_modes_on_bool_tensors() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(50) < 0.5, rng.random(50) < 0.5
    kw = [{"dtype": "bool"}, {"dtype": "bool"}]
    for mode in ("logical_and", "logical_or", "cmp_eq"):
        got = run_pointwise(mode, [a, b], "float32", out_dtype="bool", tensor_kw=kw)
        assert np.array_equal(got, expected(mode, [a, b]))
    got = run_pointwise("logical_not", [a], "float32", out_dtype="bool", tensor_kw=kw[:1])
    assert np.array_equal(got, ~a)


@pytest.mark.parametrize("dtype", IO_DTYPES)
def test_binary_select_takes_the_mask_third(dtype: str) -> None:
    target = FORMATS[dtype][0]
    a = np.arange(6, dtype=np.float64).reshape(2, 3).astype(target)
    b = -a - 10
    mask = np.array([[True, False, True], [False, False, True]])
    got = run_pointwise("binary_select", [a, b, mask], dtype, tensor_kw=[{}, {}, {"dtype": "bool"}])
    assert np.array_equal(got, np.where(mask, a, b))
    # A float mask: nonzero (NaN too) selects a.
    fmask = np.array([[0.0, -0.0, math.nan], [2.0, 0.0, -1e-30]]).astype(target)
    got = run_pointwise("binary_select", [a, b, fmask], dtype)
    check("binary_select", [a, b, fmask], got, dtype)


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16", "int32"])
def test_identity_changes_dtype_with_one_rounding(out_dtype: str) -> None:
    """float32 -> narrower: one rounding of the float32 value (no float32 -> float32 -> bf16 detour)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([specials("float32"), random_values(rng, "float32", 3000)])
    # float32 values just above bfloat16 / float16 ties, where a double rounding would show.
    x = np.concatenate([x, (1 + 2.0**-8 + 2.0**-20 * np.arange(1, 9)).astype(np.float32)])
    x = np.concatenate([x, (1 + 2.0**-11 + 2.0**-20 * np.arange(1, 9)).astype(np.float32)])
    got = run_pointwise("identity", [x], "float32", out_dtype=out_dtype)
    if out_dtype == "int32":
        finite = np.isfinite(x) & (np.abs(x) < 2.0**31)
        assert np.array_equal(got[finite], np.trunc(x[finite].astype(np.float64)).astype(np.int32))
        return
    check("identity", [x], got, out_dtype)


# -- gen_index ----------------------------------------------------------------


@pytest.mark.parametrize("out_dtype", ["int32", "int64", "float32"])
@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_gen_index(axis: int, out_dtype: str) -> None:
    dims = (2, 3, 5, 4)
    x = np.random.default_rng(axis).normal(size=dims).astype(np.float16)
    got = run_pointwise("gen_index", [x], "float16", params={"axis": axis}, out_dtype=out_dtype)
    shape = [1] * len(dims)
    shape[axis] = dims[axis]
    want = torch.arange(dims[axis]).reshape(shape).expand(dims).numpy()
    assert got.dtype == np.dtype(out_dtype) and got.shape == dims
    assert np.array_equal(got, want)


def test_gen_index_in_nhwc_layout() -> None:
    x = np.zeros((2, 3, 4, 5), dtype=np.float32)
    for axis in range(4):
        got = run_pointwise("gen_index", [x], "float32", params={"axis": axis}, out_dtype="int32",
                            tensor_kw=[{"layout": "NHWC"}])  # fmt: skip
        assert np.array_equal(got, np.indices(x.shape)[axis])


# -- integers -----------------------------------------------------------------

INT_ORACLES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": lambda a, b: torch.div(a, b, rounding_mode="trunc"),  # C: toward zero
    "mod": torch.fmod,  # C: sign of the dividend
    "max": torch.maximum,
    "min": torch.minimum,
    "add_square": lambda a, b: a + b * b,
}


def int_operands(rng: np.random.Generator, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """int32 pairs whose exact result fits int32 (overflow is undefined); no zero divisors."""
    bound = {"mul": 46340, "add_square": 30000}.get(mode, 2**30 - 1)
    edge = np.array([0, 1, -1, 2, -2, 3, -3, 7, -7, bound, -bound])
    a = np.concatenate([np.repeat(edge, edge.size), rng.integers(-bound, bound + 1, size=2000)])
    b = np.concatenate([np.tile(edge, edge.size), rng.integers(-bound, bound + 1, size=2000)])
    if mode == "add_square":
        b = np.clip(b, -100, 100)
    if mode in ("div", "mod"):
        b = np.where(b == 0, 3, b)
    return a.astype(np.int32), b.astype(np.int32)


@pytest.mark.parametrize("compute", ["int32", "float32"])
@pytest.mark.parametrize("mode", list(INT_ORACLES))
def test_int32_modes_exact(mode: str, compute: str) -> None:
    """int32 io: integer compute, or float compute stored back by truncation; both exact."""
    a, b = int_operands(np.random.default_rng(1), mode)
    got = run_pointwise(mode, [a, b], "int32", compute_dtype=compute)
    want = INT_ORACLES[mode](torch.from_numpy(a).long(), torch.from_numpy(b).long()).numpy().astype(np.int32)
    assert got.dtype == np.int32
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (
        f"{mode}: {bad.size} mismatches, e.g. {a[bad[0]]}, {b[bad[0]]} -> {got[bad[0]]} != {want[bad[0]]}"
    )


def test_int32_division_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 1, -1, 0, 2147483647, -2147483647], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, -5, 2, 3], dtype=np.int32)
    want = [3, -3, -3, 3, 0, 0, 0, 1073741823, -715827882]
    for compute in ("int32", "float32"):
        assert run_pointwise("div", [a, b], "int32", compute_dtype=compute).tolist() == want


def test_int32_pow_and_compare() -> None:
    a = np.array([2, -3, 5, 0, 1, -1, -1, 2, 7], dtype=np.int32)
    b = np.array([10, 3, 0, 4, -5, -3, -4, -1, -2], dtype=np.int32)
    # A negative power is a fraction truncated toward zero, as a C cast of the real result.
    want = [1024, -27, 1, 0, 1, -1, 1, 0, 0]
    assert run_pointwise("pow", [a, b], "int32", compute_dtype="int32").tolist() == want
    assert run_pointwise("pow", [a, b], "int32", compute_dtype="float32").tolist() == want
    got = run_pointwise("cmp_lt", [a, b], "int32", compute_dtype="int32", out_dtype="bool")
    assert got.tolist() == (a < b).tolist()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_pow_of_any_nan_to_zero_and_one_to_any_nan_is_one(dtype: str) -> None:
    """IEEE 754's pow: x^+-0 = 1 and 1^y = 1 for every x and y, NaN included; a signaling NaN too (float16's
    0x7C01 is one, and stays one in float64, where glibc's pow gives NaN for it), which a GPU's pow also maps
    to 1. NaN to any other power stays NaN."""
    bits = {"float16": (0x7C01, 0x7E00), "float32": (0x7F800001, 0x7FC00000),
            "float64": (0x7FF0000000000001, 0x7FF8000000000000)}[dtype]  # fmt: skip
    nans = np.array(bits, dtype=f"u{np.dtype(dtype).itemsize}").view(dtype)
    a = np.concatenate([nans, nans, np.ones(2, dtype), nans])
    b = np.concatenate([np.zeros(2, dtype), -np.zeros(2, dtype), nans, np.full(2, 2.0, dtype)])
    got = run_pointwise("pow", [a, b], dtype)
    np.testing.assert_array_equal(got[:6], np.ones(6, dtype))
    assert np.isnan(got[6:]).all()


# -- broadcasting and layouts -------------------------------------------------

BROADCASTS = [
    [(2, 1, 4), (1, 3, 1)],
    [(5, 1), (1, 7)],
    [(1,), (3, 4, 5)],
    [(4,), (2, 3, 4)],
    [(3, 1, 1, 2), (1, 4, 5, 1)],
    [(1, 1, 1), (1, 1, 1)],
    [(2, 1, 3), (1, 4, 1), (2, 4, 3)],
    [(7, 1, 1, 1, 3), (1, 2, 1, 5, 1), (1, 1, 3, 1, 1)],
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_broadcast_size_one_dims(shapes: list[tuple[int, ...]], dtype: str) -> None:
    rng = np.random.default_rng(len(shapes[0]))
    target = FORMATS[dtype][0]
    arrays = [rng.normal(0, 4, size=s).astype(target) for s in shapes]
    modes = ("binary_select",) if len(shapes) == 3 else ("add", "mul", "pow", "sigmoid_bwd", "relu_bwd", "cmp_lt")
    for mode in modes:
        inputs = arrays if mode != "binary_select" else [arrays[0], arrays[1], (arrays[2] > 0).astype(target)]
        got = run_pointwise(mode, inputs, dtype, out_dtype="bool" if mode in BOOL_OUT else None)
        assert got.shape == np.broadcast_shapes(*shapes)
        check(mode, inputs, got, "bool" if mode in BOOL_OUT else dtype)


def _strided(values: np.ndarray, strides: Sequence[int]) -> np.ndarray:
    """``values`` in a buffer at element ``strides`` (gaps hold NaN), as a view."""
    span = 1 + sum((d - 1) * s for d, s in zip(values.shape, strides))
    buf = np.full(span, np.nan, dtype=values.dtype)
    view = np.lib.stride_tricks.as_strided(buf, values.shape, tuple(s * buf.itemsize for s in strides))
    view[...] = values
    return view


@pytest.mark.parametrize("dtype", IO_DTYPES)
@pytest.mark.parametrize("mode", ["add", "gelu_bwd", "swish_fwd", "binary_select"])
def test_layouts_and_strides(mode: str, dtype: str) -> None:
    """NCHW, NHWC and padded strides give the same values; arrays may be any view."""
    rng = np.random.default_rng(9)
    target = FORMATS[dtype][0]
    dims = (2, 3, 5, 7)
    arity = MODES[mode].arity
    logical = [rng.normal(0, 3, size=dims).astype(target) for _ in range(arity)]
    if mode == "binary_select":
        logical[2] = (logical[2] > 0).astype(target)
    want = run_pointwise(mode, logical, dtype)
    check(mode, logical, want, dtype)

    # NHWC: graph strides channels-last, arrays are transposed views of NHWC memory.
    nhwc = [np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in logical]
    out = np.full((2, 5, 7, 3), np.nan, dtype=target).transpose(0, 3, 1, 2)
    got = run_pointwise(mode, nhwc, dtype, tensor_kw=[{"layout": "NHWC"}] * arity, out=out)
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(out, want, equal_nan=True)
    # The same NHWC graph fed plain logical (NCHW-contiguous) arrays.
    got = run_pointwise(mode, logical, dtype, tensor_kw=[{"layout": "NHWC"}] * arity)
    assert np.array_equal(got, want, equal_nan=True)

    # Non-packed strides: every dim padded.
    strides = (300, 96, 16, 2)  # packed would be (105, 35, 7, 1)
    views = [_strided(a, strides) for a in logical]
    out = _strided(np.zeros(dims, dtype=target), strides)
    got = run_pointwise(mode, views, dtype, tensor_kw=[{"strides": strides}] * arity, out=out)
    assert np.array_equal(out, want, equal_nan=True)


@pytest.mark.parametrize("dims", [(1,), (7,), (1, 1), (3, 1, 5), (5, 3, 1, 7, 2), (1, 7, 1, 1, 1)], ids=str)
def test_odd_shapes(dims: tuple[int, ...]) -> None:
    x = np.random.default_rng(2).normal(0, 5, size=dims).astype(ml_dtypes.bfloat16)
    for mode in ("tanh_fwd", "erf", "softplus_fwd"):
        check(mode, [x], run_pointwise(mode, [x], "bfloat16"), "bfloat16")


# -- hypothesis: shapes, broadcast patterns and values ------------------------

HYPO_MODES: dict[str, list[dict[str, float]]] = {
    "add": [{}],
    "sub": [{}],
    "mul": [{}],
    "div": [{}],
    "add_square": [{}],
    "max": [{}],
    "mod": [{}],
    "pow": [{}],
    "cmp_le": [{}],
    "logical_and": [{}],
    "binary_select": [{}],
    "sqrt": [{}],
    "log": [{}],
    "sin": [{}],
    "erf": [{}],
    "relu_fwd": [{}, {"relu_lower_clip": -1.0, "relu_upper_clip": 6.0, "relu_lower_clip_slope": 0.1}],
    "relu_bwd": [{}, {"relu_lower_clip_slope": 0.2, "relu_upper_clip": 1.5}],
    "tanh_bwd": [{}],
    "sigmoid_fwd": [{}],
    "elu_fwd": [{}, {"elu_alpha": 0.7}],
    "gelu_fwd": [{}],
    "gelu_bwd": [{}],
    "gelu_approx_tanh_fwd": [{}],
    "softplus_fwd": [{}, {"softplus_beta": 3.0}],
    "swish_bwd": [{}, {"swish_beta": 1.702}],
}


def _moderate_bits(dtype: str) -> list[int]:
    target, uint = FORMATS[dtype]
    v = np.concatenate([specials(dtype), np.linspace(-12, 12, 97).astype(target)])
    return sorted(set(v.view(uint).tolist()))


@st.composite
def broadcast_shapes(draw: st.DrawFn, count: int) -> list[tuple[int, ...]]:
    """``count`` shapes that broadcast: ranks 1-5, dims 1-7, some dims 1, some leading dims dropped."""
    rank = draw(st.integers(1, 5))
    full = draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank))
    shapes = []
    for _ in range(count):
        keep = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
        shape = [d if k else 1 for d, k in zip(full, keep)]
        shapes.append(tuple(shape[draw(st.integers(0, rank - 1)) :]))
    return shapes


@settings(max_examples=150, deadline=None)
@given(data=st.data(), mode=st.sampled_from(sorted(HYPO_MODES)), dtype=st.sampled_from(IO_DTYPES))
def test_hypothesis_shapes_and_values(data: st.DataObject, mode: str, dtype: str) -> None:
    params = data.draw(st.sampled_from(HYPO_MODES[mode]), label="params")
    arity = MODES[mode].arity
    shapes = data.draw(broadcast_shapes(arity), label="shapes")
    target, uint = FORMATS[dtype]
    nbits = 8 * target.itemsize
    elements = st.one_of(st.integers(0, 2**nbits - 1), st.sampled_from(_moderate_bits(dtype)))
    inputs = [
        data.draw(hnp.arrays(uint, s, elements=elements), label=f"in{i}").view(target) for i, s in enumerate(shapes)
    ]
    if MODES[mode].category == "activation_bwd":
        inputs[0] = np.where(np.isinf(inputs[0]), np.array(1.5, dtype=target), inputs[0])
    out_dtype = "bool" if mode in BOOL_OUT else dtype
    got = run_pointwise(mode, inputs, dtype, params=params, out_dtype="bool" if mode in BOOL_OUT else None)
    assert got.shape == np.broadcast_shapes(*shapes)
    check(mode, inputs, got, out_dtype, params)


# -- the oracles' rewrites are torch's functions ------------------------------


def test_stable_oracles_agree_with_torch() -> None:
    """Where torch's own float64 formulas are accurate (|x| <= 3), the rewrites equal them."""
    x = torch.linspace(-3, 3, 6001, dtype=torch.float64)
    tight = {"rtol": 1e-12, "atol": 1e-15}
    torch.testing.assert_close(gelu_stable(x), F.gelu(x), **tight)
    torch.testing.assert_close(gelu_tanh_stable(x), F.gelu(x, approximate="tanh"), **tight)
    torch.testing.assert_close(swish(x, 1.0), F.silu(x), **tight)
    torch.testing.assert_close(gelu_grad_stable(x), autograd(F.gelu)(x), **tight)
    torch.testing.assert_close(gelu_tanh_grad_stable(x), autograd(lambda v: F.gelu(v, approximate="tanh"))(x), **tight)
    torch.testing.assert_close(tanh_grad_stable(x), autograd(torch.tanh)(x), **tight)
    torch.testing.assert_close(sigmoid_grad_stable(x), autograd(torch.sigmoid)(x), **tight)
    p = {"relu_lower_clip": 0.0}
    torch.testing.assert_close(relu_fwd(x, p), F.relu(x), rtol=0, atol=0)
    p6 = {"relu_upper_clip": 6.0}
    torch.testing.assert_close(relu_fwd(x * 3, p6), F.relu6(x * 3), rtol=0, atol=0)
    leaky = {"relu_lower_clip_slope": 0.01}
    torch.testing.assert_close(relu_fwd(x, leaky), F.leaky_relu(x, 0.01), **tight)
    torch.testing.assert_close(relu_grad(x[x != 0], leaky), autograd(lambda v: F.leaky_relu(v, 0.01))(x[x != 0]))


def test_torch_loses_the_tails_the_reference_keeps() -> None:
    """Why the rewrites: at x = -10 gelu is -7.6e-23 (a float32 normal), torch's float64 gives 0."""
    x = np.array([-10.0], dtype=np.float32)
    assert F.gelu(torch.tensor([-10.0], dtype=torch.float64)).item() == 0.0
    got = run_pointwise("gelu_fwd", [x], "float32")
    assert got[0] < 0 and math.isclose(float(got[0]), -10 * 0.5 * math.erfc(10 / SQRT2), rel_tol=1e-7)
