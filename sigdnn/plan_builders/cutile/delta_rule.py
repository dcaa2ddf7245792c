"""cuTile gdn, kda and their backward: the chunked gated delta rule (``delta_rule_kernel``).

Takes packed token-major tensors (q, k, v, g, beta row-major [T, H, *],
states row-major [N, H, K, V]), bf16 / f16 / f32 q, k, v, o; a float32 gate;
int32 / int64 cu_seqlens; float32 or bf16 states; K and V up to 256. The
forward is three launches: every chunk's QK and T at once into the step's
workspace (float32, C rows a chunk slot and head), the sequences ranked
longest first (so the GPU starts the longest serial walks first), then the
serial walk over each sequence's chunks that carries the state and forms
each chunk's corrections U = T diag(beta) (V - (e^b K) h). For gdn at bf16
products a fourth, before the ranking, stores the walk's other operands ready-made
(e^b K, e^b Q, the keys decayed to the chunk's end, bf16, and each chunk's
decay), QK and T go bf16, and the walk reads them (the backward's two
walks read the same from the same launch). The backward is
six launches (kda's seven): every chunk's W, U0, QK, T and KK, the ranking,
a walk forward and one in reverse that carry only the state and its
gradient (each chunk's start state and
its end's d(state) saved in the workspace, float32, a slot per chunk of the
batch), every chunk's gradients a block of value columns at a time (dv, and
each block's share of the rest into the workspace: float32, C rows a chunk
slot, head and value block), then the pair gradients from the summed shares
(dq, dk, dg, dbeta). The kernels do not check
cu_seqlens (as flash-linear-attention's do not; the reference does):
boundaries are clamped to [0, T] and a decreasing one gives an empty
sequence, so hostile values cost at most T tokens a block and touch nothing
past the tensors (gathers and scatters are bounds-checked), but the result
is not defined. The chunk's products run as exact float32
MMAs with a float32 compute dtype and as TF32 with a 16-bit one (the gate's
cumulative sums stay exact): cuTile's float32 MMA is no tensor-core MMA, and
it made the one-kernel backward's cubin 10 MB (docs/experiments.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

from sigdnn.dtypes import DataType
from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import packed_strides
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.delta_rule_kernel import (
    CHUNK,
    PAIR_HAND_OVER,
    DeltaRuleShape,
    chunk_slots,
    chunks_source,
    forward_source,
    gradients_source,
    handed_over_sizes,
    norms_source,
    order_blocks,
    order_source,
    pair_takes,
    pairs_source,
    products_of,
    ready_source,
    reverse_source,
    states_source,
    walk_grid,
    work_rows,
)
from sigdnn.plan_builders.cutile.launches_builder import IO_DTYPES, CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.signature_keys import SignatureKey

INDEX_DTYPES = frozenset({DataType.INT32, DataType.INT64})
STATE_DTYPES = frozenset({DataType.FLOAT32, DataType.BFLOAT16})
WIDEST = 256  # K and V held as one tile each
INDEX_LIMIT = 2**31  # elements an array may have: the kernels' flat positions are int32


def dtype_allowed(port: str, dtype: DataType) -> bool:
    if port == "cu_seqlens":
        return dtype in INDEX_DTYPES
    if port in ("g", "dg"):
        return dtype is DataType.FLOAT32
    if port in ("initial_state", "final_state", "d_initial_state", "d_final_state"):
        return dtype in STATE_DTYPES
    return dtype in IO_DTYPES


class _DeltaRuleForward(CutileLaunchesBuilder):
    def serves(self, key: SignatureKey) -> bool:
        return key.op in self.ops and all(dtype_allowed(p, d) for p, d in (*key.inputs, *key.outputs))

    def _plan(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        where = f"node '{node.name}'"
        for port, uid in node.op.ports().items():
            t = graph.tensors[uid]
            dtype = graph.dtype_of(t)
            if not dtype_allowed(port, dtype):
                raise NotSupported(
                    f"{where}: port '{port}' (tensor '{t.name}') is {dtype}; {self.name} does not take it"
                )
            if t.strides != packed_strides(t.dims):
                raise NotSupported(f"{where}: port '{port}' (tensor '{t.name}') is not packed row-major")
        try:
            return self.launches(node, graph)
        except ValueError as e:
            raise NotSupported(f"{where}: {e}") from None

    def shape(self, node: Node, graph: Graph) -> tuple[DeltaRuleShape, int, int]:
        """(the kernels' shape, T, N); ValueError for head dims past ``WIDEST`` or an array past int32 positions."""
        op = node.op
        ports = op.ports()
        tokens, heads, kd = graph.tensors[ports["q"]].dims
        vd = graph.tensors[ports["v"]].dims[2]
        if kd > WIDEST or vd > WIDEST:
            raise ValueError(f"head dims K {kd}, V {vd}: at most {WIDEST}")
        sequences = graph.tensors[ports["cu_seqlens"]].size - 1
        final = "final_state" in ports or "d_final_state" in ports
        shape = DeltaRuleShape(
            heads, kd, vd, op.per_channel_gate, op.use_qk_l2norm,
            kd**-0.5 if op.scale is None else op.scale, "initial_state" in ports, final,
            products=products_of(graph.compute_dtype_of(node)), search_steps=max(1, sequences.bit_length()),
        )  # fmt: skip
        # the chunk kernel's workspace rows (more than T x H) and the backward's saved states (K x V a slot and head)
        # bound every array: the gradients' shares, C x max(KP, C) a slot, head and value block, come to that with one
        # value block and to KP x VP or C x VP a slot and head over VP / C of them
        slots = chunk_slots(shape, tokens, sequences) * shape.heads
        largest = max(work_rows(shape, tokens, sequences) * max(shape.kp, shape.vp, CHUNK), slots * shape.kp * shape.vp)
        if largest > INDEX_LIMIT:
            raise ValueError(f"{largest} elements in one array: past the kernels' int32 positions ({INDEX_LIMIT})")
        return shape, tokens, sequences

    def chunk_kernel(
        self, node: Node, graph: Graph, shape: DeltaRuleShape, tokens: int, sequences: int, workspace: Workspace,
        backward: bool = False,
    ) -> tuple[Launch, tuple[Arg, ...]]:  # fmt: skip
        """The chunk kernel over every chunk slot and head, and the arrays it writes into ``workspace``, C rows a chunk
        slot and head: QK and T (the backward's W, U0, QK, T and KK), float32, or bf16 where the forward's walk
        takes its operands ready-made."""
        rows = work_rows(shape, tokens, sequences)
        if backward:
            work = tuple(workspace.take((rows * width,)) for width in (shape.kp, shape.vp, CHUNK, CHUNK, CHUNK))
        else:
            dtype = "bfloat16" if shape.ready_operands else "float32"
            work = tuple(workspace.take((rows * CHUNK,), dtype) for _ in range(2))
        inputs = ("q", "k", "v", "g", "beta", "cu_seqlens") if backward else ("q", "k", "g", "beta", "cu_seqlens")
        ports = self.args(node, graph, inputs, "o")
        grid = (chunk_slots(shape, tokens, sequences), shape.heads, 1)
        return Launch(chunks_source(shape, backward=backward), grid, (*ports, *work)), work

    def ready_launch(
        self, node: Node, graph: Graph, shape: DeltaRuleShape, tokens: int, sequences: int, workspace: Workspace
    ) -> tuple[Launch, tuple[Arg, ...]]:
        """The walk's ready-made operands over every chunk slot and head, and the arrays they go to: e^b K, e^b Q and
        the carried keys (bf16, C rows of KP a slot and head) and the chunks' decays (float32, one a slot and head)."""
        rows = work_rows(shape, tokens, sequences)
        work = (*(workspace.take((rows * shape.kp,), "bfloat16") for _ in range(3)), workspace.take((rows // CHUNK,)))
        ports = self.args(node, graph, ("q", "k", "g", "cu_seqlens"), "o")
        grid = (chunk_slots(shape, tokens, sequences), shape.heads, 1)
        return Launch(ready_source(shape), grid, (*ports, *work)), work

    def order_launch(self, node: Node, graph: Graph, sequences: int, workspace: Workspace) -> tuple[Launch, Arg]:
        """The ranking of the sequences, longest first, and the int32 ``order`` it writes, which the walks read."""
        order = workspace.take((sequences,), "int32")  # N >= 1: the op's shape rule
        (cu,) = self.args(node, graph, ("cu_seqlens",), "cu_seqlens")
        return Launch(order_source(sequences), (order_blocks(sequences), 1, 1), (cu, order)), order

    @staticmethod
    def args(node: Node, graph: Graph, names: tuple[str, ...], placeholder: str) -> list[Arg]:
        """Flat views of the ports in kernel order; an absent optional port gets ``placeholder`` (never touched)."""
        ports = node.op.ports()
        return [
            Arg(p, (graph.tensors[ports[p]].size,), (1,)) if p in ports else Arg(placeholder, (1,), (1,)) for p in names
        ]


class _DeltaRuleForwardBuilder(_DeltaRuleForward):
    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        shape, tokens, sequences = self.shape(node, graph)
        workspace = Workspace()
        chunks, handed = self.chunk_kernel(node, graph, shape, tokens, sequences, workspace)
        ready = [self.ready_launch(node, graph, shape, tokens, sequences, workspace)] if shape.ready_operands else []
        ranking, order = self.order_launch(node, graph, sequences, workspace)
        inputs = ("v", "beta", "cu_seqlens") if ready else ("q", "k", "v", "g", "beta", "cu_seqlens")
        forward_args = (
            *self.args(node, graph, inputs, "o"), order, *self.args(node, graph, ("initial_state",), "o"), *handed,
            *(array for _, arrays in ready for array in arrays), *self.args(node, graph, ("o", "final_state"), "o"),
        )  # fmt: skip
        grid = walk_grid(sequences, shape.heads, shape.forward_value_blocks)
        walk = Launch(forward_source(shape), grid, forward_args)
        return [chunks, *(launch for launch, _ in ready), ranking, walk], workspace.nbytes


class _DeltaRuleBackwardBuilder(_DeltaRuleForward):
    """Every chunk's W, U0, QK, T and KK (and at bf16 products the walks' ready-made operands, as the forward's);
    the walk forward saving each chunk's start state; the walk in reverse
    saving d(state) at each chunk's end (and d(initial state)); every chunk's gradients a block of value columns
    at a time (dv, and each block's share of the sums over V into the workspace); then the pair gradients from the
    summed shares: gdn's launch stores dq, dk, dg and dbeta, kda's (a block per key block) dg, and a sixth launch
    dq, dk and dbeta."""

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        shape, tokens, sequences = self.shape(node, graph)
        workspace = Workspace()
        chunks, (w, u, qk, t, kk) = self.chunk_kernel(node, graph, shape, tokens, sequences, workspace, backward=True)
        slots = chunk_slots(shape, tokens, sequences)
        saved, dsaved = (workspace.take((slots * shape.heads * shape.kp * shape.vp,)) for _ in range(2))
        ready = [self.ready_launch(node, graph, shape, tokens, sequences, workspace)] if shape.ready_operands else []
        operands = tuple(array for _, arrays in ready for array in arrays)
        ranking, order = self.order_launch(node, graph, sequences, workspace)
        walk = walk_grid(sequences, shape.heads, shape.value_blocks)
        args = functools.partial(self.args, node, graph, placeholder="dq")
        states_inputs = ("beta", "cu_seqlens") if ready else ("k", "g", "cu_seqlens")
        reverse_inputs = ("beta", "cu_seqlens") if ready else ("q", "k", "g", "beta", "cu_seqlens")
        walks = [
            *(launch for launch, _ in ready),
            ranking,
            Launch(states_source(shape), walk, (
                *args(states_inputs), order, *args(("initial_state",)), w, u, saved, *operands,
            )),
            Launch(reverse_source(shape), walk, (
                *args(reverse_inputs), order, *args(("d_o", "d_final_state")), qk, t, *args(("d_initial_state",)),
                dsaved, *operands,
            )),
        ]  # fmt: skip
        handed = {
            name: workspace.take((size,))
            for name, size in handed_over_sizes(shape, slots * shape.heads * shape.value_blocks).items()
        }
        gradients = Launch(gradients_source(shape), (slots, shape.heads, shape.value_blocks), (
            *args(("k", "v", "g", "beta", "cu_seqlens", "d_o")), saved, dsaved, qk, t, kk, *handed.values(),
            *args(("dv",)),
        ))  # fmt: skip
        rows = work_rows(shape, tokens, sequences)
        pairs = self.pair_launches(shape, slots, rows, args, (qk, kk), handed, workspace)
        return [chunks, *walks, gradients, *pairs], workspace.nbytes

    @staticmethod
    def pair_launches(
        shape: DeltaRuleShape, slots: int, rows: int, args: Callable[[tuple[str, ...]], list[Arg]],
        qk_kk: tuple[Arg, Arg], handed: dict[str, Arg], workspace: Workspace,
    ) -> list[Launch]:  # fmt: skip
        """gdn's pair launch (a block per chunk slot and head, reading QK and KK), or kda's (a block per chunk slot,
        head and key block, handing dq~ and dk~ over in the workspace) and its last launch."""
        grid, taken = (slots, shape.heads, 1), tuple(handed[name] for name in pair_takes(shape))
        inputs = args(("q", "k", "g", "cu_seqlens"))
        if not shape.per_channel:
            return [Launch(pairs_source(shape), grid, (*inputs, *qk_kk, *taken, *args(("dq", "dk", "dg", "dbeta"))))]
        paired = tuple(workspace.take((rows * shape.kp,)) for _ in PAIR_HAND_OVER)
        return [
            Launch(pairs_source(shape), (slots, shape.heads, shape.key_blocks), (*inputs, *taken, *paired, *args(("dg",)))),
            Launch(norms_source(shape), grid, (
                *args(("q", "k", "cu_seqlens")), *paired, handed["dbeta"], *args(("dq", "dk", "dbeta")),
            )),
        ]  # fmt: skip


class CutileGdnBuilder(_DeltaRuleForwardBuilder):
    name: ClassVar[str] = "cutile.gdn"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("gdn",)


class CutileKdaBuilder(_DeltaRuleForwardBuilder):
    name: ClassVar[str] = "cutile.kda"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("kda",)


class CutileGdnBwdBuilder(_DeltaRuleBackwardBuilder):
    name: ClassVar[str] = "cutile.gdn_bwd"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("gdn_bwd",)


class CutileKdaBwdBuilder(_DeltaRuleBackwardBuilder):
    name: ClassVar[str] = "cutile.kda_bwd"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("kda_bwd",)
