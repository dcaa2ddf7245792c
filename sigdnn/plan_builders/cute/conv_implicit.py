"""CuTe DSL conv fprop as an implicit GEMM on Hopper: no im2col pass, A gathered by the TMA in im2col mode.

2-D and 3-D, NHWC / NDHWC, bfloat16 / float16 in, float32 accumulation, 16- or 32-bit out,
one group, any padding (asymmetric too), stride up to 8 and dilation (see
kernels/conv_sm90.py for the kernel). As a fusion builder it also claims
``conv_fprop -> add(bias) -> activation`` chains (each step optional; relu,
gelu, gelu_approx_tanh) whose intermediates are virtual and read by the next
step alone, with the bias one value per output channel: the GEMM epilogue
adds it and applies the activation in float32, and only the chain's last
tensor is written.

It ranks above ``cute.conv_fprop`` (im2col into a workspace, then the GEMM),
which stays for what the TMA's im2col mode cannot express.

Layers with too few output tiles for the SMs (late stages: M = N*P*Q of a
few thousand, a deep K loop) split each tile's K loop across CTAs inside the
kernel, or only the tiles of a last, mostly empty wave; stream-K is offered
to autotune (config labels ``k2``, ``t2``, ``x``; ``conv_geometry.split_k_plan``). The
float32 partials and the tile counters live in a workspace the launch owns.

The kernel's view of a conv and its limits are in ``conv_geometry``, the
tile configurations in ``conv_implicit_configs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.bound import GemmLaunchPlan
from sigdnn.plan_builders.cute.conv import IN_DTYPES
from sigdnn.plan_builders.cute.conv_geometry import ImplicitConv, channels_last_nd, check_geometry, split_k_plan
from sigdnn.plan_builders.cute.conv_implicit_configs import CONV_ALTERNATIVES, default_conv_config, split_alternatives
from sigdnn.plan_builders.cute.gemm_layout import ACTIVATIONS, BIAS_DTYPES, C_DTYPES, GemmSpec
from sigdnn.plan_builders.cute.matmul import _plain_relu, _sole_reader, config_override, named_config, region_chain
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, planning_sm_count, require_hopper
from sigdnn.registry.contracts import BuildContext, FusionBuilder, NodePlan, RegionContext, RegionPlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.registry.regions import Dataflow, Region, make_region
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey


@attrs.frozen
class ConvChain:
    """A conv node and the pointwise nodes its epilogue absorbs (node indices, uids)."""

    nodes: tuple[int, ...]  # conv first
    writes: tuple[int, ...]  # the uid each node writes; the last is what the kernel stores
    bias: int | None = None
    activation: str = "none"


def _is_channel_bias(graph: Graph, uid: int, k: int) -> bool:
    """One value per output channel: dims (1, K, 1, 1) (or 1, K, 1, 1, 1), contiguous along K."""
    t = graph.tensors[uid]
    return (
        t.value is None
        and t.rank in (4, 5)
        and t.dims[1] == k
        and all(d == 1 for i, d in enumerate(t.dims) if i != 1)
        and (k == 1 or t.strides[1] == 1)
        and str(graph.dtype_of(t)) in BIAS_DTYPES
    )


def epilogue_chain(graph: Graph, flow: Dataflow, i: int) -> ConvChain | None:
    """The longest conv -> [add bias] -> [activation] chain starting at node ``i`` (None: nothing to fuse)."""
    node = graph.nodes[i]
    if not isinstance(node.op, ConvFprop):
        return None
    k = graph.tensors[node.op.y].dims[1]
    nodes, writes, bias, activation = [i], [node.op.y], None, "none"
    out = node.op.y
    j = _sole_reader(graph, flow, out)
    if j is not None and isinstance(graph.nodes[j].op, Pointwise) and graph.nodes[j].op.mode == "add":
        op = graph.nodes[j].op
        other = op.in_1 if op.in_0 == out else op.in_0
        if op.in_0 != op.in_1 and _is_channel_bias(graph, other, k):
            nodes, out, bias = [*nodes, j], op.out_0, other
            writes.append(out)
            j = _sole_reader(graph, flow, out)
    if j is not None and isinstance(graph.nodes[j].op, Pointwise):
        op = graph.nodes[j].op
        if op.mode in ACTIVATIONS and (op.mode != "relu_fwd" or _plain_relu(op)):
            nodes, out, activation = [*nodes, j], op.out_0, ACTIVATIONS[op.mode]
            writes.append(out)
    if len(nodes) == 1 or any(str(graph.compute_dtype_of(graph.nodes[n])) != "float32" for n in nodes):
        return None
    return ConvChain(tuple(nodes), tuple(writes), bias, activation)


def plan_conv(node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
    """The kernel's view of a conv fprop (writing the chain's last tensor when fused), or NotSupported."""
    op = node.op
    where = f"node '{node.name}'"
    if not isinstance(op, ConvFprop):
        raise NotSupported(f"{where}: not a conv_fprop")
    x, w = graph.tensors[op.x], graph.tensors[op.w]
    y = graph.tensors[op.y if chain is None else chain.writes[-1]]
    dtypes = [str(graph.dtype_of(t)) for t in (x, w, y)]
    compute = str(graph.compute_dtype_of(node))
    if compute != "float32":
        raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
    if dtypes[0] not in IN_DTYPES or dtypes[1] != dtypes[0] or dtypes[2] not in C_DTYPES:
        raise NotSupported(f"{where}: dtypes x {dtypes[0]}, w {dtypes[1]}, y {dtypes[2]}; supported: x and w both "
                           f"float16 or bfloat16, y one of {', '.join(C_DTYPES)}")  # fmt: skip
    if op.spatial_rank not in (2, 3):
        raise NotSupported(f"{where}: {op.spatial_rank}-D convolution; supported: 2-D and 3-D")
    n, c, *spatial = x.dims
    k, cg, *taps = w.dims
    if cg != c:
        raise NotSupported(f"{where}: grouped convolution ({c // cg} groups); supported: 1 group")
    for t in (x, w, y):
        if not channels_last_nd(t.dims, t.strides):
            raise NotSupported(f"{where}: tensor '{t.name}' is not packed channels-last (NHWC / NDHWC); "
                               f"strides {t.strides}")  # fmt: skip
    geometry = (n, *spatial, c, k, *taps, *y.dims[2:], *op.pre_padding, *op.post_padding, *op.stride, *op.dilation)
    check_geometry(where, geometry, dtypes[2], x.size, w.size, y.size)
    spec = GemmSpec(dtypes[0], dtypes[1], dtypes[2], "k", "k", "n", False, False)
    if chain is not None:
        outs = [str(graph.dtype_of(graph.tensors[u])) for u in chain.writes]
        if any(d not in C_DTYPES for d in outs):
            raise NotSupported(f"{where}: epilogue tensors of dtypes {outs}")
        spec = attrs.evolve(
            spec,
            bias_dtype=None if chain.bias is None else str(graph.dtype_of(graph.tensors[chain.bias])),
            activation=chain.activation,
            round_x=outs[0] if len(outs) > 1 else "float32",
            # The chain's last tensor needs no rounding of its own: the store rounds to it.
            round_y=outs[1] if chain.bias is not None and len(outs) > 2 else "float32",
        )
    return ImplicitConv(spec, geometry)


class CuteConvPlan(GemmLaunchPlan, NodePlan):
    """One conv node: the specialization and every launch scalar fixed at build."""

    def __init__(self, launch: Any, where: str) -> None:
        super().__init__(launch, where, {"x": "x", "w": "w", "y": "y"})


class CuteConvEpiloguePlan(GemmLaunchPlan, RegionPlan):
    """A conv + bias + activation region as one launch; buffers keyed by uid."""

    def __init__(self, launch: Any, where: str, x: int, w: int, out: int, bias: int | None) -> None:
        super().__init__(launch, where, {"x": x, "w": w, "y": out}, bias)


class CuteConvImplicitBuilder(FusionBuilder):
    """2-D / 3-D channels-last conv fprop on sm_90 as an implicit GEMM (TMA im2col + wgmma), fused epilogue."""

    name = "cute.conv_fprop_implicit"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("conv_fprop",)
    priority = 1  # above cute.conv_fprop: no workspace pass

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins, outs = dict(key.inputs), dict(key.outputs)
        return (
            key.op == "conv_fprop"
            and key.trait("spatial_rank") in (2, 3)
            and str(ins.get("x")) in IN_DTYPES
            and str(ins.get("w")) == str(ins.get("x"))
            and str(outs.get("y")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def plan(self, node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
        """This builder's view of a conv (writing the chain's last tensor when fused), or NotSupported."""
        return plan_conv(node, graph, chain)

    def _check_device(self, node: Node, device: Device | None) -> None:
        require_hopper(node, device)

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)
        self._check_device(node, device)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """Labels worth measuring for this conv or conv epilogue region: the default (or the environment's
        override) first, then CONV_ALTERNATIVES and the split alternatives. The executor builds the first when
        nothing was measured."""
        view = self.plan(nodes[0], graph, region_chain(nodes, graph, epilogue_chain))
        sm_count = planning_sm_count(device)
        labels = [(config_override() or default_conv_config(view, sm_count)).label]
        offered = [*CONV_ALTERNATIVES, *split_alternatives(view, sm_count)]
        return labels + [label for label in offered if label not in labels]

    def _launch(self, view: ImplicitConv, device: Device, label: str | None, where: str) -> Any:
        """The compiled launch of the configuration ``label`` names (from ``configs``), else the default."""
        config = named_config(label, where)
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch

        _, sm_count = device_properties(device_id_of(device))
        config = config or config_override() or default_conv_config(view, sm_count)
        if config.split:
            try:
                split_k_plan(view.geometry, config, sm_count)
            except ValueError as exc:
                raise NotSupported(f"{where}: {exc}") from None
        return ConvLaunch(view.spec, config, view.geometry, sm_count)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        self.check(node, graph, context.device)
        where = f"node '{node.name}'"
        return CuteConvPlan(self._launch(self.plan(node, graph), context.device, context.config, where), where)

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
                self._check_device(graph.nodes[i], device)
            except NotSupported:
                continue
            regions.append(make_region(flow, chain.nodes))
        return regions

    def build_region(self, region: Region, graph: Graph, context: RegionContext) -> RegionPlan:
        flow = Dataflow(graph, list(region.nodes))
        chain = epilogue_chain(graph, flow, region.nodes[0])
        if chain is None or chain.nodes != region.nodes:
            names = [graph.nodes[i].name for i in region.nodes]
            raise NotSupported(f"region {names} is not a conv epilogue chain")
        node = graph.nodes[chain.nodes[0]]
        where = f"region {node.name}..{graph.nodes[chain.nodes[-1]].name}"
        launch = self._launch(self.plan(node, graph, chain), context.device, context.config, where)
        return CuteConvEpiloguePlan(launch, where, node.op.x, node.op.w, chain.writes[-1], chain.bias)
