"""Validation's bookkeeping on a real GPU (validation/device_arrays.py): the host's numbers, on the device.

The CPU tests (tests/validation/test_device_bookkeeping.py) run the same
operations through the emulator; here cuTile runs them (int64 arithmetic of
the random draws' hash, NEXT_UP for the ulps, the whole-array reductions),
and a validation whose device is the GPU backend, judged by the GPU truth
with everything kept on the device, must report what the CPU truth reports.

    python -m pytest -m gpu tests/gpu/test_gpu_bookkeeping.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.arrays import HOST
from sigdnn.accuracy.compare import compare, compare_in
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.plan_builders.gpu_reference.base import unavailable_reason
from sigdnn.runtime.device_array import DeviceArray
from sigdnn.validation.device_arrays import DeviceArrays
from sigdnn.validation.truth import run_context, truth_executor

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"no GPU reference here: {unavailable_reason()}"),
]


@pytest.fixture(scope="module")
def xp() -> DeviceArrays:
    return DeviceArrays(run_context(truth_executor("gpu")))


@pytest.mark.parametrize("shape", [(), (7,), (3, 1000), (64, 1 << 15)])
def test_the_random_draws_are_the_hosts(xp: DeviceArrays, shape: tuple[int, ...]) -> None:
    for seed in (0, 2**40 + 17):
        signs = xp.random_signs(seed, shape)
        assert isinstance(signs, DeviceArray)
        assert np.array_equal(xp.host(signs), HOST.random_signs(seed, shape))
        assert np.array_equal(xp.host(xp.random_fractions(seed, shape)), HOST.random_fractions(seed, shape))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16])
def test_the_operations_are_the_hosts(xp: DeviceArrays, dtype: type) -> None:
    rng = np.random.default_rng(0)
    a64 = rng.standard_normal((5, 3001)) * 10.0 ** rng.integers(-6, 6, (5, 3001))
    a64.reshape(-1)[:5] = (np.inf, -np.inf, np.nan, 0.0, 5e-324)
    b64 = np.roll(a64, 7)
    a, b = a64.astype(dtype), b64.astype(dtype)
    da, db = xp.upload(a), xp.upload(b)
    with np.errstate(all="ignore"):
        pairs = {
            "abs": (xp.abs(da), HOST.abs(a)),
            "magnitude": (xp.magnitude(da), HOST.magnitude(a)),
            "finite_or_zero": (xp.finite_or_zero(da), HOST.finite_or_zero(a)),
            "add": (xp.add(da, db), HOST.add(a, b)),
            "sub": (xp.sub(da, db), HOST.sub(a, b)),
            "mul": (xp.mul(da, 0.3), HOST.mul(a, 0.3)),
            "fmax": (xp.fmax(xp.widen(da), xp.widen(db)), HOST.fmax(HOST.widen(a), HOST.widen(b))),
            "where": (xp.where(xp.finite(da), da, db), HOST.where(HOST.finite(a), a, b)),
            "round_to": (xp.round_to(xp.mul(da, 1.0 / 3.0), dtype), HOST.round_to(HOST.mul(a, 1.0 / 3.0), dtype)),
        }
    for name, (got, want) in pairs.items():
        got = xp.host(got)
        assert np.array_equal(got.astype(np.float64), np.asarray(want, np.float64), equal_nan=True), name
    assert xp.largest_magnitude(da) == HOST.largest_magnitude(a)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16])
def test_a_comparison_is_summarized_as_on_the_host(xp: DeviceArrays, dtype: type) -> None:
    want = np.random.default_rng(1).standard_normal((33, 1001)).astype(dtype)
    got = (want.astype(np.float64) * (1 + 2.0**-9)).astype(dtype)
    tolerance = Tolerance(atol=1e-6, rtol=2.0**-7)
    expected = compare("t", got, want, tolerance)
    found, errors = compare_in(xp, "t", xp.upload(got), xp.upload(want), tolerance)
    assert expected.passed and found == expected and errors is None
    got.reshape(-1)[5000] = np.nan
    found, errors = compare_in(xp, "t", xp.upload(got), xp.upload(want), tolerance)
    assert repr(found) == repr(compare("t", got, want, tolerance)) and errors is not None


def test_validating_the_gpu_backend_on_the_device_reports_what_the_cpu_truth_does() -> None:
    g = sigdnn.Graph("block", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (4, 16, 10, 10), layout="NHWC"), g.tensor("w", (32, 16, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1), name="conv")
    s = g.pointwise("gelu_fwd", g.pointwise("mul", y, g.scalar("s", 0.5), name="scale"), name="gelu")
    g.pointwise("add", s, y, name="residual").set_output(True).set_name("z")
    inputs = random_inputs(g, 2)
    by_gpu = sigdnn.validate(g, inputs, executor=sigdnn.Executor("gpu"), truth="gpu")
    by_cpu = sigdnn.validate(g, inputs, executor=sigdnn.Executor("gpu"), truth="cpu")
    assert by_gpu.passed and by_cpu.passed and by_gpu.truth == "gpu"
    assert [c.comparison.passed for c in by_gpu.nodes] == [c.comparison.passed for c in by_cpu.nodes]
