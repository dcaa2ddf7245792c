"""The shrinker: the smallest failing shape, dim by dim, within a budget; which cases get shrunk."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from broken_plugin_builders import BrokenPointwise

import sigdnn
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.recipes import GraphRecipe
from sigdnn.campaign.shrink import EXHAUSTIVE, Shrunk, candidates, pick_for_shrinking, shrink_case, smallest_failing
from sigdnn.campaign.spec import parse_spec
from sigdnn.registry import DEFAULT_REGISTRY


def last_dim_over_8(shape: tuple[int, ...]) -> bool:
    return shape[-1] > 8


def odd_size_from_3(shape: tuple[int, ...]) -> bool:
    return math.prod(shape) % 2 == 1 and math.prod(shape) >= 3


def test_candidates_are_every_smaller_value_then_halvings_for_wide_dims() -> None:
    assert candidates(1) == [] and candidates(5) == [1, 2, 3, 4]
    assert candidates(EXHAUSTIVE) == list(range(1, EXHAUSTIVE)) and EXHAUSTIVE == 64
    assert candidates(65) == list(range(1, 65))
    assert candidates(300) == [*range(1, 65), 75, 150]
    assert candidates(4096) == [*range(1, 65), 128, 256, 512, 1024, 2048]
    assert all(type(v) is int for v in candidates(300) + candidates(4096))  # dims: a float breaks the graph


def test_the_smallest_failing_shape_and_the_runs_it_took() -> None:
    assert smallest_failing((4, 12), last_dim_over_8) == Shrunk((1, 9), 1 + 9 + 8, False)
    assert smallest_failing((3, 11), odd_size_from_3) == Shrunk((1, 3), 1 + 3 + 2, False)
    assert smallest_failing((1, 9), last_dim_over_8) == Shrunk((1, 9), 8, False)
    assert smallest_failing((2, 3, 4), lambda s: s[0] * s[2] >= 6) == Shrunk((2, 1, 3), 1 + 1 + 3 + 1 + 2, False)


def test_a_spent_budget_returns_the_best_so_far() -> None:
    assert smallest_failing((4, 12), last_dim_over_8, budget=5) == Shrunk((1, 12), 5, True)
    assert smallest_failing((4, 12), last_dim_over_8, budget=10) == Shrunk((1, 9), 10, True)
    assert smallest_failing((4, 12), last_dim_over_8, budget=18) == Shrunk((1, 9), 18, False)


def test_pick_the_largest_failing_generated_case_per_group() -> None:
    text = (
        'backend = "reference"\nengines = ["e1", "e2"]\n[[generate]]\nop = "pointwise"\nmodes = ["add", "mul"]\n'
        "shapes = [[2, 3], [5, 5], [1, 1], [4, 4]]\n"
    )
    cases = generate_cases(parse_spec(text, Path("."))).cases
    rows = {}
    for c in cases:
        fail = c.recipe.shape != (1, 1) and not (c.recipe.mode == "mul" and c.engine == "e2")
        rows[c.case_id] = {"verdict": "fail" if fail else "pass", "family": c.recipe.mode, "dtypes": ["float32"]}
    del rows[cases[-1].case_id]  # (4, 4) mul e2: not finished
    picked = pick_for_shrinking(cases, rows, limit=8)
    assert [(c.recipe.mode, c.engine, c.recipe.shape) for c in picked] == [
        ("add", "e1", (5, 5)),
        ("add", "e2", (5, 5)),
        ("mul", "e1", (5, 5)),
    ]
    assert [c.engine for c in pick_for_shrinking(cases, rows, limit=1)] == ["e1"]
    assert pick_for_shrinking(cases, rows, limit=0) == []
    ties = generate_cases(
        parse_spec(
            text.replace("[5, 5], [1, 1], [4, 4]", "[3, 2]")
            .replace('["e1", "e2"]', '["e1"]')
            .replace("modes", 'dtypes = ["float32", "float16"]\nmodes'),
            Path("."),
        )
    ).cases
    rows = {c.case_id: {"verdict": "fail", "family": c.recipe.mode, "dtypes": [c.recipe.dtype]} for c in ties}
    picked = [(c.recipe.mode, c.recipe.dtype, c.recipe.shape) for c in pick_for_shrinking(ties, rows, limit=8)]
    assert picked == [(m, d, (2, 3)) for m in ("add", "mul") for d in ("float32", "float16")]  # ties: the first


@pytest.fixture
def broken() -> Iterator[None]:
    sigdnn.register(BrokenPointwise, replace=True)
    yield
    DEFAULT_REGISTRY.unregister(BrokenPointwise.engine_id)


def test_a_failing_case_shrinks_to_the_planted_rules_smallest_shape(broken: None, tmp_path: Path) -> None:
    text = (
        'backend = "reference"\nengines = ["broken.pointwise"]\n[[generate]]\nop = "pointwise"\n'
        'modes = ["add"]\ndtypes = ["bfloat16"]\nshapes = [[3, 2, 12]]\nlayouts = ["packed"]\n'
    )
    spec = parse_spec(text, tmp_path)
    (case,) = generate_cases(spec).cases
    shrunk, smallest = shrink_case(case, spec)
    assert shrunk.shape == (1, 1, 9) and not shrunk.exhausted
    assert smallest.recipe.shape == (1, 1, 9) and smallest.engine == case.engine and smallest.seed == case.seed
    assert sigdnn.deserialize(smallest.graph).tensor_by_name("out").dims == (1, 1, 9)
    nhwc = parse_spec(text.replace('"packed"', '"NCW"'), tmp_path)
    (case,) = generate_cases(nhwc).cases
    assert shrink_case(case, nhwc)[0].shape == (1, 1, 9)


def test_shapes_no_graph_has_are_not_failures_and_files_do_not_shrink(broken: None, tmp_path: Path) -> None:
    spec = parse_spec(
        'backend = "reference"\nengines = ["broken.pointwise"]\n[[generate]]\nop = "pointwise"\n'
        'modes = ["add"]\nshapes = [[1, 2, 3, 9]]\nlayouts = ["NHWC"]\n',
        tmp_path,
    )
    (case,) = generate_cases(spec).cases
    assert shrink_case(case, spec)[0].shape == (1, 1, 1, 9)
    g = sigdnn.Graph("file", io_dtype="float32")
    g.pointwise("add", g.tensor("a", dims=(9,)), g.tensor("b", dims=(9,))).set_output(True)
    (tmp_path / "g.sdg").write_bytes(g.serialize())
    file_spec = parse_spec('backend = "reference"\n[[graphs]]\nfiles = ["g.sdg"]\n', tmp_path)
    (file_case,) = generate_cases(file_spec).cases
    with pytest.raises(sigdnn.SigdnnError, match="graph file: only generated cases shrink"):
        shrink_case(file_case, file_spec)


def test_shapes_a_recipe_cannot_build_are_passed_over(
    broken: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = GraphRecipe.build

    def no_ones(recipe: GraphRecipe) -> sigdnn.Graph:
        if 1 in recipe.shape:
            raise sigdnn.GraphError("no dim of 1 in this test")
        return build(recipe)

    monkeypatch.setattr(GraphRecipe, "build", no_ones)
    spec = parse_spec(
        'backend = "reference"\nengines = ["broken.pointwise"]\n[[generate]]\nop = "pointwise"\n'
        'modes = ["add"]\nshapes = [[4, 12]]\n',
        tmp_path,
    )
    (case,) = generate_cases(spec).cases
    shrunk, smallest = shrink_case(case, spec)
    assert shrunk.shape == smallest.recipe.shape == (2, 9)
