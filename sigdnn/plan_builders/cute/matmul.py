"""CuTe DSL matmul builder for Hopper: bfloat16 / float16 / fp8 in, float32 accumulation, 16- or 32-bit out.

``check`` decides from the graph alone (dtypes, dims, strides, the device's
compute capability) whether the kernel serves a node; ``build`` compiles
(or loads) the specialization and fixes every launch scalar, so
``execute`` only hands the pointers and the stream to the compiled handle.
The DSL is imported on first build, never when this module loads.

As a fusion builder it also claims ``matmul -> mul(scale) -> mul(scale) ->
add(bias) -> activation`` chains (every pointwise step optional; at most two
per-tensor scales; relu, gelu, gelu_approx_tanh) whose intermediates are
virtual and read by the next step alone: the GEMM epilogue multiplies by
the scales, adds the bias row and applies the activation in float32 and
writes only the chain's last tensor. The scale multiplies are how
cuDNN-frontend graphs descale an fp8 matmul (docs/ops.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.bound import GemmLaunchPlan
from sigdnn.plan_builders.cute.gemm_layout import (
    AB_DTYPES,
    ACTIVATIONS,
    BIAS_DTYPES,
    C_DTYPES,
    FP8_DTYPES,
    MAX_SCALES,
    SCALE_DTYPES,
    GemmConfig,
    GemmProblem,
    GemmSpec,
    default_config,
    plan_gemm,
)
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, planning_sm_count, require_hopper
from sigdnn.registry.contracts import BuildContext, FusionBuilder, NodePlan, RegionContext, RegionPlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.registry.regions import Dataflow, Region, make_region
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey

# Configurations autotune measures besides the default (``CuteMatmulBuilder.configs``): on the H200
# (docs/experiments.md) these won somewhere: large 16-bit GEMMs in 2x1 clusters of
# 128x256, gelu epilogues on pingpong 64x256, fp8 in 128x128 tiles clustered either way; 128x128 without
# clusters where a problem has fewer tiles than SMs.
ALTERNATIVES = {
    "16-bit": ("coop128x256c2x1s4n", "pp64x256c2x1s4n", "coop128x128c1x1s1"),
    "fp8": ("coop128x128c1x2s4", "coop128x128c2x1s4", "coop128x128c1x1s1"),
}
MAX_ACCUMULATOR_REGISTERS = 208  # per consumer thread; past it the kernel spills (GemmConfig)


def config_override() -> GemmConfig | None:
    """``SIGDNN_CUTE_GEMM=pp128x192c2x1s1`` style override of the default config (benchmarks, tuning)."""
    raw = os.environ.get("SIGDNN_CUTE_GEMM")
    return parse_config(raw) if raw else None


def named_config(label: str | None, where: str) -> GemmConfig | None:
    """The configuration autotune chose by label (None when none was chosen); NotSupported naming ``where``
    for a label that does not parse."""
    if not label:
        return None
    try:
        return parse_config(label)
    except ValueError as exc:
        raise NotSupported(f"{where}: {exc}") from None


def region_chain(nodes: Sequence[Node], graph: Graph, find: Callable[[Graph, Dataflow, int], Any]) -> Any:
    """The epilogue chain ``find`` reads from a region's nodes (None for a single node), for ``configs``."""
    if len(nodes) < 2:
        return None
    order = [graph.nodes.index(n) for n in nodes]
    return find(graph, Dataflow(graph, order), order[0])


def parse_config(label: str) -> GemmConfig:
    """Inverse of ``GemmConfig.label``: e.g. ``coop128x256c2x1s1`` (then ``n``: rasterize along N;
    ``f``: fp8 fast accumulation; ``k4``: split-K, every tile's K loop in 4 ranges; ``t4``: split only the
    tiles past the last full wave; ``x``: stream-K)."""
    import re

    m = re.fullmatch(r"(coop|pp)(\d+)x(\d+)c(\d)x(\d)s(\d+)(n?)(f?)(?:([kt])(\d+))?(x?)", label)
    if m is None:
        raise ValueError(f"bad GEMM config label {label!r} (e.g. coop128x256c2x1s1)")
    kind, tm, tn, cm, cn, sw, raster_n, fast, split, splits, stream_k = m.groups()
    return GemmConfig(
        int(tm),
        int(tn),
        kind == "pp",
        int(cm),
        int(cn),
        int(sw),
        raster_along_m=not raster_n,
        fast_accum=bool(fast),
        split_k=int(splits or 1),
        split_tail=split == "t",
        stream_k=bool(stream_k),
    )


@attrs.frozen
class EpilogueChain:
    """A matmul node and the pointwise nodes its epilogue absorbs (node indices, uids)."""

    nodes: tuple[int, ...]  # matmul first
    writes: tuple[int, ...]  # the uid each node writes; the last is what the kernel stores
    bias: int | None = None  # uid of the bias row
    activation: str = "none"
    scales: tuple[int, ...] = ()  # uids of the per-tensor scales, in the order they multiply


