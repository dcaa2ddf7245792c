"""cuTile fusion: maximal connected pointwise regions, each run as one generated kernel.

``claim`` grows regions (``registry.regions.grow_regions``) over the
pointwise nodes a kernel can compute, one output shape at a time (a kernel
walks one iteration space), and keeps those of two or more nodes whose exits
share a layout. A region's kernel (``codegen``) holds every internal tensor
in registers, rounded to its declared dtype as the reference stores it, so a
region computes what its nodes compute one by one, without the memory
traffic. The kernel is cached per spec: every region with the same pattern
and layout shares it.
"""

from __future__ import annotations

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.plan_builders.cutile.backend import backend_for
from sigdnn.plan_builders.cutile.plans import CutileRegionPlan, KernelLaunch
from sigdnn.plan_builders.cutile.pointwise import unavailable_reason
from sigdnn.plan_builders.cutile.spec import kernel_spec, node_compute
from sigdnn.registry.contracts import FusionBuilder, RegionContext, RegionPlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.registry.regions import Dataflow, Region, grow_regions, make_region
from sigdnn.runtime.device import Device


class CutileFusionBuilder(FusionBuilder):
    name = "cutile.fusion.pointwise"
    engine_id = IN_TREE[name]
    library = "cutile"
    device = "gpu"

    def available(self) -> str | None:
        return unavailable_reason()

    def claim(self, graph: Graph, order: list[int], device: Device) -> list[Region]:
        flow = Dataflow(graph, order)
        shape: dict[int, tuple[int, ...]] = {}
        for i in order:
            node = graph.nodes[i]
            try:
                node_compute(node, graph)
            except NotSupported:
                continue
            shape[i] = graph.tensors[node.op.out_0].dims
        regions = []
        for dims in dict.fromkeys(shape.values()):
            for group in grow_regions(flow, order, lambda i, dims=dims: shape.get(i) == dims):
                if len(group) < 2:
                    continue
                region = make_region(flow, group)
                try:
                    kernel_spec(graph, region.node_list(graph), region.entries, region.exits)
                except NotSupported:
                    continue
                regions.append(region)
        return regions

    def build_region(self, region: Region, graph: Graph, context: RegionContext) -> RegionPlan:
        spec = kernel_spec(graph, region.node_list(graph), region.entries, region.exits)
        return CutileRegionPlan(KernelLaunch(spec, backend_for(context.device.context)), region.entries, region.exits)
