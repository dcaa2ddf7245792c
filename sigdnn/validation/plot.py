"""Error-distribution plots of failing validation checks (``sigdnn validate --plot DIR``).

A failing step is easier to diagnose from the shape of its errors than from
one worst element: errors spread evenly a little above the bound suggest a
wrong accumulation dtype or epsilon; a few huge ones, an indexing bug at a
tile edge. Each plot shows the error over the bound per element (log scale,
the bound at 1) and the error against the reference value. matplotlib is an
optional extra (``sigdnn[plot]``), imported only here.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from sigdnn.accuracy.compare import Errors
from sigdnn.errors import UsageError
from sigdnn.io.files import write_file
from sigdnn.validation.checks import NodeCheck, ValidationReport

MAX_POINTS = 20_000  # a scatter of more points says nothing more and slows the drawing


def plot_failures(report: ValidationReport, directory: str, label: str) -> list[str]:
    """One PNG per failing step tensor of ``report`` in ``directory`` (created); returns the paths."""
    failing = report.failures
    if not failing:
        return []
    plt = pyplot()
    os.makedirs(directory, exist_ok=True)
    paths = []
    for check in failing:
        name = _file_name(f"{label}_{check.node}_{check.comparison.name}")
        path = os.path.join(directory, f"{name}.png")
        figure = _figure(plt, check, f"{report.graph} ({label})")
        try:
            write_file(path, lambda f, fig=figure: fig.savefig(f, format="png"), what="--plot file")
        finally:
            plt.close(figure)
        paths.append(path)
    return paths


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib; install it with: pip install 'sigdnn[plot]'") from None
    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot as plt

    return plt


def _file_name(text: str) -> str:
    """A file name of letters, digits, '.', '_' and '-' only (node names may hold anything)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:150] or "check"


def _figure(plt: Any, check: NodeCheck, title: str) -> Any:
    e = check.errors
    c = check.comparison
    assert e is not None  # a failing check keeps its errors
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    figure.suptitle(
        f"{title}: step {check.node} ({check.builder}), tensor {c.name}\n"
        f"{c.mismatches + c.nan_inf_mismatches} of {c.size} elements fail; tolerance {c.tolerance}"
    )
    ratio = _over_bound(e)
    shown = ratio[np.isfinite(ratio) & (ratio > 0)]
    left.hist(np.log10(shown), bins="auto")
    left.axvline(0.0, color="tab:red", linestyle="--", label="the bound")
    what = "error / allowed error" if e.bound is not None else "abs error (exact tolerance)"
    left.set_xlabel(f"log10 of {what}")
    left.set_ylabel("elements")
    left.legend()
    finite, mismatched = e.finite.ravel(), e.mismatched.ravel()
    over = _sample(np.flatnonzero(mismatched), MAX_POINTS // 2)  # every failing element, or a spread of them
    within = _sample(np.flatnonzero(finite & ~mismatched), MAX_POINTS - len(over))
    for pick, color, label in ((within, "tab:blue", "within"), (over, "tab:red", "over the bound")):
        right.scatter(e.want.ravel()[pick], e.abs_error.ravel()[pick], color=color, label=label)
    if e.bound is not None:
        pick = np.concatenate([within, over])
        order = pick[np.argsort(e.want.ravel()[pick])]
        right.plot(e.want.ravel()[order], e.bound.ravel()[order], color="black", label="bound")
    right.set_xlabel("reference value")
    right.set_ylabel("abs error")
    positive = e.abs_error[e.abs_error > 0]
    right.set_yscale("symlog", linthresh=float(positive.min()) if positive.size else 1.0)  # zeros sit below it
    right.legend()
    return figure


def _over_bound(e: Errors) -> np.ndarray:
    """Each finite element's error as a multiple of its bound (the abs error itself when exact)."""
    error = e.abs_error[e.finite]
    if e.bound is None:
        return error
    with np.errstate(divide="ignore", invalid="ignore"):
        return error / e.bound[e.finite]


def _sample(indices: np.ndarray, most: int) -> np.ndarray:
    """At most ``most`` of ``indices``, evenly spaced, so a plot of a huge tensor stays quick."""
    return indices[np.linspace(0, indices.size - 1, min(most, indices.size)).astype(np.int64)]
