"""Reference conv_fprop: exact against torch's float64 convs and a loop oracle.

The reference accumulates in float64 and rounds once, so after an
independent exact rounding it must agree with torch's float64 result to
within one unit of the output dtype, and bit for bit on "exact" inputs
(small integers times powers of two, where every float64 sum is exact
whatever the order, ties included). Inputs are laid out in the strides the
graph declares, padded rows included, so the layout handling is tested too.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles_conv import (
    FORMATS,
    brute_conv,
    conv_out_size,
    exact_round,
    layout_axes,
    packed_strides,
    random_values,
    strided_array,
    strided_buffer,
    torch_conv,
    ulp_distance,
)

import sigdnn
from sigdnn.errors import NoPlanError

DTYPES = ("float32", "float16", "bfloat16")
EXECUTOR = sigdnn.Executor()


@attrs.frozen
class ConvCase:
    """One convolution: logical dims, conv attributes and a memory layout."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    pre: tuple[int, ...]
    post: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    layout: str

    @property
    def spatial(self) -> int:
        return len(self.x) - 2

    @property
    def y(self) -> tuple[int, ...]:
        s = range(self.spatial)
        out = [
            conv_out_size(self.x[2 + i], self.pre[i], self.post[i], self.w[2 + i], self.stride[i], self.dilation[i])
            for i in s
        ]
        return (self.x[0], self.w[0], *out)

    def __str__(self) -> str:
        groups = self.x[1] // self.w[1]
        return f"{self.layout}-x{list(self.x)}-w{list(self.w)}-g{groups}-pad{list(self.pre)}{list(self.post)}-s{list(self.stride)}-d{list(self.dilation)}"


def case(
    x: Sequence[int],
    w: Sequence[int],
    layout: str,
    pre: int | Sequence[int] = 0,
    post: int | Sequence[int] | None = None,
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
) -> ConvCase:
    s = len(x) - 2

    def vec(v: int | Sequence[int]) -> tuple[int, ...]:
        return (v,) * s if isinstance(v, int) else tuple(v)

    return ConvCase(
        tuple(x), tuple(w), vec(pre), vec(pre if post is None else post), vec(stride), vec(dilation), layout
    )


CASES = [
    # 1 spatial dim
    case((2, 3, 17), (4, 3, 5), "NCW", pre=2, post=1, stride=2),
    case((1, 6, 11), (9, 2, 3), "NWC", pre=0, post=3, stride=3, dilation=2),
    # 2 spatial dims
    case((2, 5, 9, 7), (6, 5, 3, 3), "NCHW", pre=1),
    case((3, 4, 10, 13), (8, 4, 3, 4), "NHWC", pre=(0, 1), post=(1, 2), stride=2, dilation=(2, 1)),
    case((2, 8, 9, 9), (8, 1, 3, 3), "NHWC", pre=1, stride=2),  # depthwise
    case((1, 4, 7, 8), (8, 1, 5, 3), "NCHW", pre=(2, 1), post=(1, 0)),  # depthwise, multiplier 2
    case((2, 6, 8, 6), (9, 2, 2, 3), "NCHW", pre=(1, 0), post=(0, 2), stride=(2, 1), dilation=(1, 2)),  # 3 groups
    case((1, 3, 19, 21), (5, 3, 7, 7), "NHWC", pre=3, stride=2),  # kernel 7 > stride 2
    case((2, 16, 7, 7), (10, 16, 1, 1), "NHWC", stride=2),  # 1x1, stride 2 skips inputs
    case((1, 3, 5, 4), (2, 3, 5, 4), "NCHW"),  # kernel covers the input: 1x1 output
    case((1, 2, 3, 3), (3, 2, 2, 2), "NHWC", pre=3, post=2, stride=(1, 2)),  # padding wider than the kernel
    case((1, 64, 6, 5), (16, 64, 3, 3), "NHWC", pre=1),  # reduction of 576 taps
    # 3 spatial dims
    case(
        (1, 3, 5, 6, 7), (4, 3, 3, 2, 3), "NCDHW", pre=(1, 0, 2), post=(0, 1, 1), stride=(1, 2, 1), dilation=(2, 1, 1)
    ),
    case((2, 4, 5, 5, 4), (6, 2, 2, 3, 2), "NDHWC", pre=1, stride=2),  # 2 groups
    case((1, 5, 4, 6, 5), (5, 1, 3, 3, 3), "NDHWC", pre=1, post=(0, 1, 2), dilation=(1, 2, 1)),  # depthwise
]


