"""Case generation: the product the spec asks for, content addresses, recipes' graphs, skipped combinations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.campaign.cases import case_id, describe, generate_cases, graph_digest, recipes_of
from sigdnn.campaign.recipes import GraphRecipe
from sigdnn.campaign.spec import SpecError, parse_spec
from sigdnn.graph.ops.pointwise import MODES


def spec_of(text: str, base: Path = Path("/tmp")) -> object:
    return parse_spec(text, base)


def test_the_product_of_modes_dtypes_shapes_layouts_seeds_and_engines() -> None:
    s = spec_of(
        'engines = ["e1", "e2"]\nseeds = 2\n[[generate]]\nop = "pointwise"\nmodes = ["add", "relu_fwd"]\n'
        'dtypes = ["float32", "float16"]\nshapes = [[2, "1..3"]]\n'
    )
    cases = generate_cases(s).cases
    assert len(cases) == 2 * 2 * 3 * 2 * 2
    assert len({c.case_id for c in cases}) == len(cases)
    assert len({c.reference_key for c in cases}) == len(cases) // 2  # the two engines share each reference
    first = cases[0]
    assert (first.seed, first.engine, first.backend, first.recipe.shape) == (0, "e1", "gpu", (2, 1))
    assert first.reference_key == f"{graph_digest(first.graph)}:0" and first.digest == graph_digest(first.graph)
    assert [c.engine for c in cases[:4]] == ["e1", "e2", "e1", "e2"] and [c.seed for c in cases[:4]] == [0, 0, 1, 1]
    assert describe(first) == {
        "case": first.case_id,
        "graph": first.name,
        "source": "pointwise[add] float32 [2, 1] packed",
        "digest": first.digest,
        "seed": 0,
        "backend": "gpu",
        "engine": "e1",
    }


def test_attribute_sweeps_multiply_only_the_modes_that_read_them() -> None:
    s = spec_of(
        '[[generate]]\nop = "pointwise"\nmodes = ["add", "relu_fwd"]\nshapes = [[3]]\n'
        "attributes = { relu_lower_clip = [0.0, 0.5] }\n"
    )
    recipes = list(recipes_of(s.generators[0]))
    assert [(r.mode, r.attributes) for r in recipes] == [
        ("add", ()),
        ("relu_fwd", (("relu_lower_clip", 0.0),)),
        ("relu_fwd", (("relu_lower_clip", 0.5),)),
    ]
    graph = recipes[2].build()
    assert graph.nodes[0].op.relu_lower_clip == 0.5


def test_no_modes_means_every_mode_and_wrong_modes_are_spec_errors() -> None:
    every = list(recipes_of(spec_of('[[generate]]\nop = "pointwise"\nshapes = [[3]]\n').generators[0]))
    assert [r.mode for r in every] == list(MODES)
    assert [r.mode for r in recipes_of(spec_of('[[generate]]\nop = "softmax"\nshapes = [[3]]\n').generators[0])] == [
        None
    ]
    for text, match in [
        ('op = "pooling"\nshapes = [[3]]', "no recipe for op 'pooling'"),
        ('op = "pointwise"\nmodes = ["add", "frobnicate"]\nshapes = [[3]]', "no mode.*frobnicate"),
        ('op = "matmul"\nmodes = ["add"]\nshapes = [[3]]', "takes no modes"),
    ]:
        with pytest.raises(SpecError, match=match):
            list(recipes_of(spec_of("[[generate]]\n" + text + "\n").generators[0]))


def test_combinations_no_graph_can_be_made_of_are_skipped_with_the_reason() -> None:
    s = spec_of(
        '[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[2, 3], [1, 2, 3, 4]]\nlayouts = ["NHWC"]\n'
    )
    plan = generate_cases(s)
    assert [c.recipe.shape for c in plan.cases] == [(1, 2, 3, 4)]
    ((what, why),) = plan.skipped
    assert what == "pointwise[add] float32 [2, 3] NHWC" and "layout NHWC needs rank 4" in why
    strides = sigdnn.deserialize(plan.cases[0].graph).tensor_by_name("in_0").strides
    assert strides == (24, 1, 8, 2)  # channels last: C, then W, then H


def test_the_same_graph_from_two_generators_is_one_case() -> None:
    table = '[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[5]]\n'
    assert len(generate_cases(spec_of(table + table)).cases) == 1


def test_a_case_id_changes_with_everything_that_changes_the_verdict() -> None:
    base = case_id("d", 0, "gpu", None, None)
    assert base == case_id("d", 0, "gpu", None, None) and len(base) == 24
    others = [
        case_id("e", 0, "gpu", None, None),
        case_id("d", 1, "gpu", None, None),
        case_id("d", 0, "reference", None, None),
        case_id("d", 0, "gpu", 2001, None),
        case_id("d", 0, "gpu", None, Tolerance(0.0, 1e-3)),
    ]
    assert len({base, *others}) == 6
    assert case_id("d", 0, "gpu", None, Tolerance(0.0, 1e-3)) != case_id("d", 0, "gpu", None, Tolerance(1e-3, 0.0))


def test_graph_files_become_cases_without_a_recipe(tmp_path: Path) -> None:
    g = sigdnn.Graph("from_file", io_dtype="float32")
    g.pointwise("exp", g.tensor("x", dims=(4,))).set_output(True)
    (tmp_path / "a.sdg").write_bytes(g.serialize())
    s = parse_spec('seeds = [3]\n[[graphs]]\nfiles = ["a.sdg"]\n', tmp_path)
    (case,) = generate_cases(s).cases
    assert (case.name, case.recipe, case.source, case.seed, case.graph) == (
        "from_file",
        None,
        str(tmp_path / "a.sdg"),
        3,
        g.serialize(),
    )


def test_recipes_build_each_op_from_the_swept_shape() -> None:
    reduction = GraphRecipe("reduction", "add", "float32", (3, 5), "packed").build()
    assert reduction.tensor_by_name("y").dims == (3, 1)
    axes0 = GraphRecipe("reduction", "max", "float32", (3, 5), "packed", (("axes", 0),)).build()
    assert axes0.tensor_by_name("y").dims == (1, 5)
    softmax = GraphRecipe("softmax", None, "float16", (2, 7), "packed", (("axes", 0),)).build()
    assert softmax.tensor_by_name("y").dims == (2, 7) and softmax.nodes[0].op.axes == (0,)
    matmul = GraphRecipe("matmul", None, "bfloat16", (2, 3, 4, 5), "packed").build()
    assert [matmul.tensor_by_name(n).dims for n in "abc"] == [(2, 3, 4), (2, 4, 5), (2, 3, 5)]
    select = GraphRecipe("pointwise", "binary_select", "float16", (6,), "packed").build()
    assert [select.dtype_of(select.tensor_by_name(f"in_{i}")).name for i in range(3)] == ["FLOAT16", "FLOAT16", "BOOL"]
    unary = GraphRecipe("pointwise", "exp", "float32", (6,), "packed", compute_dtype="float64").build()
    assert len(unary.inputs) == 1 and unary.compute_dtype.name == "FLOAT64"
    assert unary.name == "pointwise_exp_float32_6_packed"
    assert GraphRecipe("gdn", None, "bfloat16", (2,), "packed", compute_dtype="bfloat16").label() == (
        "gdn bfloat16 [2] packed compute=bfloat16"
    )
    r = GraphRecipe("pointwise", "elu_fwd", "float32", (2, 3), "ROW_MAJOR", (("elu_alpha", 0.5),))
    assert r.label() == "pointwise[elu_fwd] float32 [2, 3] ROW_MAJOR elu_alpha=0.5"
    assert r.with_shape((1, 1)).shape == (1, 1) and r.with_shape((1, 1)).attributes == r.attributes
    assert GraphRecipe("softmax", None, "float32", (2,), "packed").label() == "softmax float32 [2] packed"


def test_the_digest_is_the_executors_and_graphs_over_the_limits_are_skipped() -> None:
    s = spec_of('[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4], [4000]]\n')
    small, _ = generate_cases(s).cases
    assert small.digest == sigdnn.Executor("reference").prepare(small.graph).digest and len(small.digest) == 32
    plan = generate_cases(s, limits=sigdnn.Limits(max_total_bytes=4000))
    assert [c.recipe.shape for c in plan.cases] == [(4,)]
    ((what, why),) = plan.skipped
    assert what == "pointwise[add] float32 [4000] packed" and "4000" in why


@pytest.mark.parametrize(
    ("op", "mode", "shape", "inputs", "outputs"),
    [
        ("pointwise", "add", (2, 3), ["in_0", "in_1"], ["out"]),
        ("reduction", "add", (2, 3), ["x"], ["y"]),
        ("softmax", None, (2, 3), ["x"], ["y"]),
        ("matmul", None, (2, 3, 4), ["a", "b"], ["c"]),
    ],
)
def test_each_recipe_names_its_inputs_and_marks_its_output(
    op: str, mode: str | None, shape: tuple[int, ...], inputs: list[str], outputs: list[str]
) -> None:
    g = GraphRecipe(op, mode, "float32", shape, "packed").build()
    assert [t.name for t in g.inputs] == inputs and [t.name for t in g.outputs] == outputs
    assert g.name == "_".join(p for p in (op, mode, "float32", "x".join(map(str, shape)), "packed") if p)


def test_ops_without_per_mode_parameters_sweep_every_attribute() -> None:
    s = spec_of('[[generate]]\nop = "softmax"\nshapes = [[3, 4]]\nattributes = { axes = [0, 1], log = [true] }\n')
    recipes = list(recipes_of(s.generators[0]))
    assert [r.attributes for r in recipes] == [(("axes", 0), ("log", True)), (("axes", 1), ("log", True))]


def test_variable_length_attention_cases_pack_their_sequences_token_by_token() -> None:
    """sdpa's shape [Hq, Hkv, D, L_1, ..., L_n]: n sequences of those lengths (around a 64-row tile here), every
    tensor ragged with the offsets of its packing, causal swept; each case runs on the reference and agrees with
    attention computed sequence by sequence."""
    s = spec_of('[[generate]]\nop = "sdpa"\ndtypes = ["float32"]\nshapes = [[2, 1, 8, 1, 63, 64, 65]]\n'
                "attributes = { causal = [false, true] }\n")  # fmt: skip
    cases = generate_cases(s).cases
    assert [dict(c.recipe.attributes)["causal"] for c in cases] == [False, True]
    unswept = generate_cases(spec_of('[[generate]]\nop = "sdpa"\nshapes = [[1, 1, 8, 3]]\n')).cases
    assert [sigdnn.deserialize(c.graph).nodes[0].op.use_causal_mask for c in unswept] == [False]  # no mask unasked
    for case in cases:
        graph = sigdnn.deserialize(case.graph)
        q = graph.tensor_by_name("q")
        assert q.dims == (4, 2, 65, 8) and q.strides == (65 * 16, 8, 16, 1)
        assert graph.tensor_by_name("k_offsets").constant().tolist() == [0, 8, 512, 1024, 1544]
        rng = np.random.default_rng(0)
        tokens = {
            n: rng.standard_normal((193, heads, 8)).astype(np.float32) for n, heads in (("q", 2), ("k", 1), ("v", 1))
        }
        inputs = {}
        for n, t in tokens.items():
            flat = np.zeros(graph.tensor_by_name(n).size, np.float32)
            flat[: t.size] = t.reshape(-1)
            dims, strides = graph.tensor_by_name(n).dims, graph.tensor_by_name(n).strides
            inputs[n] = np.lib.stride_tricks.as_strided(flat, dims, tuple(4 * x for x in strides)).copy()
        got = sigdnn.Executor().run(graph, inputs)["o"]  # logical [B, H, S, E]; its storage holds the tokens
        storage = np.zeros(got.size, np.float32)
        np.lib.stride_tricks.as_strided(storage, got.shape, tuple(4 * x for x in q.strides))[...] = got
        out = storage[: 193 * 2 * 8].reshape(193, 2, 8)
        start = 0
        for length in (1, 63, 64, 65):
            q_, k_, v_ = (tokens[n][start : start + length].astype(np.float64) for n in ("q", "k", "v"))
            s_ = np.einsum("shd,thd->hst", q_, np.repeat(k_, 2, axis=1)) * 8**-0.5
            if dict(case.recipe.attributes)["causal"]:
                s_ = np.where(np.arange(length)[None, None, :] <= np.arange(length)[None, :, None], s_, -np.inf)
            p = np.exp(s_ - s_.max(-1, keepdims=True))
            want = np.einsum("hst,thd->shd", p / p.sum(-1, keepdims=True), np.repeat(v_, 2, axis=1))
            np.testing.assert_allclose(out[start : start + length], want, rtol=2e-5, atol=2e-6)
            start += length
