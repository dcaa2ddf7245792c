"""Per-channel kernels as cuTile source: batchnorm's partial sums, finalize and elementwise passes.

x is an (A, C, B) array (``views.channels``) walked in (TA, TK, TB) tiles.

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

from sigdnn.plan_builders.cutile.rowgen import ZERO, KernelHints, _lit, _module


def _tile(array: str, t: tuple[int, int, int], index: str, dtype: str = "ct.float32") -> str:
    return f"ct.astype(ct.load({array}, index={index}, shape={t}, {ZERO}), {dtype})"


def _vec(array: str, tk: int, index: str, dtype: str = "ct.float32") -> str:
    """A per-channel vector's TK entries at channel tile ``index`` as a (1, TK, 1) tile."""
    load = f"ct.load({array}, index=({index},), shape=({tk},), {ZERO})"
    return f"ct.reshape(ct.astype({load}, {dtype}), (1, {tk}, 1))"


def _masks(t: tuple[int, int, int], a: int, b: int, a0: str, b0: str) -> list[str]:
    """Lines defining ``mask``: 1.0 where the tile's (a, b) lies inside x, else 0 (only where a tile can overhang)."""
    ta, _, tb = t
    parts = []
    if a % ta:
        parts.append(f"ct.reshape(ct.where(ct.arange({ta}, dtype=ct.int32) + {a0} < {a}, 1.0, 0.0), ({ta}, 1, 1))")
    if b % tb:
        parts.append(f"ct.reshape(ct.where(ct.arange({tb}, dtype=ct.int32) + {b0} < {b}, 1.0, 0.0), (1, 1, {tb}))")
    return [f"mask = {' * '.join(parts)}"] if parts else []


def partials(
    t: tuple[int, int, int],
    a: int,
    b: int,
    per: int,
    splits: int,
    grads: bool,
    lanes: str = "float64",
    hints: KernelHints | None = None,
) -> str:
    """Partial sums over A-tiles sp + i * splits (i < per) and all of B, per channel.

    Each lane (element of the tile) adds its ``per * B / TB`` values in
    ``lanes``; the lanes are added in float64. float32 lanes halve the
    registers of the accumulators (a lane's few float32 roundings stay
    far below the float64 sum's), float64 lanes keep sums of values that
    cancel (dy's) exact enough for the gradients.
    """
    ta, tk, tb = t
    bt = -(-b // tb)
    at = -(-a // ta)
    acc = f"ct.{lanes}"
    params = ["dy", "x", "mean", "inv", "p0", "p1"] if grads else ["x", "p0", "p1"]
    body = ["kt = ct.bid(0)", "sp = ct.bid(1)", f"s0 = ct.full({t}, 0.0, dtype={acc})", "s1 = s0"]
    if grads:
        body += [f"mu = {_vec('mean', tk, 'kt')}", f"r = {_vec('inv', tk, 'kt')}"]
    else:
        body.append(f"p = {_tile('x', (1, tk, 1), '(0, kt, 0)')}")
    body += [
        f"for i in range({per}):",
        f"    at = i * {splits} + sp",
        f"    if at < {at}:",
        f"        for bt in range({bt}):",
    ]
    inner = []
    if grads:
        inner += [
            f"dyt = {_tile('dy', t, '(at, kt, bt)', acc)}",
            f"xh = ct.astype(({_tile('x', t, '(at, kt, bt)')} - mu) * r, {acc})",
            "s0 = s0 + dyt",
            "s1 = s1 + dyt * xh",
        ]
    else:
        masks = _masks(t, a, b, f"at * {ta}", f"bt * {tb}")
        inner += [*masks, f"d = {_tile('x', t, '(at, kt, bt)')} - p"]
        if masks:
            inner.append("d = d * mask")
        inner += [f"d = ct.astype(d, {acc})", "s0 = s0 + d", "s1 = s1 + d * d"]
    body += [f"            {line}" for line in inner]
    for k in range(2):
        total = f"ct.sum(ct.astype(s{k}, ct.float64), axis=(0, 2))"
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


def finalize_stats(tk: int, ts: int, count: int, eps: float, momentum: float | None) -> str:
    """mean, inv_variance (and running statistics) of ``count`` elements per channel; ws rows: mean, inv."""
    running = momentum is not None
    params = ["x", "p0", "p1", "mean", "inv", "wmean", "winv"]
    if running:
        params += ["rm", "rv", "nrm", "nrv"]
    body = [
        "kt = ct.bid(0)",
        f"steps = ct.cdiv(p0.shape[0], {ts})",
        *_column_sums(ts, tk),
        f"p = ct.reshape({_tile('x', (1, tk, 1), '(0, kt, 0)', 'ct.float64')}, ({tk},))",
        f"mu = p + s0 / {_lit(count)}",
        f"var = ct.maximum((s1 - s0 * (s0 / {_lit(count)})) / {_lit(count)}, 0.0)",
        f"r = 1.0 / ct.sqrt(var + {_lit(eps)})",
        "ct.store(mean, index=(kt,), tile=ct.astype(mu, mean.dtype))",
        "ct.store(inv, index=(kt,), tile=ct.astype(r, inv.dtype))",
        "ct.store(wmean, index=(kt,), tile=ct.astype(mu, ct.float32))",
        "ct.store(winv, index=(kt,), tile=ct.astype(r, ct.float32))",
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
    t: tuple[int, int, int],
    shape: tuple[int, int, int],
    grads: bool,
    wide: bool = False,
    hints: KernelHints | None = None,
) -> str:
    """The elementwise pass over every tile, last tile first; in float64 when ``wide``.

    Inference is judged as an elementwise op (a few float32 ulps of y),
    which float32 cannot keep where (x - mean) * inv * scale cancels
    against bias; float64 can, and the pass stays memory-bound.
    """
    at, kt, bt = shape
    params = ["dy", "x", "mean", "inv", "s", "c1", "c2", "dx"] if grads else ["x", "mean", "inv", "s", "b", "y"]
    tk = t[1]
    f = "ct.float64" if wide else "ct.float32"
    body = [
        f"tile = {at * kt * bt - 1} - ct.bid(0)",
        f"ai = tile // {kt * bt}",
        f"ki = (tile // {bt}) % {kt}",
        f"bi = tile % {bt}",
        "index = (ai, ki, bi)",
        f"a = {_vec('inv', tk, 'ki', f)} * {_vec('s', tk, 'ki', f)}",
        f"mu = {_vec('mean', tk, 'ki', f)}",
    ]
    if grads:
        body += [
            f"xh = ({_tile('x', t, 'index')} - mu) * {_vec('inv', tk, 'ki')}",
            f"out = a * ({_tile('dy', t, 'index')} - {_vec('c1', tk, 'ki')} - xh * {_vec('c2', tk, 'ki')})",
            "ct.store(dx, index=index, tile=ct.astype(out, dx.dtype))",
        ]
    else:
        body += [
            f"out = ({_tile('x', t, 'index', f)} - mu) * a + {_vec('b', tk, 'ki', f)}",
            "ct.store(y, index=index, tile=ct.astype(out, y.dtype))",
        ]
    return _module(params, body, hints)
