"""Spec edges: seed lists, a generator's default dtype and layout, recursive globs, the file's size
limit, undecodable bytes, and the name errors give the spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from sigdnn.campaign.spec import SpecError, load_spec, parse_spec
from sigdnn.errors import SigdnnError

GENERATE = '[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[3]]\n'


def test_seed_lists_start_at_zero_and_refuse_any_negative(tmp_path: Path) -> None:
    assert parse_spec("seeds = [0, 3, 0]\n" + GENERATE, tmp_path).seeds == (0, 3)
    with pytest.raises(SpecError, match="seeds are integers >= 0"):
        parse_spec("seeds = [3, -1]\n" + GENERATE, tmp_path)


def test_a_generator_defaults_to_float32_packed(tmp_path: Path) -> None:
    (generator,) = parse_spec(GENERATE, tmp_path).generators
    assert generator.dtypes == ("float32",) and generator.layouts == ("packed",)
    (empty,) = parse_spec(GENERATE + "dtypes = []\nlayouts = []\n", tmp_path).generators
    assert empty.dtypes == ("float32",) and empty.layouts == ("packed",)  # an empty list is the default too


def test_double_star_globs_reach_nested_folders(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "g.sdg"
    nested.parent.mkdir(parents=True)
    nested.write_bytes(b"")
    spec = parse_spec('[[graphs]]\nfiles = ["**/*.sdg"]\n', tmp_path)
    assert spec.files == (nested,)


def test_errors_name_the_spec() -> None:
    with pytest.raises(SpecError, match=r"^campaign spec: "):
        parse_spec("", Path("."))


def test_a_spec_file_over_one_mib_is_refused_and_odd_bytes_are_replaced(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(GENERATE.encode() + b"#" * (1 << 20))
    with pytest.raises(SigdnnError, match=r"^campaign spec '.*over the 1 MiB limit"):
        load_spec(big)
    odd = tmp_path / "odd.toml"
    odd.write_bytes(b"# caf\xe9\n" + GENERATE.encode())  # Latin-1 in a comment: not UTF-8
    assert load_spec(odd).generators[0].op == "pointwise"
