"""The error-distribution plot draws what the comparison found: every failing element, the bound, the ratios."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.compare import errors, summarize
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.validation import plot
from sigdnn.validation.checks import NodeCheck, ValidationReport

matplotlib = pytest.importorskip("matplotlib")

TOL = Tolerance(atol=0.5, rtol=0.25)


def check(got: np.ndarray, want: np.ndarray, tolerance: Tolerance = TOL) -> NodeCheck:
    found = errors(got, want, tolerance)
    return NodeCheck("step", "plugin.x", summarize("t", str(want.dtype), tolerance, found), found)


def drawn(c: NodeCheck) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(histogram counts, within points, over points, bound line) of the figure made for ``c``."""
    figure = plot._figure(plot.pyplot(), c, "g")
    assert len(figure.axes[1].collections) == 2  # the within and over scatters, nothing else
    left, right = figure.axes
    counts = np.array([patch.get_height() for patch in left.patches])
    within, over = (np.asarray(s.get_offsets()) for s in right.collections)
    lines = [line for line in right.get_lines() if line.get_label() == "bound"]
    bound = np.asarray(lines[0].get_xydata()) if lines else None
    plot.pyplot().close(figure)
    return counts, within, over, bound


def test_the_figure_shows_every_failing_element_and_the_bound() -> None:
    want = np.array([0.0, 1.0, 2.0, 4.0, -8.0, 3.0])
    got = want + np.array([0.0, 0.25, 1.5, 1.0, 0.5, np.nan])  # bounds 0.5 .. 2.5: index 2 fails
    c = check(got, want)
    assert c.comparison.mismatches == 1 and c.comparison.nan_inf_mismatches == 1
    counts, within, over, bound = drawn(c)
    assert counts.sum() == 4  # the finite non-zero ratios: 0.25/0.75, 1.5/1.0, 1/1.5, 0.5/2.5
    assert over.tolist() == [[2.0, 1.5]]
    assert sorted(map(tuple, within.tolist())) == [(-8.0, 0.5), (0.0, 0.0), (1.0, 0.25), (4.0, 1.0)]
    assert bound is not None
    assert bound.tolist() == [[-8.0, 2.5], [0.0, 0.5], [1.0, 0.75], [2.0, 1.0], [4.0, 1.5]]  # sorted by value


def test_the_figure_says_what_it_shows() -> None:
    want = np.array([1.0, 2.0, 3.0, 5.0])
    c = check(want + np.array([0.0, 0.5, 9.0, np.inf]), want)
    figure = plot._figure(plot.pyplot(), c, "graph g (seed 3)")
    left, right = figure.axes
    title = figure.get_suptitle()
    assert title.startswith("graph g (seed 3): step step (plugin.x), tensor t\n")
    assert title.endswith("2 of 4 elements fail; tolerance atol 0.5 rtol 0.25")
    assert left.get_xlabel() == "log10 of error / allowed error" and left.get_ylabel() == "elements"
    (line,) = left.get_lines()
    assert line.get_xdata()[0] == 0.0 and line.get_label() == "the bound"  # log10(1): at the bound
    assert left.get_xlim()[0] < 0.0 < left.get_xlim()[1]  # the bound is in view even when every ratio is above
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["the bound"]
    assert right.get_xlabel() == "reference value" and right.get_ylabel() == "abs error"
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["within", "over the bound", "bound"]
    assert right.get_yscale() == "symlog"
    assert right.yaxis.get_transform().linthresh == 0.5  # the smallest non-zero error: zeros sit below it
    plot.pyplot().close(figure)


def test_a_failure_of_special_values_alone_still_draws() -> None:
    c = check(np.array([np.nan, 1.0]), np.array([1.0, 1.0]))
    figure = plot._figure(plot.pyplot(), c, "g")
    assert figure.axes[1].yaxis.get_transform().linthresh == 1.0  # no non-zero error to scale by
    assert sum(p.get_height() for p in figure.axes[0].patches) == 0
    plot.pyplot().close(figure)


def test_exact_tolerances_plot_the_plain_error() -> None:
    ints = check(np.array([3, 9, 5]), np.array([3, 5, 5]), Tolerance(0.0, 0.0, exact=True))
    figure = plot._figure(plot.pyplot(), ints, "g")
    assert figure.axes[0].get_xlabel() == "log10 of abs error (exact tolerance)"
    plot.pyplot().close(figure)


def test_ratios_are_error_over_bound_and_the_plain_error_when_exact() -> None:
    want = np.array([1.0, 2.0, np.inf])
    got = np.array([1.5, 2.0, 1.0])
    assert plot._over_bound(errors(got, want, TOL)).tolist() == [0.5 / 0.75, 0.0]
    exact = errors(np.array([3, 9]), np.array([3, 5]), Tolerance(0.0, 0.0, exact=True))
    assert plot._over_bound(exact).tolist() == [0.0, 4.0]
    ints = check(np.array([3, 9, 5]), np.array([3, 5, 5]), Tolerance(0.0, 0.0, exact=True))
    counts, _, over, bound = drawn(ints)
    assert counts.sum() == 1 and over.tolist() == [[5.0, 4.0]] and bound is None


def test_large_tensors_are_sampled_but_keep_their_failures() -> None:
    n = 3 * plot.MAX_POINTS
    want = np.linspace(-1, 1, n)
    got = want.copy()
    got[::997] += 10.0  # 61 failures spread over the tensor
    _, within, over, _ = drawn(check(got, want))
    assert len(over) == len(range(0, n, 997))
    assert len(within) + len(over) == plot.MAX_POINTS
    _, within, over, _ = drawn(check(want + 10.0, want))  # everything fails: half the points, evenly spread
    assert len(over) == plot.MAX_POINTS // 2 and len(within) == 0
    assert over[0, 0] == want[0] and over[-1, 0] == want[-1]


def test_sample_is_even_and_keeps_both_ends() -> None:
    indices = np.arange(10, 110)
    assert plot._sample(indices, 200).tolist() == indices.tolist()
    assert plot._sample(indices, 100).tolist() == indices.tolist()
    picked = plot._sample(indices, 5)
    assert picked.tolist() == [10, 34, 59, 84, 109]


def test_file_names_hold_only_safe_characters() -> None:
    assert plot._file_name("g.sdg_seed0_conv/1::out 0") == "g.sdg_seed0_conv_1_out_0"
    assert plot._file_name("...") == "check"
    assert plot._file_name("_conv.X") == "conv.X"  # only '.' and '_' are trimmed
    assert len(plot._file_name("x" * 400)) == 150


def test_only_failing_checks_are_drawn(tmp_path) -> None:
    good = check(np.array([1.0]), np.array([1.0]))
    bad = check(np.array([9.0]), np.array([1.0]))
    assert plot.plot_failures(ValidationReport("g", (good,), ()), str(tmp_path / "none"), "x") == []
    assert not (tmp_path / "none").exists()
    paths = plot.plot_failures(ValidationReport("g", (good, bad), ()), str(tmp_path / "p"), "run")
    assert [p.rsplit("/", 1)[1] for p in paths] == ["run_step_t.png"]
    assert plot.pyplot().get_fignums() == []  # every figure closed: a long validation run does not pile them up
    (tmp_path / "q" / "run_step_t.png").mkdir(parents=True)  # a directory where the plot goes
    with pytest.raises(sigdnn.SigdnnError, match=r"^--plot file "):
        plot.plot_failures(ValidationReport("g", (bad,), ()), str(tmp_path / "q"), "run")
