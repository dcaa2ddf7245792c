"""Compare one tensor against the reference: errors, mismatches, worst element."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from sigdnn.validation.tolerances import Tolerance


@attrs.frozen
class Comparison:
    name: str
    dtype: str
    tolerance: Tolerance
    max_abs_error: float
    max_rel_error: float
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


def compare(
    name: str, got: np.ndarray, want: np.ndarray, tolerance: Tolerance, terms: np.ndarray | None = None
) -> Comparison:
    """NaN/Inf must match position for position; integers exactly; floats within tolerance.

    ``terms`` is sum(|terms|) per element for a reduction (the reference run
    on absolute inputs); the tolerance's reduction factor scales it.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        return _compare(name, got, want, tolerance, terms)


def _compare(
    name: str, got: np.ndarray, want: np.ndarray, tolerance: Tolerance, terms: np.ndarray | None
) -> Comparison:
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    special = ~np.isfinite(g) | ~np.isfinite(w)
    same_special = (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w)))
    wrong_special = special & ~same_special
    finite = ~special
    abs_err = np.where(finite, np.abs(g - w), 0.0)
    rel_err = np.where(finite, abs_err / np.maximum(np.abs(w), np.finfo(np.float64).tiny), 0.0)
    if tolerance.exact:
        bad = finite & (abs_err != 0)
    else:
        bound = tolerance.atol + tolerance.rtol * np.abs(w)
        if terms is not None and tolerance.reduction:
            bound = bound + tolerance.reduction * np.asarray(terms, dtype=np.float64)
        bad = finite & (abs_err > bound)
    worst = None
    if g.size:
        # A wrong NaN/Inf first, then the largest mismatch, then (all passed) the largest error.
        rank = np.where(wrong_special, 2, np.where(bad, 1, 0))
        score = np.where(rank == rank.max(), abs_err, -1.0)
        worst = np.unravel_index(int(np.argmax(score)), g.shape)
    return Comparison(
        name=name,
        dtype=str(np.asarray(want).dtype),
        tolerance=tolerance,
        max_abs_error=float(abs_err.max(initial=0.0)),
        max_rel_error=float(rel_err.max(initial=0.0)),
        mismatches=int(np.count_nonzero(bad)),
        size=int(g.size),
        worst_index=tuple(int(i) for i in worst) if worst is not None else None,
        worst_got=float(g[worst]) if worst is not None else None,
        worst_want=float(w[worst]) if worst is not None else None,
        nan_inf_mismatches=int(np.count_nonzero(wrong_special)),
    )
