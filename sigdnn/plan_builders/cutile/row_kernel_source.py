"""Row kernels as cuTile source: softmax, layernorm and rmsnorm forward and backward over (M, N) rows.

x is M rows of N contiguous elements (``tensor_views.rows``). A block takes TM
rows; when a row fits K column tiles of TN (K * TN >= N, ``tiling.row_split``)
it is loaded once, into K tiles, and every statistic is computed from
registers, else the row is walked in chunks of TN (two passes for the
statistics, one to write). Sizes, tile shapes and epsilon are written into
the text: one kernel per such combination.

Numerics: float32 throughout; variance two-pass (sum((x - mean)^2)), never
E[x^2] - mean^2 (layernorm forward may take one reduction of values shifted
by the row's first element instead: ``VARIANCES``); softmax shifts by the row max (0 for a row of -inf, whose
result is 0/0 as the reference's). Columns past N are masked out of every
sum; rows past M are computed on zeros and never stored.

Backward (persistent blocks): each block accumulates its rows' dscale /
dbias terms in registers and stores them as one row of a (G, width)
partial-sum matrix in the workspace; ``column_sums`` adds those rows.
"""

from __future__ import annotations

import attrs

ZERO = "padding_mode=ct.PaddingMode.ZERO"
FLT_MAX = "3.4028234663852886e38"


def _lit(v: float) -> str:
    return repr(float(v))


@attrs.frozen
class KernelHints:
    """What ``@ct.kernel(...)`` tells cuTile's compiler (None: its own choice).

    A block is 4 worker warps unless ``num_worker_warps`` says 8; cuTile
    sizes registers for ``occupancy`` blocks per SM. Left to itself it gave a
    row kernel all 255 registers (one or two blocks per SM: the load, the
    reduction and the store of one block never overlapped another's).
    """

    occupancy: int | None = None
    num_worker_warps: int | None = None

    def decorator(self) -> str:
        pairs = (("occupancy", self.occupancy), ("num_worker_warps", self.num_worker_warps))
        args = ", ".join(f"{k}={v}" for k, v in pairs if v is not None)
        return f"@ct.kernel({args})" if args else "@ct.kernel"


def _module(params: list[str], body: list[str], hints: KernelHints | None = None) -> str:
    lines = "\n".join(f"    {line}" if line else "" for line in body)
    return f"{(hints or KernelHints()).decorator()}\ndef kernel({', '.join(params)}):\n{lines}\n"


def walked_by(body: list[str], tiles: int, blocks: int | None) -> list[str]:
    """The lines of a kernel whose ``body`` computes tile ``bid``: one tile a block, or with ``blocks`` (fewer
    than ``tiles``) that many persistent blocks, each walking tiles bid, bid + blocks, ...

    A block of one tile waits on its own loads; in a loop cuTile can pipeline the next tile's loads under
    this one's arithmetic.
    """
    if blocks is None or blocks >= tiles:
        return ["bid = ct.bid(0)", *body]
    return [f"for bid in range(ct.bid(0), {tiles}, {blocks}):", *(f"    {line}" for line in body)]


def grid_of(tiles: int, blocks: int | None) -> int:
    """Blocks launched for ``walked_by``'s kernel."""
    return tiles if blocks is None else min(tiles, blocks)


def _load_rows(array: str, tm: int, tn: int, chunk: str, row: str = "bid", padding: str = ZERO) -> str:
    return f"ct.astype(ct.load({array}, index=({row}, {chunk}), shape=({tm}, {tn}), {padding}), ct.float32)"


def _load_vector(array: str, tn: int, chunk: str) -> str:
    load = f"ct.load({array}, index=({chunk},), shape=({tn},), {ZERO})"
    return f"ct.reshape(ct.astype({load}, ct.float32), (1, {tn}))"


def _load_stat(array: str, tm: int, row: str) -> str:
    return f"ct.reshape(ct.astype(ct.load({array}, index=({row},), shape=({tm},), {ZERO}), ct.float32), ({tm}, 1))"


def _store_stat(array: str, tm: int, value: str) -> str:
    return f"ct.store({array}, index=(bid,), tile=ct.astype(ct.reshape({value}, ({tm},)), {array}.dtype))"


