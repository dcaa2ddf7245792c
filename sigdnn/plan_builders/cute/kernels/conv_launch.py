"""The implicit-GEMM conv's compile cache and launch: as kernels/launch.py does for the GEMM.

Compiled once per specialization (GemmSpec for dtypes and epilogue, tile
config, SM count) in process and in the same on-disk cache
(``SIGDNN_CUTE_CACHE``), keyed with the sources of every conv kernel module. A
launch rewrites the pointer and stream cells of a pre-marshalled argument
array; the conv's extents, padding, stride and dilation are fixed at build.

A split-K fprop launch owns its workspace (float32 partial tiles and the
tile counters, zeroed once when allocated: the kernel leaves the counters at
zero), so it stays a single launch with nothing to clear per call; one
launch of it may be in flight at a time, like any plan's.
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
from cutlass import Int32
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.conv_geometry import SplitK, split_k_plan
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig, GemmSpec, resident_clusters
from sigdnn.plan_builders.cute.kernels import (
    conv_rows_sm90,
    conv_sm90,
    conv_transposed_sm90,
    conv_wgrad_rows_sm90,
    conv_wgrad_sm90,
    gemm_sm90,
)
from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache
from sigdnn.plan_builders.cute.kernels.launch import STATS, GemmLaunch, _Cell, packed_args, zeroed_memory

# (kind, spatial rank) -> (kernel class, launch scalars: the geometry (conv_geometry.ImplicitConv's) and, for
# the wgrad kinds, the reduction's slice length and slice count). The fprop kinds also take the split-K
# workspace and counter pointers after the bias and the split count, whole-tile count and stream-K segments
# per CTA after the geometry (the transposed and row kernels read none of them). "_t": the transposed GEMM
# (conv_transposed.py); "_rows": the kernels that read x a row at a time.
KINDS = {
    ("fprop", 2): (conv_sm90.HopperConvFprop, 17),
    ("fprop", 3): (conv_sm90.HopperConvFprop3d, 24),
    ("wgrad", 2): (conv_wgrad_sm90.HopperConvWgrad, 19),
    ("wgrad_rows", 2): (conv_wgrad_rows_sm90.HopperConvWgradRows, 19),
    ("fprop_t", 2): (conv_transposed_sm90.HopperConvFpropTransposed, 17),
    ("fprop_rows", 2): (conv_rows_sm90.HopperConvFpropRows, 17),
}
FPROPS = ("fprop", "fprop_t", "fprop_rows")  # kinds that take the split-K workspace, counters and scalars

_CACHE = CompileCache(stats=STATS)  # counted with the GEMM's
_DIGEST = hashlib.sha256(
    b"\0".join(
        [cutlass.__version__.encode()]
        + [
            Path(m.__file__).read_bytes()
            for m in (gemm_sm90, conv_sm90, conv_wgrad_sm90, conv_wgrad_rows_sm90, conv_transposed_sm90, conv_rows_sm90)
        ]
    )
).hexdigest()[:16]


def _key_name(spec: GemmSpec, config: GemmConfig, sm_count: int, kind: tuple[str, int]) -> str:
    clusters = resident_clusters(sm_count, config.cluster_m * config.cluster_n)  # compiled in, as the GEMM's
    text = repr((spec, config, sm_count, kind, clusters, _DIGEST))
    return f"conv{kind[0][0]}_" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _compile(spec: GemmSpec, config: GemmConfig, sm_count: int, kind: tuple[str, int]) -> Any:
    kernel_class, scalars = KINDS[kind]
    kernel = kernel_class(spec, config, sm_count)
    dt = gemm_sm90.DTYPES
    ptrs = [make_ptr(dt[d], 0, cute.AddressSpace.gmem, assumed_align=16) for d in (spec.a_dtype, spec.b_dtype)]
    ptrs.append(make_ptr(dt[spec.c_dtype], 0, cute.AddressSpace.gmem, assumed_align=16))
    bias = dt[spec.bias_dtype or spec.c_dtype]
    ptrs.append(make_ptr(bias, 0, cute.AddressSpace.gmem, assumed_align=bias.width // 8))
    if kind[0] in FPROPS:
        ptrs.append(make_ptr(cutlass.Float32, 0, cute.AddressSpace.gmem, assumed_align=16))
        ptrs.append(make_ptr(cutlass.Int32, 0, cute.AddressSpace.gmem, assumed_align=4))
        scalars += 3
    return cute.compile(kernel, *ptrs, *[Int32(1)] * scalars, cuda.CUstream(0))


def compiled(spec: GemmSpec, config: GemmConfig, sm_count: int, kind: str = "fprop", rank: int = 2) -> Any:
    """The compiled conv kernel of a specialization: from this process, the disk cache, or a fresh compile."""
    config = config.kernel
    key = (spec, config, sm_count, kind, rank)
    return _CACHE.get(
        key, _key_name(spec, config, sm_count, (kind, rank)), lambda: _compile(spec, config, sm_count, (kind, rank))
    )


class ConvLaunch(GemmLaunch):
    """One conv's launch: the scalars are fixed, the three operand pointers, the bias and the stream are not.

    ``kind`` one of FPROPS: (x, w, y) and the 17 (2-D) or 24 (3-D) geometry scalars; "wgrad" or
    "wgrad_rows" (2-D): (dy, x, dw or the float32 partials) and the geometry followed by the reduction's
    slice length and slice count.
    A split-K fprop config allocates its workspace here (``split`` says how large; conv_geometry.SplitK).
    """

    def __init__(
        self, spec: GemmSpec, config: GemmConfig, geometry: tuple[int, ...], sm_count: int, kind: str = "fprop"
    ) -> None:
        rank = next((r for (k, r), (_, count) in KINDS.items() if k == kind and count == len(geometry)), None)
        if rank is None:
            raise ValueError(f"no conv {kind} kernel takes {len(geometry)} launch scalars")
        if config.split and kind not in FPROPS:
            raise ValueError(f"config {config.label}: split-K is the fprop's (the {kind} splits its own way)")
        self.spec, self.config, self.geometry = spec, config, geometry
        self._executor = compiled(spec, config, sm_count, kind, rank).to()
        self._a, self._b, self._c, self._bias = (_Cell(ctypes.c_void_p, 0) for _ in range(4))
        self._scales = ()
        self._stream = _Cell(ctypes.c_void_p, 0)
        scalars = [_Cell(ctypes.c_int32, v) for v in geometry]
        self.split: SplitK | None = None
        extra: list[_Cell] = []
        if kind in FPROPS:
            work = flags = 0
            split_scalars = (1, 0, 0)
            if config.split:
                self.split = split_k_plan(geometry, config, sm_count)
                work = zeroed_memory(self.split.workspace_bytes, self, "split-K workspace")
                flags = work + self.split.partial_bytes
                split_scalars = (self.split.splits, self.split.whole, self.split.sk_segments)
            extra = [_Cell(ctypes.c_void_p, work), _Cell(ctypes.c_void_p, flags)]
            scalars += [_Cell(ctypes.c_int32, v) for v in split_scalars]
        self._cells = (self._a, self._b, self._c, self._bias, *extra, *scalars, self._stream)
        args, _ = self._executor.generate_execution_args(*self._cells)
        self._args = [ctypes.c_void_p(x) for x in args]
        self._packed = packed_args(self._executor, self._args)
        self._lock = threading.Lock()
