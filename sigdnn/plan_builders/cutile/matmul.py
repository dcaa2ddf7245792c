"""cuTile matmul builder: batched GEMM with a fused epilogue, one generated kernel per specialization.

Serves matmul nodes with float16 / bfloat16 / float32 operands and float16 /
bfloat16 / float32 outputs, any batch broadcast the reference allows and any
operand strides (``matmul_layout``). Operands of one 16-bit dtype go to the
tensor cores as they are; any other pair (float32, or two dtypes: float32
activations times bf16 weights, f16 times bf16) widens both to float32, then
runs as TF32 when the node's compute dtype is 16-bit, else as exact float32
products (``matmul_codegen``).

As a fusion builder it claims a matmul with the pointwise nodes that follow
it in a chain: bias adds (a row over N), residual adds (a full [..., M, N]
tensor), and activations (relu, gelu, gelu_approx_tanh, tanh, sigmoid,
swish), each reading the previous node's virtual output and nothing else
reading it; the epilogue runs them on the accumulator and stores only the
chain's last tensor.

Configurations (tile shape, grouped order, cuTile's hints) are exposed for
measured choice (``configs``; ``BuildContext.config`` names one by label);
without one the builder uses ``default_config``: the first of the list,
unless its output tiles would leave more than half the SMs idle (an
unbatched GEMM of few rows, as batch-1 inference runs), where K is split
among blocks instead (``split_config``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.graph.tf32 import takes_tf32
from sigdnn.plan_builders.cutile.backend import backend_for
from sigdnn.plan_builders.cutile.matmul_codegen import (
    MMA_INPUTS,
    OUTPUTS,
    EpilogueStep,
    MatmulConfig,
    MatmulSpec,
    Operand,
)
from sigdnn.plan_builders.cutile.matmul_layout import GemmViews, MatrixView, plan_views
from sigdnn.plan_builders.gpu_properties import planning_sm_count
from sigdnn.registry.contracts import BuildContext, FusionBuilder, NodePlan, RegionContext, RegionPlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.registry.regions import Dataflow, Region, make_region
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

COMPUTE = ("float32", "float16", "bfloat16")
ACTIVATIONS = ("relu_fwd", "gelu_fwd", "gelu_approx_tanh_fwd", "tanh_fwd", "sigmoid_fwd", "swish_fwd")
MAX_EPILOGUE = 4  # pointwise nodes one kernel absorbs

# Configurations offered for measured choice; the first is the default (the sweep:
# docs/experiments.md). The default: two consumer warpgroups (m64 x 256 MMAs each, as cuBLAS's large tiles; 168
# registers, no spill offline), persistent so the next tile's loads overlap this one's epilogue: 755-765 TFLOP/s at
# 8192^3 bf16 where 128x128x64g8 ran 734-737, 753-754 against 704 with a bias + gelu epilogue. Its 2-CTA cluster
# ran 778 alone but 754 fused.
CONFIGS = (
    MatmulConfig(128, 256, 64, 8, warps=8, persistent=True),
    MatmulConfig(128, 128, 64, 8),
    MatmulConfig(128, 128, 64, 8, occupancy=2),
    MatmulConfig(128, 256, 64, 8, num_ctas=2),
    MatmulConfig(256, 128, 64, 8, num_ctas=2),
    MatmulConfig(128, 128, 64, 8, latency=4),
    MatmulConfig(64, 128, 64, 8),
    MatmulConfig(256, 256, 64, 8, num_ctas=2, warps=8, persistent=True),  # 2-CTA clusters of the default's tiles
    MatmulConfig(128, 128, 64, 8, persistent=True),
)
FLOAT32_CONFIGS = (MatmulConfig(128, 128, 32, 8), MatmulConfig(64, 64, 32, 8))
MIN_SPLIT_STEPS = 4  # K steps a split-K block runs at least (fewer: its partial tile's store outweighs the work)


def unavailable_reason() -> str | None:
    """Why cuTile cannot run here (no cuda.core, no GPU, no cuda.tile), else None."""
    from sigdnn.runtime.cuda import dsl_unavailable_reason

    return dsl_unavailable_reason("cuda.tile", "cuda.tile")


def parse_config(label: str) -> MatmulConfig:
    """Inverse of ``MatmulConfig.label`` (e.g. ``128x256x64g8c2``)."""
    import re

    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)g(\d+)(?:c(\d+))?(?:o(\d+))?(?:l(\d+))?(?:w(\d+))?(p?)(?:s(\d+))?", label)
    if m is None:
        raise ValueError(f"bad cuTile matmul config label {label!r} (e.g. 128x128x64g8c2)")
    tm, tn, tk, g, c, o, lat, w, split = (int(v) if v else None for i, v in enumerate(m.groups()) if i != 8)
    assert tm and tn and tk and g
    return MatmulConfig(tm, tn, tk, g, c, o, lat, w, persistent=bool(m.group(9)), split_k=split or 1)


def _dtype(graph: Graph, uid: int) -> str:
    return str(graph.dtype_of(graph.tensors[uid]))


def _operand(view: MatrixView, dtype: str) -> Operand:
    return Operand(dtype, view.transposed, view.batched)


class _Chain:
    """A matmul node and the pointwise nodes its epilogue absorbs."""

    def __init__(self, matmul: int) -> None:
        self.nodes = [matmul]
        self.steps: list[tuple[str, Pointwise, int | None]] = []  # (kind, op, uid of the other input)


def _sole_reader(graph: Graph, flow: Dataflow, uid: int) -> int | None:
    readers = flow.readers.get(uid, [])
    return readers[0] if graph.tensors[uid].is_virtual and len(readers) == 1 else None


def _step_kind(graph: Graph, op: Pointwise, value: int, out_dims: tuple[int, ...]) -> tuple[str, int | None] | None:
    """How an epilogue absorbs a pointwise node reading ``value`` (None: it cannot)."""
    if graph.tensors[op.out_0].dims != out_dims or _dtype(graph, op.out_0) not in OUTPUTS:
        return None
    if op.mode in ACTIVATIONS and op.in_0 == value:
        return "unary", None
    if op.mode != "add" or op.in_0 == op.in_1:
        return None
    other = op.in_1 if op.in_0 == value else op.in_0
    t = graph.tensors[other]
    if _dtype(graph, other) not in OUTPUTS:
        return None
    n = out_dims[-1]
    if t.rank >= 1 and t.dims[-1] == n and all(d == 1 for d in t.dims[:-1]):
        return "bias", other
    if t.rank >= 2 and t.dims[-2:] == out_dims[-2:]:
        return "residual", other
    return None


def epilogue_chain(graph: Graph, flow: Dataflow, i: int) -> _Chain | None:
    """The longest chain of absorbable pointwise nodes after matmul node ``i`` (None: nothing to fuse)."""
    node = graph.nodes[i]
    if not isinstance(node.op, Matmul):
        return None
    chain = _Chain(i)
    value = node.op.c
    out_dims = graph.tensors[value].dims
    while len(chain.steps) < MAX_EPILOGUE:
        j = _sole_reader(graph, flow, value)
        if j is None or not isinstance(graph.nodes[j].op, Pointwise):
            break
        op = graph.nodes[j].op
        if str(graph.compute_dtype_of(graph.nodes[j])) not in COMPUTE:
            break
        kind = _step_kind(graph, op, value, out_dims)
        if kind is None:
            break
        # Convex by construction: every chain tensor has one reader, the next node, so no path leaves the
        # chain and comes back through a bias or residual.
        chain.nodes.append(j)
        chain.steps.append((kind[0], op, kind[1]))
        value = op.out_0
    return chain if chain.steps else None


class CutileMatmulPlan(NodePlan, RegionPlan):
    """One GEMM launch, or split-K's two (``buffers`` by port for a node, by uid for a region), over the views the
    kernels read."""

    def __init__(
        self,
        spec: MatmulSpec,
        backend: Any,
        grid: tuple[int, int, int],
        keys: Sequence[Any],
        views: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
        workspace_at: int = 0,
    ) -> None:
        """``workspace_at``: the byte offset in the step's workspace where split-K's partials start (a 256-byte
        multiple; a step that keeps its own data in the workspace puts it first)."""
        self.spec = spec
        self.backend = backend
        self.grid = grid
        self._keys = tuple(keys)
        self._views = tuple(views)
        splits = spec.config.split_k
        if splits == 1:
            self.kernels = (backend.kernel(spec),)
            self.grids = (grid,)
        else:  # split-K: the grid's third axis the splits, then one block a tile to sum them
            self.kernels = tuple(backend.kernel(attrs.evolve(spec, stage=s)) for s in ("split", "sum"))
            self.grids = ((grid[0], 1, splits), grid)
            rows, cols = views[2][0]  # C's 2-D view, (N, M) where it is transposed
            m, n = (cols, rows) if spec.c.transposed else (rows, cols)
            self._partials = (splits, m, n)
            self._partials_at = workspace_at // 4
            self.workspace_bytes = workspace_at + splits * m * n * 4

    @property
    def config(self) -> MatmulConfig:
        return self.spec.config

    def bind(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> Callable[[], None]:
        view, launch, stream = self.backend.view, self.backend.launch, context.stream
        args = tuple(
            view(buffers[k], shape, strides, buffers[k].dtype) for k, (shape, strides) in zip(self._keys, self._views)
        )
        if len(self.kernels) == 1:
            kernel, grid = self.kernels[0], self.grid
            return lambda: launch(stream, grid, kernel, args)
        _, m, n = self._partials
        partials = view(context.workspace, self._partials, (m * n, n, 1), np.dtype(np.float32), self._partials_at)
        (split, total), (split_grid, sum_grid) = self.kernels, self.grids

        def run() -> None:
            launch(stream, split_grid, split, (*args[:2], partials))
            launch(stream, sum_grid, total, (partials, *args[2:]))

        return run

    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        self.bind(buffers, context)()


def sm_count(device: Device) -> int:
    """The SMs a plan fills: the context's (tests set it), else the GPU's (an H200's when listing without one)."""
    return getattr(device.context, "sm_count", None) or planning_sm_count(device)


def resident_blocks(device: Device, config: MatmulConfig) -> int:
    """Blocks of ``config`` the device runs at once (a persistent grid's size): SMs x occupancy / CTAs a block."""
    return max(1, sm_count(device) * (config.occupancy or 1) // (config.num_ctas or 1))


def default_config(spec_mma: str, views: GemmViews, sms: int) -> MatmulConfig:
    """The configuration without measurement: the first of the list for the operands' precision, or its split-K
    form where its output tiles leave more than half of ``sms`` idle."""
    return split_config((FLOAT32_CONFIGS if spec_mma == "float32" else CONFIGS)[0], views, sms)


def split_config(base: MatmulConfig, views: GemmViews, sms: int) -> MatmulConfig:
    """``base``, or where its output tiles would fill at most half of ``sms`` (an unbatched GEMM of few rows, as
    batch-1 inference runs), plain tiles of at most 128 x 128 (64 rows where M is that small), with K split among
    enough blocks to fill the SMs where each still runs at least MIN_SPLIT_STEPS K steps."""
    m, n, k = views.m, views.n, views.k
    if views.batch > 1 or 2 * -(-m // base.tile_m) * -(-n // base.tile_n) > sms:
        return base
    tile_m = min(base.tile_m, 64 if m <= 64 else 128)
    plain = MatmulConfig(tile_m, min(base.tile_n, 128), base.tile_k, base.group_m)
    tiles = -(-m // plain.tile_m) * -(-n // plain.tile_n)
    splits = min(-(-sms // tiles), -(-k // plain.tile_k) // MIN_SPLIT_STEPS)
    return attrs.evolve(plain, split_k=max(1, splits))


def mma_of(a: str, b: str, compute: Any) -> str:
    """How the GEMM kernel multiplies operands of dtypes a and b: "native" (one 16-bit dtype), else both widened
    to float32 and multiplied as "tf32" (a 16-bit compute dtype) or exactly ("float32")."""
    return "native" if a == b != "float32" else ("tf32" if takes_tf32(compute) else "float32")


def serves_gemm(key: SignatureKey, op: str, ports: tuple[str, str, str]) -> bool:
    """Whether ``key`` is an ``op`` whose two operand ports and output port (in that order) hold dtypes the GEMM
    kernel takes, at a compute dtype it runs."""
    ins, outs = dict(key.inputs), dict(key.outputs)
    a, b, c = ports
    return (
        key.op == op
        and str(ins.get(a)) in MMA_INPUTS
        and str(ins.get(b)) in MMA_INPUTS
        and str(outs.get(c)) in OUTPUTS
        and str(key.compute) in COMPUTE
    )


def config_labels(mma: str, views: GemmViews, device: Device | None) -> list[str]:
    """The labels worth measuring for a GEMM of ``views``: the default first, then the list for its precision."""
    sms = sm_count(device) if device is not None else planning_sm_count(None)
    first = default_config(mma, views, sms).label
    listed = [c.label for c in (FLOAT32_CONFIGS if mma == "float32" else CONFIGS)]
    return [first, *(label for label in listed if label != first)]


def gemm_plan(
    spec: MatmulSpec,
    views: GemmViews,
    device: Device,
    config: str | None,
    keys: Sequence[Any],
    epilogue_views: Sequence[tuple[tuple[int, ...], tuple[int, ...]]] = (),
    where: str = "",
    workspace_at: int = 0,
) -> CutileMatmulPlan:
    """The plan of ``spec`` over ``views`` in the configuration named (else ``default_config``'s), its buffers
    ``keys`` in kernel argument order (a, b, c, then the epilogue's operands, seen as ``epilogue_views``)."""
    chosen = parse_config(config) if config else default_config(spec.mma, views, sm_count(device))
    if chosen.split_k > 1 and views.batch > 1:
        raise NotSupported(f"{where}: split-K ({chosen.label}) runs unbatched GEMMs only")
    if chosen.split_k > -(-views.k // chosen.tile_k):  # a named configuration (autotune's cache, a pin)
        raise NotSupported(f"{where}: {chosen.label} splits K = {views.k} into more parts than its K steps")
    tiles = -(-views.m // chosen.tile_m) * -(-views.n // chosen.tile_n)
    grid = (min(tiles, resident_blocks(device, chosen)) if chosen.persistent else tiles, views.batch, 1)
    shapes = [*((v.shape, v.strides) for v in (views.a, views.b, views.c)), *epilogue_views]
    backend = backend_for(device.context)
    return CutileMatmulPlan(attrs.evolve(spec, config=chosen), backend, grid, keys, shapes, workspace_at)


class CutileMatmulBuilder(FusionBuilder):
    name = "cutile.matmul"
    engine_id = IN_TREE[name]
    library = "cutile"
    device = "gpu"
    ops = ("matmul",)
    priority = 1  # its epilogue claims go before the pointwise fusion's (which would take the chain's tail)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        return serves_gemm(key, "matmul", ("a", "b", "c"))

    # -- planning ---------------------------------------------------------------

    def plan(self, node: Node, graph: Graph, chain: _Chain | None = None) -> tuple[MatmulSpec, GemmViews, list[int]]:
        """(spec without config, views, uids in kernel argument order), or NotSupported saying why."""
        op = node.op
        where = f"node '{node.name}'"
        if not isinstance(op, Matmul):
            raise NotSupported(f"{where}: not a matmul")
        a_dt, b_dt, c_dt = _dtype(graph, op.a), _dtype(graph, op.b), _dtype(graph, op.c)
        compute = str(graph.compute_dtype_of(node))
        if a_dt not in MMA_INPUTS or b_dt not in MMA_INPUTS:
            raise NotSupported(f"{where}: operand dtypes {a_dt} x {b_dt}; supported: {', '.join(MMA_INPUTS)}")
        if c_dt not in OUTPUTS:
            raise NotSupported(f"{where}: output dtype {c_dt}; supported: {', '.join(OUTPUTS)}")
        if compute not in COMPUTE:
            raise NotSupported(f"{where}: compute dtype {compute}; supported: {', '.join(COMPUTE)}")
        mma = mma_of(a_dt, b_dt, graph.compute_dtype_of(node))
        steps = [] if chain is None else chain.steps
        out = op.c if not steps else steps[-1][1].out_0
        residuals = [uid for kind, _, uid in steps if kind == "residual"]
        tensor = graph.tensors
        try:
            views = plan_views(
                (tensor[op.a].dims, tensor[op.a].strides),
                (tensor[op.b].dims, tensor[op.b].strides),
                (tensor[out].dims, tensor[out].strides),
                [(tensor[u].dims, tensor[u].strides) for u in residuals],
            )
        except ValueError as e:
            raise NotSupported(f"{where}: {e}") from None
        epilogue, extra = [], iter(views.extras)
        uids = [op.a, op.b, out]
        for kind, step, other in steps:
            operand = None
            if kind == "residual":
                assert other is not None
                operand = _operand(next(extra), _dtype(graph, other))
            elif kind == "bias":
                assert other is not None
                operand = Operand(_dtype(graph, other))
            if other is not None:
                uids.append(other)
            params = tuple(sorted(step.params().items()))
            epilogue.append(EpilogueStep(kind, step.mode, _dtype(graph, step.out_0), params, operand))
        spec = MatmulSpec(
            _operand(views.a, a_dt),
            _operand(views.b, b_dt),
            _operand(views.c, _dtype(graph, out)),
            c_dt,
            mma,
            tuple(epilogue),
        )
        return spec, views, uids

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """Labels of the configurations worth measuring for this node or region (the default first)."""
        spec, views, _ = self.plan(nodes[0], graph)
        return config_labels(spec.mma, views, device)

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)

    def _plan(
        self,
        node: Node,
        graph: Graph,
        chain: _Chain | None,
        device: Device,
        config: str | None,
        keys: Callable[[list[int]], list[Any]],
    ) -> CutileMatmulPlan:
        spec, views, uids = self.plan(node, graph, chain)
        shapes = []
        extras = iter(views.extras)
        for kind, _, other in chain.steps if chain else ():
            if kind == "residual":
                v = next(extras)
                shapes.append((v.shape, v.strides))
            elif kind == "bias":
                t = graph.tensors[other]
                shapes.append(((views.n,), (1 if views.n == 1 else t.strides[-1],)))
        return gemm_plan(spec, views, device, config, keys(uids), shapes, f"node '{node.name}'")

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        ports = {node.op.a: "a", node.op.b: "b", node.op.c: "c"}
        return self._plan(node, graph, None, context.device, context.config, lambda uids: [ports[u] for u in uids])

    # -- fusion -----------------------------------------------------------------

    def claim(self, graph: Graph, order: list[int], device: Device) -> list[Region]:
        if device.kind != "gpu":
            return []
        flow = Dataflow(graph, order)
        regions = []
        for i in order:
            chain = epilogue_chain(graph, flow, i)
            if chain is None:
                continue
            try:
                self.plan(graph.nodes[i], graph, chain)
            except NotSupported:
                continue
            regions.append(make_region(flow, chain.nodes))
        return regions

    def build_region(self, region: Region, graph: Graph, context: RegionContext) -> RegionPlan:
        flow = Dataflow(graph, list(region.nodes))
        chain = epilogue_chain(graph, flow, region.nodes[0])
        if chain is None or tuple(chain.nodes) != region.nodes:
            names = [graph.nodes[i].name for i in region.nodes]
            raise NotSupported(f"region {names} is not a matmul epilogue chain")
        return self._plan(graph.nodes[chain.nodes[0]], graph, chain, context.device, context.config, list)
