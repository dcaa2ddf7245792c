"""Random convolutions through the implicit-GEMM fprop, dgrad and wgrad kernels (emulated), bit for bit.

hypothesis draws the geometry: 1 to 3 spatial dims, sizes, groups, kernel, asymmetric padding, stride,
dilation, channels first or last, a 16-bit or float32 dtype. Inputs are small integers, so every float32
sum is exact and the only rounding is the result's: each kernel must give torch's float64 conv (or its
autograd gradient) rounded once to the result's dtype, bit for bit. The fixed cases of
tests/conv_gemm_cases.py and tests/conv_backward_cases.py name the edges; this looks for the ones they miss.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from conv_backward_cases import dgrad_graph, dy_dims, torch_dgrad, torch_wgrad, wgrad_graph
from conv_grouped_cases import Case, graph, torch_conv
from emulated import emulated_executor, make_available
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles_conv import exact_round

LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
ENGINES = {"fprop": "cutile.conv_fprop_gemm", "dgrad": "cutile.conv_dgrad_gemm", "wgrad": "cutile.conv_wgrad_gemm"}


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    spatial = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, k = groups * draw(st.integers(1, 5)), groups * draw(st.integers(1, 6))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [draw(st.integers(1, 2)) for _ in range(spatial)]
    stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
    pre = [draw(st.integers(0, 2)) for _ in range(spatial)]
    post = [draw(st.integers(0, 2)) for _ in range(spatial)]
    reach = [d * (r - 1) + 1 for d, r in zip(dilation, kernel)]
    size = [draw(st.integers(max(1, e - a - b), 7 if spatial < 3 else 4)) for e, a, b in zip(reach, pre, post)]
    layout = draw(st.sampled_from(LAYOUTS[spatial]))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    batch = draw(st.integers(1, 3))
    return Case("drawn", (batch, c, *size), (k, c // groups, *kernel), layout, tuple(pre), tuple(post), tuple(stride),
                tuple(dilation), dtype)  # fmt: skip


def exact_inputs(g, seed: int) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return {t.name: rng.integers(-3, 4, size=t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}


def run(kind: str, case: Case) -> tuple[np.ndarray, np.ndarray]:
    g = {"fprop": graph, "dgrad": dgrad_graph, "wgrad": wgrad_graph}[kind](case)
    inputs = exact_inputs(g, seed=zlib.crc32(repr(case).encode()))
    got = emulated_executor(engine=ENGINES[kind]).run(g, inputs)
    if kind == "fprop":
        exact = torch_conv(case, inputs["x"], inputs["w"])
        return got["conv::y"], exact_round(exact, case.dtype)
    if kind == "dgrad":
        return got["dx"], exact_round(torch_dgrad(case, inputs["dy"], inputs["w"]), case.dtype)
    return got["dw"], exact_round(torch_wgrad(case, inputs["x"], inputs["dy"]), case.dtype)


@pytest.mark.parametrize("kind", list(ENGINES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_random_convolutions_give_torchs_result_rounded_once(kind: str, case: Case) -> None:
    assert min(dy_dims(case)[2:]) >= 1 and math.prod(case.dims) > 0
    got, want = run(kind, case)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=repr(case))
