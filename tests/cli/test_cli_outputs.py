"""No command writes over a file it reads (#32).

``validate --json a.sdg b.sdg`` took a.sdg as the JSON file and overwrote the
graph; ``run --out`` naming the inputs or the graph and ``import -o`` naming
its source replaced them. ``--json`` now means JSON on stdout everywhere, a
file is written only through an explicit output option, and an output that
is (through any spelling: a link, ``..``, a hard link) a file the command
reads is refused with exit 2 before any work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import add_graph, assert_one_line_error, cli

ALIASES = {
    "the same path": lambda f: f,
    "a dotted path": lambda f: f.parent / "sub" / ".." / f.name,
    "a symbolic link": lambda f: _link(f, "link"),
    "a hard link": lambda f: _hard(f),
}


def _link(target: Path, name: str) -> Path:
    link = target.parent / name
    link.symlink_to(target)
    return link


def _hard(target: Path) -> Path:
    other = target.parent / "hard"
    os.link(target, other)
    return other


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    return tmp_path


def test_validate_json_flag_prints_to_stdout_and_writes_no_file(folder: Path, capsys: pytest.CaptureFixture[str]):
    a, b = add_graph(folder / "a.sdg"), add_graph(folder / "b.sdg", name="other")
    before = a.read_bytes()
    code, out, err = cli(capsys, "validate", "--json", a, b, "--backend", "reference")
    assert code == 0, err
    assert [r["file"] for r in json.loads(out)["runs"]] == [str(a), str(b)]
    assert a.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["a.sdg", "b.sdg", "sub"]


@pytest.mark.parametrize("alias", ALIASES)
def test_validate_report_over_a_graph_is_refused(folder: Path, capsys: pytest.CaptureFixture[str], alias: str):
    a = add_graph(folder / "a.sdg")
    before = a.read_bytes()
    code, out, err = cli(capsys, "validate", a, "--backend", "reference", "--report", ALIASES[alias](a))
    assert_one_line_error(code, err, "--report file", "is the graph file", "choose another output file")
    assert a.read_bytes() == before and out == ""


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("option", ["--out", "--save-inputs"])
def test_run_outputs_over_the_graph_or_the_inputs_are_refused(
    folder: Path, capsys: pytest.CaptureFixture[str], alias: str, option: str
) -> None:
    graph = add_graph(folder / "g.sdg")
    inputs = folder / "in.npz"
    np.savez(inputs, a=np.ones((2, 3), np.float32), b=np.ones((2, 3), np.float32))
    saved = graph.read_bytes(), inputs.read_bytes()
    for target, what in ((inputs, "--inputs file"), (graph, "graph file")):
        code, _, err = cli(capsys, "run", graph, "--inputs", inputs, option, ALIASES[alias](target))
        assert_one_line_error(code, err, f"{option} file", f"is the {what}")
        assert (graph.read_bytes(), inputs.read_bytes()) == saved
        for extra in ("link", "hard"):
            if (folder / extra).exists() or (folder / extra).is_symlink():
                (folder / extra).unlink()


def test_run_out_and_save_inputs_naming_one_file_are_refused(folder: Path, capsys: pytest.CaptureFixture[str]):
    graph = add_graph(folder / "g.sdg")
    code, _, err = cli(capsys, "run", graph, "--out", folder / "o.npz", "--save-inputs", folder / "sub/../o.npz")
    assert_one_line_error(code, err, "--out file and --save-inputs file both name")
    assert not (folder / "o.npz").exists()


@pytest.mark.parametrize("alias", ALIASES)
def test_import_over_its_own_source_is_refused(folder: Path, capsys: pytest.CaptureFixture[str], alias: str):
    source = add_graph(folder / "g.sdg")
    before = source.read_bytes()
    code, _, err = cli(capsys, "import", source, "-o", ALIASES[alias](source))
    assert_one_line_error(code, err, "--output file", "is the file to import")
    assert source.read_bytes() == before


def test_outputs_elsewhere_are_written(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(folder / "g.sdg")
    code, _, err = cli(capsys, "validate", graph, "--backend", "reference", "--report", folder / "r.json")
    assert code == 0, err
    assert json.loads((folder / "r.json").read_text())["passed"] is True
    code, _, err = cli(capsys, "import", graph, "-o", folder / "copy.sdg")
    assert code == 0, err
    assert (folder / "copy.sdg").read_bytes() == graph.read_bytes()
