"""Shared base of the NumPy reference builders.

A reference plan reads each input at full value (float64, or int64 when the
node computes in an integer type), computes, and rounds once to the output's
declared dtype. Buffers are NumPy views with any strides.
"""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from sigdnn.dtypes import DataType, rounder
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.reference.math.parallel import parallel_map
from sigdnn.plan_builders.reference.math.sink import Sink
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.runtime.device import Device, ExecutionContext

CHUNK_ELEMENTS = 1 << 16  # float64 temporaries of one chunk stay in L2
# Input dtypes a narrow-reading math function takes as they are: NumPy widens them exactly wherever
# they meet float64 (casts, mixed-type ufuncs and GEMMs). Other dtypes (bfloat16, fp8, integers) are
# widened up front, as for every other builder.
NARROW_READ = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))

Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
NarrowCompute = Callable[[dict[str, np.ndarray], dict[str, Sink]], dict[str, np.ndarray]]


def chunks(shape: tuple[int, ...], target: int = CHUNK_ELEMENTS) -> list[tuple[Any, ...]]:
    """Index tuples that split ``shape`` into blocks of about ``target`` elements.

    Blocks are whole rows along the outermost axis whose inner extent fits,
    so every block is a view of the caller's (strided) arrays.
    """
    inner = math.prod(shape)
    if inner <= target:
        return [()]
    for axis, extent in enumerate(shape):
        inner //= extent
        if inner <= target:
            rows = max(1, target // max(inner, 1))
            outer = itertools.product(*(range(d) for d in shape[:axis]))
            return [(*lead, slice(r, r + rows)) for lead in outer for r in range(0, extent, rows)]
    return [()]


CASTS = (DataType.FLOAT64, DataType.FLOAT32, DataType.FLOAT16)  # float64 rounds to these by NumPy's cast


def storer(dtype: DataType) -> Callable[[np.ndarray, np.ndarray], None]:
    """Writes computed values into an output of ``dtype``, rounding once.

    float64 values bound for float64, float32 or float16 are cast straight
    into the output (NumPy's cast is IEEE round-to-nearest-even, as
    ``rounder``'s): no rounded temporary, one pass. Everything else goes
    through ``rounder``.
    """
    rounded = rounder(dtype)
    if dtype not in CASTS:

        def store_rounded(out: np.ndarray, value: np.ndarray) -> None:
            """round_to a cache-sized block at a time: its integer temporaries stay in L2 (3x faster
            than rounding the whole tensor at once on a 1M-element bfloat16 result)."""
            if out.size <= CHUNK_ELEMENTS:
                np.copyto(out, rounded(value), casting="unsafe")
                return
            value = np.broadcast_to(value, out.shape)
            parallel_map(lambda b: np.copyto(out[b], rounded(value[b]), casting="unsafe"), chunks(out.shape))

        return store_rounded

    def store(out: np.ndarray, value: np.ndarray) -> None:
        np.copyto(out, value if value.dtype == np.float64 else rounded(value), casting="unsafe")

    return store


class ReferencePlan(NodePlan):
    """Runs ``compute(inputs) -> {port: value}`` and stores each output.

    An elementwise plan runs block by block, the blocks shared out over the
    cores: the float64 temporaries then take a few L2-sized blocks per core
    instead of several copies of the tensor, which is both faster and keeps a
    node's working memory bounded.

    A narrow plan (``narrow``: compute is a NarrowCompute) hands its math the inputs in their own
    dtypes and a Sink per output: the math widens the blocks it reads and
    rounds the blocks it finishes straight into the outputs, returning only
    the values it did not write (small statistics). No float64 copy of a
    whole input or output is staged around it.
    """

    def __init__(
        self,
        compute: Compute | NarrowCompute,
        integer: bool,
        out_dtypes: dict[str, DataType],
        elementwise: bool = False,
        narrow: bool = False,
        keeps: tuple[np.dtype, ...] = NARROW_READ,
    ) -> None:
        self._compute = compute
        self._narrow = narrow
        self._keeps = keeps
        self._wide = np.dtype(np.int64 if integer else np.float64)
        self._out_dtypes = out_dtypes
        self._store = {port: storer(dtype) for port, dtype in out_dtypes.items()}
        self._elementwise = elementwise and len(out_dtypes) == 1 and not narrow

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext | None = None) -> None:
        with np.errstate(all="ignore"):
            if self._elementwise:
                (port,) = self._out_dtypes
                out = buffers[port]
                if out.size > CHUNK_ELEMENTS:
                    ins = {p: np.broadcast_to(a, out.shape) for p, a in buffers.items() if p != port}
                    parallel_map(
                        lambda b: self._run({p: a[b] for p, a in ins.items()}, {port: out[b]}), chunks(out.shape)
                    )
                    return
            inputs = {p: a for p, a in buffers.items() if p not in self._out_dtypes}
            if self._narrow:
                self._run_narrow(inputs, buffers)
            else:
                self._run(inputs, buffers)

    def _run_narrow(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        """Inputs as they are (widened unless their dtype is one the math keeps), Sinks for the outputs."""
        ins = {p: a if a.dtype in self._keeps else a.astype(self._wide) for p, a in inputs.items()}
        sinks = {
            p: Sink(outputs[p], self._store[p], self._out_dtypes[p] in CASTS) for p in self._out_dtypes if p in outputs
        }
        for port, value in self._compute(ins, sinks).items():  # type: ignore[call-arg]
            self._store[port](outputs[port], value)

    def _run(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        """Widen, compute, round once and store (NumPy's floating-point warnings are off: the caller's errstate)."""
        wide = {p: a.astype(self._wide, copy=False) for p, a in inputs.items()}
        for port, value in self._compute(wide).items():
            self._store[port](outputs[port], value)


class ReferenceBuilder(PlanBuilder):
    """A CPU builder; subclasses supply ``make_compute``."""

    library: ClassVar[str] = "reference"
    device: ClassVar[str] = "cpu"
    runs_in_blocks: ClassVar[bool] = True
    """Run an elementwise node block by block; False where the math blocks (and spreads over cores) itself."""

    reads_narrow: ClassVar[bool] = False
    """make_compute returns a NarrowCompute: inputs in their own dtypes, outputs written through Sinks
    (float compute only: the narrow math widens to float64, so only a builder that never computes in
    integers sets it)."""
    narrow_keeps: ClassVar[tuple[np.dtype, ...]] = NARROW_READ
    """Input dtypes a NarrowCompute gets as they are (others arrive widened)."""

    def narrow_keeps_for(self, node: Node, graph: Graph) -> tuple[np.dtype, ...]:
        """``narrow_keeps`` for this node (a builder whose kept dtypes depend on the node says so here)."""
        return self.narrow_keeps

    def narrow_for(self, node: Node, graph: Graph) -> bool:
        """Whether make_compute returns a NarrowCompute for this node (``reads_narrow`` unless a builder
        decides node by node)."""
        return self.reads_narrow

    @abstractmethod
    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute | NarrowCompute:
        """The node's math: float64 (or int64) inputs by port -> values by output port
        (with reads_narrow: inputs in their own dtypes and Sinks -> the values not written)."""

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        return graph.compute_dtype_of(node).is_integer

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        outs = dict(context.key.outputs)
        integer = self.computes_in_integers(node, graph)
        return ReferencePlan(
            self.make_compute(node, graph, context),
            integer,
            outs,
            self.runs_in_blocks and node.op.elementwise(),
            self.narrow_for(node, graph),
            self.narrow_keeps_for(node, graph),
        )


class FloatReferenceBuilder(ReferenceBuilder):
    """A builder for an op defined on floating point only: it declines other dtypes and computes in float64."""

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Decline integer tensors (check_graph refuses them first; a registry key may still carry them)."""
        decline_non_float(node, graph)

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        """Never: an integer compute type would read the float inputs as truncated int64."""
        return False
