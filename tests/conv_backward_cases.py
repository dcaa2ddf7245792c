"""conv_dgrad and conv_wgrad graphs and oracles for the cuTile implicit-GEMM backward builders' tests: the
forward cases of tests/conv_gemm_cases.py (and a stride-3 one, where most taps miss dy) run backward, every
tensor in the case's layout; the oracle is torch's float64 autograd of its conv."""

from __future__ import annotations

import zlib

import numpy as np
import torch
from conv_gemm_cases import CASES as FORWARD
from conv_grouped_cases import HALF_ULP, TINY, Case, graph, torch_conv
from hypothesis import strategies as st
from oracles_conv import exact_round
from pooling_cases import x_tensor

import sigdnn

CASES = [
    *FORWARD,
    Case("stride3_dilation2_nchw_f32", (2, 4, 11, 10), (5, 4, 3, 2), "NCHW", (2, 1), (1, 0), (3, 3), (2, 1)),
    Case("1d_stride2_g2_nwc_bf16", (2, 8, 13), (6, 4, 3), "NWC", (1,), (2,), (2,), (1,), "bfloat16"),
    Case("kernel_3x2_72_columns", (1, 12, 6, 5), (4, 12, 3, 2), "NCHW", (1, 0), (1, 0), (1, 1), (1, 1)),
]  # fmt: skip


def conv(case: Case, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    spatial = len(case.dims) - 2
    fn = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[spatial]
    pad = [p for pre, post in zip(reversed(case.pre), reversed(case.post)) for p in (pre, post)]
    return fn(torch.nn.functional.pad(x, pad), w, stride=case.stride, dilation=case.dilation, groups=case.groups)


def dy_dims(case: Case) -> tuple[int, ...]:
    return tuple(conv(case, torch.zeros(case.dims, dtype=torch.float64),
                      torch.zeros(case.w_dims, dtype=torch.float64)).shape)  # fmt: skip


def dgrad_graph(case: Case) -> sigdnn.Graph:
    g = sigdnn.Graph(f"dgrad_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    dy = g.tensor("dy", dy_dims(case), layout=case.layout)
    w = g.tensor("w", case.w_dims, layout=case.w_layout or case.layout)
    if case.w_dtype:
        w.set_data_type(case.w_dtype)
    dx = g.conv_dgrad(dy, w, stride=case.stride, dilation=case.dilation, pre_padding=case.pre,
                      post_padding=case.post, dims=case.dims, name="dgrad")  # fmt: skip
    dx.set_output(True).set_name("dx")
    return g


def wgrad_graph(case: Case) -> sigdnn.Graph:
    g = sigdnn.Graph(f"wgrad_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    x = x_tensor(g, case)
    dy = g.tensor("dy", dy_dims(case), layout=case.layout)
    if case.w_dtype:  # the odd dtype out goes to dy here
        dy.set_data_type(case.w_dtype)
    dw = g.conv_wgrad(x, dy, stride=case.stride, dilation=case.dilation, pre_padding=case.pre,
                      post_padding=case.post, dims=case.w_dims, name="wgrad")  # fmt: skip
    dw.set_output(True).set_name("dw")
    if case.w_layout:
        dw.set_stride(sigdnn.Graph("layout").tensor("w", case.w_dims, layout=case.w_layout).strides)
    return g


def torch_wgrad(case: Case, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """torch's float64 dw (autograd of its conv) for these values."""
    w = torch.zeros(case.w_dims, dtype=torch.float64, requires_grad=True)
    conv(case, torch.from_numpy(x.astype(np.float64)), w).backward(torch.from_numpy(dy.astype(np.float64)))
    return w.grad.numpy()


def torch_dgrad(case: Case, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """torch's float64 dx (autograd of its conv) for these values: the oracle before dx's one rounding."""
    x = torch.zeros(case.dims, dtype=torch.float64, requires_grad=True)
    conv(case, x, torch.from_numpy(w.astype(np.float64))).backward(torch.from_numpy(dy.astype(np.float64)))
    return x.grad.numpy()


def within_float32_bound(oracle, a: np.ndarray, b: np.ndarray, got: np.ndarray, terms_count: int,
                         dtype: str) -> np.ndarray:  # fmt: skip
    """Where |got - exact| is within float32 summation's error over ``terms_count`` products plus the result's
    one rounding; ``oracle(a, b)`` is torch's float64 gradient (bilinear: of |a|, |b| it sums the |terms|)."""
    exact = oracle(a, b)
    terms = oracle(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    n = terms_count + 1
    gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
    bound = gamma * terms + HALF_ULP[dtype] * (np.abs(exact) + gamma * terms) + TINY[dtype]
    return np.abs(got.astype(np.float64) - exact) <= bound


LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
ENGINES = {"fprop": "cutile.conv_fprop_gemm", "dgrad": "cutile.conv_dgrad_gemm", "wgrad": "cutile.conv_wgrad_gemm"}


@st.composite
def random_cases(draw):  # type: ignore[no-untyped-def]
    """A conv's geometry: 1 to 3 spatial dims, sizes, groups, kernel, asymmetric padding, stride, dilation,
    channels first or last, a 16-bit or float32 dtype."""
    spatial = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, k = groups * draw(st.integers(1, 5)), groups * draw(st.integers(1, 6))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [draw(st.integers(1, 2)) for _ in range(spatial)]
    stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
    pre = [draw(st.integers(0, 2)) for _ in range(spatial)]
    post = [draw(st.integers(0, 2)) for _ in range(spatial)]
    reach = [d * (r - 1) + 1 for d, r in zip(dilation, kernel)]
    least = [max(1, e - a - b) for e, a, b in zip(reach, pre, post)]  # one window must fit
    size = [draw(st.integers(lo, max(lo, 7 if spatial < 3 else 4))) for lo in least]
    layout = draw(st.sampled_from(LAYOUTS[spatial]))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    batch = draw(st.integers(1, 3))
    return Case("drawn", (batch, c, *size), (k, c // groups, *kernel), layout, tuple(pre), tuple(post), tuple(stride),
                tuple(dilation), dtype)  # fmt: skip


def run_exact(kind: str, case: Case, executor: sigdnn.Executor) -> tuple[np.ndarray, np.ndarray]:
    """``kind``'s result on small-integer inputs (every float32 sum exact), and torch's float64 rounded once."""
    g = {"fprop": graph, "dgrad": dgrad_graph, "wgrad": wgrad_graph}[kind](case)
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    inputs = {t.name: rng.integers(-3, 4, size=t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}
    got = executor.run(g, inputs)
    if kind == "fprop":
        return np.asarray(got["conv::y"]), exact_round(torch_conv(case, inputs["x"], inputs["w"]), case.dtype)
    if kind == "dgrad":
        return np.asarray(got["dx"]), exact_round(torch_dgrad(case, inputs["dy"], inputs["w"]), case.dtype)
    return np.asarray(got["dw"]), exact_round(torch_wgrad(case, inputs["x"], inputs["dy"]), case.dtype)
