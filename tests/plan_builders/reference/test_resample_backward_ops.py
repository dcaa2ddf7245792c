"""resample_backward nodes end to end (through the wire and the executor).

Oracles: torch float64 autograd of F.interpolate with the matching
conventions; a brute-force loop that sends every dy element to its taps
with exact rational weights; and central differences of the forward
resample node, both nodes built and run by sigdnn alone (resample is
linear, so the difference quotient is exact up to rounding).
"""

from __future__ import annotations

import itertools
import math
import tracemalloc
from fractions import Fraction

import attrs
import ml_dtypes
import numpy as np
import pytest
from graph_runs import close, normal, outputs, run, torch64
from hypothesis import given, settings
from hypothesis import strategies as st

import sigdnn

torch = pytest.importorskip("torch")
F = torch.nn.functional
LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}
# (mode, coordinates) -> F.interpolate's (mode, align_corners); asymmetric linear has no torch equivalent
TORCH = {
    ("nearest", "half_pixel"): ("nearest-exact", None),
    ("nearest", "asymmetric"): ("nearest", None),
    ("bilinear", "half_pixel"): ("linear", False),
    ("bilinear", "align_corners"): ("linear", True),
}
ALL = [*TORCH, ("bilinear", "asymmetric")]


def backward_graph(dy_dims, mode, dims, scales=None, coordinates="half_pixel", io_dtype="float64", layout=None):
    g = sigdnn.Graph("rs_bwd", io_dtype=io_dtype, compute_dtype="float32")
    dy = g.tensor("dy", dy_dims, layout=layout)
    outputs(g, {"dx": g.resample_backward(dy, mode, dims, scales, coordinates, name="rs_bwd")})
    return g


def torch_dx(x_dims, dy: np.ndarray, mode: str, coordinates: str, scales=None) -> np.ndarray:
    t_mode, align = TORCH[(mode, coordinates)]
    if t_mode == "linear":
        t_mode = LINEAR[len(x_dims) - 2]
    x = torch.zeros(tuple(x_dims), dtype=torch.float64, requires_grad=True)
    kw = {"scale_factor": tuple(scales)} if scales else {"size": tuple(dy.shape[2:])}
    F.interpolate(x, mode=t_mode, align_corners=align, **kw).backward(torch64(dy))
    return x.grad.numpy()


def taps(size: int, out: int, o: int, mode: str, coordinates: str) -> list[tuple[int, Fraction]]:
    """(input index, exact weight) of output o along one axis, from the definition in docs/ops.md."""
    f = Fraction(size, out)
    if mode == "nearest":
        pos = (o + Fraction(1, 2)) * f if coordinates == "half_pixel" else o * f
        return [(min(math.floor(pos), size - 1), Fraction(1))]
    if coordinates == "half_pixel":
        pos = max((o + Fraction(1, 2)) * f - Fraction(1, 2), Fraction(0))
    elif coordinates == "align_corners":
        pos = Fraction(o * (size - 1), out - 1) if out > 1 else Fraction(0)
    else:
        pos = o * f
    low = min(math.floor(pos), size - 1)
    t = pos - math.floor(pos)
    return [(low, 1 - t), (min(low + 1, size - 1), t)]


def loop_dx(x_dims, dy: np.ndarray, mode: str, coordinates: str) -> np.ndarray:
    """Every dy element added to each of its taps times the product of the exact per-axis weights."""
    sums: dict[tuple[int, ...], list[float]] = {}
    for n, c, *o in itertools.product(*(range(e) for e in dy.shape)):
        per_axis = [taps(x_dims[2 + a], dy.shape[2 + a], o[a], mode, coordinates) for a in range(len(o))]
        for combo in itertools.product(*per_axis):
            weight = math.prod(w for _, w in combo)
            sums.setdefault((n, c, *(i for i, _ in combo)), []).append(float(weight * Fraction(dy[(n, c, *o)])))
    dx = np.zeros(x_dims)
    for index, terms in sums.items():
        dx[index] = math.fsum(terms)
    return dx


@pytest.mark.parametrize(("mode", "coordinates"), list(TORCH), ids=str)
@pytest.mark.parametrize(
    ("x_dims", "dy_dims", "layout"),
    [
        ((2, 3, 5, 6), (2, 3, 9, 4), "NHWC"),
        ((1, 2, 7), (1, 2, 13), None),
        ((1, 2, 3, 4, 5), (1, 2, 5, 2, 7), "NDHWC"),
        ((2, 1, 1, 5), (2, 1, 4, 1), None),
    ],
)
def test_matches_torch_autograd(mode: str, coordinates: str, x_dims, dy_dims, layout) -> None:
    rng = np.random.default_rng(sum(dy_dims))
    dy = np.round(normal(rng, dy_dims, layout is not None) * 8)  # integers: nearest's sums are exact
    got = run(backward_graph(dy_dims, mode, x_dims, None, coordinates, layout=layout), {"dy": dy})["dx"]
    want = torch_dx(x_dims, dy, mode, coordinates)
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        close(got, want)


