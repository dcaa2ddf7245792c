"""The GPU reference's float64 erf / erfc / gelu against mpmath (the emulated kernels on the CPU).

Graphs in float64 io, so each output is the GPU reference's float64 value
itself, judged in float64 ulps of mpmath's correctly rounded value.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from gpu_reference_emulation import gpu_reference_executor, make_available

import sigdnn

mpmath.mp.dps = 50
POINTS = np.concatenate(
    [
        np.linspace(-30.0, 30.0, 1201),
        np.linspace(0.9, 1.1, 41),  # the series / fraction seam
        np.linspace(25.5, 28.5, 61),  # erfc into and out of the subnormals
        [0.0, -0.0, 1e-300, -1e-300, 5e-324, 1e-17, -1e-17, 0.5, -0.5],
    ]
)
SPECIAL = np.array([np.inf, -np.inf, np.nan])


@pytest.fixture(autouse=True)
def _emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)


def _run(mode: str, x: np.ndarray, dy: np.ndarray | None = None) -> np.ndarray:
    g = sigdnn.Graph(mode, io_dtype="float64", compute_dtype="float64")
    ports = [g.tensor("x", x.shape)] if dy is None else [g.tensor("dy", x.shape), g.tensor("x", x.shape)]
    g.pointwise(mode, *ports, name="pw").set_output(True).set_name("y")
    ex = gpu_reference_executor()
    inputs = {"x": x} if dy is None else {"dy": dy, "x": x}
    return np.asarray(ex.execute(ex.prepare(g), inputs)["y"])


def _ulps(got: np.ndarray, want: list[mpmath.mpf]) -> np.ndarray:
    exact = np.array([float(w) for w in want])
    spacing = np.spacing(np.abs(exact))
    return np.abs(got - exact) / np.where(exact == 0, np.spacing(0.0), spacing)


def _phi(x: mpmath.mpf) -> mpmath.mpf:
    return mpmath.erfc(-x / mpmath.sqrt(2)) / 2


ORACLES = {
    "erf": lambda x: mpmath.erf(x),
    "gelu_fwd": lambda x: x * _phi(x),
    "gelu_bwd": lambda x: _phi(x) + x * mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi),
}


def test_erf_within_16_float64_ulps_of_mpmath() -> None:
    got = _run("erf", POINTS)
    u = _ulps(got, [mpmath.erf(mpmath.mpf(float(v))) for v in POINTS])
    assert u.max() <= 16, (POINTS[np.argmax(u)], got[np.argmax(u)], u.max())


@pytest.mark.parametrize("mode", ["gelu_fwd", "gelu_bwd"])
def test_gelu_within_its_conditioning_of_mpmath(mode: str) -> None:
    """16 ulps of the largest term, plus what rounding z = x / sqrt2 does to erfc(z): 3 z^2 ulps.

    z carries up to 1.5 float64 roundings (sqrt2's and the division's), dz / z <= 1.5 * 2^-53, and
    erfc's relative change is 2 z dz: 3 z^2 * 2^-53, at most 3 z^2 ulps of the result.

    gelu_bwd = Phi(x) + x phi(x) cancels near its root (x ~ -0.75): there the error is judged against
    the terms' size, as any float64 evaluation of the sum must be."""
    x = POINTS
    got = _run(mode, x, np.ones_like(x) if mode == "gelu_bwd" else None)
    want = [ORACLES[mode](mpmath.mpf(float(v))) for v in x]
    if mode == "gelu_bwd":
        scale = np.array(
            [
                float(abs(_phi(mpmath.mpf(float(v))))) + float(abs(w - _phi(mpmath.mpf(float(v)))))
                for v, w in zip(x, want, strict=True)
            ]
        )
    else:
        scale = np.abs([float(w) for w in want])
    error = np.abs(got - np.array([float(w) for w in want]))
    allowed = (16 + 3 * (x / math.sqrt(2)) ** 2) * np.spacing(np.maximum(scale, np.finfo(np.float64).tiny))
    assert np.all(error <= allowed), (x[np.argmax(error / allowed)], (error / allowed).max())


def test_erfc_tail_of_gelu_is_not_cancelled() -> None:
    """gelu(-12) = -12 Phi(-12) ~ -2.1e-32: 1 + erf(x / sqrt2) would give 0."""
    got = _run("gelu_fwd", np.array([-12.0, -20.0, -38.0]))
    want = [mpmath.mpf(v) * _phi(mpmath.mpf(v)) for v in (-12, -20, -38)]
    assert np.all(got != 0)
    assert np.all(_ulps(got, want) <= 16 + 1.5 * np.array([12.0, 20.0, 38.0]) ** 2)  # 3 z^2, z = x / sqrt2


def test_special_values_match_the_limits() -> None:
    erf = _run("erf", SPECIAL)
    assert erf[0] == 1.0 and erf[1] == -1.0 and math.isnan(erf[2])
    gelu = _run("gelu_fwd", SPECIAL)
    assert gelu[0] == math.inf and math.isnan(gelu[2])
    cpu = sigdnn.Executor("reference")
    for mode in ("gelu_fwd", "gelu_bwd", "gelu_approx_tanh_fwd"):  # -inf * 0 and the like: as the CPU reference
        g = sigdnn.Graph(mode, io_dtype="float64", compute_dtype="float64")
        ports = [g.tensor(n, (3,)) for n in (("dy", "x") if mode == "gelu_bwd" else ("x",))]
        g.pointwise(mode, *ports, name="pw").set_output(True).set_name("y")
        inputs = {"x": SPECIAL, "dy": np.ones(3)}
        want = np.asarray(cpu.execute(cpu.prepare(g), {p.name: inputs[p.name] for p in ports})["y"])
        got = _run(mode, SPECIAL, np.ones(3) if mode == "gelu_bwd" else None)
        np.testing.assert_array_equal(got, want, err_msg=mode)


def test_tiny_gelu_rounds_above_the_half() -> None:
    """gelu(x) = x/2 + x^2 / sqrt(2 pi) + ...: above x/2 for both signs, so never exactly x/2."""
    x = np.array([1e-20, -1e-20, 3e-300, -3e-300])
    got = _run("gelu_fwd", x)
    assert np.all(got > x * 0.5)


@pytest.mark.parametrize("half", [False, True])
def test_exp_of_minus_z_squared_carries_z_squared_beyond_float64(half: bool) -> None:
    """e^(-z^2) (e^(-z^2 / 2)) within 2 float64 ulps up to z = 26: rounding z^2 first would cost up to z^2 / 2 ulps
    (~340 at z = 26), so only the exact split (Dekker's 2^27 + 1, the halving of both parts) passes."""
    from sigdnn.plan_builders.cutile.backend import EmulatedGpu
    from sigdnn.plan_builders.gpu_reference.arrays import Array
    from sigdnn.plan_builders.gpu_reference.backend import Gpu
    from sigdnn.plan_builders.gpu_reference.error_function import exp_neg_square

    z = np.linspace(3.0, 26.0, 4001) + 1e-9  # off the grid of short mantissas
    gpu = Gpu(EmulatedGpu(), None)
    got = exp_neg_square(Array.from_host(gpu, z), half=half).host()
    want = [mpmath.exp(-(mpmath.mpf(float(v)) ** 2) / (2 if half else 1)) for v in z]
    assert _ulps(got, want).max() <= 2


def test_erf_keeps_the_sign_of_zero() -> None:
    """erf is odd: erf(+0) = +0 and erf(-0) = -0, bit for bit."""
    got = _run("erf", np.array([0.0, -0.0]))
    assert not np.signbit(got[0]) and np.signbit(got[1])
