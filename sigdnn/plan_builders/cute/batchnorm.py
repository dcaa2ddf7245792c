"""CuTe DSL batchnorm training forward for Hopper: the whole node in one cooperative launch.

x stays on chip (registers and shared memory) across a grid barrier where
it fits, so it comes from DRAM about once where cuTile's three launches
read it twice (kernels/batchnorm_sm90.py). The builder takes channels-last
x (channels innermost in memory: NHWC, NDHWC, or any x whose spatial extent
is 1) of bfloat16, float16 or float32 with y laid out alike; channels a
power-of-two number of 16-byte vectors, at most 256 of them (bfloat16: 8 to
2048 channels); per-channel tensors contiguous, scale and bias of one dtype,
mean, inv_variance and the running statistics of another. It ranks above
``cutile.batchnorm``, which keeps every other layout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.batchnorm import Batchnorm
from sigdnn.plan_builders import tensor_views
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, require_hopper
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

IO_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4}  # x and y, with their bytes an element
VECTOR_DTYPES = ("bfloat16", "float16", "float32")  # the per-channel tensors
MAX_LANES = 256  # 16-byte vectors a row: half the kernel's 512 threads (its sums need two rows of shared memory)
STATS = ("mean", "inv_variance", "in_running_mean", "in_running_var", "next_running_mean", "next_running_var")
SHARED_BYTES = 227 * 1024  # an sm_90 block's largest shared memory


def vector_elements(dtype: str) -> int:
    """Elements of an io dtype in a thread's 16-byte vector."""
    return 16 // IO_DTYPES[dtype]


