"""Resample cases for the cuTile builder's tests (the emulator's and the GPU's).

Every mode and coordinate convention over 1 to 3 spatial dims, channels
first and last, up- and downsampling by odd factors, size-1 input and
output dims, and an input laid out with gaps (a strided view).
"""

from __future__ import annotations

import attrs

import sigdnn

CONVENTIONS = (
    ("nearest", "half_pixel"),
    ("nearest", "asymmetric"),
    ("bilinear", "half_pixel"),
    ("bilinear", "align_corners"),
    ("bilinear", "asymmetric"),
)


@attrs.frozen
class Case:
    name: str
    dims: tuple[int, ...]
    layout: str
    out: tuple[int, ...]  # y's spatial dims
    dtype: str = "float32"
    gap: bool = False


CASES = (
    Case("2d_up_nhwc", (2, 3, 5, 4), "NHWC", (9, 7)),
    Case("2d_down_nchw", (1, 4, 11, 9), "NCHW", (4, 5), "bfloat16"),
    Case("2d_to_one", (2, 2, 6, 1), "NHWC", (1, 3)),
    Case("2d_gapped", (1, 3, 4, 6), "NCHW", (7, 3), gap=True),
    Case("1d_nwc", (3, 5, 7), "NWC", (12,), "float16"),
    Case("1d_ncw_same", (2, 1, 5), "NCW", (5,)),
    Case("3d_ndhwc", (1, 3, 3, 4, 5), "NDHWC", (5, 2, 7)),
    Case("3d_ncdhw", (2, 2, 4, 1, 3), "NCDHW", (2, 3, 6), "bfloat16"),
)


def graph(case: Case, mode: str, coordinates: str) -> sigdnn.Graph:
    g = sigdnn.Graph(f"resample_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    x = g.tensor("x", case.dims, x_layout(case))  # gapped: every innermost run followed by 3 unused elements
    y = g.resample(x, mode, dims=(*case.dims[:2], *case.out), coordinates=coordinates, name="resample")
    y.set_output(True)
    return g


def backward_graph(case: Case, mode: str, coordinates: str) -> sigdnn.Graph:
    """dy (y's dims, laid out like x) -> dx with x's dims and layout (gapped for the gapped case)."""
    g = sigdnn.Graph(f"resample_bwd_{case.name}", io_dtype=case.dtype, compute_dtype="float32")
    dy = g.tensor("dy", (*case.dims[:2], *case.out), layout=case.layout)
    dx = g.resample_backward(dy, mode, case.dims, coordinates=coordinates, name="resample_bwd")
    dx.set_stride(x_layout(case)).set_output(True)
    return g


def x_layout(case: Case) -> tuple[int, ...]:
    x = sigdnn.Graph("layout").tensor("x", case.dims, layout=case.layout)
    if not case.gap:
        return x.strides
    inner = min(range(len(x.strides)), key=lambda a: x.strides[a])
    return tuple(s if a == inner else s // x.dims[inner] * (x.dims[inner] + 3) for a, s in enumerate(x.strides))