def _sole_reader(graph: Graph, flow: Dataflow, uid: int) -> int | None:
    """The one node reading a virtual tensor nobody else sees, else None."""
    readers = flow.readers.get(uid, [])
    return readers[0] if graph.tensors[uid].is_virtual and len(readers) == 1 else None


def _is_bias_row(graph: Graph, uid: int, n: int) -> bool:
    """A tensor that broadcasts as one value per output column: dims (1, ..., 1, N), contiguous along N."""
    t = graph.tensors[uid]
    return (
        t.value is None
        and t.rank >= 1
        and t.dims[-1] == n
        and all(d == 1 for d in t.dims[:-1])
        and (n == 1 or t.strides[-1] == 1)
        and str(graph.dtype_of(t)) in BIAS_DTYPES
    )


def _is_scale(graph: Graph, uid: int) -> bool:
    """A per-tensor scale: one value (every dim 1) the caller or the graph provides."""
    t = graph.tensors[uid]
    return not t.is_virtual and all(d == 1 for d in t.dims) and str(graph.dtype_of(t)) in SCALE_DTYPES


def _plain_relu(op: Pointwise) -> bool:
    return op.relu_upper_clip is None and not op.relu_lower_clip and not op.relu_lower_clip_slope


def epilogue_chain(graph: Graph, flow: Dataflow, i: int) -> EpilogueChain | None:
    """The longest matmul -> [add bias] -> [activation] chain starting at node ``i`` (None: nothing to fuse)."""
    node = graph.nodes[i]
    if not isinstance(node.op, Matmul):
        return None
    n = graph.tensors[node.op.c].dims[-1]
    nodes, writes, bias, activation, scales = [i], [node.op.c], None, "none", []
    out = node.op.c
    j = _sole_reader(graph, flow, out)
    while j is not None and len(scales) < MAX_SCALES and isinstance(graph.nodes[j].op, Pointwise):
        op = graph.nodes[j].op
        other = op.in_1 if op.in_0 == out else op.in_0
        if op.mode != "mul" or op.in_0 == op.in_1 or not _is_scale(graph, other):
            break
        nodes, out = [*nodes, j], op.out_0
        scales.append(other)
        writes.append(out)
        j = _sole_reader(graph, flow, out)
    if j is not None and isinstance(graph.nodes[j].op, Pointwise) and graph.nodes[j].op.mode == "add":
        op = graph.nodes[j].op
        other = op.in_1 if op.in_0 == out else op.in_0
        if op.in_0 != op.in_1 and _is_bias_row(graph, other, n):
            nodes, out, bias = [*nodes, j], op.out_0, other
            writes.append(out)
            j = _sole_reader(graph, flow, out)
    if j is not None and isinstance(graph.nodes[j].op, Pointwise):
        op = graph.nodes[j].op
        if op.mode in ACTIVATIONS and (op.mode != "relu_fwd" or _plain_relu(op)):
            nodes, out, activation = [*nodes, j], op.out_0, ACTIVATIONS[op.mode]
            writes.append(out)
    if len(nodes) == 1 or any(str(graph.compute_dtype_of(graph.nodes[k])) != "float32" for k in nodes):
        return None
    return EpilogueChain(tuple(nodes), tuple(writes), bias, activation, tuple(scales))


class CuteMatmulPlan(GemmLaunchPlan, NodePlan):
    """Runs one matmul node: the specialization and every scalar are fixed at build."""

    def __init__(self, launch: Any, where: str) -> None:
        super().__init__(launch, where, {"a": "a", "b": "b", "c": "c"})

    def extra_arguments(self, buffers: Mapping[str, Any]) -> tuple[Any, ...]:
        return ((),)  # no scales


class CuteEpiloguePlan(GemmLaunchPlan, RegionPlan):
    """Runs a matmul + bias + activation region as one GEMM launch; buffers keyed by uid."""

    def __init__(
        self, launch: Any, where: str, a: int, b: int, out: int, bias: int | None, scales: tuple[int, ...]
    ) -> None:
        super().__init__(launch, where, {"a": a, "b": b, "c": out}, bias)
        self._scales = scales

    def extra_arguments(self, buffers: Mapping[int, Any]) -> tuple[Any, ...]:
        return (tuple(buffers[u].ptr for u in self._scales),)


