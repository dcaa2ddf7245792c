"""cuTile pointwise builder: add, mul, relu_fwd, tanh_fwd, computing in float32.

The builder decides everything it can at build time: the operand layout (one
flat packed index space, or an output-ordered view of at most 4 collapsed
dims for broadcast and strided inputs), the kernel, its grid and its compile
constants. ``execute`` then only picks up the buffers and calls ``ct.launch``.

``cuda.tile`` is imported on first launch (through :mod:`.kernels`), never
when this module loads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

MODES = ("add", "mul", "relu_fwd", "tanh_fwd")
IO_DTYPES = frozenset({"float32", "float16", "bfloat16"})
MAX_RANK = 4  # collapsed dims the strided kernels index
_INT32_MAX = 2**31 - 1


# ---------------------------------------------------------------------------
# Layout


@attrs.frozen
class Layout:
    """How a node's operands map onto one flat output index space.

    ``dense``: every operand is the same packed block in the same order, so
    each is read as a 1-D array of ``size`` elements. Otherwise ``dims`` are
    the output's collapsed dims in memory order (padded to 4 with leading 1s),
    ``in_strides`` each input's element strides over them (0 broadcasts) and
    ``in_spans`` how many elements each input's 1-D view must cover.
    """

    size: int
    dense: bool
    dims: tuple[int, ...] = (1, 1, 1, 1)
    in_strides: tuple[tuple[int, ...], ...] = ()
    in_spans: tuple[int, ...] = ()


def _dense_order(shape: Sequence[int], strides: Sequence[int]) -> list[int] | None:
    """Dims of size > 1 from outermost to innermost if the view is packed, else None."""
    dims = sorted((i for i, d in enumerate(shape) if d != 1), key=lambda i: -strides[i])
    expected = 1
    for i in reversed(dims):
        if strides[i] != expected:
            return None
        expected *= shape[i]
    return dims


def plan_layout(
    in_shapes: Sequence[Sequence[int]],
    in_strides: Sequence[Sequence[int]],
    out_shape: Sequence[int],
    out_strides: Sequence[int],
) -> Layout:
    """The operand layout, or ValueError saying why the kernels can't take it."""
    out_shape = tuple(int(d) for d in out_shape)
    rank = len(out_shape)
    size = math.prod(out_shape)
    if size > _INT32_MAX:
        raise ValueError(f"{size} elements exceed the 32-bit index space")
    if any(s < 0 for s in out_strides):
        raise ValueError("negative output strides")
    if size == 0:
        return Layout(size=0, dense=True)
    order = _dense_order(out_shape, out_strides)
    if order is None:
        raise ValueError(f"output strides {tuple(out_strides)} are not packed")

    # Inputs broadcast to the output's rank; a broadcast dim gets stride 0.
    bstrides: list[list[int]] = []
    for shape, strides in zip(in_shapes, in_strides, strict=True):
        if len(shape) > rank:
            raise ValueError(f"input rank {len(shape)} exceeds output rank {rank}")
        pad = rank - len(shape)
        shape = (1,) * pad + tuple(shape)
        strides = (0,) * pad + tuple(strides)
        if any(s < 0 for s in strides):
            raise ValueError("negative input strides")
        row = []
        for d, s, o in zip(shape, strides, out_shape, strict=True):
            if d not in (o, 1):
                raise ValueError(f"input dims {shape} do not broadcast to {out_shape}")
            row.append(0 if d == 1 else int(s))
        bstrides.append(row)

    # Walk the output in memory order; merge a dim into the next inner one when
    # every operand steps through both as one.
    dims = [out_shape[i] for i in order]
    strides = [[row[i] for i in order] for row in bstrides]
    k = len(dims) - 2
    while k >= 0:
        if all(row[k] == row[k + 1] * dims[k + 1] for row in strides):
            dims[k + 1] *= dims[k]
            del dims[k]
            for row in strides:
                del row[k]
        k -= 1

    if len(dims) <= 1 and all(row == [1] or not row for row in strides):
        return Layout(size=size, dense=True)
    if len(dims) > MAX_RANK:
        raise ValueError(f"operands need {len(dims)} collapsed dims, at most {MAX_RANK}")
    pad = MAX_RANK - len(dims)
    spans = tuple(sum((d - 1) * s for d, s in zip(dims, row, strict=True)) + 1 for row in strides)
    if any(span > _INT32_MAX for span in spans):
        raise ValueError("an input spans more than the 32-bit index space")
    return Layout(
        size=size,
        dense=False,
        dims=(1,) * pad + tuple(dims),
        in_strides=tuple((0,) * pad + tuple(row) for row in strides),
        in_spans=spans,
    )


# ---------------------------------------------------------------------------
# Launch


# Elements per block. Measured on an H200 with 2^28 elements
# (benchmarks/results/gpu_pointwise_2026-11-30.md): 1024 reaches the copy
# roofline for f32, f16 and bf16 add and relu; 4096 and up lose 3-70%.
DEFAULT_TILE = 1024


@attrs.frozen
class ReluParams:
    """relu_fwd's clip parameters (OPS.md); the defaults are plain relu."""

    lower: float = 0.0
    upper: float | None = None  # None (or +inf): no upper clip
    slope: float = 0.0