@attrs.frozen
class BatchnormSpec:
    """One batchnorm training forward over (rows, channels) channels-last x; everything the kernel compiles in."""

    dtype: str  # x and y
    channels: int
    rows: int  # every element but the channel: N * spatial
    param_dtype: str  # scale and bias
    stat_dtype: str  # mean, inv_variance and the running statistics
    running: bool  # whether the running statistics are updated
    epsilon: float
    momentum: float  # 0.0 without running statistics
    blocks: int  # one a SM
    threads: int = 512
    registers: int = 8  # groups a block keeps in registers, at most (12 spilled at 512 threads)
    step: int = 4  # streamed groups a thread has in flight
    slots: int = 8  # accumulator copies
    policy: bool = True  # L2 hints as an explicit evict-first policy with non-coherent loads (else .cs operators)

    @property
    def vec(self) -> int:
        return vector_elements(self.dtype)

    @property
    def lanes(self) -> int:
        """Threads covering one row's channels."""
        return self.channels // self.vec

    @property
    def group_rows(self) -> int:
        return self.threads // self.lanes

    @property
    def groups(self) -> int:
        """Whole groups of ``group_rows`` rows; the rows after them are the tail."""
        return self.rows // self.group_rows

    @property
    def scratch_bytes(self) -> int:
        """Shared memory for the block's sums (group_rows x channels floats), then the coefficients."""
        return self.group_rows * self.channels * 4

    @property
    def kept_registers(self) -> int:
        return min(self.registers, self.groups // self.blocks)

    @property
    def kept_shared(self) -> int:
        room = (SHARED_BYTES - self.scratch_bytes - 64) // (self.threads * 16)
        return max(0, min(room, (self.groups - self.blocks * self.kept_registers) // self.blocks))

    @property
    def accumulator_elements(self) -> int:
        """Two accumulators (this launch's and the next one's) of ``slots`` (2, channels) float64 copies."""
        return 2 * self.slots * 2 * self.channels


def plan_batchnorm(node: Node, graph: Graph) -> dict[str, Any]:
    """The kernel's view of a training batchnorm node (every BatchnormSpec field but ``blocks``); ValueError says
    what the kernel does not take."""
    op = node.op
    if not isinstance(op, Batchnorm):
        raise ValueError(f"{op.kind} is not a batchnorm training forward")
    x, y = graph.tensors[op.x], graph.tensors[op.y]
    dtype = str(graph.dtype_of(x))
    if dtype not in IO_DTYPES:
        raise ValueError(f"x is {dtype}; the kernel takes {', '.join(IO_DTYPES)}")
    if str(graph.dtype_of(y)) != dtype:
        raise ValueError(f"y is {graph.dtype_of(y)} and x {dtype}; the kernel writes y in x's dtype")
    outer, channels, inner = tensor_views.channels(x)
    if inner != 1:
        raise ValueError(f"x's channels are not innermost in memory (strides {list(x.strides)}); NHWC only")
    tensor_views.same_layout(x, [y])  # views also refuses past 2^31 - 1 elements, the kernel's 32-bit indices
    vec = vector_elements(dtype)
    lanes = channels // vec
    if channels % vec or lanes & (lanes - 1) or lanes > MAX_LANES:
        raise ValueError(
            f"{channels} channels; the kernel takes a power of two of {vec}-channel vectors, at most {MAX_LANES}"
        )
    params = {str(graph.dtype_of(graph.tensors[u])) for u in (op.scale, op.bias)}
    running = op.momentum is not None
    stats = [getattr(op, p) for p in STATS if getattr(op, p) is not None]
    stat_dtypes = {str(graph.dtype_of(graph.tensors[u])) for u in stats}
    if len(params) != 1 or len(stat_dtypes) != 1 or not (params | stat_dtypes) <= set(VECTOR_DTYPES):
        raise ValueError(
            f"scale / bias of {sorted(params)}, statistics of {sorted(stat_dtypes)}: the kernel takes one dtype each, "
            f"of {', '.join(VECTOR_DTYPES)}"
        )
    for u in (op.scale, op.bias, *stats):
        t = graph.tensors[u]
        if tensor_views.channel_stride(t) != 1:
            raise ValueError(f"tensor '{t.name}' is not contiguous along its channels")
    if running and (len(stats) != len(STATS) or outer < 2):
        raise ValueError("running statistics need all four running ports and at least 2 elements a channel")
    return {
        "dtype": dtype,
        "channels": channels,
        "rows": outer,
        "param_dtype": params.pop(),
        "stat_dtype": stat_dtypes.pop(),
        "running": running,
        "epsilon": float(op.epsilon),
        "momentum": float(op.momentum) if running else 0.0,
    }


class CuteBatchnormPlan(BindsLaunches, NodePlan):
    """Runs one training batchnorm node: one launch owning its accumulators and barrier (one run at a time)."""

    workspace_bytes = 0

    def __init__(self, launch: Any, where: str) -> None:
        self._launch = launch
        self._where = where

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        x, y = buffers["x"], buffers["y"]
        check_aligned(self._where, x=x, y=y)
        vectors = [buffers[p].ptr for p in ("scale", "bias", "mean", "inv_variance")]
        running = [buffers[p].ptr if p in buffers else 0 for p in STATS[2:]]
        return functools.partial(self._launch, x.ptr, y.ptr, *vectors, *running, context.stream)


class CuteBatchnormBuilder(PlanBuilder):
    """Batchnorm training forward over channels-last x on sm_90 in one cooperative launch."""

    name = "cute.batchnorm"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("batchnorm",)
    priority = 1  # above cutile.batchnorm where both apply: x read from DRAM about once, not twice

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        return key.op == "batchnorm" and str(dict(key.inputs).get("x")) in IO_DTYPES

    def _view(self, node: Node, graph: Graph, device: Device | None) -> dict[str, Any]:
        """``plan_batchnorm``'s view, or NotSupported saying why the kernel cannot run the node on ``device``."""
        try:
            view = plan_batchnorm(node, graph)
        except ValueError as e:
            raise NotSupported(f"node '{node.name}': {e}") from None
        require_hopper(node, device)
        return view

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self._view(node, graph, device)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.batchnorm_launch import BatchnormLaunch

        view = self._view(node, graph, context.device)
        _, sm_count = device_properties(device_id_of(context.device))
        spec = BatchnormSpec(**view, blocks=sm_count)
        return CuteBatchnormPlan(BatchnormLaunch(spec), f"node '{node.name}'")
