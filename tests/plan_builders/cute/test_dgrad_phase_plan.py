"""The strided CuTe dgrad plan as built and bound, run on the CPU with NumPy stand-ins for its launches.

The builder's wiring -- which launch gets which table, extents, workspace
offsets and pointers, in which order -- is what this checks, not the CuTe
kernels: each stand-in is the index arithmetic of its kernel
(kernels/phase_dgrad.py, and the implicit-GEMM fprop of a geometry)
transcribed to NumPy over a fake byte-addressed device memory. Inputs are
small integers, so float16 operands and float32 sums are exact and dx must
equal the float64 reference bit for bit.
"""

from __future__ import annotations

import itertools
import sys
import types

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.cute import conv_dgrad
from sigdnn.plan_builders.cute.conv_geometry import unpack
from sigdnn.plan_builders.reference.math.conv_backward import conv_dgrad as reference_dgrad
from sigdnn.registry.contracts import BuildContext
from sigdnn.runtime.device import ExecutionContext

NP = {"float16": np.float16, "bfloat16": np.float16, "float32": np.float32}  # bfloat16 not needed: cases use f16


class Memory:
    """Device memory as NumPy byte arrays at fake addresses."""

    def __init__(self) -> None:
        self.regions: dict[int, np.ndarray] = {}
        self.top = 1 << 20

    def alloc(self, nbytes: int) -> int:
        base = self.top
        self.regions[base] = np.zeros(nbytes, np.uint8)
        self.top += -(-(nbytes + 1) // 4096) * 4096
        return base

    def view(self, ptr: int, dtype: type) -> np.ndarray:
        """Everything from ``ptr`` to the end of its region, as ``dtype``."""
        base = max(b for b in self.regions if b <= ptr)
        rest = self.regions[base][ptr - base :]
        return rest[: len(rest) // np.dtype(dtype).itemsize * np.dtype(dtype).itemsize].view(dtype)


MEMORY = Memory()
launch_log: list[str] = []


class ConvLaunch:
    """y[n, i, j, k] = sum over (t, u, c) of x[n, i*sh - ph + t*dh, j*sw - pw + u*dw, c] * w[k, t, u, c]."""

    def __init__(self, spec, config, geometry, sm_count) -> None:
        self.spec, self.config, self.g = spec, config, unpack(geometry)

    def __call__(self, x_ptr: int, w_ptr: int, y_ptr: int, stream: int) -> None:
        launch_log.append("conv")
        g = self.g
        (h, wd), (r, s), (p, q) = g["in"], g["taps"], g["out"]
        x = MEMORY.view(x_ptr, NP[self.spec.a_dtype])[: g["n"] * h * wd * g["c"]].reshape(g["n"], h, wd, g["c"])
        w = MEMORY.view(w_ptr, NP[self.spec.b_dtype])[: g["k"] * r * s * g["c"]].reshape(g["k"], r, s, g["c"])
        y = np.zeros((g["n"], p, q, g["k"]), np.float32)
        for i, j, t, u in itertools.product(range(p), range(q), range(r), range(s)):
            a = i * g["stride"][0] - g["pre"][0] + t * g["dilation"][0]
            b = j * g["stride"][1] - g["pre"][1] + u * g["dilation"][1]
            if 0 <= a < h and 0 <= b < wd:
                y[:, i, j] += x[:, a, b].astype(np.float32) @ w[:, t, u].astype(np.float32).T
        MEMORY.view(y_ptr, NP[self.spec.c_dtype])[: y.size] = y.reshape(-1)


class PhaseGatherLaunch:
    """out[dst + c * c_stride + k] = w[(k * taps + tap) * C + c] (0 for tap -1), one table row per tap."""

    def __init__(self, dtype, table, k, taps, c, span) -> None:
        self.dtype, self.table, self.k, self.taps, self.c, self.span = NP[dtype], table, k, taps, c, span

    def __call__(self, w_ptr: int, out_ptr: int, stream: int) -> None:
        launch_log.append("gather")
        rows = np.array(self.table).reshape(-1, 3)
        i = np.arange(len(rows) * self.c * self.k)
        kk, cc, row = i % self.k, i // self.k % self.c, i // self.k // self.c
        tap, dst, c_stride = rows[row].T
        w, out = MEMORY.view(w_ptr, self.dtype), MEMORY.view(out_ptr, self.dtype)[: self.span]
        out[dst + cc * c_stride + kk] = np.where(tap >= 0, w[(kk * self.taps + np.maximum(tap, 0)) * self.c + cc], 0)


class PhaseInterleaveLaunch:
    """dx[n, y, x, c] = work[base + ((n * Hp + y / sh) * Wp + x / sw) * C + c] (0 for base -1)."""

    def __init__(self, dtype, table, nhwc, stride, span) -> None:
        self.dtype, self.table, self.nhwc, self.stride, self.span = NP[dtype], table, nhwc, stride, span

    def __call__(self, work_ptr: int, dx_ptr: int, stream: int) -> None:
        launch_log.append("interleave")
        (n, h, wd, c), (sh, sw) = self.nhwc, self.stride
        nn, y, x, cc = np.meshgrid(*(np.arange(e) for e in (n, h, wd, c)), indexing="ij")
        base, hp, wp = np.array(self.table).reshape(-1, 3)[(y % sh) * sw + x % sw].transpose(4, 0, 1, 2, 3)
        src = base + ((nn * hp + y // sh) * wp + x // sw) * c + cc
        work = MEMORY.view(work_ptr, self.dtype)[: self.span]
        MEMORY.view(dx_ptr, self.dtype)[: n * h * wd * c] = np.where(base >= 0, work[np.maximum(src, 0)], 0).reshape(-1)


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel modules replaced by the stand-ins above (they import cutlass), and an H200's 132 SMs."""
    kernels = "sigdnn.plan_builders.cute.kernels"
    monkeypatch.setitem(sys.modules, f"{kernels}.conv_launch", types.SimpleNamespace(ConvLaunch=ConvLaunch))
    monkeypatch.setitem(
        sys.modules,
        f"{kernels}.phase_dgrad",
        types.SimpleNamespace(PhaseGatherLaunch=PhaseGatherLaunch, PhaseInterleaveLaunch=PhaseInterleaveLaunch),
    )
    monkeypatch.setattr(conv_dgrad, "device_properties", lambda device_id: ((9, 0), 132))
    launch_log.clear()


CASES = {
    # name: dy dims, w dims, dx dims, conv arguments, the launches the plan makes
    "3x3_stride2_odd": ((2, 16, 4, 5), (16, 8, 3, 3), (2, 8, 7, 9), {"padding": (1, 1), "stride": (2, 2)}, 4),
    "1x1_stride2": ((2, 16, 4, 3), (16, 8, 1, 1), (2, 8, 8, 6), {"stride": (2, 2)}, 1),
    "2x2_pad1_zero_taps": ((1, 8, 5, 5), (8, 16, 2, 2), (1, 16, 8, 8), {"padding": (1, 1), "stride": (2, 2)}, 4),
    "3x2_stride3x2_dilated": (
        (2, 16, 6, 8),
        (16, 8, 3, 2),
        (2, 8, 17, 16),
        {"pre_padding": (2, 0), "post_padding": (1, 1), "stride": (3, 2), "dilation": (2, 1)},
        6,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_built_plan_computes_the_reference_dgrad(name: str, stand_ins: None) -> None:
    dy_dims, w_dims, dx_dims, conv, phases = CASES[name]
    g = sigdnn.Graph("dgrad", io_dtype="float16", compute_dtype="float32")
    tdy, tw = g.tensor("dy", dy_dims, layout="NHWC"), g.tensor("w", w_dims, layout="NHWC")
    g.conv_dgrad(tdy, tw, name="dgrad", dims=dx_dims, **conv).set_output(True).set_name("dx").set_data_type("float32")
    node = g.node_by_name("dgrad")
    plan = conv_dgrad.CuteConvDgradBuilder().build(node, g, BuildContext(None, None, g))
    rng = np.random.default_rng(5)
    dy = rng.integers(-3, 4, dy_dims).astype(np.float16)  # NCHW values
    w = rng.integers(-3, 4, w_dims).astype(np.float16)
    ptrs = {}
    for port, value in (("dy", dy), ("w", w)):
        ptrs[port] = MEMORY.alloc(value.nbytes)
        MEMORY.view(ptrs[port], np.float16)[: value.size] = value.transpose(0, 2, 3, 1).reshape(-1)  # NHWC
    ptrs["dx"] = MEMORY.alloc(int(np.prod(dx_dims)) * 4)
    MEMORY.view(ptrs["dx"], np.float32)[:] = np.nan
    work = MEMORY.alloc(plan.workspace_bytes)
    MEMORY.view(work, np.uint8)[:] = 0xFF  # NaN in every float: nothing may read what no launch wrote
    buffers = {port: types.SimpleNamespace(ptr=ptr) for port, ptr in ptrs.items()}
    plan.bind(buffers, ExecutionContext(stream=7, workspace=types.SimpleNamespace(ptr=work)))()
    assert launch_log == ["gather", *["conv"] * phases, "interleave"]
    n, c, h, wd = dx_dims
    got = MEMORY.view(ptrs["dx"], np.float32)[: n * h * wd * c].reshape(n, h, wd, c).transpose(0, 3, 1, 2)
    op = node.op
    want = reference_dgrad(dy, w, op.pre_padding, op.post_padding, op.stride, op.dilation, dx_dims)
    np.testing.assert_array_equal(got, want)