def _mask(tn: int, chunk: str, n: int) -> str:
    """A (1, TN) float32 tile: 1 where column chunk * TN + j is inside the row, else 0."""
    cols = f"ct.arange({tn}, dtype=ct.int32) + {chunk} * {tn}"
    return f"ct.reshape(ct.where({cols} < {n}, 1.0, 0.0), (1, {tn}))"


def _chunks(n: int, tn: int) -> list[tuple[str, bool]]:
    """(index expression, masked) of each chunk of a row walked in chunks: a loop over the whole ones, then the tail."""
    parts = [("c", False)] if n // tn else []
    if n % tn:
        parts.append((str(n // tn), True))
    return parts


def _loop(n: int, tn: int, body: callable) -> list[str]:
    """Lines that run ``body(chunk, masked)`` over every chunk of a row."""
    lines = []
    for chunk, masked in _chunks(n, tn):
        inner = body(chunk, masked)
        if chunk == "c":
            lines.append(f"for c in range({n // tn}):")
            lines += [f"    {line}" for line in inner]
        else:
            lines += inner
    return lines


def _held(n: int, tn: int, k: int) -> list[tuple[str, bool]]:
    """(index expression, masked) of the K column tiles a held row is loaded in: only the last may run past N."""
    return [(str(i), (i + 1) * tn > n) for i in range(k)]


def _sum_of(terms: list[str]) -> str:
    return " + ".join(terms)


def _max_of(terms: list[str]) -> str:
    """The lane-wise maximum of (TM, TN) tiles, NaN kept."""
    out = terms[0]
    for term in terms[1:]:
        out = f"ct.maximum({out}, {term}, propagate_nan=True)"
    return out


# How layernorm forward gets a row's mean and variance (``norm_forward``).
#
# two_pass: the mean's reduction, then sum((x - mean)^2)'s, which waits on it. chan (rows held in one tile):
# one reduction of per-lane (count, mean, M2) triples combined by Chan's update (``CHAN``), over values shifted
# by the row's first element x0 (exact where the row sits far from zero: the partial means are then of x - x0,
# not of x). On the H200 (bf16, 16384 rows) chan ran 4 % faster at 4096 columns; over rows held in several
# tiles a per-lane Welford pass before it ran 9-11 % slower than two_pass (3072 and 5120 columns), so it was
# dropped there.
# The cheaper one reduction of sum(x - x0) and sum((x - x0)^2) loses ~ (mean - x0)^2 / var ulps and failed
# the reference's layernorm tolerance on a row whose first element is far from the rest.
VARIANCES = ("two_pass", "chan")

# Chan et al.'s pairwise update of two (count, mean, M2) groups; a group of count 0 whose mean is 0 (a masked
# lane) leaves the other group's mean and M2 exactly as they are. The weight nb / n takes an approximate
# reciprocal (MUFU.RCP, ~1 ulp): it scales the mean's correction and one term of M2, where an ulp of the
# weight is an ulp of a correction; the IEEE division cost a per-lane slow path and spilled masked rows.
_WEIGHT = "nb * ct.truediv(1.0, ct.maximum(na + nb, 1.0), rounding_mode=ct.RoundingMode.APPROX)"
CHAN = (f"lambda na, ma, qa, nb, mb, qb: (na + nb, ma + (mb - ma) * ({_WEIGHT}), "
        f"qa + qb + (mb - ma) * (mb - ma) * (na * ({_WEIGHT})))")  # fmt: skip


def _one_pass_stats(n: int, tm: int, tn: int) -> list[str]:
    """Lines setting k0 (each row's first element), m (mean - k0) and var from one Chan reduction over a row
    held in the one tile x0."""
    full = f"ct.full(({tm}, {tn}), 0.0, dtype=ct.float32)"
    lines = [f"k0 = {_load_rows('x', tm, 1, '0')}"]
    if tn != n:
        mask = _mask(tn, "0", n)
        lines += [f"xs = (x0 - k0) * {mask}", f"count = ct.broadcast_to({mask}, ({tm}, {tn}))"]
    else:
        lines += ["xs = x0 - k0", f"count = ct.full(({tm}, {tn}), 1.0, dtype=ct.float32)"]
    lines.append(
        f"_, m, q = ct.reduce((count, xs, {full}), axis=1, func={CHAN}, identity=(0.0, 0.0, 0.0), keepdims=True)"
    )
    return [*lines, f"var = q / {_lit(n)}"]


def _walked_chan_stats(n: int, tm: int, tn: int) -> list[str]:
    """Lines setting mu and var of rows walked in chunks of TN, reading each chunk once.

    Each chunk's mean and M2 (two passes over the chunk in registers: its sum, then the sum of its squared
    deviations) are merged into the row's running count, mean and M2 by Chan's update, so the statistics
    take one read of the row where two_pass takes two. The counts are exact in float32 (rows < 2^24).
    """
    zero = f"ct.full(({tm}, 1), 0.0, dtype=ct.float32)"
    lines = [f"cnt = {zero}", f"mu = {zero}", f"q = {zero}"]

    def chunk(c: str, masked: bool) -> list[str]:
        nb = _lit(n % tn if masked else tn)
        body = [f"xt = {_load_rows('x', tm, tn, c)}", f"cm = ct.sum(xt, axis=1, keepdims=True) / {nb}", "d = xt - cm"]
        if masked:  # the zeros read past the row add nothing to the sum, but would to the squares
            body.append(f"d = d * {_mask(tn, c, n)}")
        return [
            *body,
            f"w = {nb} / (cnt + {nb})",
            "delta = cm - mu",
            "mu = mu + delta * w",
            "q = q + ct.sum(d * d, axis=1, keepdims=True) + delta * delta * (cnt * w)",
            f"cnt = cnt + {nb}",
        ]

    return [*lines, *_loop(n, tn, chunk), f"var = q / {_lit(n)}"]


def norm_forward(
    n: int,
    tm: int,
    tn: int,
    eps: float,
    center: bool,
    bias: bool,
    stats: tuple[str, ...],
    hints: KernelHints | None = None,
    variance: str = "two_pass",
    *,
    k: int,
    tiles: int,
    blocks: int | None = None,
) -> str:
    """layernorm (center) or rmsnorm: y = (x - mean) * inv * scale (+ bias); ``stats`` among ("mean", "inv").

    ``variance`` (layernorm): one of ``VARIANCES``, for rows held in one tile or walked (chan: each chunk's
    mean and M2 merged into the row's, ``_walked_chan_stats``); rows held in several (``k`` column tiles)
    take two_pass. ``tiles`` row tiles in all, ``blocks``: see ``walked_by``.
    """
    if variance not in VARIANCES:
        raise ValueError(f"variance {variance!r}: expected one of {VARIANCES}")
    params = ["x", "s", *(["b"] if bias else []), "y", *stats]
    body = []
    held = _held(n, tn, k) if tn * k >= n else []
    one_pass = center and variance != "two_pass" and tn >= n
    body += [f"x{i} = {_load_rows('x', tm, tn, c)}" for i, (c, _) in enumerate(held)]
    if one_pass:
        body += _one_pass_stats(n, tm, tn)
        body.append("mu = k0 + m")
    elif held:
        if center:
            body.append(f"mu = ct.sum({_sum_of([f'x{i}' for i in range(k)])}, axis=1, keepdims=True) / {_lit(n)}")
            for i, (c, masked) in enumerate(held):
                body.append(f"d{i} = x{i} - mu")
                if masked:
                    body.append(f"d{i} = d{i} * {_mask(tn, c, n)}")
        else:
            body += [f"d{i} = x{i}" for i in range(k)]
        body.append(f"var = ct.sum({_sum_of([f'd{i} * d{i}' for i in range(k)])}, axis=1, keepdims=True) / {_lit(n)}")
    elif center and variance == "chan":
        body += _walked_chan_stats(n, tm, tn)
    else:
        body.append(f"acc = ct.full(({tm}, {tn}), 0.0, dtype=ct.float32)")
        if center:
            body += _loop(n, tn, lambda c, m: [f"acc = acc + {_load_rows('x', tm, tn, c)}"])
            body.append(f"mu = ct.sum(acc, axis=1, keepdims=True) / {_lit(n)}")
            body.append(f"acc = ct.full(({tm}, {tn}), 0.0, dtype=ct.float32)")

            def square(c: str, m: bool) -> list[str]:
                lines = [f"d = {_load_rows('x', tm, tn, c)} - mu"]
                if m:
                    lines.append(f"d = d * {_mask(tn, c, n)}")
                return [*lines, "acc = acc + d * d"]

            body += _loop(n, tn, square)
        else:
            body += _loop(n, tn, lambda c, m: [f"xt = {_load_rows('x', tm, tn, c)}", "acc = acc + xt * xt"])
        body.append(f"var = ct.sum(acc, axis=1, keepdims=True) / {_lit(n)}")
    body.append(f"r = 1.0 / ct.sqrt(var + {_lit(eps)})")

    def write(c: str, d: str) -> list[str]:
        out = f"{d} * r * {_load_vector('s', tn, c)}"
        if bias:
            out += f" + {_load_vector('b', tn, c)}"
        return [f"ct.store(y, index=(bid, {c}), tile=ct.astype({out}, y.dtype))"]

    if held:  # x - mean: one-pass kernels subtract x0 first (exact where x sits near it), then the shifted mean
        for i, (c, _) in enumerate(held):
            body += write(c, f"(x{i} - k0 - m)" if one_pass else f"d{i}")
    else:
        centered = " - mu" if center else ""
        body += _loop(n, tn, lambda c, m: [f"d = {_load_rows('x', tm, tn, c)}{centered}", *write(c, "d")])
    if "mean" in stats:
        body.append(_store_stat("mean", tm, "mu"))
    if "inv" in stats:
        body.append(_store_stat("inv", tm, "r"))
    return _module(params, walked_by(body, tiles, blocks), hints)


def softmax_forward(
    n: int,
    tm: int,
    tn: int,
    log: bool,
    stats: bool,
    hints: KernelHints | None = None,
    *,
    k: int,
    tiles: int,
    blocks: int | None = None,
) -> str:
    """Softmax (or log-softmax) of each row; ``stats`` = max + log(sum(exp(x - max))); ``k`` column tiles held;
    ``tiles`` row tiles in all, ``blocks``: see ``walked_by``."""
    params = ["x", "y", *(["st"] if stats else [])]
    # Columns past N must read -inf (they take no part in max and sum); when no chunk holds such a column,
    # rows past M read zeros instead (never stored), which lets cuTile load through TMA (no -inf fill there).
    pad = ZERO if n % tn == 0 else "padding_mode=ct.PaddingMode.NEG_INF"
    body = []
    if tn * k >= n:
        held = _held(n, tn, k)
        body += [f"x{i} = {_load_rows('x', tm, tn, c, padding=pad)}" for i, (c, _) in enumerate(held)]
        body += [
            f"mx = ct.max({_max_of([f'x{i}' for i in range(k)])}, axis=1, keepdims=True)",
            f"sh = ct.where(mx < -{FLT_MAX}, 0.0, mx)",
        ]
        for i in range(k):
            body += [f"z{i} = x{i} - sh", f"e{i} = ct.exp(z{i})"]
        body.append(f"total = ct.sum({_sum_of([f'e{i}' for i in range(k)])}, axis=1, keepdims=True)")
        for i, (c, _) in enumerate(held):
            out = f"z{i} - ct.log(total)" if log else f"e{i} * (1.0 / total)"
            body.append(f"ct.store(y, index=(bid, {c}), tile=ct.astype({out}, y.dtype))")
    else:
        # Per row: running max sh and sum total of exp(x - sh), updated chunk by chunk (one exp an element; a
        # lane-wise running pair took two and twice the registers, and spilled at 32768 columns).
        body += [
            f"sh = ct.full(({tm}, 1), -{FLT_MAX}, dtype=ct.float32)",
            f"total = ct.full(({tm}, 1), 0.0, dtype=ct.float32)",
        ]
        body += _loop(
            n,
            tn,
            lambda c, _: [
                f"xt = {_load_rows('x', tm, tn, c, padding=pad)}",
                "m2 = ct.maximum(sh, ct.max(xt, axis=1, keepdims=True))",
                "total = total * ct.exp(sh - m2) + ct.sum(ct.exp(xt - m2), axis=1, keepdims=True)",
                "sh = m2",
            ],
        )

        def write(c: str, _: bool) -> list[str]:
            z = f"({_load_rows('x', tm, tn, c, padding=pad)} - sh)"
            out = f"{z} - ct.log(total)" if log else f"ct.exp({z}) * (1.0 / total)"
            return [f"ct.store(y, index=(bid, {c}), tile=ct.astype({out}, y.dtype))"]

        body += _loop(n, tn, write)
    if stats:
        body.append(_store_stat("st", tm, "sh + ct.log(total)"))
    return _module(params, walked_by(body, tiles, blocks), hints)


def _row_means(first: str, second: str, n: int, paired: bool) -> list[str]:
    """Lines setting c1 = mean(first) and c2 = mean(second) over each row (axis 1 of (TM, TN) tiles).

    ``paired``: both sums in one reduction of the pair (one pass of shuffles and one shared-memory
    round trip where two ``ct.sum`` take two).
    """
    if not paired:
        return [f"c2 = ct.sum({second}, axis=1, keepdims=True) / {_lit(n)}",
                f"c1 = ct.sum({first}, axis=1, keepdims=True) / {_lit(n)}"]  # fmt: skip
    return [
        f"c1, c2 = ct.reduce(({first}, {second}), axis=1, func={ADD_PAIRS}, identity=(0.0, 0.0), keepdims=True)",
        f"c1 = c1 / {_lit(n)}",
        f"c2 = c2 / {_lit(n)}",
    ]


ADD_PAIRS = "lambda a1, a2, b1, b2: (a1 + b1, a2 + b2)"


def norm_backward(
    n: int,
    tm: int,
    tn: int,
    center: bool,
    dbias: bool,
    hints: KernelHints | None = None,
    paired: bool = True,
    *,
    k: int,
) -> str:
    """dx of layernorm (center) or rmsnorm, and per-block partial dscale (and dbias) rows in ``pds`` / ``pdb``.

    With g = dy * scale and x_hat = (x - mean) * inv (mean 0 for rmsnorm):
    dx = inv * (g - mean(g) - x_hat * mean(g * x_hat)), without mean(g) for
    rmsnorm; dscale = sum over rows of dy * x_hat, dbias = sum of dy.
    Layernorm's two row means are one reduction of the pair unless ``paired`` is False.
    ``k``: column tiles a row is held in.
    """
    params = ["dy", "x", "s", *(["mean"] if center else []), "inv", "dx", "pds", *(["pdb"] if dbias else [])]
    body = [
        "bid = ct.bid(0)",
        "tiles = ct.cdiv(x.shape[0], " + str(tm) + ")",
        "blocks = ct.num_blocks(0)",
    ]
    held = _held(n, tn, k) if tn * k >= n else []

    def x_hat(c: str, i: str = "") -> list[str]:
        """Lines setting xh{i}, dyt{i} and g{i} of column tile ``c``. Columns past N need no mask: dy and scale
        read 0 there, so g and dy * xh are 0 whatever xh is."""
        return [
            f"xh{i} = ({_load_rows('x', tm, tn, c, 't')}{' - mu' if center else ''}) * r",
            f"dyt{i} = {_load_rows('dy', tm, tn, c, 't')}",
            f"g{i} = dyt{i} * {_load_vector('s', tn, c)}",
        ]

    def col(value: str) -> str:
        """The tile's rows of ``value`` summed: (1, TN). One row is its own sum: cuTile's sum over an axis of
        length 1 still went through shared memory, with 12 barriers per row of layernorm backward."""
        return f"({value})" if tm == 1 else f"ct.sum({value}, axis=0, keepdims=True)"

    stats = ([f"mu = {_load_stat('mean', tm, 't')}"] if center else []) + [f"r = {_load_stat('inv', tm, 't')}"]

    def dx(i: str = "") -> str:
        return f"(g{i} - c1 - xh{i} * c2) * r" if center else f"(g{i} - xh{i} * c2) * r"

    if held:
        zero = f"ct.full((1, {tn}), 0.0, dtype=ct.float32)"
        sums = [("pds", "ads"), *([("pdb", "adb")] if dbias else [])]  # (partial-sum row, its accumulators)
        body += [f"{a}{i} = {zero}" for i in range(k) for _, a in sums]
        loop = list(stats)
        for i, (c, _) in enumerate(held):
            loop += x_hat(c, str(i))
        g, gxh = _sum_of([f"g{i}" for i in range(k)]), _sum_of([f"g{i} * xh{i}" for i in range(k)])
        if center:
            loop += _row_means(g, gxh, n, paired)
        else:
            loop.append(f"c2 = ct.sum({gxh}, axis=1, keepdims=True) / {_lit(n)}")
        for i, (c, _) in enumerate(held):
            loop += [
                f"ct.store(dx, index=(t, {c}), tile=ct.astype({dx(str(i))}, dx.dtype))",
                f"ads{i} = ads{i} + {col(f'dyt{i} * xh{i}')}",
            ]
            if dbias:
                loop.append(f"adb{i} = adb{i} + {col(f'dyt{i}')}")
        body.append("for t in range(bid, tiles, blocks):")
        body += [f"    {line}" for line in loop]
        for i, (c, _) in enumerate(held):
            body += [f"ct.store({part}, index=(bid, {c}), tile={a}{i})" for part, a in sums]
        return _module(params, body, hints)

    # Chunked rows: the block's partial-sum row starts at 0 and is added to chunk by chunk.
    zero = f"ct.full((1, {tn}), 0.0, dtype=ct.float32)"
    chunks = -(-n // tn)
    body.append(f"for c in range({chunks}):")
    body.append(f"    ct.store(pds, index=(bid, c), tile={zero})")
    if dbias:
        body.append(f"    ct.store(pdb, index=(bid, c), tile={zero})")
    loop = [*stats, f"a1 = ct.full(({tm}, {tn}), 0.0, dtype=ct.float32)", "a2 = a1"]
    loop += _loop(n, tn, lambda c, _: [*x_hat(c), "a1 = a1 + g", "a2 = a2 + g * xh"])
    if center:
        loop += _row_means("a1", "a2", n, paired)
    else:
        loop.append(f"c2 = ct.sum(a2, axis=1, keepdims=True) / {_lit(n)}")

    def write(c: str, _: bool) -> list[str]:
        lines = [*x_hat(c), f"ct.store(dx, index=(t, {c}), tile=ct.astype({dx()}, dx.dtype))"]
        lines.append(f"ct.store(pds, index=(bid, {c}), tile=ct.load(pds, index=(bid, {c}), shape=(1, {tn})) + "
                     f"{col('dyt * xh')})")  # fmt: skip
        if dbias:
            lines.append(f"ct.store(pdb, index=(bid, {c}), tile=ct.load(pdb, index=(bid, {c}), shape=(1, {tn})) + "
                         f"{col('dyt')})")  # fmt: skip
        return lines

    loop += _loop(n, tn, write)
    body.append("for t in range(bid, tiles, blocks):")
    body += [f"    {line}" for line in loop]
    return _module(params, body, hints)


def column_sums(tg: int, tc: int, outputs: int) -> str:
    """out_k[j] = sum over rows i of part_k[i, j] for ``outputs`` (part, out) pairs; a block per TC columns."""
    params = [name for k in range(outputs) for name in (f"p{k}", f"o{k}")]
    body = ["bid = ct.bid(0)", f"steps = ct.cdiv(p0.shape[0], {tg})"]
    for k in range(outputs):
        body += [
            f"a{k} = ct.full(({tg}, {tc}), 0.0, dtype=ct.float32)",
            "for i in range(steps):",
            f"    a{k} = a{k} + ct.load(p{k}, index=(i, bid), shape=({tg}, {tc}), {ZERO})",
            f"ct.store(o{k}, index=(bid,), tile=ct.astype(ct.sum(a{k}, axis=0), o{k}.dtype))",
        ]
    return _module(params, body)
