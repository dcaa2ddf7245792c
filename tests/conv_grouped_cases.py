"""Grouped and depthwise conv fprop cases for the cuTile builder's tests: the emulator's and the GPU's.

Depthwise (multiplier 1 and 2) and grouped (G = 2, 3 and 4 with C/G = 2 or
3) convs over 1 to 3 spatial dims, channels first and last (w in x's layout
or the other one), odd sizes, size-1 dims, asymmetric padding, stride 2,
dilation 2, an input laid out with gaps (a strided view), more output
channels than one channel tile, and the three io dtypes (one case mixing
them).
"""

from __future__ import annotations

import attrs
import numpy as np
import torch
from oracles_conv import exact_round
from pooling_cases import x_tensor

import sigdnn

HALF_ULP = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}  # relative rounding error of y
TINY = {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}  # half the subnormal spacing
OTHER_LAYOUT = {"NCW": "NWC", "NWC": "NCW", "NCHW": "NHWC", "NHWC": "NCHW", "NCDHW": "NDHWC", "NDHWC": "NCDHW"}


@attrs.frozen
class Case:
    name: str
    dims: tuple[int, ...]  # x's logical dims (N, C, spatial...)
    w_dims: tuple[int, ...]  # (K, C/G, kernel...)
    layout: str
    pre: tuple[int, ...]
    post: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    dtype: str = "float32"
    gap: bool = False  # x laid out with a gap after each innermost run (a strided view of a wider buffer)
    w_layout: str | None = None  # w's layout when not x's
    w_dtype: str | None = None  # w's dtype when not the graph's io dtype

    @property
    def groups(self) -> int:
        return self.dims[1] // self.w_dims[1]


CASES = [
    Case("depthwise_3x3_nhwc", (2, 8, 9, 7), (8, 1, 3, 3), "NHWC", (1, 1), (1, 1), (1, 1), (1, 1), "bfloat16"),
    Case("depthwise_x2_nchw_stride2", (1, 5, 6, 7), (10, 1, 3, 3), "NCHW", (1, 0), (0, 2), (2, 2), (1, 1),
         "float16"),
    Case("g2_c3_dilation2", (2, 6, 9, 8), (4, 3, 3, 3), "NHWC", (2, 2), (2, 2), (1, 1), (2, 2)),
    Case("g4_c3_nchw_stride2", (3, 12, 7, 9), (8, 3, 2, 3), "NCHW", (0, 1), (1, 0), (2, 2), (1, 2), "bfloat16",
         w_layout="NHWC"),
    Case("depthwise_size_one_dims", (1, 4, 1, 9), (4, 1, 1, 3), "NHWC", (0, 1), (0, 1), (1, 2), (1, 1)),
    Case("g2_c3_gapped_rows", (2, 6, 5, 6), (6, 3, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1), gap=True),
    Case("depthwise_wide_5x5_stride2", (1, 72, 7, 7), (72, 1, 5, 5), "NHWC", (2, 2), (2, 2), (2, 2), (1, 1),
         "bfloat16", w_dtype="float32"),
    Case("1d_g3_ncw", (2, 6, 11), (6, 2, 3), "NCW", (2,), (1,), (2,), (2,), "float16"),
    Case("1d_depthwise_nwc", (3, 5, 8), (5, 1, 5), "NWC", (2,), (2,), (1,), (1,), "bfloat16", w_layout="NCW"),
    Case("3d_g2_ndhwc", (1, 4, 3, 5, 4), (8, 2, 2, 3, 2), "NDHWC", (1, 0, 1), (0, 1, 0), (1, 2, 1), (1, 1, 1),
         "float16"),
    Case("3d_depthwise_ncdhw", (2, 3, 4, 3, 5), (3, 1, 3, 1, 3), "NCDHW", (1, 0, 1), (1, 0, 1), (1, 1, 1),
         (1, 1, 2)),
]  # fmt: skip


def graph(case: Case) -> sigdnn.Graph:
    g = sigdnn.Graph(f"conv_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    x = x_tensor(g, case)
    w = g.tensor("w", case.w_dims, layout=case.w_layout or case.layout)
    if case.w_dtype:
        w.set_data_type(case.w_dtype)
    y = g.conv_fprop(x, w, stride=case.stride, dilation=case.dilation, pre_padding=case.pre,
                     post_padding=case.post, name="conv")  # fmt: skip
    y.set_output(True)
    return g


def exact_inputs(g: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    """Small integers (|v| <= 4): every float32 sum of their products is exact, so only y's rounding is left."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.integers(-4, 5, size=t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}


def torch_conv(case: Case, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """torch's float64 conv of the given values (read as float64): the oracle, before y's one rounding."""
    spatial = len(case.dims) - 2
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[spatial]
    pad = [p for pre, post in zip(reversed(case.pre), reversed(case.post)) for p in (pre, post)]  # last dim first
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), pad)
    wt = torch.from_numpy(w.astype(np.float64))
    return conv(xt, wt, stride=case.stride, dilation=case.dilation, groups=case.groups).numpy()


def rounded_oracle(case: Case, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """torch's float64 conv rounded once to y's dtype (exact inputs: what a correct kernel writes, bit for bit)."""
    return exact_round(torch_conv(case, x, w), case.dtype)


def within_float32_bound(case: Case, got: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Where |got - exact| exceeds float32 summation's error over C/G x taps products plus y's one rounding."""
    exact = torch_conv(case, x, w)
    terms = torch_conv(case, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)))
    n = int(np.prod(case.w_dims[1:])) + 1  # additions, and the product's own rounding
    gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
    summed = gamma * terms
    bound = summed + HALF_ULP[case.dtype] * (np.abs(exact) + summed) + TINY[case.dtype]
    return np.abs(got.astype(np.float64) - exact) <= bound
