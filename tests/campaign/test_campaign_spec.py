"""The campaign spec: every value form it takes, and a SpecError naming the key for every mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.campaign.spec import MAX_DIM_VALUES, SpecError, expand_shape, load_spec, parse_dim, parse_spec

MINIMAL = '[[generate]]\nop = "pointwise"\nshapes = [[4]]\n'


def spec(text: str, base: Path = Path("/base")) -> object:
    return parse_spec(text, base, where="t.toml")


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (3, (3,)),
        ([2, 5, 2], (2, 5)),
        ("1..4", (1, 2, 3, 4)),
        (" 2 .. 3 ", (2, 3)),
        ("1..10/3", (1, 4, 7, 10)),
        ("1..8*2", (1, 2, 4, 8)),
        ("3..20*2", (3, 6, 12)),
        ("5..5", (5,)),
        ([7, "1..2"], (7, 1, 2)),
        ("1..4096", tuple(range(1, 4097))),
    ],
)
def test_a_dim_is_a_number_a_list_or_a_range(value: object, want: tuple[int, ...]) -> None:
    assert parse_dim(value, "d") == want


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (0, ">= 1"),
        ([1, 0], ">= 1"),
        ([], ">= 1"),
        (True, "not a dim"),
        (2.0, "not a dim"),
        ("x", "not a range"),
        ("1..", "not a range"),
        ("5..2", "empty"),
        ("0..3", ">= 1"),
        ("1..8/0", "empty"),
        ("1..8*1", "empty"),
        ("0..8*2", "empty"),
        ("1..4097", "at most"),
    ],
)
def test_a_bad_dim_is_a_spec_error(value: object, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_dim(value, "shape[0]")


def test_a_shape_template_expands_to_the_product_of_its_dims_in_order() -> None:
    assert expand_shape([[1, 2], 3, "4..5"], "s") == [(1, 3, 4), (1, 3, 5), (2, 3, 4), (2, 3, 5)]
    for bad in ([], 4, "1..2"):
        with pytest.raises(SpecError, match="non-empty list of dims"):
            expand_shape(bad, "s")
    assert MAX_DIM_VALUES == 4096


def test_defaults_and_every_top_level_key(tmp_path: Path) -> None:
    s = spec(MINIMAL)
    assert (s.name, s.backend, s.engines, s.seeds, s.retries, s.shrink, s.tolerance) == (
        "t",
        "gpu",
        (None,),
        (0,),
        3,
        8,
        None,
    )
    assert s.output == Path("/base/campaign-results") and s.files == ()
    (g,) = s.generators
    assert (g.op, g.modes, g.dtypes, g.shapes, g.layouts, g.attributes, g.compute_dtype) == (
        "pointwise",
        (),
        ("float32",),
        ((4,),),
        ("packed",),
        (),
        None,
    )
    full = spec(
        'name = "n"\nbackend = "reference"\nengines = ["a", 30001, "a"]\nseeds = [5, 2, 5]\noutput = "o"\n'
        "retries = 0\nshrink = 0\n[tolerance]\nrtol = 1e-3\n"
        '[[generate]]\nop = "pointwise"\nmodes = "add"\ndtypes = ["float16", "float16"]\n'
        'shapes = [[2, 3], [2, 3], ["1..2"]]\nlayouts = "NHWC"\ncompute_dtype = "float32"\n'
        "attributes = { relu_lower_clip = [0.0, 0.5], elu_alpha = 2.0 }\n"
    )
    assert (full.name, full.backend, full.engines, full.seeds, full.retries, full.shrink) == (
        "n",
        "reference",
        ("a", 30001),
        (5, 2),
        0,
        0,
    )
    assert full.output == Path("/base/o") and full.tolerance == Tolerance(0.0, 1e-3)
    (g,) = full.generators
    assert (g.modes, g.dtypes, g.shapes, g.layouts, g.compute_dtype) == (
        ("add",),
        ("float16",),
        ((2, 3), (1,), (2,)),
        ("NHWC",),
        "float32",
    )
    assert g.attributes == (("relu_lower_clip", (0.0, 0.5)), ("elu_alpha", (2.0,)))
    assert spec("seeds = 3\n" + MINIMAL).seeds == (0, 1, 2)
    assert spec("[tolerance]\natol = 1\n" + MINIMAL).tolerance == Tolerance(1.0, 0.0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("nonsense = 1\n" + MINIMAL, "unknown key.*nonsense"),
        ('backend = "tpu"\n' + MINIMAL, "backend.*'tpu'"),
        ("engines = []\n" + MINIMAL, "engines"),
        ('engines = "x"\n' + MINIMAL, "engines"),
        ("engines = [true]\n" + MINIMAL, "engines"),
        ('engines = [""]\n' + MINIMAL, "engines"),
        ("engines = [1.5]\n" + MINIMAL, "engines"),
        ("seeds = 0\n" + MINIMAL, "seeds"),
        ("seeds = []\n" + MINIMAL, "seeds"),
        ("seeds = [-1]\n" + MINIMAL, "seeds"),
        ("seeds = true\n" + MINIMAL, "seeds"),
        ("seeds = [1, true]\n" + MINIMAL, "seeds"),
        ("retries = -1\n" + MINIMAL, "retries"),
        ("retries = true\n" + MINIMAL, "retries"),
        ("shrink = 1.0\n" + MINIMAL, "shrink"),
        ('output = ""\n' + MINIMAL, "output"),
        ("name = 3\n" + MINIMAL, "name"),
        ("tolerance = 3\n" + MINIMAL, "tolerance"),
        ("[tolerance]\n" + MINIMAL, "atol, rtol or both"),
        ("[tolerance]\nulps = 2\n" + MINIMAL, "unknown key.*ulps"),
        ("[tolerance]\nrtol = -1.0\n" + MINIMAL, "rtol"),
        ("[tolerance]\nrtol = inf\n" + MINIMAL, "rtol"),
        ("[tolerance]\natol = nan\n" + MINIMAL, "atol"),
        ("[tolerance]\natol = true\n" + MINIMAL, "atol"),
        ("", "no cases"),
        ('generate = "x"\n', "array of tables"),
        ("generate = [1]\n", "array of tables"),
        ("[[generate]]\nshapes = [[1]]\n", "says no op"),
        ('[[generate]]\nop = "pointwise"\n', "says no shapes"),
        ('[[generate]]\nop = "pointwise"\nshapes = []\n', "non-empty list of shapes"),
        ('[[generate]]\nop = "pointwise"\nshapes = [[1]]\nattributes = 3\n', "attributes"),
        ('[[generate]]\nop = "pointwise"\nshapes = [[1]]\nattributes = { a = [] }\n', "at least one value"),
        ('[[generate]]\nop = "pointwise"\nshapes = [[1]]\nsize = 3\n', "unknown key.*size"),
        ('[[generate]]\nop = ""\nshapes = [[1]]\n', "op"),
        ('[[generate]]\nop = "pointwise"\nshapes = [[1]]\nmodes = [1]\n', "modes"),
        ('[[generate]]\nop = "pointwise"\nshapes = [[1]]\ndtypes = 3\n', "dtypes"),
        ('[[generate]]\nop = "pointwise"\nshapes = [[1]]\ncompute_dtype = 3\n', "compute_dtype"),
        ("[[graphs]]\nwhat = 1\n", "unknown key.*what"),
        ('[[graphs]]\nfiles = ["none*.sdg"]\n', "matches no file"),
        ("x = [\n", "not valid TOML"),
    ],
)
def test_every_mistake_is_a_spec_error_naming_the_key(text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match) as caught:
        spec(text)
    assert str(caught.value).startswith("t.toml")


def test_graph_files_are_globbed_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    for name in ("b.sdg", "a.sdg", "c.onnx"):
        (tmp_path / "g" / name).write_bytes(b"")
    s = parse_spec('[[graphs]]\nfiles = ["g/*.sdg", "g/c.onnx"]\n', tmp_path)
    assert s.files == (tmp_path / "g/a.sdg", tmp_path / "g/b.sdg", tmp_path / "g/c.onnx")
    assert s.generators == ()
    path = tmp_path / "nightly.toml"
    path.write_text(MINIMAL)
    loaded = load_spec(path)
    assert loaded.name == "nightly" and loaded.output == tmp_path / "campaign-results" / "nightly"


def test_two_specs_of_one_folder_default_to_two_results_folders(tmp_path: Path) -> None:
    for name in ("conv", "matmul"):
        (tmp_path / f"{name}.toml").write_text(MINIMAL)
    outputs = {load_spec(tmp_path / f"{name}.toml").output for name in ("conv", "matmul")}
    assert outputs == {tmp_path / "campaign-results" / "conv", tmp_path / "campaign-results" / "matmul"}
    (tmp_path / "named.toml").write_text('output = "here"\n' + MINIMAL)
    assert load_spec(tmp_path / "named.toml").output == tmp_path / "here"


def test_the_documented_campaign_spec_is_two_lines_that_parse() -> None:
    usage = Path(__file__).resolve().parents[2] / "docs" / "usage.md"  # the README points there for campaigns
    text = usage.read_text().split("## Campaigns", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    assert len(text.splitlines()) == 2
    from sigdnn.campaign.cases import generate_cases

    s = parse_spec(text, Path("."))
    assert s.seeds == (0, 1, 2, 3) and len(s.generators[0].shapes) == 8 * 13
    assert len(generate_cases(s).cases) == 3 * 2 * 8 * 13 * 4