def run_reference(
    c: ConvCase,
    x: np.ndarray,
    w: np.ndarray,
    dtype: str,
    out_dtype: str | None = None,
    pad: bool = False,
    y_pad: bool = False,
) -> np.ndarray:
    """Build the graph, lay x and w out in its declared strides, run the reference.

    ``pad`` declares non-packed strides (every axis padded by a few elements)
    instead of a named layout; ``y_pad`` does the same for y and hands the
    executor a NaN-filled buffer, whose gaps must come back untouched.
    """
    out_dtype = out_dtype or dtype
    order = layout_axes(c.layout, len(c.x))
    g = sigdnn.Graph("conv", io_dtype=dtype, compute_dtype="float32")
    if pad:
        xt = g.tensor("x", dims=c.x, strides=packed_strides(c.x, order, [1, 3, 2, 1, 2][: len(c.x)]))
        wt = g.tensor("w", dims=c.w, strides=packed_strides(c.w, order, [2, 1, 1, 3, 1][: len(c.w)]))
    else:
        xt = g.tensor("x", dims=c.x, layout=c.layout)
        wt = g.tensor("w", dims=c.w, layout=c.layout)
        assert xt.strides == packed_strides(c.x, order)
        assert wt.strides == packed_strides(c.w, order)
    y = g.conv_fprop(xt, wt, pre_padding=c.pre, post_padding=c.post, stride=c.stride, dilation=c.dilation)
    y.set_output(True).set_name("y").set_data_type(out_dtype)
    assert y.dims == c.y, f"{c}: builder inferred y dims {y.dims}, expected {c.y}"
    store = FORMATS[dtype][0]
    pack = {"x": strided_array(x, xt.strides, store), "w": strided_array(w, wt.strides, store)}
    if y_pad:
        y.set_stride(packed_strides(c.y, order, [1, 2, 1, 3, 1][: len(c.y)]))
        pack["y"], y_buf = strided_buffer(np.zeros(c.y), y.strides, FORMATS[out_dtype][0], fill=np.nan)
    out = EXECUTOR.execute(EXECUTOR.prepare(g), pack)["y"]
    assert out.shape == c.y
    assert out.dtype == FORMATS[out_dtype][0]
    if y_pad:
        assert out is pack["y"]
        gaps = int(np.isnan(y_buf.astype(np.float64)).sum())
        assert gaps == y_buf.size - out.size, "the reference wrote outside y's logical elements"
    return out


def assert_rounded_equal(got: np.ndarray, exact64: np.ndarray, dtype: str, max_ulps: int, what: str) -> None:
    """got must be within max_ulps of exact64 rounded (exactly) to dtype."""
    want = exact_round(exact64, dtype)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    dist = ulp_distance(got, want, dtype)
    worst = np.unravel_index(np.argmax(dist), dist.shape)
    assert dist.max() <= max_ulps, (
        f"{what}: {int((dist > max_ulps).sum())} of {dist.size} elements off by more than {max_ulps} ulp; "
        f"worst at {worst}: got {got[worst]!r}, want {want[worst]!r} (float64 {exact64[worst]!r})"
    )


def check_against_torch(c: ConvCase, dtype: str, exact: bool, seed: int, pad: bool = False, out: str | None = None):
    rng = np.random.default_rng(seed)
    x = random_values(rng, c.x, dtype, exact)
    w = random_values(rng, c.w, dtype, exact)
    got = run_reference(c, x, w, dtype, out_dtype=out, pad=pad)
    want64 = torch_conv(x, w, c.pre, c.post, c.stride, c.dilation)
    assert_rounded_equal(got, want64, out or dtype, 0 if exact else 1, f"{c} {dtype} exact={exact}")


# -- 1. against torch ---------------------------------------------------------


