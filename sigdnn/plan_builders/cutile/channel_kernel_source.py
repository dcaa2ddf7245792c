"""Per-channel kernels as cuTile source: batchnorm's partial sums, finalize and elementwise passes.

x is an (A, C, B) array (``tensor_views.channels``) walked in (TA, TK, TB) tiles;
when B is 1 (channels innermost, NHWC) it is an (A, C) array walked in
(TA, TK) tiles instead: cuTile vectorizes along a tile's last dimension
only, so a trailing dimension of 1 made every access a 2-byte one.

* ``partials``: grid (C tiles, splits); block ``sp`` sums A-tiles sp,
  sp + splits, sp + 2 splits, ... (all of B) per channel (so the blocks
  walk A together, band after band, and the last band read is the top of
  A) into per-lane accumulators and stores one row of
  an (S, C) partial matrix per sum. Statistics sum d = x - p and d^2 with p
  the channel's first element (a shift that keeps sum(d^2) - sum(d)^2 / M
  from cancelling when |mean| >> std); gradients sum dy and dy * x_hat.
* ``finalize``: one block per TK channels adds the S rows and writes the
  node's per-channel outputs and the float32 coefficients the last pass
  reads (from the workspace).
* ``apply``: y = (x - mean) * (inv * scale) + bias, or dx = inv * scale *
  (dy - dbias / M - x_hat * dscale / M); one block per tile, from the top
  of A down, so the bands the partial pass read last (still in L2) are
  read first here.
"""

from __future__ import annotations

from sigdnn.plan_builders.cutile.row_kernel_source import ZERO, KernelHints, _lit, _module

Tile = tuple[int, ...]  # (TA, TK, TB), or (TA, TK) for an (A, C) array


def _at(t: Tile, a: str, k: str, b: str) -> str:
    """The index (a, k, b) of a tile of shape ``t`` (without b for an (A, C) array)."""
    return f"({a}, {k}, {b})" if len(t) == 3 else f"({a}, {k})"


def _tile(array: str, t: Tile, index: str, dtype: str = "ct.float32", exact: bool = False, options: str = "") -> str:
    """A tile of ``array`` as ``dtype``; ``exact``: every tile lies inside the array (no bounds check).

    ``options``: more ``ct.load`` keywords (``load_options``).
    """
    unchecked = "check_bounds=False" if exact else ZERO
    return f"ct.astype(ct.load({array}, index={index}, shape={t}, {unchecked}{options}), {dtype})"


def load_options(tma: bool = True, latency: int | None = None) -> str:
    """``ct.load`` keywords of the partial pass's big loads: TMA off, a DRAM latency hint (1 to 10)."""
    return ("" if tma else ", allow_tma=False") + ("" if latency is None else f", latency={latency}")


def _vec(array: str, t: Tile, index: str, dtype: str = "ct.float32") -> str:
    """A per-channel vector's TK entries at channel tile ``index`` as a (1, TK, 1) (or (1, TK)) tile."""
    tk = t[1]
    load = f"ct.load({array}, index=({index},), shape=({tk},), {ZERO})"
    shape = f"(1, {tk}, 1)" if len(t) == 3 else f"(1, {tk})"
    return f"ct.reshape(ct.astype({load}, {dtype}), {shape})"


def _masks(t: Tile, a: int, b: int, a0: str, b0: str) -> list[str]:
    """Lines defining ``mask``: 1.0 where the tile's (a, b) lies inside x, else 0 (only where a tile can overhang)."""
    ta, tb = t[0], t[2] if len(t) == 3 else 1
    parts = []
    if a % ta:
        shape = f"({ta}, 1, 1)" if len(t) == 3 else f"({ta}, 1)"
        parts.append(f"ct.reshape(ct.where(ct.arange({ta}, dtype=ct.int32) + {a0} < {a}, 1.0, 0.0), {shape})")
    if b % tb:
        parts.append(f"ct.reshape(ct.where(ct.arange({tb}, dtype=ct.int32) + {b0} < {b}, 1.0, 0.0), (1, 1, {tb}))")
    return [f"mask = {' * '.join(parts)}"] if parts else []