@pytest.mark.parametrize("scales", [(2.0, 1.5), (0.5, 0.75), (1.7, 2.3)])
@pytest.mark.parametrize(
    ("mode", "coordinates"), [("nearest", "half_pixel"), ("nearest", "asymmetric"), ("bilinear", "half_pixel")]
)
def test_scales_match_torch_scale_factor(scales, mode: str, coordinates: str) -> None:
    rng = np.random.default_rng(5)
    x_dims = (1, 2, 5, 6)
    dy_dims = (1, 2, *(math.floor(d * s) for d, s in zip(x_dims[2:], scales)))
    dy = np.round(rng.standard_normal(dy_dims) * 8)
    got = run(backward_graph(dy_dims, mode, x_dims, scales, coordinates), {"dy": dy})["dx"]
    want = torch_dx(x_dims, dy, mode, coordinates, scales)
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        close(got, want)


@settings(max_examples=30, deadline=None)
@given(
    x_dims=st.lists(st.sampled_from([1, 2, 3, 5, 7]), min_size=1, max_size=2),
    dy_dims=st.lists(st.sampled_from([1, 2, 3, 4, 7, 11]), min_size=2, max_size=2),
    which=st.sampled_from(ALL),
    channels_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_brute_force_loops(x_dims, dy_dims, which, channels_last: bool, seed: int) -> None:
    """Hypothesis shapes with size-1 and prime dims, shrinking and growing, every mode and convention."""
    mode, coordinates = which
    x_full = (2, 3, *x_dims)
    dy_full = (2, 3, *dy_dims[: len(x_dims)])
    dy = normal(np.random.default_rng(seed), dy_full, channels_last)
    got = run(backward_graph(dy_full, mode, x_full, None, coordinates), {"dy": dy})["dx"]
    close(got, loop_dx(x_full, dy, mode, coordinates))


@pytest.mark.parametrize(
    ("mode", "coordinates", "scales"), [(*which, scales) for which in ALL for scales in (None, (1.5, 0.5))], ids=str
)
def test_is_the_forward_nodes_gradient(mode: str, coordinates: str, scales) -> None:
    """Central differences of f(x) = <resample(x), dy>, the forward and backward both sigdnn nodes."""
    x_dims, y_dims = (2, 3, 4, 6), (2, 3, 6, 3)
    rng = np.random.default_rng(9)
    x, dy = rng.standard_normal(x_dims), rng.standard_normal(y_dims)
    fwd = sigdnn.Graph("rs", io_dtype="float64")
    outputs(fwd, {"y": fwd.resample(fwd.tensor("x", x_dims), mode, y_dims, scales, coordinates, name="rs")})

    def f(values: np.ndarray) -> float:
        return float(np.sum(run(fwd, {"x": values})["y"] * dy))

    dx = run(backward_graph(y_dims, mode, x_dims, scales, coordinates), {"dy": dy})["dx"]
    h = 1e-3
    for _ in range(3):
        d = rng.standard_normal(x_dims)
        numeric = (f(x + h * d) - f(x - h * d)) / (2 * h)
        analytic = float(np.sum(dx * d))
        # linear f: the quotient is exact but for rounding, ~EPS |f| / h
        assert abs(numeric - analytic) <= 1e-9 * (float(np.sum(np.abs(dx * d))) + abs(f(x))), (numeric, analytic)


def _ulps(got: np.ndarray, want: np.ndarray, mantissa_bits: int) -> float:
    """|got - want| in units in the last place of want (normal range) for a p-bit significand."""
    exponent = np.frexp(np.where(want == 0, 1.0, np.abs(want)))[1]
    return float(np.max(np.abs(got - want) / np.ldexp(1.0, exponent - mantissa_bits)))


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype", "bits"),
    [("float32", np.float32, 24), ("float16", np.float16, 11), ("bfloat16", ml_dtypes.bfloat16, 8)],
)
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_low_precision_rounds_once(dtype: str, numpy_dtype, bits: int, mode: str) -> None:
    """Within 1 ulp of the float64 oracle's value: one rounding (two would allow ~1.5 ulp)."""
    rng = np.random.default_rng(3)
    x_dims, dy_dims = (2, 4, 5, 3), (2, 4, 8, 7)
    dy = rng.standard_normal(dy_dims).astype(numpy_dtype)
    got = sigdnn.Executor().run(backward_graph(dy_dims, mode, x_dims, io_dtype=dtype), {"dy": dy})["dx"]
    assert got.dtype == np.dtype(numpy_dtype)
    want = torch_dx(x_dims, dy.astype(np.float64), mode, "half_pixel")
    assert _ulps(got.astype(np.float64), want, bits) <= 0.5 + 2.0**-20


