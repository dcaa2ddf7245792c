"""Compile once, cache in process and on disk, launch with scalars only.

Compiling a GEMM specialization traces the Python kernel and runs the MLIR
and ptxas pipeline (about a second or two). Each specialization is compiled
once per process (``compiled``, through ``compile_cache.CompileCache``, which
every CuTe kernel family shares), and its host shim and cubin are written to
an on-disk cache through the DSL's own ahead-of-time export
(``JitCompiledFunction.export_to_c`` / ``ExternalBinaryModule``), so a later
process loads it in milliseconds without tracing again. The cache key holds
the DSL version, the kernel sources, the specialization and the SM count;
``SIGDNN_CUTE_CACHE`` names the directory (default
``~/.cache/sigdnn/cute``; ``0`` turns the disk cache off).

A launch goes through the compiled handle, never the jit function: the
arguments are ctypes cells whose addresses were marshalled once
(``generate_execution_args``) into the packed argument array the compiled
host entry takes; a launch rewrites the pointer and stream cells and calls
that entry with the same array. (``run_compiled_program`` would rebuild the
array from Python on every call: a few microseconds more.)
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from pathlib import Path
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass.cute.runtime import make_ptr

from sigdnn.plan_builders.cute.gemm_layout import GemmConfig, GemmProblem, GemmSpec, resident_clusters
from sigdnn.plan_builders.cute.kernels import gemm_sm90
from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache

_CACHE = CompileCache()
STATS = _CACHE.stats  # how each specialization arrived in this process (GEMMs and the convs' GEMMs)


def _sources_digest() -> str:
    parts = [cutlass.__version__.encode()]
    for mod in (gemm_sm90,):
        parts.append(Path(mod.__file__).read_bytes())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


_DIGEST = _sources_digest()


def _key_name(spec: GemmSpec, config: GemmConfig, sm_count: int) -> str:
    # The persistent grid's cluster count is compiled in (gemm_layout.resident_clusters).
    clusters = resident_clusters(sm_count, config.cluster_m * config.cluster_n)
    text = repr((spec, config, sm_count, clusters, _DIGEST))
    return "gemm_" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _compile(spec: GemmSpec, config: GemmConfig, sm_count: int) -> Any:
    kernel = gemm_sm90.HopperGemm(spec, config, sm_count)
    dt = gemm_sm90.DTYPES
    ptrs = [
        make_ptr(dt[d], 0, cute.AddressSpace.gmem, assumed_align=16) for d in (spec.a_dtype, spec.b_dtype, spec.c_dtype)
    ]
    # A pointer slot for the bias and each scale even where there is none: one signature.
    bias = dt[spec.bias_dtype or spec.c_dtype]
    ptrs.append(make_ptr(bias, 0, cute.AddressSpace.gmem, assumed_align=bias.width // 8))
    for i in range(2):
        scale = dt[spec.scale_dtypes[i] if i < len(spec.scale_dtypes) else "float32"]
        ptrs.append(make_ptr(scale, 0, cute.AddressSpace.gmem, assumed_align=scale.width // 8))
    ints = [Int32(1)] * 4
    strides = [Int64(8)] * 3 + [Int64(0)] * 3
    return cute.compile(kernel, *ptrs, *ints, *strides, cuda.CUstream(0))


def compiled(spec: GemmSpec, config: GemmConfig, sm_count: int) -> Any:
    """The compiled function of a specialization: from this process, the disk cache, or a fresh compile."""
    key = (spec, config, sm_count)
    return _CACHE.get(key, _key_name(spec, config, sm_count), lambda: _compile(spec, config, sm_count))


class _Cell:
    """A launch argument the compiled function reads by address; rewritten in place."""

    __slots__ = ("value",)

    def __init__(self, ctype: Any, value: int) -> None:
        self.value = ctype(value)

    def __c_pointers__(self) -> list[int]:
        return [ctypes.addressof(self.value)]


def packed_args(executor: Any, args: list[Any]) -> Any:
    """A private copy of the executor's packed argument array (None where this DSL has none)."""
    pack = getattr(executor, "_get_invoke_packed_args", None)
    if pack is None or not hasattr(executor, "capi_func") or not hasattr(executor, "_has_cuda_result"):
        return None
    shared = pack(args)  # the executor's per-thread buffer: copy it
    return (ctypes.c_void_p * len(shared))(*shared)


def invoke(executor: Any, packed: Any, args: list[Any], what: str) -> None:
    """Call the compiled host entry with the packed array (or, without one, the DSL's own path)."""
    if packed is None:
        executor.run_compiled_program(args)
        return
    executor.capi_func(packed)
    if executor._has_cuda_result and executor.cuda_result.value != 0:
        raise RuntimeError(f"{what} launch failed: CUDA error {executor.cuda_result.value}")


