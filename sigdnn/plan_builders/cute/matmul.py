"""CuTe DSL matmul builder for Hopper: bfloat16 / float16 in, float32 accumulation, 16- or 32-bit out.

``check`` decides from the graph alone (dtypes, dims, strides, the device's
compute capability) whether the kernel serves a node; ``build`` compiles
(or loads) the specialization and fixes every launch scalar, so
``execute`` only hands three pointers and the stream to the compiled
handle. The DSL is imported on first build, never when this module loads.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from sigdnn.errors import NotSupported, VariantPackError
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.plan_builders.cute.gemm_layout import (
    AB_DTYPES,
    C_DTYPES,
    GemmConfig,
    GemmProblem,
    GemmSpec,
    default_config,
    plan_gemm,
)
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey


@functools.cache
def unavailable_reason() -> str | None:
    """Why the CuTe DSL GEMM cannot run here (no GPU, no DSL), else None."""
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        return reason
    try:
        import cutlass.cute  # noqa: F401
    except Exception as exc:  # any failure means "unavailable"
        return f"nvidia-cutlass-dsl is not importable ({type(exc).__name__}: {exc})"
    return None


@functools.cache
def device_properties(device_id: int) -> tuple[tuple[int, int], int]:
    """(compute capability, SM count) of a CUDA device, read through the driver."""
    from cuda.bindings import driver

    attr = driver.CUdevice_attribute
    err, dev = driver.cuDeviceGet(device_id)
    values = []
    for a in (
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    ):
        err, v = driver.cuDeviceGetAttribute(a, dev)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuDeviceGetAttribute({a.name}) failed: {err!r}")
        values.append(int(v))
    return (values[0], values[1]), values[2]


def _device_id(device: Device | None) -> int:
    context = getattr(device, "context", None)
    return int(getattr(context, "device_id", 0) or 0)


def config_override() -> GemmConfig | None:
    """``SIGDNN_CUTE_GEMM=pp128x192c2x1s1`` style override of the default config (benchmarks, tuning)."""
    raw = os.environ.get("SIGDNN_CUTE_GEMM")
    return parse_config(raw) if raw else None


def parse_config(label: str) -> GemmConfig:
    """Inverse of ``GemmConfig.label``: e.g. ``coop128x256c2x1s1`` (a trailing ``n`` rasterizes along N)."""
    import re

    m = re.fullmatch(r"(coop|pp)(\d+)x(\d+)c(\d)x(\d)s(\d+)(n?)", label)
    if m is None:
        raise ValueError(f"bad GEMM config label {label!r} (e.g. coop128x256c2x1s1)")
    kind, tm, tn, cm, cn, sw, raster_n = m.groups()
    return GemmConfig(int(tm), int(tn), kind == "pp", int(cm), int(cn), int(sw), raster_along_m=not raster_n)


class CuteMatmulPlan(NodePlan):
    """Runs one matmul node: the specialization and every scalar are fixed at build."""

    workspace_bytes = 0

    def __init__(self, launch: Any, where: str) -> None:
        self._launch = launch
        self._where = where

    @property
    def config(self) -> GemmConfig:
        return self._launch.config

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        a, b, c = buffers["a"], buffers["b"], buffers["c"]
        if (a.ptr | b.ptr | c.ptr) & 15:
            names = [p for p, x in (("a", a), ("b", b), ("c", c)) if x.ptr & 15]
            raise VariantPackError(f"{self._where}: {', '.join(names)} not 16-byte aligned (TMA needs it)")
        self._launch(a.ptr, b.ptr, c.ptr, context.stream)


class CuteMatmulBuilder(PlanBuilder):
    """Batched GEMM on sm_90 through TMA + wgmma (see kernels/gemm_sm90.py)."""

    name = "cute.matmul"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("matmul",)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins = dict(key.inputs)
        outs = dict(key.outputs)
        return (
            key.op == "matmul"
            and str(ins.get("a")) in AB_DTYPES
            and str(ins.get("b")) == str(ins.get("a"))
            and str(outs.get("c")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def plan(self, node: Node, graph: Graph) -> tuple[GemmSpec, GemmProblem]:
        """The kernel view of the node, or NotSupported naming the node and the reason."""
        op = node.op
        where = f"node '{node.name}'"
        if not isinstance(op, Matmul):
            raise NotSupported(f"{where}: not a matmul")
        compute = str(graph.compute_dtype_of(node))
        if compute != "float32":
            raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
        a, b, c = (graph.tensors[uid] for uid in (op.a, op.b, op.c))
        try:
            return plan_gemm(
                (a.dims, a.strides, str(graph.dtype_of(a))),
                (b.dims, b.strides, str(graph.dtype_of(b))),
                (c.dims, c.strides, str(graph.dtype_of(c))),
            )
        except ValueError as exc:
            raise NotSupported(f"{where}: {exc}") from None

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)
        if device is not None and device.kind == "gpu":
            capability, _ = device_properties(_device_id(device))
            if capability != (9, 0):
                raise NotSupported(
                    f"node '{node.name}': needs sm_90 (Hopper), the device is sm_{capability[0]}{capability[1]}"
                )

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        self.check(node, graph, context.device)
        spec, problem = self.plan(node, graph)
        _, sm_count = device_properties(_device_id(context.device))
        config = config_override() or default_config(spec, problem, sm_count)
        from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

        return CuteMatmulPlan(GemmLaunch(spec, config, problem, sm_count), f"node '{node.name}'")
