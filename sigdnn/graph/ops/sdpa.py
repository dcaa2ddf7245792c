"""sdpa: scaled dot-product attention, o = softmax(attn_scale * q k^T (+ bias), causal) v (docs/ops.md).

q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] with Hq a multiple
of Hkv (grouped-query heads share k and v; Hkv = 1 is multi-query); bias
broadcasts to [B, Hq, Sq, Skv]; the causal mask keeps key j for query i
when j <= i, and the diagonal band (``Band``: cuDNN's left and right
bounds, top-left or bottom-right aligned) narrows that further. o is
[B, Hq, Sq, Dv]; stats [B, Hq, Sq, 1]
(float32 unless set, the logsumexp of each score row) is written exactly
when ``generate_stats`` is set. attn_scale is an attribute value (cuDNN
also takes a scalar tensor; the builder method reads its value).

Variable lengths (ragged.py): optional ``seq_len_q`` / ``seq_len_kv``
padding masks and ragged offsets for q, k, v and o. A query row past its
sequence sees no key; o and stats there are unspecified (the reference
writes 0 and -inf).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops import ragged
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import STATS_DTYPE, described, packed_in_order_of
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


def attention_dims(where: str, inputs: Mapping[str, Tensor], attn_scale: float) -> tuple[int, int, int, int, int]:
    """(B, Hq, Sq, Skv, Dv) after checking q, k, v and the optional bias; shared by sdpa and sdpa_backward."""
    for port in ("q", "k", "v"):
        t = inputs[port]
        if t.rank != 4:
            raise GraphError(f"{where}: {described(port, t)} has rank {t.rank}; sdpa takes [B, H, S, D] tensors")
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    b, hq, sq, d = q.dims
    if k.dims[0] != b or v.dims[0] != b:
        raise GraphError(f"{where}: batch sizes differ: q {b}, k {k.dims[0]}, v {v.dims[0]}")
    if k.dims[3] != d:
        raise GraphError(f"{where}: {described('k', k)} has head dim {k.dims[3]}, q has {d}; they must match")
    if v.dims[1:3] != k.dims[1:3]:
        raise GraphError(
            f"{where}: {described('v', v)} has heads and sequence {list(v.dims[1:3])}, k has {list(k.dims[1:3])}"
        )
    hkv, skv = k.dims[1], k.dims[2]
    if hq % hkv:
        raise GraphError(f"{where}: k and v's {hkv} heads do not divide q's {hq} heads (port 'k', tensor '{k.name}')")
    if not math.isfinite(attn_scale):
        raise GraphError(f"{where}: attn_scale must be finite, got {attn_scale}")
    scores = (b, hq, sq, skv)
    bias = inputs.get("bias")
    if bias is not None and (bias.rank != 4 or any(e not in (1, f) for e, f in zip(bias.dims, scores))):
        raise GraphError(
            f"{where}: {described('bias', bias)} has dims {list(bias.dims)}; it must broadcast to the scores "
            f"{list(scores)} (rank 4, each dim 1 or the scores')"
        )
    return b, hq, sq, skv, v.dims[3]


VARLEN_PORTS = (
    "seq_len_q",
    "seq_len_kv",
    "q_ragged_offset",
    "k_ragged_offset",
    "v_ragged_offset",
    "o_ragged_offset",
)
VARLEN_FIELDS = tuple((p, "uid?") for p in VARLEN_PORTS)
RAGGED_LENGTHS = {"q": "seq_len_q", "o": "seq_len_q", "k": "seq_len_kv", "v": "seq_len_kv"}
BLOCK_SCORES = 1 << 18  # the reference's float64 scores per block (math/sdpa.py): 2 MiB, stays in L2
BOUND_LIMIT = 1 << 31  # a band's bounds lie strictly inside +-2^31 (cuDNN's int32 and the kernels')
BAND_FIELDS = (("diagonal_bottom_right", "bool"), ("left_bound", "i64?"), ("right_bound", "i64?"))


@attrs.frozen
class Band:
    """The keys each query row may see, beyond padding: the diagonal band (docs/ops.md, sdpa's masks).

    With a = 0 (top-left alignment) or a = Skv_b - Sq_b (bottom-right: the
    last query row faces the last key of its sequence, as in decoding with a
    key cache), key j is visible to row i when i + a - left < j (a left
    bound: the window's length) and j <= i + a + right (a right bound). The
    causal mask is the right bound 0 (``with_causal``). Padding is applied
    besides: keys past seq_len_kv are hidden, rows past seq_len_q see none.
    """

    bottom_right: bool = False
    left: int | None = None
    right: int | None = None

    @classmethod
    def of(cls, op: Any) -> Band:
        """An sdpa / sdpa_backward node's band, its causal mask included."""
        return cls(op.diagonal_bottom_right, op.left_bound, op.right_bound).with_causal(op.use_causal_mask)

    def with_causal(self, causal: bool) -> Band:
        """This band and the causal mask (the right bound 0) both applied."""
        if not causal:
            return self
        return attrs.evolve(self, right=0 if self.right is None else min(self.right, 0))

    @property
    def masks(self) -> bool:
        """Whether it hides any key (an alignment alone hides none)."""
        return self.left is not None or self.right is not None

    def visible(
        self, rows: np.ndarray, sq: int, skv: int, seq_len_q: np.ndarray | None, seq_len_kv: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high), int64 [B, R] (B: the lengths' batch, else 1): key j is visible to row rows[r] of batch b
        when low[b, r] <= j < high[b, r]; padding applied (a padding row's range is empty)."""
        lq = np.full(1, sq, np.int64) if seq_len_q is None else np.asarray(seq_len_q, np.int64)
        lkv = np.full(1, skv, np.int64) if seq_len_kv is None else np.asarray(seq_len_kv, np.int64)
        lq, lkv = np.broadcast_arrays(lq, lkv)
        shape = (lq.shape[0], rows.shape[0])
        diagonal = np.broadcast_to(rows[None, :] + ((lkv - lq)[:, None] if self.bottom_right else 0), shape)
        high = np.broadcast_to(lkv[:, None], shape).astype(np.int64)
        low = np.zeros(shape, np.int64)
        if self.right is not None:
            high = np.minimum(high, diagonal + self.right + 1)
        if self.left is not None:
            low = np.maximum(low, diagonal - self.left + 1)
        high = np.where(rows[None, :] < lq[:, None], np.maximum(high, 0), 0)
        return np.clip(low, 0, None), high

    def hidden(
        self,
        rows: np.ndarray,
        keys: int,
        sq: int,
        skv: int,
        seq_len_q: np.ndarray | None,
        seq_len_kv: np.ndarray | None,
    ) -> np.ndarray | None:
        """Bool [B, R, keys]: True where key j (of the first ``keys``) is hidden from row rows[r] of batch b
        (``visible``'s range, padding applied); None where nothing is (no bound and no lengths)."""
        if not self.masks and seq_len_q is None and seq_len_kv is None:
            return None
        low, high = self.visible(rows, sq, skv, seq_len_q, seq_len_kv)
        j = np.arange(keys)
        return (j < low[:, :, None]) | (j >= high[:, :, None])


def check_band(where: str, op: Any) -> None:
    """A left bound of at least 1 (a window holds its diagonal's key) and bounds inside +-2^31."""
    for name in ("left_bound", "right_bound"):
        value = getattr(op, name)
        if value is not None and not -BOUND_LIMIT < value < BOUND_LIMIT:
            raise GraphError(f"{where}: {name} {value} is outside (-2^31, 2^31)")
    if op.left_bound is not None and op.left_bound < 1:
        raise GraphError(f"{where}: left_bound {op.left_bound}; a window holds at least its diagonal's key (>= 1)")


def block_scores(skv: int) -> int:
    """The most float64 scores one reference block holds: the budget, or one row of keys where that is longer."""
    return max(BLOCK_SCORES, skv)


def varlen_traits(op: Any) -> tuple[tuple[str, Any], ...]:
    padding = op.seq_len_q is not None or op.seq_len_kv is not None
    raggeds = ragged.ragged_ports(op)
    return (("padding", padding), ("ragged", raggeds))


def varlen_copy_bytes(op: Any, inputs: Mapping[str, Tensor]) -> int:
    """float64 copies the reference makes: padding zeroed or a ragged layout unpacked, per tensor."""
    if op.seq_len_q is None and op.seq_len_kv is None:
        return 0
    return 8 * sum(inputs[p].size for p in ("q", "k", "v", "o", "d_o") if p in inputs) * 2


@attrs.frozen
class Sdpa(Op):
    kind: ClassVar[str] = "sdpa"
    table: ClassVar[str] = "SdpaAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("q", "k", "v", "bias", *VARLEN_PORTS)
    output_ports: ClassVar[tuple[str, ...]] = ("o", "stats")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("q", "uid"),
        ("k", "uid"),
        ("v", "uid"),
        ("bias", "uid?"),
        ("o", "uid"),
        ("stats", "uid?"),
        ("attn_scale", "f64"),
        ("use_causal_mask", "bool"),
        ("generate_stats", "bool"),
        *VARLEN_FIELDS,
        *BAND_FIELDS,
    )
    key_attributes: ClassVar[tuple[str, ...]] = (
        "use_causal_mask",
        "diagonal_bottom_right",
        "left_bound",
        "right_bound",
    )

    q: int
    k: int
    v: int
    o: int
    attn_scale: float
    bias: int | None = None
    stats: int | None = None
    use_causal_mask: bool = False
    generate_stats: bool = False
    seq_len_q: int | None = None
    seq_len_kv: int | None = None
    q_ragged_offset: int | None = None
    k_ragged_offset: int | None = None
    v_ragged_offset: int | None = None
    o_ragged_offset: int | None = None
    diagonal_bottom_right: bool = False
    left_bound: int | None = None
    right_bound: int | None = None

    probability_weighted: ClassVar[Mapping[str, str]] = {"o": "v"}
    score_operands: ClassVar[tuple[str, ...]] = ("q", "k")

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """Scores sum D products; each output row then sums over Skv keys."""
        return max(tensors["q"].dims[3], tensors["k"].dims[2])

    def score_terms(self, tensors: Mapping[str, Tensor]) -> int:
        return tensors["q"].dims[3]

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Multiply-adds of q k^T and p v over every (query, key) pair."""
        q, k, v = tensors["q"], tensors["k"], tensors["v"]
        return q.dims[0] * q.dims[1] * q.dims[2] * k.dims[2] * (q.dims[3] + v.dims[3]) + q.size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        q = inputs["q"]
        b, hq, sq, _, dv = attention_dims(f"sdpa(q='{q.name}')", inputs, self.attn_scale)
        dims = {"o": (b, hq, sq, dv)}
        if self.generate_stats:
            dims["stats"] = (b, hq, sq, 1)
        return dims

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        where = f"sdpa '{outputs['o'].name}'"
        require_float(where, {p: t for p, t in {**inputs, **outputs}.items() if p not in VARLEN_PORTS})
        check_band(where, self)
        ragged.check_varlen(where, inputs, {**inputs, **outputs}, RAGGED_LENGTHS)
        ragged.check_constant_places(where, {**inputs, **outputs}, outputs, RAGGED_LENGTHS)

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        """Padding and ragged ports choose code paths: a kernel without them must not be picked."""
        return (*super().key_traits(tensors), *varlen_traits(self))

    def unspecified(self, values: Mapping[str, np.ndarray], tensors: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
        return ragged.unspecified_outputs(values, tensors, {"o": ("o", "seq_len_q"), "stats": (None, "seq_len_q")})

    def random_inputs(
        self, tensors: Mapping[str, Tensor], rng: np.random.Generator, given: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        return ragged.random_varlen(tensors, rng, RAGGED_LENGTHS, given)

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """The reference's float64 score blocks (a score block, its exps, the product) and its unpacked copies."""
        return 3 * 8 * block_scores(inputs["k"].dims[2]) + varlen_copy_bytes(self, inputs)

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        return STATS_DTYPE if port == "stats" else None

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """o in q's layout (BSHD stays BSHD); stats packed."""
        return packed_in_order_of(inputs["q"], dims) if port == "o" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        q, k, v = graph.tensor("q", (1, 4, 5, 8)), graph.tensor("k", (1, 2, 7, 8)), graph.tensor("v", (1, 2, 7, 3))
        bias = graph.tensor("bias", (1, 1, 5, 7))
        for t in graph.sdpa(q, k, v, 0.35, bias, use_causal_mask=True, generate_stats=True, name="sdpa"):
            t.set_output(True)
        return graph.nodes[-1]
