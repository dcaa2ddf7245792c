"""The summary table's groups and counts, and the throughput / ETA the progress line shows."""

from __future__ import annotations

import io

from rich.console import Console

from sigdnn.campaign.summary import Group, Throughput, engine_label, progress_display, summarize, summary_table


def row(family: str, dtypes: list[str], verdict: str, builders: list[str] | None = None, **errors: float) -> dict:
    return {"family": family, "dtypes": dtypes, "verdict": verdict, "builders": builders, "engine": None, **errors}


def test_groups_count_cases_failures_errors_and_keep_the_worst_error() -> None:
    rows = [
        row("pointwise[add]", ["float16"], "pass", ["b1"], max_abs_error=0.5, max_ulp_error=1.0),
        row("pointwise[add]", ["float16"], "fail", ["b1"], max_abs_error=2.0, max_ulp_error=0.5),
        row("pointwise[add]", ["float16"], "fail", ["b1"], max_abs_error=1.0, max_ulp_error=9.0),
        row("pointwise[add]", ["float16"], "error"),
        row("pointwise[add]", ["float16", "int32"], "pass", ["b1"]),
        row("matmul", ["float32"], "pass", ["b2", "b3"]),
        {"verdict": "error", "engine": 2001},
    ]
    assert summarize(rows) == [
        Group("?", "?", "2001", 1, 0, 1, 0.0, 0.0),
        Group("matmul", "float32", "b2, b3", 1, 0, 0, 0.0, 0.0),
        Group("pointwise[add]", "float16", "b1", 3, 2, 0, 2.0, 9.0),
        Group("pointwise[add]", "float16", "default", 1, 0, 1, 0.0, 0.0),
        Group("pointwise[add]", "float16/int32", "b1", 1, 0, 0, 0.0, 0.0),
    ]
    assert engine_label({"builders": [], "engine": "x"}) == "x" and engine_label({}) == "default"


def test_the_table_shows_every_group() -> None:
    out = io.StringIO()
    Console(file=out, width=200).print(summary_table([Group("mm", "float32", "e", 10, 3, 1, 0.25, 7.0)], "summary"))
    text = out.getvalue()
    assert "summary" in text and "worst ulp" in text
    assert text.split("\n")[-2].split() == ["mm", "float32", "e", "10", "3", "1", "0.25", "7"]


def test_throughput_and_eta_from_the_cases_done() -> None:
    now = [100.0]
    meter = Throughput(10, clock=lambda: now[0])
    assert (meter.rate, meter.eta, meter.text()) == (0.0, None, "0.0 cases/s, ETA ?")
    now[0] = 102.0
    meter.advance()
    meter.advance(3)
    assert (meter.done, meter.rate, meter.eta, meter.text()) == (4, 2.0, 3.0, "2.0 cases/s, ETA 3 s")


def test_the_progress_display_counts_without_a_terminal() -> None:
    with progress_display(3, lambda: 1) as advance:
        assert advance().startswith("1/3, 1 failing · ")
        assert advance().endswith(" s") and advance().startswith("3/3")