class PackedLaunch:
    """One kernel's launch through its compiled handle: pointer cells and the stream rewritten per call, every
    other argument fixed when made (for the small kernels, a call through the compiled function itself, which
    wraps each argument anew, cost the split-K reduction about 26 us of host time a launch on the H200, more
    than the kernel)."""

    def __init__(self, fn: Any, pointers: int, scalars: list[_Cell], what: str) -> None:
        self._executor = fn.to()
        self._what = what
        self.ptrs = tuple(_Cell(ctypes.c_void_p, 0) for _ in range(pointers))
        self.stream = _Cell(ctypes.c_void_p, 0)
        self._cells = (*self.ptrs, *scalars, self.stream)
        args, _ = self._executor.generate_execution_args(*self._cells)
        self._args = [ctypes.c_void_p(x) for x in args]
        self._packed = packed_args(self._executor, self._args)

    def __call__(self, ptrs: tuple[int, ...], stream: int) -> None:
        for cell, ptr in zip(self.ptrs, ptrs, strict=True):
            cell.value.value = ptr
        self.stream.value.value = stream
        invoke(self._executor, self._packed, self._args, self._what)


def zeroed_memory(nbytes: int, owner: object, what: str) -> int:
    """Device memory of ``nbytes`` (0: none), zeroed once and freed with ``owner``: state a kernel leaves ready for
    its next launch (the split-K counters, the batchnorm accumulators and barrier)."""
    if nbytes == 0:
        return 0
    err, ptr = cuda.cuMemAlloc(nbytes)
    if err != cuda.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} of {nbytes} bytes: cuMemAlloc failed ({err})")
    weakref.finalize(owner, cuda.cuMemFree, ptr)
    for result in (cuda.cuMemsetD8(ptr, 0, nbytes), cuda.cuCtxSynchronize()):
        if result[0] != cuda.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what}: zeroing failed ({result[0]})")
    return int(ptr)


def int32_cells(*values: int) -> list[_Cell]:
    return [_Cell(ctypes.c_int32, v) for v in values]


class GemmLaunch:
    """One problem's launch: the extents and strides are fixed, pointers and stream are not."""

    def __init__(self, spec: GemmSpec, config: GemmConfig, problem: GemmProblem, sm_count: int) -> None:
        if config.split:
            raise ValueError(f"config {config.label}: split-K is the conv fprop's (kernels/conv_launch.py)")
        self.spec, self.config, self.problem = spec, config, problem
        self._executor = compiled(spec, config, sm_count).to()
        self._a = _Cell(ctypes.c_void_p, 0)
        self._b = _Cell(ctypes.c_void_p, 0)
        self._c = _Cell(ctypes.c_void_p, 0)
        self._bias = _Cell(ctypes.c_void_p, 0)
        self._scales = (_Cell(ctypes.c_void_p, 0), _Cell(ctypes.c_void_p, 0))
        self._stream = _Cell(ctypes.c_void_p, 0)
        p = problem
        scalars = [_Cell(ctypes.c_int32, v) for v in (p.m, p.n, p.k, p.batch)]
        scalars += [
            _Cell(ctypes.c_int64, v)
            for v in (p.lda, p.ldb, p.ldc, p.batch_stride_a, p.batch_stride_b, p.batch_stride_c)
        ]
        self._cells = (self._a, self._b, self._c, self._bias, *self._scales, *scalars, self._stream)
        args, _ = self._executor.generate_execution_args(*self._cells)
        self._args = [ctypes.c_void_p(x) for x in args]
        self._packed = packed_args(self._executor, self._args)
        self._lock = threading.Lock()

    def _run(self) -> None:
        invoke(self._executor, self._packed, self._args, "GEMM")

    def __call__(
        self, a_ptr: int, b_ptr: int, c_ptr: int, stream: int, bias_ptr: int = 0, scale_ptrs: tuple[int, ...] = ()
    ) -> None:
        """Enqueue C = act(scales * (A @ B) + bias) on ``stream`` (raw CUstream); A, B, C 16-byte aligned."""
        if (a_ptr | b_ptr | c_ptr) & 15:
            raise ValueError("TMA needs 16-byte aligned operand addresses")
        if self.spec.bias_dtype is not None and not bias_ptr:
            raise ValueError("this specialization adds a bias: give its address")
        if len(scale_ptrs) != len(self.spec.scale_dtypes) or not all(scale_ptrs):
            raise ValueError(f"this specialization reads {len(self.spec.scale_dtypes)} scales: give their addresses")
        with self._lock:  # the cells are shared: one launch at a time per plan
            self._a.value.value = a_ptr
            self._b.value.value = b_ptr
            self._c.value.value = c_ptr
            self._bias.value.value = bias_ptr
            for cell, ptr in zip(self._scales, (*scale_ptrs, 0, 0), strict=False):
                cell.value.value = ptr
            self._stream.value.value = stream
            self._run()
