"""The validation table: one row a checked tensor, at most ``WIDTH`` columns, and a line per failure.

A row holds what tells a step's verdict at a glance (errors, mismatches);
the worst element and the tolerance of a failing tensor follow the table as
lines wrapped to the same width, and every field in full is in
``ValidationReport.to_json`` (``sigdnn validate --json``). Names longer than
their column are cut in the middle, where ONNX paths repeat themselves least.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from sigdnn.accuracy.compare import Comparison

WIDTH = 120
END_TO_END = "(end to end)"
# (header, justify, widest cell): text capped, numbers short by their format, so that a row stays within WIDTH.
COLUMNS = (
    ("step", "left", 22),
    ("builder", "left", 20),
    ("tensor", "left", 20),
    ("max abs", "right", None),
    ("max rel", "right", None),
    ("max ulp", "right", None),
    ("mismatches", "right", None),
    ("verdict", "left", None),
)
GAP = "  "


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by an ellipsis in the middle (both ends say most)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return f"{text[:head]}…{text[len(text) - (width - 1 - head) :]}"


def row(step: str, builder: str, c: Comparison) -> list[str]:
    cells = [
        step,
        builder,
        c.name,
        f"{c.max_abs_error:.3g}",
        f"{c.max_rel_error:.3g}",
        f"{c.max_ulp_error:.3g}",
        mismatches(c.mismatches + c.nan_inf_mismatches, c.size),
        "PASS" if c.passed else "FAIL",
    ]
    return [cell if widest is None else fit(cell, widest) for cell, (_, _, widest) in zip(cells, COLUMNS)]


def mismatches(count: int, size: int) -> str:
    """count/size exactly when short, in three digits past a million elements (the JSON keeps both exact)."""
    exact = f"{count}/{size}"
    return exact if len(exact) <= 13 else f"{count:.3g}/{size:.3g}"


def failure_lines(checks: Sequence[tuple[str, Comparison]]) -> list[str]:
    """For each failing (step, comparison): where it is worst and the tolerance it broke, wrapped to WIDTH."""
    lines = []
    for step, c in checks:
        if c.passed:
            continue
        text = (
            f"{step} {c.name}: worst at {c.worst_index}: got {c.worst_got!r}, want {c.worst_want!r}; "
            f"tolerance {c.tolerance}"
        )
        lines += textwrap.wrap(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    return lines


def plain(title: str, rows: Sequence[Sequence[str]], details: Sequence[str]) -> str:
    """The rows as plain text under ``title``, the failure lines after them."""
    body = [[name for name, _, _ in COLUMNS], *rows]
    widths = [max(len(r[i]) for r in body) for i in range(len(COLUMNS))]
    lines = [title]
    for r in body:
        cells = (v.rjust(w) if justify == "right" else v.ljust(w) for v, w, (_, justify, _) in zip(r, widths, COLUMNS))
        lines.append(GAP.join(cells).rstrip())
    return "\n".join([*lines, *details])
