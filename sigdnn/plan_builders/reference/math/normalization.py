"""Batch, layer and RMS normalization, forward and backward, in float64 (docs/ops.md's definitions).

All three are one computation on x seen as (A, K, B) (grouping.py): one
mean / inverse variance per K over the M = A*B elements of A and B.

* batchnorm: K is the channel axis; scale and bias are per channel.
* layernorm / rmsnorm: the normalized axes are those where scale's dim
  (scale aligned to x's rank from the right) equals x's; the others are
  batch axes, which make K. So an axis where x's dim is 1 counts as
  normalized; reading it as a batch axis instead would change no value and
  not even the statistics' shape (1 there either way: they keep 1 on every
  normalized axis and x's dim on every batch axis).

Numerics: the variance is two-pass, sum((x - mean)^2) / M, never
E[x^2] - E[x]^2 (which cancels when |mean| >> std). Each block of K
indices is finished while it is in cache (read x once, write y once), and
blocks run on every core (parallel.py). When the reduced elements of one K
are not contiguous enough for that (channels-last batchnorm: B = 1), blocks
of A rows make partial sums in three passes instead.
"""

from __future__ import annotations

import numpy as np

from sigdnn.plan_builders.reference.math.grouping import Grouped, Result
from sigdnn.plan_builders.reference.math.parallel import ieee, parallel_map
from sigdnn.plan_builders.reference.math.sink import Sink, wide

# Elements per block: large enough that NumPy's per-call overhead (~10 calls a block) is noise,
# small enough that a block's float64 temporaries stay in L2.
_BLOCK_ELEMENTS = 1 << 17
_MIN_INNER = 64  # below this many contiguous reduced elements per K, use row blocks

Block = tuple[slice, slice]  # (rows of A, indices of K)