@pytest.mark.parametrize("method", ["resample", "resample_backward"])
def test_memory_stays_near_the_larger_tensor(method: str) -> None:
    """Growing one axis while shrinking another: the passes shrink first, so no intermediate holds
    their product (here 4000 x 4000 float64, 128 MB, against 32 KB tensors)."""
    g = sigdnn.Graph("turn", io_dtype="float64")
    src, dst = (1, 1, 1, 4000), (1, 1, 4000, 1)
    t = g.tensor("t", src)
    resampled = getattr(g, method)(t, "bilinear", dst)
    outputs(g, {"out": resampled})
    plan = sigdnn.Executor().prepare(g)
    values = np.arange(4000.0).reshape(src)
    tracemalloc.start()
    try:
        out = sigdnn.Executor().execute(plan, {"t": values})["out"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"peak {peak} bytes"
    if method == "resample":  # the row's middle (half-pixel: 1999.5 between 1999 and 2000), then spread
        close(out, np.full(dst, 1999.5))
    else:  # every dy to the one column, its sum halved onto the two inputs the middle sample blends
        want = np.zeros(dst)
        want[0, 0, 1999:2001, 0] = np.sum(values) / 2
        np.testing.assert_array_equal(out, want)


def test_declared_properties() -> None:
    """What validation, the key and the limits read from the op: traits, layout, work, defaults."""
    g = sigdnn.Graph("props", io_dtype="float32")
    dy = g.tensor("dy", (2, 3, 8, 7), layout="NHWC")
    dx = g.resample_backward(dy, "bilinear", (2, 3, 4, 5), name="rs_bwd")
    node = g.nodes[0]
    assert sigdnn.key_for(node, g).traits == (("mode", "bilinear"), ("spatial_rank", 2))
    assert dx.strides == (60, 1, 15, 3)  # packed in dy's (channels-last) order
    assert node.op.sums_absolute_terms  # non-negative weights: validation may bound by |dy|
    assert attrs.fields(type(node.op)).coordinates.default == "half_pixel"  # docs/ops.md's default
    work = max(dx.size, dy.size) * 2 * 2 + dx.size  # a pass per spatial dim over the larger tensor, and dx
    g.tensor_by_name(dx.name).set_output(True)
    sigdnn.Executor(limits=sigdnn.Limits(max_work=work)).prepare(g)
    with pytest.raises(sigdnn.GraphError, match="work"):
        sigdnn.Executor(limits=sigdnn.Limits(max_work=work - 1)).prepare(g)


@settings(max_examples=40, deadline=None)
@given(
    size=st.lists(st.integers(1, 9), min_size=2, max_size=2),
    out=st.lists(st.integers(1, 23), min_size=2, max_size=2),
    which=st.sampled_from(ALL),
)
def test_reduction_length_bounds_the_terms_each_dx_element_sums(size, out, which) -> None:
    """The declared reduction length (validation's tolerance grows with it) is at least the number of
    dy elements that reach one dx element, counted with the exact taps; and not wildly more."""
    mode, coordinates = which
    g = sigdnn.Graph("len", io_dtype="float32")
    dx = g.resample_backward(g.tensor("dy", (1, 1, *out)), mode, (1, 1, *size), coordinates=coordinates)
    tensors = {"dy": g.tensor_by_name("dy"), "dx": dx}
    declared = g.nodes[0].op.reduction_length(tensors, "dx")
    count: dict[tuple[int, ...], int] = {}
    for o in itertools.product(*(range(e) for e in out)):
        per_axis = [taps(size[a], out[a], o[a], mode, coordinates) for a in range(2)]
        for combo in itertools.product(*per_axis):
            index = tuple(i for i, _ in combo)
            count[index] = count.get(index, 0) + 1
    assert isinstance(declared, int)
    assert max(count.values()) <= declared <= 9 * max(count.values()) * (1 if mode == "nearest" else 9)


def test_the_builder_is_floating_point_only() -> None:
    """A registry key may carry an integer port: the builder declines it, and never computes in integers."""
    from sigdnn.errors import NotSupported
    from sigdnn.plan_builders.reference.resample import ReferenceResampleBackward
    from sigdnn.runtime import Device

    g = sigdnn.Graph("rb", io_dtype="float32", compute_dtype="int32")
    g.resample_backward(g.tensor("dy", (1, 2, 6)), "nearest", (1, 2, 3), name="rb").set_output(True)
    builder = ReferenceResampleBackward()
    builder.check(g.nodes[0], g, Device())  # floats: accepted
    assert builder.computes_in_integers(g.nodes[0], g) is False  # an int32 compute type is not int64 math
    g.tensor_by_name("dy").set_data_type("int8")
    with pytest.raises(NotSupported, match=r"node 'rb': port 'dy' \(tensor 'dy'\) is int8; resample_backward is"):
        builder.check(g.nodes[0], g, Device())