class CuteMatmulBuilder(FusionBuilder):
    """Batched GEMM on sm_90 through TMA + wgmma (see kernels/gemm_sm90.py), with a fused epilogue."""

    name = "cute.matmul"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("matmul",)
    priority = 2  # without a measured choice (executor/autotune.py) the GEMM closest to cuBLAS ranks first

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins = dict(key.inputs)
        outs = dict(key.outputs)
        a, b = str(ins.get("a")), str(ins.get("b"))
        return (
            key.op == "matmul"
            and a in AB_DTYPES
            and (b == a or (a in FP8_DTYPES and b in FP8_DTYPES))
            and str(outs.get("c")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def plan(self, node: Node, graph: Graph, chain: EpilogueChain | None = None) -> tuple[GemmSpec, GemmProblem]:
        """The kernel view of the node (writing the chain's last tensor when fused), or NotSupported saying why."""
        op = node.op
        where = f"node '{node.name}'"
        if not isinstance(op, Matmul):
            raise NotSupported(f"{where}: not a matmul")
        compute = str(graph.compute_dtype_of(node))
        if compute != "float32":
            raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
        a, b = graph.tensors[op.a], graph.tensors[op.b]
        c = graph.tensors[op.c if chain is None else chain.writes[-1]]
        try:
            spec, problem = plan_gemm(
                (a.dims, a.strides, str(graph.dtype_of(a))),
                (b.dims, b.strides, str(graph.dtype_of(b))),
                (c.dims, c.strides, str(graph.dtype_of(c))),
            )
        except ValueError as exc:
            raise NotSupported(f"{where}: {exc}") from None
        if chain is not None:
            dtypes = [str(graph.dtype_of(graph.tensors[u])) for u in chain.writes]
            if any(d not in C_DTYPES for d in dtypes):
                raise NotSupported(f"{where}: epilogue tensors of dtypes {dtypes}")
            bias = None if chain.bias is None else str(graph.dtype_of(graph.tensors[chain.bias]))
            ns = len(chain.scales)
            spec = attrs.evolve(
                spec,
                bias_dtype=bias,
                activation=chain.activation,
                round_x=dtypes[0] if len(dtypes) > 1 else "float32",
                # A step's output that is the chain's last tensor needs no rounding of its own: the
                # store rounds to it (and rounding twice to one dtype is rounding once).
                round_y=dtypes[1 + ns] if chain.bias is not None and len(dtypes) > 2 + ns else "float32",
                scale_dtypes=tuple(str(graph.dtype_of(graph.tensors[u])) for u in chain.scales),
                round_s=tuple(dtypes[1 : 1 + ns]),
            )
        return spec, problem

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)
        require_hopper(node, device)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """Labels worth measuring for this node or epilogue region: the default (or the environment's
        override) first, then ALTERNATIVES'. The executor builds the first when nothing was measured."""
        spec, problem = self.plan(nodes[0], graph, region_chain(nodes, graph, epilogue_chain))
        labels = [(config_override() or default_config(spec, problem, planning_sm_count(device))).label]
        for label in ALTERNATIVES["fp8" if spec.fp8 else "16-bit"]:
            config = parse_config(label)
            if label not in labels and config.accumulator_registers(spec.fp8) <= MAX_ACCUMULATOR_REGISTERS:
                labels.append(label)
        return labels

    def _launch(self, spec: GemmSpec, problem: GemmProblem, device: Device, label: str | None, where: str) -> Any:
        """The compiled launch of the configuration ``label`` names (from ``configs``), else the default."""
        config = named_config(label, where) or config_override()
        if config is not None and config.split:
            raise NotSupported(f"{where}: config {config.label}: split-K is the conv fprop's")
        from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

        _, sm_count = device_properties(device_id_of(device))
        config = config or default_config(spec, problem, sm_count)
        return GemmLaunch(spec, config, problem, sm_count)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        self.check(node, graph, context.device)
        spec, problem = self.plan(node, graph)
        where = f"node '{node.name}'"
        return CuteMatmulPlan(self._launch(spec, problem, context.device, context.config, where), where)

    # -- fusion ---------------------------------------------------------------

    def claim(self, graph: Graph, order: list[int], device: Device) -> list[Region]:
        if device.kind != "gpu" or self.available() is not None:
            return []
        flow = Dataflow(graph, order)
        regions = []
        for i in order:
            chain = epilogue_chain(graph, flow, i)
            if chain is None:
                continue
            try:
                self.plan(graph.nodes[i], graph, chain)
                require_hopper(graph.nodes[i], device)
            except NotSupported:
                continue
            regions.append(make_region(flow, chain.nodes))
        return regions

    def build_region(self, region: Region, graph: Graph, context: RegionContext) -> RegionPlan:
        flow = Dataflow(graph, list(region.nodes))
        chain = epilogue_chain(graph, flow, region.nodes[0])
        if chain is None or chain.nodes != region.nodes:
            names = [graph.nodes[i].name for i in region.nodes]
            raise NotSupported(f"region {names} is not a GEMM epilogue chain")
        node = graph.nodes[chain.nodes[0]]
        spec, problem = self.plan(node, graph, chain)
        where = f"region {node.name}..{graph.nodes[chain.nodes[-1]].name}"
        launch = self._launch(spec, problem, context.device, context.config, where)
        return CuteEpiloguePlan(launch, where, node.op.a, node.op.b, chain.writes[-1], chain.bias, chain.scales)
