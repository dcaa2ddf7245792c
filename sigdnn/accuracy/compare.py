"""Compare one tensor against the reference: errors, ulps, mismatches, worst element."""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from sigdnn.accuracy.arrays import HOST, Arrays
from sigdnn.accuracy.tolerances import Tolerance, finfo


@attrs.frozen
class Comparison:
    name: str
    dtype: str
    tolerance: Tolerance
    max_abs_error: float
    max_rel_error: float
    max_ulp_error: float  # in ulps of the output dtype at the reference value (1 for integers)
    mismatches: int
    size: int
    worst_index: tuple[int, ...] | None
    worst_got: float | None
    worst_want: float | None
    nan_inf_mismatches: int

    @property
    def passed(self) -> bool:
        return self.mismatches == 0 and self.nan_inf_mismatches == 0

    def as_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["tolerance"] = str(self.tolerance)
        d["passed"] = self.passed
        return d


@attrs.frozen(eq=False)
class Errors:
    """Per-element errors of one comparison, in float64: what the statistics and the plots are made of."""

    got: np.ndarray
    want: np.ndarray
    finite: np.ndarray  # both values finite
    wrong_special: np.ndarray  # a NaN / Inf where the other side has none, or of the other sign
    abs_error: np.ndarray  # 0 where not finite
    bound: np.ndarray | None  # the allowed abs error per element; None for an exact tolerance
    ulp: np.ndarray  # one ulp of the output dtype at each reference value

    @property
    def mismatched(self) -> np.ndarray:
        if self.bound is None:
            return self.finite & (self.abs_error != 0)
        return self.finite & (self.abs_error > self.bound)


