"""stdout for results (tables, JSON), stderr for progress, and the formats of times and numbers in them."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any


class Screen:
    """stdout for results (tables, JSON), stderr for progress; rich only once something is drawn."""

    def __init__(self) -> None:
        self._out: Any = None

    @property
    def out(self) -> Any:
        if self._out is None:
            from rich.console import Console

            self._out = Console(markup=False, highlight=False, emoji=False)
            if not self._out.is_terminal:  # piped: lines as long as their content, for grep and scripts
                self._out.width = 1 << 16
        return self._out

    def line(self, text: str = "") -> None:
        print(text)

    def json(self, data: Any) -> None:
        print(json.dumps(data, indent=2, allow_nan=False))

    def table(self, title: str | None, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]) -> None:
        """A table; columns are (header, "left" | "right")."""
        from rich import box
        from rich.table import Table

        sys.stdout.flush()
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
        for header, justify in columns:
            table.add_column(header, justify=justify)
        for row in rows:
            table.add_row(*row)
        self.out.print(table)

    @contextlib.contextmanager
    def progress(self, total: int | None = None) -> Iterator[Any]:
        """A live display on stderr while something runs, when stderr is a terminal; yields update(text)."""
        if not (sys.stderr.isatty() or os.environ.get("FORCE_COLOR")):  # as rich decides; its import costs 0.2 s
            yield lambda text, advance=0: None
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = Console(stderr=True, markup=False, highlight=False)
        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("", total=total)

            def update(text: str, advance: int = 0) -> None:
                bar.update(task, description=text, advance=advance)

            yield update


def duration(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.0f} µs"
    return f"{t * 1000:.0f} ms" if t < 1 else f"{t:.2f} s"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def left(*headers: str) -> list[tuple[str, str]]:
    """Table columns justified left."""
    return [(h, "left") for h in headers]


def right(*headers: str) -> list[tuple[str, str]]:
    """Table columns justified right."""
    return [(h, "right") for h in headers]