class PointwiseLaunch:
    """One prepared kernel launch: kernel, grid and compile constants, fixed."""

    def __init__(
        self,
        mode: str,
        layout: Layout,
        *,
        relu: ReluParams | None = None,
        tile: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        from sigdnn.plan_builders.cutile import kernels as k

        self.mode = mode
        self.layout = layout
        self.arity = 2 if mode in ("add", "mul") else 1
        self.tile = tile or DEFAULT_TILE
        if self.tile & (self.tile - 1):
            raise ValueError(f"tile {self.tile} is not a power of two")
        self.grid = (max(1, -(-layout.size // self.tile)), 1, 1)
        self._launch = k.launch
        op = {"add": k.ADD, "mul": k.MUL, "relu_fwd": k.RELU, "tanh_fwd": k.TANH}[mode]
        relu = relu or ReluParams()
        upper = relu.upper if relu.upper is not None and math.isfinite(relu.upper) else None
        unary = (
            float(relu.lower),
            float(relu.slope),
            upper is not None,
            float(upper if upper is not None else 0.0),
        )
        if layout.dense:
            self.kernel = k.binary_dense if self.arity == 2 else k.unary_dense
            self.consts: tuple[Any, ...] = (op, self.tile) if self.arity == 2 else (op, *unary, self.tile)
        else:
            geometry = (
                *layout.dims[1:],
                *(s for row in layout.in_strides for s in row),
            )
            self.kernel = k.binary_strided if self.arity == 2 else k.unary_strided
            self.consts = (*geometry, op, self.tile) if self.arity == 2 else (*geometry, op, *unary, self.tile)

    def __call__(self, inputs: Sequence[Any], out: Any, stream: int) -> None:
        """Enqueue on ``stream`` (a raw CUstream int); DeviceArray operands."""
        if not self.layout.size:
            return
        if self.layout.dense:
            args = [a.flat() for a in inputs[: self.arity]]
        else:
            spans = self.layout.in_spans
            args = [a.as_strided((spans[i],), (1,)) for i, a in enumerate(inputs[: self.arity])]
        self._launch(stream, self.grid, self.kernel, (*args, out.flat(), *self.consts))


def prepare(
    mode: str,
    inputs: Sequence[Any],
    out: Any,
    *,
    relu: ReluParams | None = None,
    tile: int | None = None,
) -> PointwiseLaunch:
    """A launch for these DeviceArrays' shapes and strides (ValueError if unsupported)."""
    layout = plan_layout([a.shape for a in inputs], [a.strides for a in inputs], out.shape, out.strides)
    return PointwiseLaunch(mode, layout, relu=relu, tile=tile)


def pointwise(
    mode: str,
    inputs: Sequence[Any],
    out: Any,
    stream: Any,
    *,
    relu: ReluParams | None = None,
    tile: int | None = None,
) -> None:
    """One-shot: prepare and enqueue ``out = mode(*inputs)`` on ``stream``."""
    from sigdnn.runtime.cuda import raw_stream

    prepare(mode, inputs, out, relu=relu, tile=tile)(inputs, out, raw_stream(stream))


# ---------------------------------------------------------------------------
# Registry


@functools.cache
def unavailable_reason() -> str | None:
    """Why cuTile cannot run here (no cuda.core, no GPU, no cuda.tile), else None."""
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        return reason
    try:
        import cuda.tile  # noqa: F401
    except Exception as exc:  # any failure means "unavailable"
        return f"cuda.tile is not importable ({type(exc).__name__}: {exc})"
    return None


class CutilePointwisePlan(NodePlan):
    """Runs one pointwise node; everything but the buffers is fixed at build."""

    workspace_bytes = 0

    def __init__(self, launch: PointwiseLaunch, in_ports: tuple[str, ...]) -> None:
        self._launch = launch
        self._in_ports = in_ports

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        self._launch([buffers[p] for p in self._in_ports], buffers["out_0"], context.stream)


class CutilePointwiseBuilder(PlanBuilder):
    """add / mul / relu_fwd / tanh_fwd over f32, f16, bf16, computing in f32."""

    name = "cutile.pointwise"
    engine_id = IN_TREE[name]
    library = "cutile"
    device = "gpu"
    ops = ("pointwise",)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        return (
            key.op == "pointwise"
            and key.trait("mode") in MODES
            and all(str(d) in IO_DTYPES for _, d in (*key.inputs, *key.outputs))
            and str(key.compute) == "float32"
        )

    def _layout(self, node: Node, graph: Graph) -> tuple[Layout, tuple[str, ...]]:
        op = node.op
        where = f"node '{node.name}'"
        ports = tuple(op.inputs())
        tensors = [graph.tensors[uid] for uid in op.inputs().values()]
        out = graph.tensors[op.out_0]
        # Pass-by-value scalars arrive as device arrays of their declared dims
        # (the executor uploads them), so they take the broadcast path.
        try:
            layout = plan_layout([t.dims for t in tensors], [t.strides for t in tensors], out.dims, out.strides)
        except ValueError as exc:
            raise NotSupported(f"{where}: {exc}") from None
        return layout, ports

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        op = node.op
        where = f"node '{node.name}'"
        if not isinstance(op, Pointwise) or op.mode not in MODES:
            raise NotSupported(f"{where}: only pointwise {', '.join(MODES)}")
        dtypes = [str(graph.dtype_of(graph.tensors[u])) for u in op.ports().values()]
        if any(d not in IO_DTYPES for d in dtypes):
            raise NotSupported(f"{where}: dtypes {dtypes}; supported: {sorted(IO_DTYPES)}")
        compute = str(graph.compute_dtype_of(node))
        if compute != "float32":
            raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
        self._layout(node, graph)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        self.check(node, graph, context.device)
        layout, ports = self._layout(node, graph)
        op = node.op
        relu = None
        if op.mode == "relu_fwd":
            relu = ReluParams(
                lower=0.0 if op.relu_lower_clip is None else op.relu_lower_clip,
                upper=op.relu_upper_clip,
                slope=0.0 if op.relu_lower_clip_slope is None else op.relu_lower_clip_slope,
            )
        return CutilePointwisePlan(PointwiseLaunch(op.mode, layout, relu=relu), ports)