def ulp_of(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype`` at each |value| (float64 in, float64 out); 1 for integer and bool dtypes.

    Below the smallest normal (zero included) the spacing is the subnormal one.
    """
    if dtype.kind not in "fV":
        return np.ones(values.shape)
    info = finfo(dtype)
    magnitude = np.abs(values)
    _, exponent = np.frexp(magnitude)  # |v| = m * 2**exponent, m in [0.5, 1); frexp(0) gives 0
    binade = np.maximum(np.where(magnitude == 0, info.minexp, exponent - 1), int(info.minexp))
    return np.ldexp(1.0, binade - int(info.nmant))


def integer_abs_error(got: np.ndarray, want: np.ndarray) -> np.ndarray | None:
    """|got - want| computed exactly when both are integers (None otherwise), then given as float64.

    Through float64 first, 2**60 + 1 and 2**60 are one value: an off-by-one
    would pass near 2**60 and fail near 0. The difference of two 64-bit
    integers always fits in uint64 (wrapping subtraction of the larger minus
    the smaller), and any nonzero uint64 is a nonzero float64.
    """
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype.kind not in "iub" or w.dtype.kind not in "iub":
        return None
    common = np.result_type(g.dtype, w.dtype, np.int8)
    if common.kind == "f":  # int64 against uint64: no 64-bit type holds both, Python integers do
        return np.abs(g.astype(object) - w.astype(object)).astype(np.float64)
    wide = np.int64 if common.kind == "i" else np.uint64
    a, b = g.astype(wide), w.astype(wide)
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    with np.errstate(over="ignore"):
        return np.where(a >= b, ua - ub, ub - ua).astype(np.float64)


def errors(
    got: np.ndarray,
    want: np.ndarray,
    tolerance: Tolerance,
    terms: np.ndarray | None = None,
    carried: np.ndarray | None = None,
) -> Errors:
    """The per-element errors and bounds of ``got`` against ``want`` (``want`` in the output dtype).

    ``carried``: the absolute error earlier nodes bring to each element (a region's inner nodes for a
    step's exit; every node before it for a graph output), added to the bound; without it a tolerance's
    ``inner * |want|`` stands in.
    """
    dtype = np.asarray(want).dtype
    with np.errstate(invalid="ignore", over="ignore"):
        g = np.asarray(got).astype(np.float64)
        w = np.asarray(want).astype(np.float64)
        finite = np.isfinite(g) & np.isfinite(w)
        every_finite = bool(finite.all())  # the common case: no NaN / Inf work below
        if every_finite:
            wrong_special = np.zeros(finite.shape, bool)
        else:
            same_special = (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w)))
            wrong_special = ~finite & ~same_special
        exact = integer_abs_error(got, want)
        if exact is not None:
            abs_err = exact
        else:
            abs_err = np.abs(g - w) if every_finite else np.where(finite, np.abs(g - w), 0.0)
        bound = None if tolerance.exact else tolerance_bound(HOST, np.abs(w), tolerance, terms, carried)
        ulp = ulp_of(w if every_finite else np.where(finite, w, 0.0), dtype)
    return Errors(g, w, finite, wrong_special, abs_err, bound, ulp)


def tolerance_bound(xp: Arrays, magnitude: Any, tolerance: Tolerance, terms: Any = None, carried: Any = None) -> Any:
    """The |error| each element may have: atol + rtol * |want| (``magnitude``), plus the reduction's share of
    sum(|terms|), plus the ``carried`` error (or, without one, ``inner`` * |want|), in ``xp``'s arrays."""
    bound = xp.add(xp.mul(magnitude, tolerance.rtol), tolerance.atol)
    if terms is not None and tolerance.reduction:
        bound = xp.add(bound, xp.mul(terms, tolerance.reduction))
    if carried is not None:
        return xp.add(bound, carried)
    if tolerance.inner:
        return xp.add(bound, xp.mul(magnitude, tolerance.inner))
    return bound


def compare(
    name: str,
    got: np.ndarray,
    want: np.ndarray,
    tolerance: Tolerance,
    terms: np.ndarray | None = None,
    carried: np.ndarray | None = None,
) -> Comparison:
    """NaN/Inf must match position for position; integers exactly; floats within tolerance.

    ``terms`` is sum(|terms|) per element for a reduction (the reference run
    on absolute inputs); the tolerance's reduction factor scales it.
    ``carried`` as for ``errors``.
    """
    found = errors(got, want, tolerance, terms, carried)
    return summarize(name, str(np.asarray(want).dtype), tolerance, found)


def compare_in(
    xp: Arrays,
    name: str,
    got: Any,
    want: Any,
    tolerance: Tolerance,
    terms: Any = None,
    carried: Any = None,
) -> tuple[Comparison, Errors | None]:
    """``compare`` of arrays that live in ``xp``, and the per-element errors when it fails (for plots).

    Where ``xp`` can summarize a passing comparison itself (the device's ``passing_summary``: a float tensor,
    not an exact tolerance), only the statistics cross to the host; anything else, and every failing
    comparison, is judged on the host as ``compare`` does."""
    dtype = np.dtype(want.dtype)
    summary = getattr(xp, "passing_summary", None)
    if summary is not None and not tolerance.exact and dtype.kind in "fV" and math.prod(want.shape):
        bound = tolerance_bound(xp, xp.magnitude(want), tolerance, terms, carried)
        info = finfo(dtype)
        found = summary(got, want, bound, int(info.nmant), int(info.minexp))
        if found is not None:
            largest, relative, ulps, worst, worst_got, worst_want = found
            index = tuple(int(i) for i in np.unravel_index(worst, tuple(want.shape)))
            size = math.prod(want.shape)
            passed = Comparison(
                name, str(dtype), tolerance, largest, relative, ulps, 0, size, index, worst_got, worst_want, 0
            )
            return passed, None
    on_host = [None if a is None else xp.host(a) for a in (terms, carried)]
    errs = errors(xp.host(got), xp.host(want), tolerance, *on_host)
    comparison = summarize(name, str(dtype), tolerance, errs)
    return comparison, None if comparison.passed else errs


def summarize(name: str, dtype: str, tolerance: Tolerance, e: Errors) -> Comparison:
    """The statistics of one comparison's errors."""
    bad = e.mismatched
    with np.errstate(invalid="ignore", over="ignore"):
        # (abs_error is 0 where not finite; there the relative error is 0 too, whatever the division gives)
        rel_err = np.where(e.finite, e.abs_error / np.maximum(np.abs(e.want), np.finfo(np.float64).tiny), 0.0)
        ulps = e.abs_error / e.ulp  # a float64 error over a float64 subnormal spacing can overflow to inf
    wrong_specials = int(np.count_nonzero(e.wrong_special))
    mismatches = int(np.count_nonzero(bad))
    worst = None
    if e.got.size:
        # A wrong NaN/Inf first, then the largest mismatch, then (all passed) the largest error.
        worst_of = e.wrong_special if wrong_specials else bad if mismatches else None
        score = e.abs_error if worst_of is None else np.where(worst_of, e.abs_error, -1.0)
        worst = np.unravel_index(int(np.argmax(score)), e.got.shape)
    return Comparison(
        name=name,
        dtype=dtype,
        tolerance=tolerance,
        max_abs_error=float(e.abs_error.max(initial=0.0)),
        max_rel_error=float(rel_err.max(initial=0.0)),
        max_ulp_error=float(ulps.max(initial=0.0)),
        mismatches=mismatches,
        size=int(e.got.size),
        worst_index=tuple(int(i) for i in worst) if worst is not None else None,
        worst_got=float(e.got[worst]) if worst is not None else None,
        worst_want=float(e.want[worst]) if worst is not None else None,
        nan_inf_mismatches=wrong_specials,
    )
