"""Pooling cases for the cuTile builders' tests: the emulator's (tests/plan_builders/cutile) and the GPU's.

Every mode over 1 to 3 spatial dims, channels first and last, odd sizes,
size-1 dims, padding, strides unlike the window, inputs laid out with gaps
(strided views, one whose pixels share no single stride), and inputs with
ties, a NaN and a -inf for the max's first-maximum rule.
"""

from __future__ import annotations

import attrs
import numpy as np

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

MODES = ("max", "average_count_include_pad", "average_count_exclude_pad")


@attrs.frozen
class Case:
    name: str
    dims: tuple[int, ...]
    layout: str
    window: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dtype: str = "float32"
    gap: bool = False  # x laid out with a gap after each row (a strided view of a wider buffer)
    strides: tuple[int, ...] | None = None  # x's strides, where given


def cases() -> list[Case]:
    found = [
        Case("2d_resnet_maxpool", (2, 5, 9, 7), "NHWC", (3, 3), (2, 2), (1, 1)),
        Case("2d_nchw_odd", (1, 3, 7, 5), "NCHW", (2, 3), (1, 2), (1, 0)),
        Case("2d_global", (3, 4, 5, 6), "NHWC", (5, 6), (1, 1), (0, 0), "bfloat16"),
        Case("2d_window_one", (2, 3, 4, 4), "NCHW", (1, 1), (2, 1), (0, 0), "float16"),
        Case("2d_size_one_dims", (1, 1, 1, 9), "NHWC", (1, 3), (1, 2), (0, 1)),
        Case("2d_gapped_rows", (2, 3, 6, 5), "NCHW", (2, 2), (2, 2), (1, 1), gap=True),
        Case("1d_ncw", (2, 3, 11), "NCW", (4,), (3,), (2,)),
        Case("1d_nwc", (3, 2, 8), "NWC", (3,), (1,), (1,), "bfloat16"),
        Case("3d_ncdhw", (1, 2, 5, 4, 3), "NCDHW", (2, 2, 2), (2, 1, 2), (1, 0, 1)),
        Case("3d_ndhwc", (2, 3, 3, 5, 4), "NDHWC", (3, 2, 2), (1, 2, 1), (1, 1, 0), "float16"),
        Case("2d_nhwc_wide", (2, 70, 5, 6), "NHWC", (3, 3), (2, 2), (1, 1), "bfloat16"),  # two channel blocks
        Case("2d_nhwc_gapped", (2, 5, 6, 5), "NHWC", (2, 2), (2, 2), (1, 1), gap=True),
        # channels innermost, 2 unused elements after each row of pixels: no single pixel stride
        Case("2d_nhwc_row_gaps", (2, 5, 4, 3), "NHWC", (2, 2), (1, 1), (0, 1), strides=(68, 1, 17, 5)),
        # rows of 40 pixels, 64 channels: each stride-2 phase of a row spans three blocks of 8 pixels
        Case("2d_nhwc_long_rows", (1, 64, 2, 40), "NHWC", (1, 3), (1, 2), (0, 1), "bfloat16"),
        # x's last column lies in no window (7 = 3 windows of 2, stride 2, and one left over)
        Case("2d_nhwc_uncovered_column", (2, 8, 2, 7), "NHWC", (2, 2), (2, 2), (0, 0)),
        # 3 windows along w could cover a pixel, ow has 2: the row kernel's clamped candidates, with padding
        Case("2d_nhwc_narrow_output", (2, 5, 4, 2), "NHWC", (3, 3), (1, 1), (1, 1)),
        # a stride far past the input along h, where one window fits: never stepped
        Case("2d_stride_past_the_input", (2, 5, 1, 6), "NHWC", (1, 2), (2**20, 2), (0, 0)),
    ]
    return found


CASES = cases()


def x_tensor(g: sigdnn.Graph, case: Case) -> sigdnn.Tensor:
    x = g.tensor("x", case.dims, layout=case.layout)
    if getattr(case, "strides", None):  # (the conv cases that share this helper have no such field)
        x.set_stride(case.strides)
    if case.gap:  # every innermost run followed by 3 unused elements
        inner = min(range(len(x.strides)), key=lambda a: x.strides[a])
        x.set_stride(tuple(s if a == inner else s // x.dims[inner] * (x.dims[inner] + 3) for a, s in
                           enumerate(x.strides)))  # fmt: skip
    return x


def forward(case: Case, mode: str) -> sigdnn.Graph:
    g = sigdnn.Graph(f"pool_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    x = x_tensor(g, case)
    g.pooling(x, mode, case.window, case.stride, case.padding, name="pool").set_output(True)
    return g


def backward(case: Case, mode: str) -> sigdnn.Graph:
    g = sigdnn.Graph(f"pool_bwd_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    x = x_tensor(g, case)
    scratch = sigdnn.Graph("shape", io_dtype=case.dtype)
    pooled = scratch.pooling(scratch.tensor("x", case.dims), mode, case.window, case.stride, case.padding)
    dy = g.tensor("dy", pooled.dims, layout=case.layout)
    g.pooling_backward(dy, x, mode, case.window, case.stride, case.padding, name="pool_bwd").set_output(True)
    return g


def with_ties(graph: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    """Random inputs with x rounded to few values (many ties in every window) and a NaN and a -inf planted."""
    inputs = random_inputs(graph, seed=seed)
    x = inputs["x"].astype(np.float32)
    x = np.round(x * 2) / 2
    flat = x.reshape(-1)
    flat[seed % flat.size] = np.nan
    flat[(seed * 7 + 3) % flat.size] = -np.inf
    inputs["x"] = x.astype(inputs["x"].dtype)
    return inputs
