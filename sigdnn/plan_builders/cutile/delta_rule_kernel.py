"""The chunked gated delta rule (gdn, kda) as cuTile kernels' text: the forward in three launches (gdn's four at bf16
products), the backward in six (kda's in seven).

Within a chunk of ``C`` tokens (rows i, j; b the cumulative log decay from
the chunk's start, b_L at its last token; k, q after the l2 norm and scale):

    KK_ij = sum_c k_ic k_jc exp(b_ic - b_jc)    (i > j)       the decayed key products
    QK_ij = sum_c q_ic k_jc exp(b_ic - b_jc)    (i >= j)
    T = (I + diag(beta) KK)^-1                                  the WY representation:
    U = T diag(beta) (V - (exp(b) * K) h)                       each token's correction u
      = U0 - W h,  W = T diag(beta) (exp(b) * K),  U0 = T diag(beta) V   (the backward's form)
    O = (exp(b) * Q) h + QK U
    h <- diag(exp(b_L)) h + (exp(b_L - b) * K)^T U

Every exponent above is <= 0 (pairs i >= j only; b never increases), so no
decay overflows however strong. For gdn b is one column and the pair
factors one [C, C] matrix; for kda they go through a reference row per
level of the chunk's halving (``_level_products``, and in reverse
``_level_pair_gradients``).
T comes from recursion on halves (16 x 16 diagonal blocks inverted by
doubling, then joined up to 64 x 64: ``_inverse``). Rows past the
sequence's end read 0 (g = 0, beta = 0, k = 0), so they leave the state and
the other rows unchanged and are not stored.

The forward splits what needs no state from what does, as
flash-linear-attention's chunked kernels do: ``chunks_source`` (grid: chunk
slots x heads) forms every chunk's QK and T at once, in parallel however
few the sequences; ``forward_source`` (grid: sequences x heads x value
blocks on one axis, the longest sequences first: ``order_source``,
``walk_grid``) walks each sequence's chunks carrying h, with the products
that involve h (and QK, T) on that serial path: U from T there costs one
[C, C] x [C, VW] product more than U0 - W h, and the workspace holds two
[C, C] arrays instead of W [C, K], U0 [C, V] and QK. For gdn at bf16 products
``ready_source`` stores the walk's other operands (e^b K, e^b Q, the keys
decayed to the chunk's end) and the walk reads them, keeping only the
products with h and U on its serial path. Chunk slot start // C + n
holds chunk 0 of sequence n (distinct for every chunk of the batch: at most
T // C + N + 1 slots); a slot's block finds its sequence from ``cu`` on
the device (``_find_sequence``: no host-side chunk table, no host sync). The
backward runs the chunk kernel (storing W, U0, QK, T and KK), a forward walk saving each
chunk's start state (``states_source``), a reverse walk saving d(state) at
each chunk's end (``reverse_source``), then every chunk's gradients at once,
a block per chunk slot, head and block of value columns, each handing its
share of the sums over V to the workspace (``gradients_source``), and last
the pair gradients and dq, dk, dg and dbeta, a block per chunk slot and head
(``pairs_source``).
"""

from __future__ import annotations

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.ops.linear_attention import L2NORM_EPS
from sigdnn.plan_builders.cutile.row_kernel_source import KernelHints
from sigdnn.plan_builders.cutile.source import KernelSource

CHUNK = 64
VALUE_BLOCK = 64  # value columns a forward block carries of the state, where V allows a split
KEY_BLOCK = 64  # key columns a block of kda's pair launch takes, where K allows a split
# 8 worker warps share the [C, K] tiles where cuTile's default 4 held them in half the threads, and spilled (sm_90
# cubins, K = V = 128, TF32: kda's forward chunk kernel 1,400 -> 576 B a thread, its walk 1,584 -> 264; gdn's 784 -> 40
# and 344 -> 0; the backward's chunk kernel, state walks and pair launch 2-60x fewer spill instructions, docs/experiments.md)
WIDE_HINTS = KernelHints(num_worker_warps=8)
DEFAULT_HINTS = KernelHints()  # cuTile's own choice: the gradients kernel spills more with 8 (gdn 546 -> 1,353)
# two blocks an SM for gdn's forward chunk kernel with bf16 products: each block waits on its own loads and a chain
# of small products, and 128 registers a thread cost 95 spill instructions (sm_90 cubins; 246 registers and none at
# one block). H100, T = 32,768 in 64 sequences, 16 heads, K = V = 128: the forward 2.26 / 2.25 -> 2.03 / 1.95 ms in
# two pairs (docs/experiments.md). kda's and TF32's chunk kernels do not fit two blocks: cuTile keeps one.
TWO_BLOCK_HINTS = KernelHints(occupancy=2, num_worker_warps=8)