@pytest.mark.parametrize("pad", [False, True], ids=["packed", "padded-strides"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", CASES, ids=str)
def test_matches_torch_within_one_ulp(c: ConvCase, dtype: str, pad: bool) -> None:
    pytest.importorskip("torch")
    check_against_torch(c, dtype, exact=False, seed=zlib.crc32(f"{c}{dtype}".encode()), pad=pad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", CASES, ids=str)
def test_matches_torch_bit_exact_on_exact_sums(c: ConvCase, dtype: str) -> None:
    """With sums float64 holds exactly, rounding (ties, double-rounding traps) must be exact."""
    pytest.importorskip("torch")
    check_against_torch(c, dtype, exact=True, seed=7, pad=True)


@pytest.mark.parametrize(("dtype", "out"), [("float16", "float32"), ("bfloat16", "float32"), ("float32", "bfloat16")])
def test_output_dtype_differs_from_inputs(dtype: str, out: str) -> None:
    pytest.importorskip("torch")
    for c in (CASES[3], CASES[12]):
        check_against_torch(c, dtype, exact=False, seed=3, out=out)
        check_against_torch(c, dtype, exact=True, seed=4, out=out)


@pytest.mark.parametrize("c", [CASES[1], CASES[6], CASES[13]], ids=str)
def test_strided_output_buffer(c: ConvCase) -> None:
    """y with padded strides, supplied by the caller: only logical elements are written."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x = random_values(rng, c.x, "bfloat16", exact=True)
    w = random_values(rng, c.w, "bfloat16", exact=True)
    got = run_reference(c, x, w, "bfloat16", pad=True, y_pad=True)
    want64 = torch_conv(x, w, c.pre, c.post, c.stride, c.dilation)
    assert_rounded_equal(got, want64, "bfloat16", 0, str(c))


def test_double_rounding_trap_bfloat16() -> None:
    """2^25 + 2^17 + 1 rounds to 2^25 + 2^18 in bfloat16; via float32 it would become 2^25."""
    c = case((1, 3, 1, 1), (1, 3, 1, 1), "NCHW")
    x = np.array([2.0**25, 2.0**17, 1.0]).reshape(c.x)
    w = np.ones(c.w)
    got = run_reference(c, x, w, "bfloat16")
    assert float(got.ravel()[0]) == 2.0**25 + 2.0**18


def test_float16_overflow_and_ties() -> None:
    """Ties go to even and sums past float16's range become inf, as the output dtype says."""
    c = case((1, 2, 1, 4), (1, 2, 1, 1), "NHWC")
    # column sums: 2049 (tie -> 2048), 2051 (tie -> 2052), 65520 (tie -> inf), -65519 (-> -65504)
    x = np.array([[2048, 2048, 65504, -65504], [1, 3, 16, -15]], dtype=np.float64).reshape(c.x)
    got = run_reference(c, x, np.ones(c.w), "float16")
    assert got.ravel().tolist() == [2048.0, 2052.0, np.inf, -65504.0]


# -- 2. against a brute-force loop oracle --------------------------------------

TINY = [
    case((1, 2, 5), (3, 2, 2), "NCW", pre=1, post=0, stride=2),
    case((2, 4, 6), (4, 2, 3), "NWC", pre=0, post=2, dilation=2),  # 2 groups
    case((1, 3, 4, 5), (3, 1, 2, 3), "NHWC", pre=(1, 0), post=(0, 2), stride=(2, 1)),  # depthwise
    case((2, 2, 5, 4), (2, 2, 3, 2), "NCHW", stride=(1, 2), dilation=(2, 1), pre=1),
    case((1, 4, 3, 4), (6, 2, 1, 2), "NHWC", stride=3, post=1),  # 2 groups, stride > kernel
    case((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), "NCDHW", pre=(1, 0, 1), stride=(2, 1, 1)),
    case((1, 2, 4, 3, 3), (4, 1, 2, 1, 3), "NDHWC", post=(1, 1, 0), dilation=(1, 1, 1), stride=(1, 2, 1)),
]


@pytest.mark.parametrize("c", TINY, ids=str)
def test_matches_brute_force_float64_exact_sums(c: ConvCase) -> None:
    """float64 io with integer inputs: every summation order is exact, so bits must match."""
    rng = np.random.default_rng(5)
    x = rng.integers(-50, 51, size=c.x).astype(np.float64)
    w = rng.integers(-50, 51, size=c.w).astype(np.float64)
    g = sigdnn.Graph("conv64", io_dtype="float64", compute_dtype="float64")
    xt = g.tensor("x", dims=c.x, layout=c.layout)
    wt = g.tensor("w", dims=c.w, layout=c.layout)
    y = g.conv_fprop(xt, wt, pre_padding=c.pre, post_padding=c.post, stride=c.stride, dilation=c.dilation)
    y.set_output(True).set_name("y")
    got = EXECUTOR.run(
        g, {"x": strided_array(x, xt.strides, np.float64), "w": strided_array(w, wt.strides, np.float64)}
    )
    np.testing.assert_array_equal(got["y"], brute_conv(x, w, c.pre, c.post, c.stride, c.dilation))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", TINY, ids=str)
def test_matches_brute_force(c: ConvCase, dtype: str) -> None:
    rng = np.random.default_rng(6)
    for exact in (False, True):
        x = random_values(rng, c.x, dtype, exact)
        w = random_values(rng, c.w, dtype, exact)
        got = run_reference(c, x, w, dtype, pad=exact)
        want64 = brute_conv(x, w, c.pre, c.post, c.stride, c.dilation)
        assert_rounded_equal(got, want64, dtype, 0 if exact else 1, f"{c} {dtype} exact={exact}")


# -- 4. generated cases ----------------------------------------------------------


@st.composite
def conv_cases(draw: st.DrawFn, max_spatial: int = 3, small: bool = False) -> ConvCase:
    """Any valid conv: 1-3 spatial dims, groups, stride, dilation, asymmetric padding."""
    s = draw(st.integers(1, max_spatial))
    groups = draw(st.integers(1, 3))
    cg = draw(st.integers(1, 2 if small else 3))
    kg = draw(st.integers(1, 2 if small else 3))
    kernel, size, pre, post, stride, dilation = [], [], [], [], [], []
    for _ in range(s):
        k = draw(st.integers(1, 3))
        d = draw(st.integers(1, 2))
        p, q = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        span = d * (k - 1) + 1
        lo = max(1, span - p - q)
        kernel.append(k)
        dilation.append(d)
        pre.append(p)
        post.append(q)
        stride.append(draw(st.integers(1, 3)))
        size.append(draw(st.integers(lo, lo + (2 if small else 5))))
    n = draw(st.integers(1, 2))
    channels_last = draw(st.booleans())
    layout = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[s][channels_last]
    x = (n, groups * cg, *size)
    w = (groups * kg, cg, *kernel)
    return ConvCase(x, w, tuple(pre), tuple(post), tuple(stride), tuple(dilation), layout)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=conv_cases(),
    dtype=st.sampled_from(DTYPES),
    exact=st.booleans(),
    pad=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_generated_against_torch(c: ConvCase, dtype: str, exact: bool, pad: bool, seed: int) -> None:
    pytest.importorskip("torch")
    check_against_torch(c, dtype, exact, seed, pad=pad)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=conv_cases(max_spatial=2, small=True), seed=st.integers(0, 2**32 - 1))
def test_generated_against_brute_force(c: ConvCase, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = random_values(rng, c.x, "bfloat16", exact=True)
    w = random_values(rng, c.w, "bfloat16", exact=True)
    got = run_reference(c, x, w, "bfloat16", pad=True)
    assert_rounded_equal(got, brute_conv(x, w, c.pre, c.post, c.stride, c.dilation), "bfloat16", 0, str(c))


# -- dtypes the reference must not compute in ------------------------------------


def test_integer_output_dtype_is_refused() -> None:
    """An int32 y would truncate: the graph rules refuse it even when it comes from a default."""
    g = sigdnn.Graph("conv_int", io_dtype="float16", intermediate_dtype="int32")
    y = g.conv_fprop(g.tensor("x", dims=(1, 1, 3, 3)), g.tensor("w", dims=(1, 1, 1, 1)), name="conv")
    g.relu(y).set_output(True).set_name("z")
    with pytest.raises((sigdnn.GraphError, NoPlanError), match="conv"):
        EXECUTOR.prepare(g)


@pytest.mark.parametrize("compute", ["int32", "int8"])
def test_integer_compute_dtype_does_not_truncate(compute: str) -> None:
    """An integer compute type must not make the reference read float inputs as integers."""
    c = CASES[2]
    rng = np.random.default_rng(13)
    x = random_values(rng, c.x, "float16", exact=True)
    w = random_values(rng, c.w, "float16", exact=True) / 4  # fractions, which truncation would lose
    g = sigdnn.Graph("conv_int_compute", io_dtype="float16", compute_dtype=compute)
    y = g.conv_fprop(g.tensor("x", dims=c.x), g.tensor("w", dims=c.w), padding=c.pre, name="conv")
    y.set_output(True).set_name("y")
    got = EXECUTOR.run(g, {"x": x.astype(np.float16), "w": w.astype(np.float16)})["y"]
    want = exact_round(brute_conv(x, w, c.pre, c.post, c.stride, c.dilation), "float16")
    np.testing.assert_array_equal(got, want)


def test_the_math_refuses_output_dims_that_are_not_the_convolutions() -> None:
    """The builder's own consistency check (check_graph infers y's dims, so only a direct caller can trip it)."""
    from sigdnn.plan_builders.reference.conv_fprop import conv_fprop

    g = sigdnn.Graph("c", io_dtype="float64")
    g.conv_fprop(g.tensor("x", (1, 2, 5, 5)), g.tensor("w", (3, 2, 3, 3)), name="conv").set_output(True)
    op = g.node_by_name("conv").op
    x, w = np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))
    y = conv_fprop(x, w, op, (1, 3, 3, 3))
    assert y is not None and y.shape == (1, 3, 3, 3)
    with pytest.raises(ValueError, match=r"y's dims \[1, 3, 5, 5\] are not the convolution's \[1, 3, 3, 3\]"):
        conv_fprop(x, w, op, (1, 3, 5, 5))
