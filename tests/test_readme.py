"""The README's Python blocks run as written, and its first lines give the two commands CI relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_python_blocks() -> None:
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_block_runs_as_written(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(README.parent)
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {"__name__": "__readme__"})


def test_the_first_lines_give_the_run_and_test_commands() -> None:
    head = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert head[0].startswith("pip install . && sigdnn run examples/")
    assert "pip install -e '.[test]' torch==2.13.0 && python -m pytest -q" in head[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -q -e '.[test]' torch==2.13.0 && python -m pytest -q" in ci


def test_help_on_pointwise_lists_every_mode_and_parameter() -> None:
    import pydoc

    import sigdnn
    from sigdnn.graph.ops.pointwise import MODES, PARAMS

    text = pydoc.render_doc(sigdnn.Graph.pointwise, renderer=pydoc.plaintext)
    missing = [name for name in (*MODES, *PARAMS) if name not in text]
    assert not missing, f"help(Graph.pointwise) does not name {missing}"


def test_the_readme_reads_in_a_minute() -> None:
    """At most 150 lines, and no table cell past 300 characters: a table, not a changelog."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    long = [cell.strip()[:40] for line in lines if line.startswith("|") for cell in line.split("|") if len(cell) > 300]
    assert not long, f"table cells over 300 characters: {long}"