def partials(
    t: Tile,
    a: int,
    b: int,
    splits: int,
    grads: bool,
    lanes: str,
    hints: KernelHints | None,
    options: str,
    exact: bool,
) -> str:
    """Partial sums over A-tiles sp, sp + splits, ... and all of B, per channel.

    Each lane (element of the tile) adds its ``cdiv(AT, splits) * B / TB``
    values in ``lanes``; the lanes are added in float64. float32 lanes
    halve the registers of the accumulators (a lane's few float32 roundings
    stay far below the float64 sum's), float64 lanes keep sums of values
    that cancel (dy's) exact enough for the gradients. The loop runs the
    block's own trip count, not a guarded maximum: cuTile pipelines a loop
    body without a branch (TMA loads into 7 stages of a 2048-element tile),
    where ``if at < AT`` left it one stage, each load waiting for the
    previous tile's sums (on the H200 it bought 37.6 -> 35.0 us only).
    ``options`` go to the loads of x and dy (``load_options``); ``exact``
    (the tiles divide x): those loads without bounds checks.
    """
    ta, tk, tb = t[0], t[1], t[2] if len(t) == 3 else 1
    bt = -(-b // tb)
    at = -(-a // ta)
    acc = f"ct.{lanes}"
    here = _at(t, "at", "kt", "bt")
    params = ["dy", "x", "mean", "inv", "p0", "p1"] if grads else ["x", "p0", "p1"]
    body = ["kt = ct.bid(0)", "sp = ct.bid(1)", f"s0 = ct.full({t}, 0.0, dtype={acc})", "s1 = s0"]
    if grads:
        body += [f"mu = {_vec('mean', t, 'kt')}", f"r = {_vec('inv', t, 'kt')}"]
    else:
        body.append(f"p = {_tile('x', (1, tk, 1)[: len(t)], _at(t, '0', 'kt', '0'))}")
    body += [
        f"for i in range(({at} - sp + {splits - 1}) // {splits}):",
        f"    at = i * {splits} + sp",
        f"    for bt in range({bt}):",
    ]
    inner = []
    if grads:
        inner += [
            f"dyt = {_tile('dy', t, here, acc, exact, options)}",
            f"xh = ct.astype(({_tile('x', t, here, exact=exact, options=options)} - mu) * r, {acc})",
            "s0 = s0 + dyt",
            "s1 = s1 + dyt * xh",
        ]
    else:
        masks = _masks(t, a, b, f"at * {ta}", f"bt * {tb}")
        inner += [*masks, f"d = {_tile('x', t, here, exact=exact, options=options)} - p"]
        if masks:
            inner.append("d = d * mask")
        inner += [f"d = ct.astype(d, {acc})", "s0 = s0 + d", "s1 = s1 + d * d"]
    body += [f"        {line}" for line in inner]
    for k in range(2):
        total = f"ct.sum(ct.astype(s{k}, ct.float64), axis={'(0, 2)' if len(t) == 3 else 0})"
        body.append(f"ct.store(p{k}, index=(sp, kt), tile=ct.reshape({total}, (1, {tk})))")
    return _module(params, body, hints)


def _column_sums(ts: int, tk: int) -> list[str]:
    """Lines adding the float64 partial rows p0 and p1 of this block's channels into s0 and s1."""
    return [
        f"a0 = ct.full(({ts}, {tk}), 0.0, dtype=ct.float64)",
        "a1 = a0",
        "for i in range(steps):",
        f"    a0 = a0 + ct.load(p0, index=(i, kt), shape=({ts}, {tk}), {ZERO})",
        f"    a1 = a1 + ct.load(p1, index=(i, kt), shape=({ts}, {tk}), {ZERO})",
        "s0 = ct.sum(a0, axis=0)",
        "s1 = ct.sum(a1, axis=0)",
    ]


def finalize_stats(tk: int, ts: int, count: int, eps: float, momentum: float | None, flat: bool) -> str:
    """mean, inv_variance (and running statistics) of ``count`` elements per channel; ws rows: mean, inv and the
    mean's float32 remainder (mean - float32(mean)), which the elementwise pass subtracts after float32(mean):
    where |mean| >> std, float32(mean) alone is off by more than the tolerance of y in units of std."""
    running = momentum is not None
    params = ["x", "p0", "p1", "mean", "inv", "wmean", "winv", "wlow"]
    if running:
        params += ["rm", "rv", "nrm", "nrv"]
    body = [
        "kt = ct.bid(0)",
        f"steps = ct.cdiv(p0.shape[0], {ts})",
        *_column_sums(ts, tk),
        f"p = ct.reshape({_tile('x', (1, tk) if flat else (1, tk, 1), '(0, kt)' if flat else '(0, kt, 0)', 'ct.float64')}, ({tk},))",
        f"mu = p + s0 / {_lit(count)}",
        f"var = ct.maximum((s1 - s0 * (s0 / {_lit(count)})) / {_lit(count)}, 0.0)",
        f"r = 1.0 / ct.sqrt(var + {_lit(eps)})",
        "ct.store(mean, index=(kt,), tile=ct.astype(mu, mean.dtype))",
        "ct.store(inv, index=(kt,), tile=ct.astype(r, inv.dtype))",
        "mu32 = ct.astype(mu, ct.float32)",
        "ct.store(wmean, index=(kt,), tile=mu32)",
        "ct.store(winv, index=(kt,), tile=ct.astype(r, ct.float32))",
        "ct.store(wlow, index=(kt,), tile=ct.astype(mu - ct.astype(mu32, ct.float64), ct.float32))",
    ]
    if running:
        keep, unbias = 1.0 - momentum, count / (count - 1)
        for src, dst, value in (("rm", "nrm", "mu"), ("rv", "nrv", f"var * {_lit(unbias)}")):
            old = f"ct.astype(ct.load({src}, index=(kt,), shape=({tk},), {ZERO}), ct.float64)"
            new = f"{_lit(keep)} * {old} + {_lit(momentum)} * {value}"
            body.append(f"ct.store({dst}, index=(kt,), tile=ct.astype({new}, {dst}.dtype))")
    return _module(params, body)


def finalize_grads(tk: int, ts: int, count: int) -> str:
    """dbias = sum dy, dscale = sum dy * x_hat per channel; ws rows: dbias / M, dscale / M."""
    params = ["p0", "p1", "dscale", "dbias", "wc1", "wc2"]
    body = [
        "kt = ct.bid(0)",
        f"steps = ct.cdiv(p0.shape[0], {ts})",
        *_column_sums(ts, tk),
        "ct.store(dbias, index=(kt,), tile=ct.astype(s0, dbias.dtype))",
        "ct.store(dscale, index=(kt,), tile=ct.astype(s1, dscale.dtype))",
        f"ct.store(wc1, index=(kt,), tile=ct.astype(s0 / {_lit(count)}, ct.float32))",
        f"ct.store(wc2, index=(kt,), tile=ct.astype(s1 / {_lit(count)}, ct.float32))",
    ]
    return _module(params, body)


def apply(
    t: Tile,
    shape: tuple[int, int, int],
    grads: bool,
    wide: bool,
    hints: KernelHints | None,
    exact: bool,
    split_mean: bool = False,
) -> str:
    """The elementwise pass over every tile, last tile first; in float64 when ``wide``; with ``split_mean``, the
    mean comes as float32(mean) and its remainder, subtracted one after the other (x - mean to float32's
    precision of the difference, not of the mean: training's statistics, see ``finalize_stats``).

    Inference is judged as an elementwise op (a few float32 ulps of y),
    which float32 cannot keep where (x - mean) * inv * scale cancels
    against bias; float64 can, and the pass stays memory-bound. x is
    loaded before the per-channel vectors. ``exact`` (the tiles divide x):
    loads and stores without bounds checks; with them cuTile wrapped each
    thread's 16-byte loads in their own branches, one load in flight at a
    time (four a thread at 4096 elements), without them it issues all of
    them back to back.
    """
    at, kt, bt = shape
    params = ["dy", "x", "mean", "inv", "s", "c1", "c2", "dx"] if grads else ["x", "mean", "inv", "s", "b", "y"]
    if split_mean:
        params.insert(params.index("mean") + 1, "low")
    f = "ct.float64" if wide else "ct.float32"
    body = [
        f"tile = {at * kt * bt - 1} - ct.bid(0)",
        f"ai = tile // {kt * bt}",
        f"ki = (tile // {bt}) % {kt}",
        f"bi = tile % {bt}",
        f"index = {_at(t, 'ai', 'ki', 'bi')}",
    ]
    vectors = [f"a = {_vec('inv', t, 'ki', f)} * {_vec('s', t, 'ki', f)}", f"mu = {_vec('mean', t, 'ki', f)}"]
    unchecked = ", check_bounds=False" if exact else ""
    if grads:
        body += [
            *vectors,
            f"xh = ({_tile('x', t, 'index', exact=exact)} - mu) * {_vec('inv', t, 'ki')}",
            f"dyt = {_tile('dy', t, 'index', exact=exact)}",
            f"out = a * (dyt - {_vec('c1', t, 'ki')} - xh * {_vec('c2', t, 'ki')})",
            f"ct.store(dx, index=index, tile=ct.astype(out, dx.dtype){unchecked})",
        ]
    else:
        body += [
            f"xt = {_tile('x', t, 'index', f, exact)}",
            *vectors,
            f"centred = xt - mu - {_vec('low', t, 'ki', f)}" if split_mean else "centred = xt - mu",
            f"out = centred * a + {_vec('b', t, 'ki', f)}",
            f"ct.store(y, index=index, tile=ct.astype(out, y.dtype){unchecked})",
        ]
    return _module(params, body, hints)