def _blocks(extent: int, per_index: int) -> list[slice]:
    step = max(1, _BLOCK_ELEMENTS // max(per_index, 1))
    return [slice(i, min(extent, i + step)) for i in range(0, extent, step)]


def _sum_ab(a: np.ndarray) -> np.ndarray:
    """Sum over axes 0 and 2 of an (A, k, B) block: (k,)."""
    return np.add.reduce(np.add.reduce(a, axis=2), axis=0)


def _dot_ab(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum(a * b) over axes 0 and 2: (k,)."""
    if hasattr(np, "vecdot"):  # NumPy >= 2: a BLAS dot per row, no temporary
        return np.add.reduce(np.vecdot(a, b), axis=0)
    return np.einsum("akb,akb->k", a, b)


def _plan(g: Grouped) -> tuple[bool, list[Block]]:
    """Cache-sized blocks covering (A, K): whole K indices when each K's elements are contiguous
    enough (then a block holds complete statistics), else runs of A rows (then statistics need
    partial sums over every block first)."""
    a, k, b = g.dims
    if b >= _MIN_INNER or a == 1:
        return True, [(slice(None), ks) for ks in _blocks(k, a * b)]
    return False, [(rows, slice(None)) for rows in _blocks(a, k * b)]


def _part(p: np.ndarray, blk: Block) -> np.ndarray:
    """A (A|1, K|1, B|1) parameter restricted to a block."""
    rows, ks = blk
    return p[rows if p.shape[0] != 1 else slice(None), ks if p.shape[1] != 1 else slice(None)]


def _col(v: np.ndarray, blk: Block) -> np.ndarray:
    """A per-K vector restricted to a block, shaped to broadcast over (rows, k, B)."""
    return v[blk[1]][None, :, None]


def _forward(
    x: np.ndarray,
    reduced: tuple[int, ...],
    scale: np.ndarray,
    bias: np.ndarray | None,
    epsilon: float,
    center: bool,
    y: Sink | None = None,
) -> tuple[np.ndarray | None, Grouped, np.ndarray | None, np.ndarray, np.ndarray]:
    """y (None when written into the sink), the grouping, and per K: mean (None uncentred), inverse std,
    variance (mean square uncentred). x may be float16 / float32: blocks are widened where read."""
    g = Grouped(x, reduced)
    x3 = g.view
    k, m = g.dims[1], g.count
    s3 = g.param(scale)
    b3 = g.param(bias) if bias is not None else None
    result = Result(g, y)
    fresh = x3.dtype != np.float64  # wide() copies each block: the copy can take the block's result
    mean = np.zeros(k)
    var = np.empty(k)
    complete, blocks = _plan(g)
    per_k_scale = s3.shape[0] == 1 and s3.shape[2] == 1

    def centred(blk: Block, xb: np.ndarray, out: np.ndarray) -> np.ndarray:
        return np.subtract(xb, _col(mean, blk), out=out)

    def finish(blk: Block, d: np.ndarray) -> None:
        """d (x - mean) of the block -> y in place: d * inv * scale + bias."""
        inv = 1.0 / np.sqrt(var[blk[1]] + epsilon)
        if per_k_scale:
            d *= (inv * _part(s3, blk)[0, :, 0])[None, :, None]
        else:
            np.einsum("...,...,...->...", d, inv[None, :, None], _part(s3, blk), out=d)  # one pass, not two
        if b3 is not None:
            result.done_by(blk, np.add, d, _part(b3, blk))
        else:
            result.done(blk, d)

    if complete:

        def block(blk: Block) -> None:
            xb = wide(x3[blk])
            if center:
                mean[blk[1]] = _sum_ab(xb) / m
            d = centred(blk, xb, result.scratch(blk, xb, fresh))
            var[blk[1]] = _dot_ab(d, d) / m
            finish(blk, d)

        parallel_map(block, blocks)
    else:
        if center:
            mean[:] = np.sum(parallel_map(lambda blk: _sum_ab(wide(x3[blk])), blocks), axis=0) / m

        def square(blk: Block) -> np.ndarray:
            xb = wide(x3[blk])
            d = centred(blk, xb, np.empty(xb.shape))
            return _dot_ab(d, d)

        var[:] = np.sum(parallel_map(square, blocks), axis=0) / m

        def centred_block(blk: Block) -> np.ndarray:
            xb = wide(x3[blk])
            return centred(blk, xb, result.scratch(blk, xb, fresh))

        parallel_map(lambda blk: finish(blk, centred_block(blk)), blocks)
    inv = 1.0 / np.sqrt(var + epsilon)
    return result.finish(), g, (mean if center else None), inv, var


def _backward(
    dy: np.ndarray,
    x: np.ndarray,
    reduced: tuple[int, ...],
    scale: np.ndarray,
    mean: np.ndarray | None,
    inv_variance: np.ndarray,
    has_dbias: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """dx, dscale, dbias (scale's shape; None without has_dbias) for y = x_hat * scale + bias.

    With x_hat = (x - mean) * inv (mean = 0 for rmsnorm) and g = dy * scale:
    dx = inv * (g - mean(g) - x_hat * mean(g * x_hat)) centred, and
    dx = inv * (g - x_hat * mean(g * x_hat)) for rmsnorm (whose inv depends on
    x only through mean(x^2)). dscale = sum(dy * x_hat) and dbias = sum(dy),
    over the axes where scale is broadcast.
    """
    g = Grouped(x, reduced)
    x3 = g.view
    dy3 = dy.transpose(g.perm).reshape(g.dims)
    k, m = g.dims[1], g.count
    s3 = g.param(scale)
    center = mean is not None
    mu = g.param(mean).reshape(k) if center else np.zeros(k)
    inv = g.param(inv_variance).reshape(k)
    dx3 = np.empty(g.dims)
    complete, blocks = _plan(g)
    param_axes = tuple(i for i in range(3) if s3.shape[i] == 1)  # where dscale / dbias reduce
    per_k_scale = param_axes == (0, 2)  # batchnorm

    def x_hat(blk: Block) -> np.ndarray:
        h = np.subtract(x3[blk], _col(mu, blk))
        h *= _col(inv, blk)
        return h

    def param_sums(blk: Block, h: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Block parts of dscale = sum(dy * x_hat) and dbias = sum(dy), keepdims in the (A, K, B) grouping."""
        dyb = dy3[blk]
        if per_k_scale:
            ds = _dot_ab(dyb, h)[None, :, None]
            db = _sum_ab(dyb)[None, :, None] if has_dbias else None
            return ds, db
        ds = np.add.reduce(dyb * h, axis=param_axes, keepdims=True)
        db = np.add.reduce(dyb, axis=param_axes, keepdims=True) if has_dbias else None
        return ds, db

    def row_sums(
        blk: Block, h: np.ndarray, sums: tuple[np.ndarray, np.ndarray | None]
    ) -> tuple[np.ndarray, np.ndarray]:
        """sum(g) and sum(g * x_hat) per K over the block, g = dy * scale; with a per-K scale,
        which factors out, sum(dy) and sum(dy * x_hat) (the latter is dscale's part)."""
        if per_k_scale:
            return _sum_ab(dy3[blk]), sums[0].reshape(-1)
        gb = dy3[blk] * _part(s3, blk)
        return _sum_ab(gb), _dot_ab(gb, h)

    def dx_block(blk: Block, h: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> None:
        """dx = inv * (g - c1 - x_hat * c2) from row_sums' means c1, c2 shaped (1, k, 1);
        with a per-K scale, dx = (inv * scale) * (dy - c1 - x_hat * c2)."""
        out = dx3[blk]
        if per_k_scale:
            np.subtract(dy3[blk], c1 if center else 0.0, out=out)
        else:
            np.multiply(dy3[blk], _part(s3, blk), out=out)
            if center:
                out -= c1
        h *= c2
        out -= h
        out *= _col(inv, blk) * _part(s3, blk) if per_k_scale else _col(inv, blk)

    if complete:

        def block(blk: Block) -> tuple[np.ndarray, np.ndarray | None]:
            h = x_hat(blk)
            sums = param_sums(blk, h)
            c1, c2 = row_sums(blk, h, sums)
            dx_block(blk, h, c1[None, :, None] / m, c2[None, :, None] / m)
            return sums

        parts = parallel_map(block, blocks)
    else:

        def first(blk: Block) -> tuple[tuple[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]]:
            h = x_hat(blk)
            sums = param_sums(blk, h)
            return sums, row_sums(blk, h, sums)

        both = parallel_map(first, blocks)
        parts = [p for p, _ in both]
        c1 = np.sum([r[0] for _, r in both], axis=0)[None, :, None] / m
        c2 = np.sum([r[1] for _, r in both], axis=0)[None, :, None] / m
        parallel_map(lambda blk: dx_block(blk, x_hat(blk), c1, c2), blocks)
    split = 1 if complete else 0  # the axis the blocks split
    dscale = _gather([p[0] for p in parts], split, s3.shape[split] != 1)
    dbias = _gather([p[1] for p in parts], split, s3.shape[split] != 1) if has_dbias else None
    shape = np.shape(scale)
    return (
        g.restore(dx3),
        _param_grad(g, dscale, shape),
        (_param_grad(g, dbias, shape) if dbias is not None else None),
    )


def _gather(parts: list, axis: int, split: bool) -> np.ndarray:
    """Combine per-block parameter sums: concatenated when the blocks split the parameter's own axis, else summed."""
    return np.concatenate(parts, axis=axis) if split else np.sum(parts, axis=0)


def _param_grad(g: Grouped, grad3: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A gradient in the (A|1, K|1, B|1) grouping back to the parameter's own shape."""
    keep = []
    for i, (lo, hi) in enumerate(g.groups):
        keep += list(g.transposed[lo:hi]) if grad3.shape[i] != 1 else [1] * (hi - lo)
    full = grad3.reshape(keep).transpose(g.inverse)
    return np.ascontiguousarray(full.reshape(shape))


def _channel_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


def normalized_axes(x_shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Layer / RMS norm: the axes where scale's dim equals x's (scale aligned to x's rank from the right)."""
    full = (1,) * (len(x_shape) - len(scale_shape)) + tuple(scale_shape)
    return tuple(i for i, (d, s) in enumerate(zip(x_shape, full)) if s == d)


# -- batchnorm ------------------------------------------------------------------------------


@ieee
def batchnorm_train(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    epsilon: float,
    running_mean: np.ndarray | None = None,
    running_var: np.ndarray | None = None,
    momentum: float | None = None,
    y: Sink | None = None,
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(y, mean, inv_variance, next_running_mean, next_running_var) of x (N, C, *S); y None when
    written into the Sink ``y``.

    Statistics are per channel over N and S, shaped (1, C, 1, ...). The
    running variance takes the unbiased variance var * M / (M - 1), as cuDNN
    and PyTorch keep it (NaN when M = 1: one sample has no unbiased variance).
    The running outputs are None unless running_mean, running_var and momentum are given.
    """
    out, g, mean, inv, var = _forward(x, _channel_axes(x), scale, bias, epsilon, center=True, y=y)
    assert mean is not None
    next_mean = next_var = None
    if running_mean is not None and running_var is not None and momentum is not None:
        m = g.count
        unbiased = var * m / (m - 1) if m > 1 else np.full_like(var, np.nan)
        next_mean = (1.0 - momentum) * np.asarray(running_mean, np.float64) + momentum * g.stat(mean)
        next_var = (1.0 - momentum) * np.asarray(running_var, np.float64) + momentum * g.stat(unbiased)
    return out, g.stat(mean), g.stat(inv), next_mean, next_var


@ieee
def batchnorm_inference(
    x: np.ndarray, mean: np.ndarray, inv_variance: np.ndarray, scale: np.ndarray, bias: np.ndarray
) -> np.ndarray:
    """y = (x - mean) * (inv_variance * scale) + bias, per channel."""
    g = Grouped(x, _channel_axes(x))
    mean3, bias3 = g.param(mean), g.param(bias)
    factor3 = g.param(np.asarray(inv_variance, dtype=np.float64) * np.asarray(scale, dtype=np.float64))
    y3 = np.empty(g.dims)

    def block(blk: Block) -> None:
        out = np.subtract(g.view[blk], _part(mean3, blk), out=y3[blk])
        out *= _part(factor3, blk)
        out += _part(bias3, blk)

    parallel_map(block, _plan(g)[1])
    return g.restore(y3)


@ieee
def batchnorm_backward(
    dy: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray, inv_variance: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dscale, dbias) from the saved mean and inv_variance; dscale and dbias shaped like scale."""
    dx, dscale, dbias = _backward(dy, x, _channel_axes(x), scale, mean, inv_variance, has_dbias=True)
    assert dbias is not None
    return dx, dscale, dbias


# -- layernorm / rmsnorm ------------------------------------------------------------------------------


@ieee
def layernorm(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float, training: bool, y: Sink | None = None
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(y, mean, inv_variance) over the normalized axes (see normalized_axes); stats None unless training;
    y None when written into the Sink ``y``."""
    axes = normalized_axes(x.shape, np.shape(scale))
    out, g, mean, inv, _ = _forward(x, axes, scale, bias, epsilon, center=True, y=y)
    assert mean is not None
    if not training:
        return out, None, None
    return out, g.stat(mean), g.stat(inv)


@ieee
def layernorm_backward(
    dy: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray, inv_variance: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dscale, dbias); dscale and dbias shaped like scale."""
    axes = normalized_axes(x.shape, np.shape(scale))
    dx, dscale, dbias = _backward(dy, x, axes, scale, mean, inv_variance, has_dbias=True)
    assert dbias is not None
    return dx, dscale, dbias


@ieee
def rmsnorm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None,
    epsilon: float,
    training: bool,
    y: Sink | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(y, inv_variance): inv_variance = 1/sqrt(mean(x^2) + eps) over the normalized axes; y = x*inv*scale (+bias);
    y None when written into the Sink ``y``."""
    axes = normalized_axes(x.shape, np.shape(scale))
    out, g, _, inv, _ = _forward(x, axes, scale, bias, epsilon, center=False, y=y)
    return out, (g.stat(inv) if training else None)


@ieee
def rmsnorm_backward(
    dy: np.ndarray, x: np.ndarray, scale: np.ndarray, inv_variance: np.ndarray, has_dbias: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(dx, dscale, dbias or None); dscale and dbias shaped like scale."""
    axes = normalized_axes(x.shape, np.shape(scale))
    return _backward(dy, x, axes, scale, None, inv_variance, has_dbias)