@attrs.frozen
class DeltaRuleShape:
    heads: int
    kd: int  # K
    vd: int  # V
    per_channel: bool  # kda's gate [T, H, K]; gdn's [T, H]
    l2norm: bool
    scale: float
    initial_state: bool
    final_state: bool
    chunk: int = CHUNK
    products: str = "float32"  # the products' operands (not the gate's cumulative sums'): see PRODUCTS
    search_steps: int = 1  # N.bit_length(): a chunk slot's search over cu (``_find_sequence``) covers 2^this > N

    @property
    def kp(self) -> int:
        return 1 << max(0, self.kd - 1).bit_length()

    @property
    def vp(self) -> int:
        return 1 << max(0, self.vd - 1).bit_length()

    @property
    def value_width(self) -> int:
        """Value columns of h a serial walk's block carries."""
        return self.vp // self.value_blocks

    @property
    def key_blocks(self) -> int:
        """kda's pair launch's blocks a (chunk slot, head), each taking KEY_BLOCK key columns: its pair gradients go
        channel by channel, and [C, 64] tiles spilled half what [C, 128] ones did (sm_90 cubins)."""
        return max(1, self.kp // KEY_BLOCK) if self.per_channel else 1

    @property
    def forward_value_blocks(self) -> int:
        """The forward walk's blocks a (sequence, head): with bfloat16 products one carries all of V up to 128 (its
        operand tiles take half of TF32's registers; H100, gdn at T = 32,768 in 64 sequences, K = V = 128: 2.45 ms
        against 3.04 with two blocks of 64, and 4.56 with four of 32), else ``value_blocks``."""
        return 1 if self.products == "bfloat16" and self.vp <= 2 * VALUE_BLOCK else self.value_blocks

    @property
    def ready_operands(self) -> bool:
        """Whether the forward's walk reads its product operands ready-made in bf16 (QK and T from the chunk kernel,
        e^b K, e^b Q and the carried keys from ``ready_source``): at bf16 products ``dot`` rounds them to bf16
        anyway, so the walk's products come out the same, and its serial path keeps only the products with h and U
        (sm_90 cubins as launched, K = V = 128: gdn's walk 0 spill instructions and 1,424 instructions against 195
        and 4,368). gdn only: kda's ran 6% slower so (H100, 4.64-4.69 ms against 4.39-4.41; its launch forms b by
        two TF32 MMAs and stores a decay a key channel), while gdn's forward ran 1.86 against 1.88-1.91 ms
        (docs/experiments.md)."""
        return self.products == "bfloat16" and not self.per_channel

    @property
    def value_blocks(self) -> int:
        """The forward's blocks a (sequence, head), each carrying VALUE_BLOCK columns of h: more blocks on the
        serial path."""
        return max(1, self.vp // VALUE_BLOCK)


def _decay_matrix() -> list[str]:
    """gdn's pair decays exp(b_i - b_j) for i >= j (0 above the diagonal, where the exponent would be positive)."""
    return ["diff = ct.where(lower, b - ct.transpose(b), 0.0)", "decay = ct.where(lower, ct.exp(diff), 0.0)"]


def _pair_products(s: DeltaRuleShape, *, backward: bool) -> list[str]:
    """Lines computing KK (strictly lower) and QK (lower, diagonal included) for one chunk (of the ``backward``'s
    chunk kernel or the forward's)."""
    if not s.per_channel:
        return [
            *_decay_matrix(),
            "kk = ct.where(strict, dot(kt, ct.transpose(kt), zero_cc) * decay, 0.0)",
            "qk = dot(qt, ct.transpose(kt), zero_cc) * decay",
        ]
    return [
        "pair_rows = ct.reshape(steps, (C, 1))",
        "kk = zero_cc",
        "qk = ct.where(pair_rows == ccols2, ct.sum(qt * kt, axis=1, keepdims=True), 0.0)",
        f"for level in range({s.chunk.bit_length() - 1}):",
        *("    " + line for line in _level_products(s, level_selection(s, backward=backward))),
    ]


def _level_products(s: DeltaRuleShape, selection: str) -> list[str]:
    """kda's pair decays exp(b_ic - b_jc) depend on the channel, so no [C, C] decay matrix multiplies a product of
    keys. Every pair i > j of a chunk has a highest bit ``half`` in which i and j differ: then both lie in one block
    of 2 half rows, i in its upper half, j in its lower, and with r the first row of that upper half
    exp(b_i - b_j) = exp(b_i - b_r) exp(b_r - b_j), both factors <= 1 (b never increases), each folded into its
    side's keys: one [C, K] x [K, C] product a level (half = C / 2, ..., 1) serves all its pairs. b_r comes exact
    by one-hot ``selection`` MMAs (``_level_decays``). The keys go LEVEL_KEYS columns at a time (the forward's chunk
    kernel at K = 128 spilled 1,040 B a thread on whole [C, 128] tiles, 536 on halves: sm_90 cubins)."""
    parts = max(1, s.kp // LEVEL_KEYS)
    lines = [*_level_setup(selection), "kk_level = zero_cc", "qk_level = zero_cc"]
    for part in range(parts):
        lines += [
            f"bp = ct.extract(b, (0, {part}), (C, KP // {parts}))",
            f"kp = ct.extract(kt, (0, {part}), (C, KP // {parts}))",
            f"qp = ct.extract(qt, (0, {part}), (C, KP // {parts}))",
            *_level_decays("bp", f"KP // {parts}", selection),
            "earlier = kp * ct.where(upper, 0.0, e)",
            "kk_level = dot(kp * later, ct.transpose(earlier), kk_level)",
            "qk_level = dot(qp * later, ct.transpose(earlier), qk_level)",
        ]
    return [
        *lines,
        "kk = kk + ct.where(same_block, kk_level, 0.0)",
        "qk = qk + ct.where(same_block, qk_level, 0.0)",
    ]


def level_selection(s: DeltaRuleShape, *, backward: bool) -> str:
    """The MMA kind of a level's reference-row selection, exact either way: bfloat16 (twice TF32's rate) in the
    backward's chunk kernel and pair launch at bf16 products, TF32 elsewhere. sm_90 cubins as cuTile's launch
    specializes them (stride 1, sizes divisible by 16), kda at K = V = 128: with bf16 the backward's chunk kernel
    624 -> 0 spill instructions (mma.sync -> warpgroup MMAs), its pair launch 74 -> 20; the forward's chunk kernel
    0 -> 152 (its level loop unrolled); at TF32 products the backward's chunk kernel does not compile with bf16
    selections (tileiras, cuda-tile 1.7). docs/experiments.md."""
    return "bfloat16" if backward and s.products == "bfloat16" else "tfloat32"


def _level_setup(selection: str) -> list[str]:
    """A level's half (the highest bit in which its pairs' rows differ), each row's half of its block and reference
    row, the one-hot ``selection`` of that row, and the pairs in one block."""
    return [
        "half = (C // 2) >> level",
        "upper = (pair_rows // half) % 2 == 1",
        "ref_row = pair_rows - pair_rows % (2 * half) + half",
        f"select = ct.astype(ct.where(ccols2 == ref_row, 1.0, 0.0), ct.{selection})",
        "same_block = pair_rows // (2 * half) == ccols2 // (2 * half)",
    ]


def _level_decays(b: str, width: str, selection: str) -> list[str]:
    """``e``: the level's decays of ``b``'s ``width`` columns, to each upper row from its reference row and from
    each lower row to it; ``later``: e on the upper rows. b_first, the reference row's b, comes exact from three
    one-hot ``selection`` MMAs (bfloat16 or TF32) of b's parts (either keeps float32's exponents and 8 or 11 of its
    24 bits, so b = bh + bm + bl with each part exact, and each MMA adds one part unrounded): then no exponent is
    above 0 however strong the gates (one MMA of b rounded to TF32 put some 2^-11 |b| above it, e^88 and overflow
    past |b| = 2^18)."""
    return [
        f"bh = ct.astype({b}, ct.{selection})",
        f"b_rest = {b} - ct.astype(bh, ct.float32)",
        f"bm = ct.astype(b_rest, ct.{selection})",
        f"bl = ct.astype(b_rest - ct.astype(bm, ct.float32), ct.{selection})",
        f"b_first = ct.mma(select, bh, ct.mma(select, bm, ct.mma(select, bl, ct.full((C, {width}), 0.0, dtype=ct.float32))))",
        f"e = ct.exp(ct.where(upper, {b} - b_first, b_first - {b}))",
        "later = ct.where(upper, e, 0.0)",
    ]


LEVEL_KEYS = 64  # key columns a level's products take at a time


def _tokens(length: str, width: str = "K") -> str:
    """T from ``length``'s first dimension, ``width`` elements a token and head: T is no constant of the text, so
    one kernel serves every T."""
    return f"tokens = {length}.shape[0] // (H * {width})"


def _bounds(index: str) -> list[str]:
    """Sequence ``index``'s tokens [start, stop), read from cu on the device and clamped to [0, T], so hostile
    boundaries cost at most T tokens a block."""
    return [
        f"start = ct.minimum(ct.maximum(ct.gather(cu, {index}), 0), tokens)",
        f"stop = ct.minimum(ct.maximum(ct.gather(cu, {index} + 1), start), tokens)",
        "chunks = ct.cdiv(stop - start, C)",
    ]


ALL_KEYS = "ct.arange(KP, dtype=ct.int32)"  # a block's key columns where it takes all of K


def _indices(values: str, keys: str = ALL_KEYS) -> list[str]:
    """Index tiles and masks; ``values``: the block's value columns (VW of them), ``keys`` its key columns (KP)."""
    return [
        "steps = ct.arange(C, dtype=ct.int32)",
        f"kcols = {keys}",
        f"vcols = {values}",
        "kcols2 = ct.reshape(kcols, (1, KP))",
        "vcols2 = ct.reshape(vcols, (1, VW))",
        "ccols2 = ct.reshape(steps, (1, C))",
        "kin2 = kcols2 < K",
        "vin2 = vcols2 < V",
        "lower = ct.reshape(steps, (C, 1)) >= ct.reshape(steps, (1, C))",
        "ones_below = ct.where(lower, 1.0, 0.0)",
        "zero_cv = ct.full((C, VW), 0.0, dtype=ct.float32)",
    ]


LAST_ROW = "last = ct.reshape(steps == C - 1, (C, 1))"  # the chunk's last row


WALK_BLOCKS = "(VP // VW)"  # a serial walk's blocks a (sequence, head): one a block of VW value columns


def _sequence_setup(values: str, length: str = "q", width: str = "K", last_row: bool = True) -> list[str]:
    """A serial walk's block: its sequence, head and value block (``walk_grid``), T from ``length`` (``width``
    elements a token and head), index tiles, the chunk's last row where the walk forms its decays (``last_row``)
    and its state's elements."""
    return [
        "walk = ct.bid(0)",
        f"n = ct.gather(order, walk // (H * {WALK_BLOCKS}))",
        f"head = walk // {WALK_BLOCKS} % H",
        _tokens(length, width),
        *_bounds("n"),
        *_indices(values),
        *([LAST_ROW] if last_row else []),
        "state_at = ((n * H + head) * K + ct.reshape(kcols, (KP, 1))) * V + vcols2",
        "state_in = (ct.reshape(kcols, (KP, 1)) < K) & vin2",
    ]


def _slot_setup(s: DeltaRuleShape, values: str, keys: str = ALL_KEYS) -> list[str]:
    """A (chunk slot, head) block's sequence n, the last whose slot start_n // C + n is <= the block's
    (``_find_sequence``); ``mine`` is 1 where the slot holds one of n's chunks (``chunk``), 0 in a gap. ``values``:
    the block's value columns, ``keys`` its key columns."""
    return [
        "slot = ct.bid(0)",
        "head = ct.bid(1)",
        _tokens("k"),
        *_find_sequence(s),
        *_bounds("n"),
        "chunk = slot - (start // C + n)",
        "mine = ct.where((chunk >= 0) & (chunk < chunks), 1, 0)",
        *_indices(values, keys),
        "zero_ck = ct.full((C, KP), 0.0, dtype=ct.float32)",
        "strict = ct.reshape(steps, (C, 1)) > ct.reshape(steps, (1, C))",
        "zero_cc = ct.full((C, C), 0.0, dtype=ct.float32)",
    ]


COUNTED = 1024  # sequences up to which a chunk slot's block finds its own by counting, past it by binary search


def _find_sequence(s: DeltaRuleShape) -> list[str]:
    """``n``, the last sequence whose first chunk slot start_n // C + n is <= the block's ``slot``. Up to COUNTED
    sequences by one load of every start and a count (the slots are non-decreasing in n for any cu a batch holds,
    and a hostile cu still gives some n in [0, N)); past it by binary search, N.bit_length() steps of one load each
    (``search_steps``), a chain of dependent loads at the start of every block."""
    sequences = 1 << s.search_steps  # > N
    if sequences <= COUNTED:
        return [
            f"seqs = ct.arange({sequences}, dtype=ct.int32)",
            "listed = seqs < cu.shape[0] - 1",
            "firsts = ct.minimum(ct.maximum(ct.gather(cu, seqs, mask=listed), 0), tokens) // C + seqs",
            "n = ct.maximum(ct.sum(ct.where(listed & (firsts <= slot), 1, 0)) - 1, 0)",
        ]
    return ["n = slot * 0", "hi = n + (cu.shape[0] - 1)", *(SEARCH_STEP * s.search_steps)]


SEARCH_STEP = [
    "mid = (n + hi) // 2",
    "first = ct.minimum(ct.maximum(ct.gather(cu, mid), 0), tokens) // C + mid",
    "n = ct.where(first <= slot, mid, n)",
    "hi = ct.where(first <= slot, hi, mid)",
]  # one step of the binary search for a chunk slot's sequence (``_find_sequence``)


def _rows() -> list[str]:
    """One chunk's rows (the chunk ``chunk`` of the block's sequence) and their elements' flat positions."""
    return [
        "rows = start + chunk * C + steps",
        "valid = rows < stop",
        "rows2 = ct.reshape(rows, (C, 1))",
        "valid2 = ct.reshape(valid, (C, 1))",
        "qk_at = rows2 * (H * K) + head * K + kcols2",
        VALUE_AT,
    ]


def _keys(s: DeltaRuleShape, *, scan: bool = False) -> list[str]:
    """The chunk's keys (0 past the sequence; normalized) and b, the cumulative log decay from its start."""
    return [*_normalized_keys(s), *_cumulative_gate(s, scan=scan)]


def _normalized_keys(s: DeltaRuleShape, *, whole_rows: bool = False) -> list[str]:
    """The chunk's keys in the block's KP columns (0 past the sequence), normalized over ``whole_rows`` of K where
    the block takes part of them."""
    norm = [*_inverse_norm("rk", "kr", "k", whole_rows), "kt = kr * rk"]
    return [
        "kr = ct.astype(ct.gather(k, qk_at, mask=valid2 & kin2), ct.float32)",
        *(norm if s.l2norm else ["kt = kr"]),
    ]


WHOLE_ROW = "krow2 = ct.reshape(ct.arange(KROW, dtype=ct.int32), (1, KROW))"  # all of K's columns, padded


def _inverse_norm(name: str, raw: str, array: str, whole_rows: bool) -> list[str]:
    """``name`` = 1 / |row| of the l2 norm, from the block's tile ``raw``, or with ``whole_rows`` from the whole row
    of K read again from ``array`` (``WHOLE_ROW``'s columns), where the block takes KP of them."""
    if not whole_rows:
        return [f"{name} = ct.rsqrt(ct.sum({raw} * {raw}, axis=1, keepdims=True) + {L2NORM_EPS!r})"]
    row = "rows2 * (H * K) + head * K + krow2"
    return [
        f"whole = ct.astype(ct.gather({array}, {row}, mask=valid2 & (krow2 < K)), ct.float32)",
        f"{name} = ct.rsqrt(ct.sum(whole * whole, axis=1, keepdims=True) + {L2NORM_EPS!r})",
    ]


def _cumulative_gate(s: DeltaRuleShape, *, scan: bool = False) -> list[str]:
    """The chunk's gate and b, its cumulative sums from the chunk's start: by the row sums' MMAs (``_row_sums``),
    or with ``scan`` by cuTile's float32 scan, which the gradients kernel takes:
    there kda's two TF32 MMAs of the gate turned every product of the kernel into mma.sync (HMMA) instead of
    warpgroup MMAs and it spilled 3,624 B a thread against 2,728 (gdn's 1,320 against 1,240; sm_90 cubins), while
    the scan in the chunk and pair kernels spilled more (kda's 2,720 -> 4,360 B and 3,872 -> 7,712)."""
    gate = (
        "gt = ct.astype(ct.gather(g, rows2 * (H * K) + head * K + kcols2, mask=valid2 & kin2), ct.float32)"
        if s.per_channel
        else "gt = ct.reshape(ct.astype(ct.gather(g, rows * H + head, mask=valid), ct.float32), (C, 1))"
    )
    return [gate, *(["b = ct.cumsum(gt, axis=0)"] if scan else _row_sums(s, "b", "ones_below", "gt"))]


def _row_sums(s: DeltaRuleShape, name: str, ones: str, tile: str) -> list[str]:
    """``name`` = ``ones`` @ ``tile``: sums over the chunk's rows by a 0 / 1 matrix (b, the gate's cumulative sums,
    and the backward's reverse ones). gdn's [C, 1] as one float32 MMA. kda's [C, K] as two TF32 MMAs of the
    tile's high and low TF32 parts (0 and 1 are exact in TF32; each term loses about 2^-22 of itself, a float32
    sum's order): the float32 MMA runs on no tensor core, and at [C, C] x [C, K] it spilled (sm_90 cubins, kda's
    chunk kernel: 3,968 B a thread with it, 2,592 B with the two TF32 MMAs)."""
    if not s.per_channel:
        return [f"{name} = ct.mma({ones}, {tile}, ct.full((C, 1), 0.0, dtype=ct.float32))"]
    return [
        f"high = ct.astype({tile}, ct.tfloat32)",
        f"low = ct.astype({tile} - ct.astype(high, ct.float32), ct.tfloat32)",
        f"exact_ones = ct.astype({ones}, ct.tfloat32)",
        f"{name} = ct.mma(exact_ones, high, ct.mma(exact_ones, low, ct.full((C, KP), 0.0, dtype=ct.float32)))",
    ]


B_LAST = "b_last = ct.sum(ct.where(last, b, 0.0), axis=0, keepdims=True)"  # b_L, the log decay over the whole chunk


def _decay_to_chunk_end() -> list[str]:
    """b_L and each key decayed from its token to the chunk's end."""
    return [B_LAST, "carried = kt * ct.exp(b_last - b)"]


def _carry(s: DeltaRuleShape) -> list[str]:
    """The state after the chunk."""
    rows = "KP" if s.per_channel else "1"
    return [
        *_decay_to_chunk_end(),
        f"state = state * ct.reshape(ct.exp(b_last), ({rows}, 1))"
        " + dot(ct.transpose(carried), u, ct.full((KP, VW), 0.0, dtype=ct.float32))",
    ]


def _queries(s: DeltaRuleShape, *, whole_rows: bool = False) -> list[str]:
    """The chunk's queries in the block's KP columns, normalized (over ``whole_rows`` of K where the block takes
    part of them) and scaled."""
    norm = [*_inverse_norm("rq", "qr", "q", whole_rows), "qn = qr * rq"]
    return [
        "qr = ct.astype(ct.gather(q, qk_at, mask=valid2 & kin2), ct.float32)",
        *(norm if s.l2norm else ["qn = qr"]),
        f"qt = qn * {float(s.scale)!r}",
    ]


def _values() -> list[str]:
    return [_value_tile(), _beta()]


VALUE_AT = "v_at = rows2 * (H * V) + head * V + vcols2"  # the flat positions of the rows' values in the VW columns
OUTPUT_GRADIENT = "do = ct.astype(ct.gather(d_o, v_at, mask=valid2 & vin2), ct.float32)"  # dO in those columns


def _value_tile() -> str:
    """The chunk's values in the block's VW columns (0 past the sequence and past V)."""
    return "vt = ct.astype(ct.gather(v, v_at, mask=valid2 & vin2), ct.float32)"


def _beta() -> str:
    return "bt = ct.reshape(ct.astype(ct.gather(beta, rows * H + head, mask=valid), ct.float32), (C, 1))"


BASE = 16  # the diagonal blocks T's recursion inverts by doubling: ct.mma's smallest tile


def _zeros(size: int) -> str:
    return f"z{size} = ct.full(({size}, {size}), 0.0, dtype=ct.float32)"


def _inverse(s: DeltaRuleShape) -> list[str]:
    """T = (I + M)^-1, M = diag(beta) KK (strictly lower), by recursion on halves: [[A, 0], [L, B]]^-1 =
    [[A^-1, 0], [-B^-1 L A^-1, B^-1]]. Each 16 x 16 diagonal block's inverse by doubling within it (D_1 = I,
    D_2b = D_b - D_b (M on the lower-left b x b blocks of the 2b blocks) D_b), then the halves joined up to C:
    about 1/15 of the multiply-adds of doubling on whole C x C tiles (twelve products at C = 64), and a chain of
    small products where that was twelve dependent large ones. Every block is a true inverse, whose entries the
    delta rule bounds; the nilpotent series prod (I + (-M)^(2^j)) formed powers whose entries grow as C choose
    2^j with correlated keys, and float32 cancelled them (K = 1: outputs 10^4 off)."""
    lines = [
        "m = kk * bt",
        f"bi = ct.reshape(ct.arange({BASE}, dtype=ct.int32), ({BASE}, 1))",
        f"bj = ct.reshape(ct.arange({BASE}, dtype=ct.int32), (1, {BASE}))",
        _zeros(BASE),
    ]
    names = []
    for i in range(s.chunk // BASE):
        t = f"t{BASE}_{i}"
        lines += [f"mb = ct.extract(m, ({i}, {i}), ({BASE}, {BASE}))", f"{t} = ct.where(bi == bj, 1.0, 0.0)"]
        block = 1
        while block < BASE:
            lower_left = f"(bi // {2 * block} == bj // {2 * block}) & (bi // {block} > bj // {block})"
            lines.append(f"{t} = {t} - dot(dot({t}, ct.where({lower_left}, mb, 0.0), z{BASE}), {t}, z{BASE})")
            block *= 2
        names.append(t)
    size = BASE
    while len(names) > 1:
        if size > BASE:
            lines.append(_zeros(size))
        joined = []
        for p in range(len(names) // 2):
            a, b, t = names[2 * p], names[2 * p + 1], f"t{2 * size}_{p}"
            lower_left = f"ct.extract(m, ({2 * p + 1}, {2 * p}), ({size}, {size}))"
            lines += [
                f"below = -dot(dot({b}, {lower_left}, z{size}), {a}, z{size})",
                f"{t} = ct.cat((ct.cat(({a}, z{size}), 1), ct.cat((below, {b}), 1)), 0)",
            ]
            joined.append(t)
        names, size = joined, 2 * size
    return [*lines, f"inverse = {names[0]}"]


# The products' operands by compute dtype, float32 accumulation throughout: bfloat16 compute rounds them to bfloat16
# (its precision, as flash-linear-attention's dots run); float16 compute to TF32 (float16's 10 bits with float32's
# range: a state or a correction past 65,504 stays finite); float32 compute splits each into TF32 parts.
PRODUCTS = {DataType.BFLOAT16: "bfloat16", DataType.FLOAT16: "tfloat32"}  # any other compute dtype: "float32"


def products_of(compute: DataType) -> str:
    """The operand type of the products at the node's compute dtype (``PRODUCTS``)."""
    return PRODUCTS.get(compute, "float32")


def _dot_body(s: DeltaRuleShape) -> list[str]:
    """The products' MMA: one of operands rounded to bfloat16 or TF32 at a 16-bit compute dtype; for float32, three
    TF32 MMAs of the operands' high and low TF32 parts (a b = ah bh + ah bl + al bh, missing al bl: about 2^-22 of
    |a b|), since cuTile's float32 MMA runs on no tensor core and its code at K = V = 128 swamps the compiler
    (kda's backward: ptxas past 7 GB and 20 minutes)."""
    if s.products != "float32":
        return [f"    return ct.mma(ct.astype(a, ct.{s.products}), ct.astype(b, ct.{s.products}), acc)"]
    return [
        "    ah = ct.astype(a, ct.tfloat32)",
        "    bh = ct.astype(b, ct.tfloat32)",
        "    al = ct.astype(a - ct.astype(ah, ct.float32), ct.tfloat32)",
        "    bl = ct.astype(b - ct.astype(bh, ct.float32), ct.tfloat32)",
        "    return ct.mma(ah, bh, ct.mma(ah, bl, ct.mma(al, bh, acc)))",
    ]


def _module(
    s: DeltaRuleShape, prefix: str, params: str, body: list[str], value_width: int, key_width: int | None = None,
    hints: KernelHints = DEFAULT_HINTS,
) -> KernelSource:  # fmt: skip
    """The kernel module: the shape's constants (KROW: K padded, a workspace row's key columns; KP: the key columns
    a block takes, ``key_width`` where not all of KROW), ``dot`` and the kernel, with ``hints`` for the compiler."""
    header = [
        f"C = {s.chunk}",
        f"H = {s.heads}",
        f"K = {s.kd}",
        f"V = {s.vd}",
        f"KP = {key_width or s.kp}",
        f"KROW = {s.kp}",
        f"VP = {s.vp}",
        f"VW = {value_width}",
        "",
        "",
        "def dot(a, b, acc):",
        *_dot_body(s),
        "",
        "",
        hints.decorator(),
        f"def kernel({params}):",
    ]
    return KernelSource(prefix, "\n".join([*header, *("    " + line for line in body)]) + "\n")


def _initial(s: DeltaRuleShape) -> str:
    if s.initial_state:
        return "state = ct.astype(ct.gather(h0, state_at, mask=state_in), ct.float32)"
    return "state = ct.full((KP, VW), 0.0, dtype=ct.float32)"


def chunk_slots(s: DeltaRuleShape, tokens: int, sequences: int) -> int:
    """Chunk slots start // C + n of every chunk of the batch, gaps included: at most T // C + N + 1."""
    return tokens // s.chunk + sequences + 1


def work_rows(s: DeltaRuleShape, tokens: int, sequences: int) -> int:
    """Rows of the chunk kernel's workspace arrays (QK, T; the backward's W, U0 and KK): C a chunk slot and head."""
    return chunk_slots(s, tokens, sequences) * s.heads * s.chunk


QK_STORE = "ct.scatter(qk_work, at * C + ccols2, ct.astype(qk, qk_work.dtype))"
T_STORE = "ct.scatter(t_work, at * C + ccols2, ct.astype(inverse, t_work.dtype))"


def _ready_stores() -> list[str]:
    """gdn's walk operands of a chunk (rows ``at``), in the workspace's dtype: e^b K, e^b Q, the keys decayed to the
    chunk's end and the chunk's whole decay e^(b_L), one a chunk slot and head."""
    return [
        LAST_ROW,
        "eb = ct.exp(b)",
        "ct.scatter(ke_work, at * KP + kcols2, ct.astype(kt * eb, ke_work.dtype))",
        "ct.scatter(qe_work, at * KP + kcols2, ct.astype(qt * eb, qe_work.dtype))",
        *_decay_to_chunk_end(),
        "ct.scatter(kc_work, at * KP + kcols2, ct.astype(carried, kc_work.dtype))",
        "ct.scatter(decay_work, ct.full((1, 1), slot * H + head, dtype=ct.int32), ct.exp(b_last))",
    ]


# what the backward's chunk kernel stores: W and U0 (its forward walk's), QK, T and KK (its gradients kernel's)
BACKWARD_CHUNK_STORES = [
    "ct.scatter(w_work, at * KP + kcols2, dot(inverse, bt * (kt * ct.exp(b)), zero_ck))",
    "ct.scatter(u_work, at * VP + vcols2, dot(inverse, bt * vt, zero_cv))",
    QK_STORE,
    T_STORE,
    "ct.scatter(kk_work, at * C + ccols2, kk)",
]


def chunks_source(s: DeltaRuleShape, *, backward: bool) -> KernelSource:
    """Each chunk's QK and T [C, C] (in the workspace's dtype: bf16 with ``ready_operands``) into rows
    (slot * H + head) * C + i of qk_work and t_work, all the forward's walk reads of it (it forms U = T diag(beta)
    (V - (e^b K) h) itself: W [C, K] and U0 [C, V] in the workspace cost more traffic and spilled); for the
    ``backward`` W [C, KP], U0 [C, VP] and KK [C, C] into w_work, u_work and kk_work too, which its walk and
    gradients kernel read."""
    chunk = [
        *_rows(),
        *_queries(s),
        *_keys(s),
        *(_values() if backward else [_beta()]),
        *_pair_products(s, backward=backward),
        *_inverse(s),
        _chunk_rows("slot"),
        *(BACKWARD_CHUNK_STORES if backward else [QK_STORE, T_STORE]),
    ]
    body = [
        *_slot_setup(s, "ct.arange(VW, dtype=ct.int32)"),
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    params = (
        "q, k, v, g, beta, cu, w_work, u_work, qk_work, t_work, kk_work"
        if backward
        else "q, k, g, beta, cu, qk_work, t_work"
    )
    return _module(s, "delta_rule_chunks", params, body, s.vp, hints=chunk_hints(s, backward=backward))


def ready_source(s: DeltaRuleShape) -> KernelSource:
    """gdn's walks' ready-made operands of every chunk slot and head (``_ready_stores``), a launch of their own:
    stored from the chunk kernel they cost it 900 spill instructions at two blocks an SM (none without; sm_90
    cubins as launched, K = V = 128), and the walks' serial paths are what they shorten. cuTile's default warps:
    at 8 it spilled 330."""
    chunk = [*_rows(), *_queries(s), *_keys(s), _chunk_rows("slot"), *_ready_stores()]
    body = [
        *_slot_setup(s, "ct.arange(VW, dtype=ct.int32)"),
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    return _module(s, "delta_rule_ready", "q, k, g, cu" + READY_PARAMS, body, s.vp, hints=DEFAULT_HINTS)


def chunk_hints(s: DeltaRuleShape, *, backward: bool) -> KernelHints:
    """The chunk kernel's hints: two blocks an SM for gdn's forward with bfloat16 products (``TWO_BLOCK_HINTS``),
    else 8 worker warps."""
    two = not backward and not s.per_channel and s.products == "bfloat16"
    return TWO_BLOCK_HINTS if two else WIDE_HINTS


def _chunk_rows(slot: str) -> str:
    """``at``: the workspace rows of chunk slot ``slot``'s C tokens for this head."""
    return f"at = ({slot} * H + head) * C + ct.reshape(steps, (C, 1))"


SEQUENCE_SLOT = "((start + chunk * C) // C + n)"  # a (sequence, head) block's chunk ``chunk`` as a chunk slot


def _value_block() -> str:
    """A gradients block's value columns: block bid(2) of VW."""
    return "ct.bid(2) * VW + ct.arange(VW, dtype=ct.int32)"


def _walk_value_block() -> str:
    """A serial walk's value columns: its block's VW of them (``walk_grid``)."""
    return f"walk % {WALK_BLOCKS} * VW + ct.arange(VW, dtype=ct.int32)"


def walk_grid(sequences: int, heads: int, blocks: int) -> tuple[int, int, int]:
    """A serial walk's blocks on one axis, rank r of ``order`` (``order_source``) the slowest, then the head, then
    the value block: the GPU starts blocks in index order, so the longest sequences' walks start first and the
    short ones fill in behind them. A greedy schedule of gdn at T = 32,768 in 64 sequences and 16 heads on 132 SMs,
    one block each and a chunk a turn: 84 turns sequence-major (the grid before), 76 head-major, 67 longest first,
    against a bound of 66."""
    return (sequences * heads * blocks, 1, 1)


ORDER_LIMIT = 4096  # sequences ranked by length: the ranking is N^2 comparisons; past it the walks take them in turn
RANKED = 64  # sequences a block of the ranking takes, and compares at a time


def order_source(sequences: int) -> KernelSource:
    """``order``, the batch's sequences longest first (ties by index: a permutation of 0 .. N - 1 whatever ``cu``
    holds), which the serial walks take in turn: each block ranks RANKED sequences against all N, at most
    ``ORDER_LIMIT`` of them; past that the identity. Lengths as the walks clamp their boundaries, but for T: a
    start below 0 is 0, a stop below its start is the start (no difference overflows)."""
    ranking = [
        "first = ct.maximum(ct.gather(cu, own, mask=inside), 0)",
        "length = ct.maximum(ct.gather(cu, own + 1, mask=inside), first) - first",
        f"rank = ct.full(({RANKED}, 1), 0, dtype=ct.int32)",
        f"for step in range(ct.cdiv(count, {RANKED})):",
        f"    other = ct.reshape(step * {RANKED} + ct.arange({RANKED}, dtype=ct.int32), (1, {RANKED}))",
        "    there = other < count",
        "    start = ct.maximum(ct.gather(cu, other, mask=there), 0)",
        "    theirs = ct.maximum(ct.gather(cu, other + 1, mask=there), start) - start",
        "    ahead = there & ((theirs > length) | ((theirs == length) & (other < own)))",
        "    rank = rank + ct.sum(ct.where(ahead, 1, 0), axis=1, keepdims=True)",
        "ct.scatter(order, rank, own, mask=inside)",
    ]
    body = [
        "count = cu.shape[0] - 1",
        f"own = ct.reshape(ct.bid(0) * {RANKED} + ct.arange({RANKED}, dtype=ct.int32), ({RANKED}, 1))",
        "inside = own < count",
        *(["ct.scatter(order, own, own, mask=inside)"] if sequences > ORDER_LIMIT else ranking),
    ]
    text = "\n".join(["@ct.kernel", "def kernel(cu, order):", *("    " + line for line in body)])
    return KernelSource("delta_rule_order", text + "\n")


def order_blocks(sequences: int) -> int:
    """The ranking's blocks: RANKED sequences each."""
    return -(-sequences // RANKED)


def forward_source(s: DeltaRuleShape) -> KernelSource:
    """The serial walk of a (sequence, head, value block): U = T diag(beta) (V - (e^b K) h) from the chunk kernel's
    T, the outputs, the state passed on; with ``ready_operands`` every operand but h, V and beta read ready-made."""
    if s.ready_operands:
        return _ready_forward_source(s)
    chunk = [
        *_rows(),
        *_queries(s),
        *_keys(s),
        *_values(),
        _chunk_rows(SEQUENCE_SLOT),
        "eb = ct.exp(b)",
        "e = vt - dot(kt * eb, state, zero_cv)",
        "u = dot(ct.gather(t_work, at * C + ccols2), bt * e, zero_cv)",
        "qk = ct.gather(qk_work, at * C + ccols2)",
        "out = dot(qt * eb, state, dot(qk, u, zero_cv))",
        "ct.scatter(o, v_at, ct.astype(out, o.dtype), mask=valid2 & vin2)",
        *_carry(s),
    ]
    params = "q, k, v, g, beta, cu, order, h0, qk_work, t_work, o, ht"
    return _walk_module(s, _sequence_setup(_walk_value_block()), chunk, params)


READY_PARAMS = ", ke_work, qe_work, kc_work, decay_work"  # the ready-made operands, after QK and T


READY_CARRY = [
    f"decay = ct.gather(decay_work, ct.full((1, 1), {SEQUENCE_SLOT} * H + head, dtype=ct.int32))",
    "carried = ct.gather(kc_work, at * KP + kcols2)",
]  # a serial walk's chunk decay e^(b_L) and keys decayed to the chunk's end, read ready-made (``_ready_stores``)


STATE_UPDATE = "state = state * decay + dot(ct.transpose(carried), u, ct.full((KP, VW), 0.0, dtype=ct.float32))"


def _ready_forward_source(s: DeltaRuleShape) -> KernelSource:
    """The walk with its operands ready-made (``_ready_stores``): per chunk three products with h and two with U."""
    chunk = [
        "rows = start + chunk * C + steps",
        "valid = rows < stop",
        "rows2 = ct.reshape(rows, (C, 1))",
        "valid2 = ct.reshape(valid, (C, 1))",
        VALUE_AT,
        *_values(),
        _chunk_rows(SEQUENCE_SLOT),
        "e = vt - dot(ct.gather(ke_work, at * KP + kcols2), state, zero_cv)",
        "u = dot(ct.gather(t_work, at * C + ccols2), bt * e, zero_cv)",
        "qe = ct.gather(qe_work, at * KP + kcols2)",
        "out = dot(qe, state, dot(ct.gather(qk_work, at * C + ccols2), u, zero_cv))",
        "ct.scatter(o, v_at, ct.astype(out, o.dtype), mask=valid2 & vin2)",
        *READY_CARRY,
        STATE_UPDATE,
    ]
    params = "v, beta, cu, order, h0, qk_work, t_work" + READY_PARAMS + ", o, ht"
    return _walk_module(s, _sequence_setup(_walk_value_block(), "v", "V", last_row=False), chunk, params)


def _walk_module(s: DeltaRuleShape, setup: list[str], chunk: list[str], params: str) -> KernelSource:
    """The forward walk's kernel: ``setup``, the initial state, ``chunk`` for each chunk, the final state."""
    body = [
        *setup,
        _initial(s),
        "for chunk in range(chunks):",
        *("    " + line for line in chunk),
        *(["ct.scatter(ht, state_at, ct.astype(state, ht.dtype), mask=state_in)"] if s.final_state else []),
    ]
    return _module(s, "delta_rule_fwd", params, body, s.vp // s.forward_value_blocks, hints=walk_hints(s))


def walk_hints(s: DeltaRuleShape) -> KernelHints:
    """The hints of the forward walk, the reverse walk and the pair launch: 8 worker warps, but for gdn at a float32
    compute dtype, whose three TF32 MMAs a product went to mma.sync with 8 warps and spilled more (sm_90 cubins: the
    forward walk 5,480 B a thread against 1,528, the reverse walk 3,080 against 2,064, the pair launch 3,496 against
    1,904)."""
    return WIDE_HINTS if s.products != "float32" or s.per_channel else DEFAULT_HINTS


def _corrections() -> list[str]:
    """U = U0 - W h for the chunk at workspace rows ``at`` (this block's value columns)."""
    return ["u = ct.gather(u_work, at * VP + vcols2) - dot(ct.gather(w_work, at * KP + kcols2), state, zero_cv)"]


def _decay_matrix_pair_gradients() -> list[str]:
    """gdn's dq, dk, db from the gradients of KK (dkk, strictly lower) and QK (dqk, lower) through its [C, C] pair
    decays."""
    return [
        "a = dkk * decay",
        "a2 = dqk * decay",
        "dkt = dot(a + ct.transpose(a), kt, dot(ct.transpose(a2), qt, dkt))",
        "dqt = dot(a2, kt, dqt)",
        "p = dkk * kk + dqk * qk",
        "db = db + ct.sum(p, axis=1, keepdims=True) - ct.transpose(ct.sum(p, axis=0, keepdims=True))",
    ]


def _pair_gradients(s: DeltaRuleShape) -> list[str]:
    """dq~, dk~ and db's shares through the pair products: gdn's through the [C, C] decay matrix, with KK and QK
    read from the chunk kernel's (forming them again spilled: 3,416 B a thread against 1,944, sm_90 cubins), kda's
    through the per-channel decays by levels."""
    if s.per_channel:
        return _level_pair_gradients(s)
    return [
        _chunk_rows("slot"),
        *(f"{name} = ct.gather({PAIR_ARRAYS[name]}, at * C + ccols2)" for name in PAIR_ARRAYS),
        *_decay_matrix(),
        *_decay_matrix_pair_gradients(),
    ]


PAIR_ARRAYS = {"qk": "qk_work", "kk": "kk_work"}  # what gdn's pair kernel reads of the chunk kernel's


def _level_pair_gradients(s: DeltaRuleShape) -> list[str]:
    """kda's dq~, dk~, db from the gradients of KK (dkk, strictly lower) and QK (dqk, lower) through the per-channel
    pair decays, level by level as ``_level_products`` forms them: with E the level's decays to and from its
    reference rows (``later`` on the upper rows, ``sooner`` on the lower), KK's share is (k E)_up (k E)_low^T, so
    d(k E)_up = dKK (k E)_low, d(k E)_low = dKK^T (k E)_up (QK's likewise), and b's gradient is + dE E on the upper
    rows, - dE E on the lower: b_r, which cancels in every pair's factor, is held constant. QK's diagonal is
    q . k, decay-free."""
    selection = level_selection(s, backward=True)
    return [
        "pair_rows = ct.reshape(steps, (C, 1))",
        "dqk_diagonal = ct.sum(ct.where(pair_rows == ccols2, dqk, 0.0), axis=1, keepdims=True)",
        "dqt = dqt + dqk_diagonal * kt",
        "dkt = dkt + dqk_diagonal * qt",
        f"for level in range({s.chunk.bit_length() - 1}):",
        *("    " + line for line in [*_level_setup(selection), *_level_decays("b", "KP", selection)]),
        "    sooner = ct.where(upper, 0.0, e)",
        "    a = ct.where(same_block, dkk, 0.0)",
        "    a2 = ct.where(same_block, dqk, 0.0)",
        "    ka = kt * later",
        "    qa = qt * later",
        "    kb = kt * sooner",
        "    dka = dot(a, kb, zero_ck)",
        "    dqa = dot(a2, kb, zero_ck)",
        "    dkb = dot(ct.transpose(a), ka, dot(ct.transpose(a2), qa, zero_ck))",
        "    dkt = dkt + dka * later + dkb * sooner",
        "    dqt = dqt + dqa * later",
        "    db = db + (dka * kt + dqa * qt) * later - dkb * kb",
    ]


def _unnormalized(s: DeltaRuleShape) -> list[str]:
    """dq, dk of the raw inputs from those of q~ = scale n(q) and k~ = n(k)."""
    lines = [f"dqn = dqt * {float(s.scale)!r}"]
    if not s.l2norm:
        return [*lines, "dqr = dqn", "dkr = dkt"]
    return [
        *lines,
        "dqr = (dqn - qn * ct.sum(qn * dqn, axis=1, keepdims=True)) * rq",
        "dkr = (dkt - kt * ct.sum(kt * dkt, axis=1, keepdims=True)) * rk",
    ]


def _state_slot(slot: str) -> str:
    """The positions of chunk slot ``slot``'s [KP, VW] part of a saved state (KP x VP a slot and head)."""
    return f"(({slot} * H + head) * KP + ct.reshape(kcols, (KP, 1))) * VP + vcols2"


def states_source(s: DeltaRuleShape) -> KernelSource:
    """The backward's forward walk a (sequence, head, value block): each chunk's start state into ``saved``; with
    ``ready_operands`` the carried keys and the chunk's decay read ready-made."""
    ready = s.ready_operands
    chunk = [
        *_rows(),
        *([] if ready else _keys(s)),
        f"ct.scatter(saved, {_state_slot(SEQUENCE_SLOT)}, state)",
        _chunk_rows(SEQUENCE_SLOT),
        *_corrections(),
        *([*READY_CARRY, STATE_UPDATE] if ready else _carry(s)),
    ]
    body = [
        *_sequence_setup(_walk_value_block(), *(("beta", "1") if ready else ("k",)), last_row=not ready),
        _initial(s),
        "for chunk in range(chunks):",
        *("    " + line for line in chunk),
    ]
    inputs = "beta, cu" if ready else "k, g, cu"
    params = f"{inputs}, order, h0, w_work, u_work, saved" + READY_PARAMS * ready
    return _module(s, "delta_rule_states", params, body, s.value_width, hints=WIDE_HINTS)


def reverse_source(s: DeltaRuleShape) -> KernelSource:
    """The backward's reverse walk a (sequence, head, value block): d(state) at each chunk's end into ``dsaved``,
    carried to the chunk before through the chunk's outputs and its corrections u, and d(initial state) at the
    end. Only the products that involve d(state) or dO: the chunk's own gradients are ``gradients_source``'s."""
    ready = s.ready_operands
    rows = "KP" if s.per_channel else "1"
    formed = [
        *_queries(s),
        *_keys(s),
        _beta(),
        *_decay_to_chunk_end(),
        f"ct.scatter(dsaved, {_state_slot(SEQUENCE_SLOT)}, dstate)",
        _chunk_rows(SEQUENCE_SLOT),
        f"decay = ct.reshape(ct.exp(b_last), ({rows}, 1))",
        "qe = qt * ct.exp(b)",
        "ke = kt * ct.exp(b)",
    ]
    read = [
        _beta(),
        f"ct.scatter(dsaved, {_state_slot(SEQUENCE_SLOT)}, dstate)",
        _chunk_rows(SEQUENCE_SLOT),
        *READY_CARRY,
        "qe = ct.gather(qe_work, at * KP + kcols2)",
        "ke = ct.gather(ke_work, at * KP + kcols2)",
    ]
    chunk = [
        "chunk = chunks - 1 - back",
        *_rows(),
        *(read if ready else formed),
        OUTPUT_GRADIENT,
        "qk = ct.gather(qk_work, at * C + ccols2)",
        "du = dot(ct.transpose(qk), do, dot(carried, dstate, zero_cv))",
        "de = bt * dot(ct.transpose(ct.gather(t_work, at * C + ccols2)), du, zero_cv)",
        "dstate = dstate * decay",
        "dstate = dstate + dot(ct.transpose(qe), do, zero_kv) - dot(ct.transpose(ke), de, zero_kv)",
    ]
    body = [
        *_sequence_setup(_walk_value_block(), *(("d_o", "V") if ready else ("q",)), last_row=not ready),
        "zero_kv = ct.full((KP, VW), 0.0, dtype=ct.float32)",
        (
            "dstate = ct.astype(ct.gather(dht, state_at, mask=state_in), ct.float32)"
            if s.final_state
            else "dstate = zero_kv"
        ),
        "for back in range(chunks):",
        *("    " + line for line in chunk),
        *(["ct.scatter(dh0, state_at, ct.astype(dstate, dh0.dtype), mask=state_in)"] if s.initial_state else []),
    ]
    inputs = "beta, cu" if ready else "q, k, g, beta, cu"
    params = f"{inputs}, order, d_o, dht, qk_work, t_work, dh0, dsaved" + READY_PARAMS * ready
    return _module(s, "delta_rule_reverse", params, body, s.value_width, hints=walk_hints(s))


def _value_block_gradients(s: DeltaRuleShape) -> list[str]:
    """Value block bid(2)'s share of the chunk's gradients, every one linear in it: dv's columns stored, and its
    share of the gradients of QK and KK, of dbeta and of the keys' and queries' (``_handed_over``) left for
    ``pairs_source`` to sum and mask. dKK through dM = -T^T dT T^T, with dT = du (beta e)^T and u = T (beta e), is
    -dy u^T (dy = T^T du): no [C, C] product of T."""
    return [
        _value_tile(),
        OUTPUT_GRADIENT,
        f"state = ct.gather(saved, {_state_slot('slot')})",
        f"dstate = ct.gather(dsaved, {_state_slot('slot')})",
        "ks = dot(kg, state, zero_cv)",
        "e = vt - ks",
        "u = dot(inverse, bt * e, zero_cv)",
        "cd = dot(carried, dstate, zero_cv)",
        "dy = dot(ct.transpose(inverse), dot(ct.transpose(qk), do, cd), zero_cv)",
        "de = bt * dy",
        "ct.scatter(dv, v_at, ct.astype(de, dv.dtype), mask=valid2 & vin2)",
        "dqk = dot(do, ct.transpose(u), zero_cc)",
        "dm = -dot(dy, ct.transpose(u), zero_cc)",
        "dkk = dm * bt",
        "dbeta = ct.sum(dy * e, axis=1, keepdims=True) + ct.sum(dm * kk, axis=1, keepdims=True)",
        *(_per_channel_key_gradients() if s.per_channel else _scalar_gate_key_gradients()),
    ]


def _scalar_gate_key_gradients() -> list[str]:
    """gdn's share of dq~, dk~ and db: its decays are a column, so they fold into the left operands (one [C, K]
    product for dq~, two into one for dk~), and db's key terms are row sums of the [C, VW] products the block
    formed (kg . state, carried . dstate); db's query term, q~ . dq~, is ``pairs_source``'s."""
    return [
        "eb = ct.exp(b)",
        "dqt = dot(eb * do, ct.transpose(state), zero_ck)",
        "dkt = dot(ct.exp(b_last - b) * u, ct.transpose(dstate), dot(-eb * de, ct.transpose(state), zero_ck))",
        "uc = ct.sum(u * cd, axis=1, keepdims=True)",
        "db_last = ct.reshape(ct.sum(state * dstate), (1, 1)) * ct.exp(b_last) + ct.sum(uc, axis=0, keepdims=True)",
        "db = ct.where(last, db_last, 0.0) - ct.sum(de * ks, axis=1, keepdims=True) - uc",
    ]


def _per_channel_key_gradients() -> list[str]:
    """kda's share of the keys' and queries' gradients, before their per-channel decays (``_per_channel_decays``
    applies them once to the sum: here they cost [C, K] tiles of every block's and spilled)."""
    return [
        "dqg = dot(do, ct.transpose(state), zero_ck)",
        "dkg = dot(de, ct.transpose(state), zero_ck)",
        "dkd = dot(u, ct.transpose(dstate), zero_ck)",
        "sdd = ct.reshape(ct.sum(state * dstate, axis=1), (1, KP))",
    ]


def _per_channel_decays() -> list[str]:
    """kda's dq~, dk~ and db from the summed shares: the decays from the chunk's start (e^b) and to its end
    (e^(b_L - b)) per channel, db's last row with its share through b_L."""
    return [
        "eb = ct.exp(b)",
        B_LAST,
        "dqt = eb * dqg",
        "dkg = -eb * dkg",
        "dkd = ct.exp(b_last - b) * dkd",
        "dkt = dkg + dkd",
        "db_last = sdd * ct.exp(b_last) + ct.sum(kt * dkd, axis=0, keepdims=True)",
        "db = ct.where(last, db_last, 0.0) + kt * (dkg - dkd) + qt * dqt",
    ]


CHUNK_ARRAYS = {**PAIR_ARRAYS, "inverse": "t_work"}  # what the gradients kernel reads of the chunk kernel's


def gradients_source(s: DeltaRuleShape) -> KernelSource:
    """Each chunk's gradients at once, a block per chunk slot, head and block of VW value columns (a walk over V
    inside one block kept [C, K] sums live across it: the compiler spilled), from its start state and its end's
    d(state) (the walks' ``saved`` and ``dsaved``) and the chunk kernel's T, QK and KK. Stores dv and hands its
    value block's share of the rest to ``pairs_source`` in the workspace."""
    chunk = [
        *_rows(),
        *_keys(s, scan=True),
        _beta(),
        _chunk_rows("slot"),
        *(f"{name} = ct.gather({array}, at * C + ccols2)" for name, array in CHUNK_ARRAYS.items()),
        "kg = kt * ct.exp(b)",
        *_decay_to_chunk_end(),
        *_value_block_gradients(s),
        *_part_rows("ct.bid(2)"),
        *(f"ct.scatter({name}_work, {HANDED_OVER_AT[form]}, {name})" for name, form in _handed_over(s).items()),
    ]
    body = [
        *_slot_setup(s, _value_block()),
        LAST_ROW,
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    params = f"k, v, g, beta, cu, d_o, saved, dsaved, qk_work, t_work, kk_work, {_params(list(_handed_over(s)))}, dv"
    return _module(s, "delta_rule_grads", params, body, s.value_width)


def _handed_over(s: DeltaRuleShape) -> dict[str, str]:
    """What each value block of the gradients kernel hands ``pairs_source``, a float32 workspace array each
    (``<name>_work``), by form: "KROW", "C" or "1" columns of C rows a chunk slot, head and value block, or "row",
    one row of KROW. The gradients of QK and KK (unmasked) and dbeta's share; gdn's dq~, dk~ and db (one column: its gate
    is a scalar); kda's products of dO, de and u with the state and d(state) before their decays, and the sum of
    state * d(state) over the block's columns (db's last row)."""
    keys = (
        {"dqg": "KROW", "dkg": "KROW", "dkd": "KROW", "sdd": "row"}
        if s.per_channel
        else {"dqt": "KROW", "dkt": "KROW", "db": "1"}
    )
    return {"dqk": "C", "dkk": "C", "dbeta": "1", **keys}


def handed_over_sizes(s: DeltaRuleShape, parts: int) -> dict[str, int]:
    """The elements of each handed-over array, by name in ``_handed_over``'s order, for ``parts`` (chunk slot, head,
    value block) triples."""
    per_part = {"KROW": s.chunk * s.kp, "C": s.chunk * s.chunk, "1": s.chunk, "row": s.kp}
    return {name: parts * per_part[form] for name, form in _handed_over(s).items()}


def pair_takes(s: DeltaRuleShape) -> list[str]:
    """The handed-over arrays ``pairs_source`` sums, in its parameters' order: all but kda's dbeta, which
    ``norms_source`` sums (kda's pair launch runs a block per key block: each would store it)."""
    return [name for name in _handed_over(s) if not (s.per_channel and name == "dbeta")]


def _params(names: list[str]) -> str:
    """Workspace arrays as kernel parameters."""
    return ", ".join(f"{name}_work" for name in names)


# the flat positions of a (chunk slot, head, value block)'s share in a handed-over array of each form
HANDED_OVER_AT = {"KROW": "part * KROW + kcols2", "C": "part * C + ccols2", "1": "part", "row": "block * KROW + kcols2"}


def _part_rows(value_block: str) -> list[str]:
    """``block``: the (chunk slot, head, value block ``value_block``) triple's index; ``part``: its C hand-over rows."""
    return [
        f"block = (slot * H + head) * (VP // VW) + {value_block}",
        "part = block * C + ct.reshape(steps, (C, 1))",
    ]


def _take_over(s: DeltaRuleShape, names: list[str]) -> list[str]:
    """The handed-over shares ``names`` of the block's chunk slot and head summed over the value blocks (a line
    each, not a loop: kda's pair kernel spilled 7,328 B a thread with the loop, 3,752 without, sm_90 cubins)."""
    lines = []
    for block in range(s.value_blocks):
        lines += _part_rows(str(block))
        lines += [
            f"{name} = {f'{name} + ' if block else ''}ct.gather({name}_work, {HANDED_OVER_AT[_handed_over(s)[name]]})"
            for name in names
        ]
    return lines


PAIR_MASKS = ["dqk = ct.where(lower, dqk, 0.0)", "dkk = ct.where(strict, dkk, 0.0)"]  # dQK on i >= j, dKK on i > j
DBETA_STORE = "ct.scatter(dbeta_out, rows2 * H + head, ct.astype(dbeta, dbeta_out.dtype), mask=valid2)"


def _gate_gradient(s: DeltaRuleShape) -> list[str]:
    """dg stored, the reverse row sums of the chunk's whole db."""
    return [
        *_row_sums(s, "dg_t", "ct.transpose(ones_below)", "db"),
        (
            "ct.scatter(dg, qk_at, ct.astype(dg_t, dg.dtype), mask=valid2 & kin2)"
            if s.per_channel
            else "ct.scatter(dg, rows2 * H + head, ct.astype(dg_t, dg.dtype), mask=valid2)"
        ),
    ]


def _query_key_gradients(s: DeltaRuleShape) -> list[str]:
    """dq and dk stored, from the chunk's whole dq~ and dk~ back through the scale and the l2 norm."""
    return [
        *_unnormalized(s),
        "ct.scatter(dq, qk_at, ct.astype(dqr, dq.dtype), mask=valid2 & kin2)",
        "ct.scatter(dk, qk_at, ct.astype(dkr, dk.dtype), mask=valid2 & kin2)",
    ]


# kda's pair launch hands its key block's columns of dq~ and dk~ to ``norms_source`` (float32, C rows of KROW a
# chunk slot and head): the l2 norm's reverse sums over all of K
PAIR_HAND_OVER = {"dqt": "pair_dq_work", "dkt": "pair_dk_work"}


SCALAR_GATE_QUERY_TERM = "db = db + ct.sum(qt * dqt, axis=1, keepdims=True)"  # gdn's db through q~ . dq~
KEY_BLOCK_COLUMNS = "ct.bid(2) * KP + ct.arange(KP, dtype=ct.int32)"  # block bid(2)'s KP key columns


def pairs_source(s: DeltaRuleShape) -> KernelSource:
    """The pair gradients, a launch after ``gradients_source``: the value blocks' shares summed, db's query term
    added, dq~, dk~ and db through the pair products from the gradients of KK and QK, then dg stored. gdn's, a
    block per chunk slot and head, stores dq, dk and dbeta too. kda's, a block per chunk slot, head and KEY_BLOCK
    key columns (its pair gradients go channel by channel; only the l2 norm's reverse sums over K), hands dq~ and
    dk~ to ``norms_source``. Spill stack a thread, sm_90 cubins at K = V = 128, TF32: kda's 3,872 B over all of K,
    1,984 a key block; in one kernel with the walk over V, kda's gradients spilled 11,800 B and gdn's 7,584."""
    whole_rows = s.key_blocks > 1
    chunk = [
        *_rows(),
        *_queries(s, whole_rows=whole_rows),
        *_normalized_keys(s, whole_rows=whole_rows),
        *_cumulative_gate(s),
        *_take_over(s, pair_takes(s)),
        *PAIR_MASKS,
        *(_per_channel_decays() if s.per_channel else [DBETA_STORE, SCALAR_GATE_QUERY_TERM]),
        *_pair_gradients(s),
        *_gate_gradient(s),
        *(_pair_hand_over() if s.per_channel else _query_key_gradients(s)),
    ]
    body = [
        *_slot_setup(s, "ct.arange(VW, dtype=ct.int32)", KEY_BLOCK_COLUMNS if s.per_channel else ALL_KEYS),
        *([LAST_ROW] if s.per_channel else []),
        *([WHOLE_ROW] if whole_rows else []),
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    if s.per_channel:
        params = f"q, k, g, cu, {_params(pair_takes(s))}, {', '.join(PAIR_HAND_OVER.values())}, dg"
    else:
        params = f"q, k, g, cu, {', '.join(PAIR_ARRAYS.values())}, {_params(pair_takes(s))}, dq, dk, dg, dbeta_out"
    return _module(s, "delta_rule_pairs", params, body, s.value_width, s.kp // s.key_blocks, walk_hints(s))


def _pair_hand_over() -> list[str]:
    """kda's pair launch's end: its key block's columns of dq~ and dk~ into the workspace."""
    return [
        _chunk_rows("slot"),
        *(f"ct.scatter({array}, at * KROW + kcols2, {name})" for name, array in PAIR_HAND_OVER.items()),
    ]


def norms_source(s: DeltaRuleShape) -> KernelSource:
    """kda's last launch, a block per chunk slot and head: dq and dk from the pair launch's dq~ and dk~ back
    through the scale and the l2 norm (which sums over all of K), and dbeta from its value blocks' shares."""
    chunk = [
        *_rows(),
        *_queries(s),
        *_normalized_keys(s),
        _chunk_rows("slot"),
        *(f"{name} = ct.gather({array}, at * KROW + kcols2)" for name, array in PAIR_HAND_OVER.items()),
        *_take_over(s, ["dbeta"]),
        DBETA_STORE,
        *_query_key_gradients(s),
    ]
    body = [
        *_slot_setup(s, "ct.arange(VW, dtype=ct.int32)"),
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    params = f"q, k, cu, {', '.join(PAIR_HAND_OVER.values())}, {_params(['dbeta'])}, dq, dk, dbeta_out"
    return _module(s, "delta_rule_norms", params, body, s.value_width)
