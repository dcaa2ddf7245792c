"""Campaign specs stay inside their folder and are counted before they are expanded (#32).

``files = ["/**/*.sdg"]`` walked the whole file system; ``seeds = 10**10`` or
three dims of ``"1..4096"`` expanded to a MemoryError. Patterns are now
matched inside the spec's folder tree only, with a bounded walk, and a
spec's cases are counted from its lists' lengths and refused above
MAX_CASES with the count named, before anything is built.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sigdnn.campaign import spec_files
from sigdnn.campaign.cases import count_cases, generate_cases
from sigdnn.campaign.spec import MAX_CASES, SpecError, parse_spec

GENERATE = '[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[3]]\n'


def graphs(patterns: str, base: Path):
    return parse_spec(f"[[graphs]]\nfiles = [{patterns}]\n", base).files


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ('"/**/*.sdg"', "is an absolute path; patterns are relative to the spec's folder"),
        ('"/etc/passwd"', "is an absolute path"),
        ('"~/g.sdg"', "is an absolute path"),
        ('"../*.sdg"', "climbs out with '..'"),
        ('"a/../../g.sdg"', "climbs out with '..'"),
        ('"**/../g.sdg"', "climbs out with '..'"),
    ],
)
def test_patterns_that_leave_the_spec_folder_are_refused(tmp_path: Path, pattern: str, message: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "g.sdg").write_bytes(b"")
    with pytest.raises(SpecError, match=message):
        graphs(pattern, tmp_path / "a")


def test_links_out_of_the_tree_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.sdg").write_bytes(b"")
    spec_dir = tmp_path / "spec"
    (spec_dir / "models").mkdir(parents=True)
    (spec_dir / "models" / "g.sdg").write_bytes(b"")
    (spec_dir / "escape").symlink_to(outside, target_is_directory=True)
    assert graphs('"**/*.sdg"', spec_dir) == (spec_dir / "models" / "g.sdg",)  # the folder link is not walked
    (spec_dir / "models" / "link.sdg").symlink_to(outside / "secret.sdg")
    with pytest.raises(SpecError, match="is a link to a file outside the spec's folder"):
        graphs('"models/*.sdg"', spec_dir)
    (spec_dir / "models" / "link.sdg").unlink()
    (spec_dir / "models" / "inside.sdg").symlink_to(spec_dir / "models" / "g.sdg")
    assert graphs('"models/*.sdg"', spec_dir) == (spec_dir / "models" / "g.sdg", spec_dir / "models" / "inside.sdg")


def test_the_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_files, "MAX_GLOB_ENTRIES", 50)
    for i in range(60):
        (tmp_path / f"f{i}.txt").write_bytes(b"")
    with pytest.raises(SpecError, match=r"'\*\*/\*.sdg' visits more than 50 folder entries"):
        graphs('"**/*.sdg"', tmp_path)


def test_glob_rules_match_the_documented_ones(tmp_path: Path) -> None:
    for name in ("a/b/g.sdg", "a/h.sdg", "top.sdg", ".hidden/x.sdg", "a/.dot.sdg", "m/c.onnx"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    found = graphs('"**/*.sdg", "m/c.onnx", "./a/[h].sdg"', tmp_path)
    assert found == tuple(
        tmp_path / n for n in ("a/b/g.sdg", "a/h.sdg", "top.sdg", "m/c.onnx", "a/h.sdg")
    )  # hidden names only when the pattern names them, as glob does
    assert graphs('"a/.*.sdg"', tmp_path) == (tmp_path / "a/.dot.sdg",)


def test_a_huge_seed_count_is_refused_naming_the_count_without_expanding(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"seeds: asks for 10,000,000,000 seeds, over the limit of 100,000"):
        parse_spec("seeds = 10000000000\n" + GENERATE, tmp_path)


def test_huge_shape_ranges_are_refused_before_expanding(tmp_path: Path) -> None:
    text = '[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [["1..4096", "1..4096", "1..4096"]]\n'
    with pytest.raises(SpecError, match=r"asks for 68,719,476,736 shapes"):
        parse_spec(text, tmp_path)


def test_the_product_of_every_list_is_counted_before_any_graph_is_built(tmp_path: Path) -> None:
    text = (
        'seeds = 100\nengines = ["a", "b"]\n[[generate]]\nop = "pointwise"\nmodes = ["add", "mul"]\n'
        'dtypes = ["float16", "float32"]\nshapes = [["1..200"]]\nlayouts = ["packed"]\n'
    )
    spec = parse_spec(text, tmp_path)
    assert count_cases(spec) == 100 * 2 * 2 * 2 * 200 == 160_000 > MAX_CASES
    with pytest.raises(SpecError, match=r"asks for 160,000 cases"):
        generate_cases(spec)
    every_mode = parse_spec('seeds = 2\n[[generate]]\nop = "pointwise"\nshapes = [[3]]\n', tmp_path)
    from sigdnn.graph.ops.pointwise import MODES

    assert count_cases(every_mode) == 2 * len(MODES)  # no modes listed: every mode of the op


def test_a_spec_at_the_cap_still_runs(tmp_path: Path) -> None:
    spec = parse_spec(f"seeds = {MAX_CASES}\n" + GENERATE, tmp_path)
    assert count_cases(spec) == MAX_CASES
    assert os.fspath(spec.output)  # parsed: nothing refused


def test_the_walk_limit_is_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(9):
        (tmp_path / f"f{i}.sdg").write_bytes(b"")
    monkeypatch.setattr(spec_files, "MAX_GLOB_ENTRIES", 9)
    assert len(graphs('"*.sdg"', tmp_path)) == 9  # nine entries visited: at the limit
    monkeypatch.setattr(spec_files, "MAX_GLOB_ENTRIES", 8)
    with pytest.raises(SpecError, match="visits more than 8 folder entries"):
        graphs('"*.sdg"', tmp_path)


def test_the_number_of_graph_files_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        (tmp_path / f"g{i}.sdg").write_bytes(b"")
    monkeypatch.setattr(spec_files, "MAX_GRAPH_FILES", 3)
    assert len(graphs('"*.sdg"', tmp_path)) == 3
    monkeypatch.setattr(spec_files, "MAX_GRAPH_FILES", 2)
    with pytest.raises(SpecError, match="more than 2 graph files; split the spec"):
        graphs('"*.sdg"', tmp_path)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [('"\\\\server\\\\g.sdg"', "is an absolute path"), ('"."', "names no file"), ('"./"', "names no file")],
)
def test_odd_patterns(tmp_path: Path, pattern: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        graphs(pattern, tmp_path)


def test_literal_parts_and_double_star_at_the_end(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "secret.sdg").write_bytes(b"")
    spec_dir = tmp_path / "spec"
    (spec_dir / "m" / "sub").mkdir(parents=True)
    (spec_dir / "m" / "a.sdg").write_bytes(b"")
    (spec_dir / "m" / "sub" / "b.onnx").write_bytes(b"")
    (spec_dir / "escape").symlink_to(outside, target_is_directory=True)
    for pattern in ('"escape/secret.sdg"', '"m"', '"m/sub"', '"escape/*.sdg"'):
        with pytest.raises(SpecError, match="matches no file"):  # a linked folder is not entered; a folder is no file
            graphs(pattern, spec_dir)
    assert graphs('"m/**"', spec_dir) == (spec_dir / "m/a.sdg", spec_dir / "m/sub/b.onnx")
    assert graphs('"m/*"', spec_dir) == (spec_dir / "m/a.sdg",)  # a folder matched by * is not a file
    assert graphs('"m/sub/b.onnx"', spec_dir) == (spec_dir / "m/sub/b.onnx",)
