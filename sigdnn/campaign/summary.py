"""The end-of-campaign table (op family x dtype x engine) and the live progress line.

Aggregation is plain Python; rich is imported only to draw.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from sigdnn.campaign.judge import ERROR, FAIL


@attrs.define
class Group:
    family: str
    dtype: str
    engine: str
    cases: int = 0
    failures: int = 0
    errors: int = 0
    worst_abs: float = 0.0
    worst_ulp: float = 0.0


def engine_label(row: dict[str, Any]) -> str:
    return ", ".join(row.get("builders") or ()) or str(row.get("engine") or "default")


def summarize(rows: Iterable[dict[str, Any]]) -> list[Group]:
    """One group per (op family, dtypes, engine), sorted; a case that errored counts apart from failures."""
    groups: dict[tuple[str, str, str], Group] = {}
    for row in rows:
        key = (row.get("family", "?"), "/".join(row.get("dtypes", ())) or "?", engine_label(row))
        group = groups.setdefault(key, Group(*key))
        group.cases += 1
        group.failures += row["verdict"] == FAIL
        group.errors += row["verdict"] == ERROR
        group.worst_abs = max(group.worst_abs, row.get("max_abs_error", 0.0))
        group.worst_ulp = max(group.worst_ulp, row.get("max_ulp_error", 0.0))
    return [groups[k] for k in sorted(groups)]


def summary_table(groups: list[Group], title: str) -> Any:
    """A rich Table of the groups."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
    for header in ("op family", "dtype", "engine"):
        table.add_column(header)
    for header in ("cases", "failures", "errors", "worst abs", "worst ulp"):
        table.add_column(header, justify="right")
    for g in groups:
        table.add_row(
            g.family,
            g.dtype,
            g.engine,
            str(g.cases),
            str(g.failures),
            str(g.errors),
            f"{g.worst_abs:.3g}",
            f"{g.worst_ulp:.3g}",
        )
    return table


class Throughput:
    """Cases per second over the cases this run did (not the ones a resume skipped), and the ETA."""

    def __init__(self, total: int, clock: Any = time.monotonic) -> None:
        self.total = total
        self.done = 0
        self._clock = clock
        self._start = clock()

    def advance(self, n: int = 1) -> None:
        self.done += n

    @property
    def rate(self) -> float:
        elapsed = self._clock() - self._start
        return self.done / elapsed if elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        rate = self.rate
        return (self.total - self.done) / rate if rate > 0 else None

    def text(self) -> str:
        eta = self.eta
        left = "?" if eta is None else f"{eta:.0f} s"
        return f"{self.rate:.1f} cases/s, ETA {left}"


@contextlib.contextmanager
def progress_display(total: int, failures_of: Any, enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar on stderr with throughput and ETA; yields ``advance()``, which returns the line shown."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, markup=False, highlight=False)
    meter = Throughput(total)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True, disable=not (enabled and console.is_terminal)) as bar:
        task = bar.add_task("campaign", total=total)

        def advance() -> str:
            meter.advance()
            line = f"{meter.done}/{total}, {failures_of()} failing · {meter.text()}"
            bar.update(task, advance=1, description=line)
            return line

        yield advance
