"""Compile once, cache in process and on disk, launch with scalars only: the flash-attention backward.

The same path as the forward's (fmha_launch.py): each of the three kernels
of a specialization is compiled once per process, exported to the disk
cache (``SIGDNN_CUTE_CACHE``) so a later process loads it without tracing,
and launched through its compiled handle with a packed argument array whose
pointer and stream cells are rewritten in place.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from pathlib import Path
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute import sdpa_backward_layout
from sigdnn.plan_builders.cute.kernels import fmha_bwd_sm90
from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, _Cell, int32_cells
from sigdnn.plan_builders.cute.sdpa_backward_layout import BwdProblem, BwdSpec

KERNELS = ("pre", "main", "convert")
_CACHE = CompileCache()
STATS = _CACHE.stats
# The kernels' source and the tile sizes they take from the layout module.
_SOURCES = (fmha_bwd_sm90.__file__, sdpa_backward_layout.__file__)
_DIGEST = hashlib.sha256(
    b"\0".join([cutlass.__version__.encode(), *(Path(f).read_bytes() for f in _SOURCES)])
).hexdigest()[:16]


def _key_name(spec: BwdSpec, kernel: str) -> str:
    return f"fmhabwd_{kernel}_" + hashlib.sha256(repr((spec, kernel, _DIGEST)).encode()).hexdigest()[:24]


def _ptr(dtype: Any, align: int) -> Any:
    return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)


def _compile(spec: BwdSpec, kernel: str) -> Any:
    dt = fmha_bwd_sm90.DTYPES[spec.dtype]
    f32 = cutlass.Float32
    stream = cuda.CUstream(0)
    if kernel == "pre":
        ptrs = [_ptr(dt, 16), _ptr(dt, 16), _ptr(f32, 4), _ptr(f32, 16), _ptr(f32, 16), _ptr(f32, 16)]
        args = [*ptrs, *[Int32(1)] * 4, *[Int64(8)] * 9, stream]
        return cute.compile(fmha_bwd_sm90.BwdPreprocess(spec), *args)
    if kernel == "main":
        ptrs = [_ptr(dt, 16) for _ in range(6)] + [_ptr(f32, 16) for _ in range(3)]
        args = [*ptrs, *[Int32(1)] * 6, *[Int64(8)] * 18, Float32(1.0), Float32(1.0), stream]
        return cute.compile(fmha_bwd_sm90.HopperFmhaBwd(spec), *args)
    args = [_ptr(f32, 16), _ptr(dt, 16), *[Int32(1)] * 4, *[Int64(8)] * 3, Float32(1.0), stream]
    return cute.compile(fmha_bwd_sm90.BwdConvert(spec), *args)


def compiled(spec: BwdSpec, kernel: str) -> Any:
    """One kernel of a specialization: from this process, the disk cache, or a fresh compile."""
    key = (spec, kernel)
    return _CACHE.get(key, _key_name(spec, kernel), lambda: _compile(spec, kernel))


def _longs(*values: int) -> list[_Cell]:
    return [_Cell(ctypes.c_int64, v) for v in values]


def _float(value: float) -> _Cell:
    cell = _Cell(ctypes.c_float, 0)
    cell.value.value = value
    return cell


class FmhaBwdLaunch:
    """One problem's three launches: extents, strides and scale fixed; pointers, workspace and stream not."""

    def __init__(self, spec: BwdSpec, problem: BwdProblem) -> None:
        self.spec, self.problem = spec, problem
        p = problem
        self._pre = PackedLaunch(
            compiled(spec, "pre"),
            6,
            int32_cells(p.batch, p.heads, p.sq, p.sq_pad) + _longs(*p.o_strides, *p.do_strides, *p.stats_strides),
            "SDPA backward",
        )
        self._main = PackedLaunch(
            compiled(spec, "main"),
            9,
            int32_cells(p.batch, p.heads, p.groups, p.sq, p.skv, p.sq_pad)
            + _longs(*p.q_strides, *p.k_strides, *p.v_strides, *p.do_strides, *p.dk_strides, *p.dv_strides)
            + [_float(p.scale_log2), _float(p.attn_scale)],
            "SDPA backward",
        )
        self._convert = PackedLaunch(
            compiled(spec, "convert"),
            2,
            int32_cells(p.batch, p.heads, p.sq, p.sq_pad) + _longs(*p.dq_strides) + [_float(p.attn_scale)],
            "SDPA backward",
        )
        self._lock = threading.Lock()

    def __call__(self, tensors: dict[str, int], workspace: int, stream: int) -> None:
        """Enqueue the backward on ``stream`` (raw CUstream); q, k, v, o, d_o and the workspace 16-byte aligned."""
        t = tensors
        if (t["q"] | t["k"] | t["v"] | t["o"] | t["d_o"] | workspace) & 15:
            raise ValueError("the kernels need 16-byte aligned q, k, v, o, d_o and workspace")
        with self._lock:
            for kernel in KERNELS:
                self.run(kernel, tensors, workspace, stream)

    def run(self, kernel: str, tensors: dict[str, int], workspace: int, stream: int) -> None:
        """Enqueue one of the three kernels (``KERNELS``) alone: what a benchmark times part by part."""
        t = tensors
        p = self.problem
        lse = workspace + p.rows * p.head_dim * 4
        dsum = lse + p.rows * 4
        if kernel == "pre":
            self._pre((t["o"], t["d_o"], t["stats"], workspace, lse, dsum), stream)
        elif kernel == "main":
            self._main((t["q"], t["k"], t["v"], t["d_o"], t["dk"], t["dv"], workspace, lse, dsum), stream)
        else:
            self._convert((workspace, t["dq"]), stream)
