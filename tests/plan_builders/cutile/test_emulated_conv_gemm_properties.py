"""Random convolutions through the implicit-GEMM fprop, dgrad and wgrad kernels (emulated), bit for bit.

hypothesis draws the geometry: 1 to 3 spatial dims, sizes, groups, kernel, asymmetric padding, stride,
dilation, channels first or last, a 16-bit or float32 dtype. Inputs are small integers, so every float32
sum is exact and the only rounding is the result's: each kernel must give torch's float64 conv (or its
autograd gradient) rounded once to the result's dtype, bit for bit. The fixed cases of
tests/conv_gemm_cases.py and tests/conv_backward_cases.py name the edges; this looks for the ones they miss.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conv_backward_cases import ENGINES, dy_dims, random_cases, run_exact
from conv_grouped_cases import Case
from emulated import emulated_executor, make_available
from hypothesis import HealthCheck, given, settings


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize("kind", list(ENGINES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=random_cases())
def test_random_convolutions_give_torchs_result_rounded_once(kind: str, case: Case) -> None:
    assert min(dy_dims(case)[2:]) >= 1 and math.prod(case.dims) > 0
    got, want = run_exact(kind, case, emulated_executor(engine=ENGINES[kind]))
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=repr(case))
