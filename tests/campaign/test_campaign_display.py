"""What the campaign shows: the summary table's columns and the progress bar on a terminal.

The labels are stated here, not read back from the code: they are what a user reads.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from sigdnn.campaign.summary import Group, Throughput, progress_display, summary_table

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_table_has_its_title_and_columns_in_order_numbers_right_aligned() -> None:
    out = io.StringIO()
    groups = [Group("mm", "float32", "e", 10, 3, 1, 0.25, 7.0), Group("pointwise[add]", "bf16", "b1", 2, 0, 0, 1e-9, 0)]
    Console(file=out, width=200, markup=False).print(summary_table(groups, "the summary"))  # as the CLI's console
    lines = [line for line in out.getvalue().split("\n") if line.strip()]
    assert lines[0].startswith("the summary")  # left-justified title
    assert re.split(r"\s{2,}", lines[1].strip()) == [
        "op family", "dtype", "engine", "cases", "failures", "errors", "worst abs", "worst ulp"
    ]  # fmt: skip
    first, second = lines[-2], lines[-1]
    assert first.split() == ["mm", "float32", "e", "10", "3", "1", "0.25", "7"]
    assert second.split() == ["pointwise[add]", "bf16", "b1", "2", "0", "0", "1e-09", "0"]
    assert first.index("mm") == second.index("pointwise")  # text columns left-aligned
    assert first.rindex("10") + 2 == second.rindex("2") + 1  # numbers right-aligned: "10" ends where "2" does
    assert first.endswith("7") and second.endswith("0")


def frames(err: str) -> list[str]:
    return [ANSI.sub("", f).strip() for f in err.split("\r") if ANSI.sub("", f).strip()]


def test_the_progress_bar_draws_on_stderr_of_a_terminal_and_goes_away(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats the captured stderr as a terminal
    with progress_display(3, lambda: 1) as advance:
        advance()
        advance()
    out, err = capsys.readouterr()
    assert out == ""
    shown = frames(err)
    assert shown[0].startswith("campaign ") and shown[0].split()[-2] == "0/3"  # then the elapsed time
    assert shown[-1].startswith("2/3, 1 failing · ") and shown[-1].split()[-2] == "2/3"
    assert err.endswith("\x1b[2K")  # transient: the last write erases the bar's line


@pytest.mark.parametrize("terminal", [False, True])
def test_the_progress_bar_stays_off_when_disabled_or_not_a_terminal(
    terminal: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    with progress_display(2, lambda: 0, enabled=False) as advance:
        assert advance().startswith("1/2, 0 failing")
    if not terminal:
        with progress_display(2, lambda: 0) as advance:
            advance()
    assert capsys.readouterr() == ("", "")


def test_a_slow_campaign_still_has_an_eta() -> None:
    now = [0.0]
    meter = Throughput(10, clock=lambda: now[0])
    meter.advance()
    now[0] = 4.0  # a quarter of a case per second
    assert (meter.rate, meter.eta, meter.text()) == (0.25, 36.0, "0.2 cases/s, ETA 36 s")
