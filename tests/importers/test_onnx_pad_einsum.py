"""ONNX Pad and Einsum through the importer and the reference, against NumPy's own np.pad and np.einsum.

Pad: every mode (constant, reflect, edge, wrap), negative pads (a crop),
the axes input, a constant value, a known (initializer) input; Einsum: the
batched attention products vision transformers export (MaxViT's
'B G H I D, B G H J D -> B G H I J'), permuted outputs, implicit outputs,
sums within one operand, inner and outer products. What is not supported
is refused naming the node.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import onnx as onnx_import


def model(node, inputs: dict[str, np.ndarray], known: dict[str, np.ndarray] | None = None) -> bytes:
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in inputs.items()]
    inits = [numpy_helper.from_array(v, n) for n, v in (known or {}).items()]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "g", infos, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def run(node, inputs: dict[str, np.ndarray], known: dict[str, np.ndarray] | None = None) -> np.ndarray:
    graph = onnx_import.load(model(node, inputs, known))
    return sigdnn.Executor().run(graph, inputs)["y"]


def pad_node(mode: str, pads: list[int], value: float | None = None, axes: list[int] | None = None):
    names = ["x", "pads", "value" if value is not None else "", "axes" if axes is not None else ""]
    while names[-1] == "":
        names.pop()
    return helper.make_node("Pad", names, ["y"], mode=mode)


def pad_known(pads: list[int], value: float | None, axes: list[int] | None) -> dict[str, np.ndarray]:
    known = {"pads": np.array(pads, np.int64)}
    if value is not None:
        known["value"] = np.array(value, np.float32)
    if axes is not None:
        known["axes"] = np.array(axes, np.int64)
    return known


X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) - 50


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize(
    "pads",
    [[0, 0, 1, 2, 0, 0, 3, 0], [0, 1, 0, 3, 1, 0, 2, 1], [0, 0, -1, 2, 0, 0, 1, -2], [0, 0, 0, 0, 0, 0, 0, 0]],
    ids=["rows_cols", "every_side", "crop_and_pad", "none"],
)
def test_pad_equals_numpys(mode: str, pads: list[int]) -> None:
    rank = X.ndim
    pre, post = pads[:rank], pads[rank:]
    cropped = X[tuple(slice(max(-b, 0), X.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(pre, post)))]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(pre, post)]
    extra = {"constant_values": 7.5} if mode == "constant" else {}
    want = np.pad(cropped, width, mode=mode, **extra)
    value = 7.5 if mode == "constant" else None
    got = run(pad_node(mode, pads, value), {"x": X}, pad_known(pads, value, None))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("mode", "pads"), [("wrap", [0, 0, 4, 5, 0, 0, 4, 5]), ("reflect", [0, 0, 3, 4, 0, 0, 3, 4])])
def test_pads_as_large_as_a_mode_allows_equal_numpys(mode: str, pads: list[int]) -> None:
    """wrap: up to the axis's size; reflect: up to its size - 1."""
    got = run(pad_node(mode, pads), {"x": X}, pad_known(pads, None, None))
    np.testing.assert_array_equal(got, np.pad(X, list(zip(pads[:4], pads[4:])), mode=mode))


def test_a_crop_on_every_axis_is_one_slice_and_a_pad_on_one_side_no_slice() -> None:
    pads = [-1, -1, -1, -1, 0, 0, 0, -2]
    graph = onnx_import.load(model(pad_node("constant", pads), {"x": X}, pad_known(pads, None, None)))
    assert [n.op.kind for n in graph.nodes] == ["slice"]
    np.testing.assert_array_equal(sigdnn.Executor().run(graph, {"x": X})["y"], X[1:, 1:, 1:, 1:-2])
    pads = [0, 0, 0, 2, 0, 0, 0, 0]
    graph = onnx_import.load(model(pad_node("constant", pads, 1.0), {"x": X}, pad_known(pads, 1.0, None)))
    assert [n.op.kind for n in graph.nodes] == ["concatenate"]
    assert [t.name for t in graph.tensors.values() if t.data is not None] == ["Pad_0/pad_before_axis3"]


@pytest.mark.parametrize("runtime", ["pads", "value", "axes"])
def test_pads_value_and_axes_must_be_known_at_import_time(runtime: str) -> None:
    """Given as graph inputs instead of initializers, each is refused by its name."""
    pads, value, axes = [0, 1, 0, 1], 2.0, [1, 3]
    known = pad_known(pads, value, axes)
    inputs = {"x": X, runtime: known.pop(runtime)}
    what = {"pads": "pads", "value": "constant_value", "axes": "axes"}[runtime]
    with pytest.raises(GraphError, match=f"{what} \\(input"):
        onnx_import.load(model(pad_node("constant", pads, value, axes), inputs, known))


def test_pad_takes_negative_axes() -> None:
    got = run(pad_node("constant", [1, 2, 0, 3], axes=[-1, 1]), {"x": X}, pad_known([1, 2, 0, 3], None, [-1, 1]))
    np.testing.assert_array_equal(got, np.pad(X, [(0, 0), (2, 3), (0, 0), (1, 0)]))


def test_pad_of_a_known_input_is_folded() -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = helper.make_node("Pad", ["w", "pads"], ["p"], mode="reflect")
    add = helper.make_node("Add", ["x", "p"], ["y"])
    x = np.ones((4, 5), np.float32)
    g = helper.make_graph([node, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([1, 1, 1, 1]), "pads")])  # fmt: skip
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    graph = onnx_import.load(data)
    assert [n.op.kind for n in graph.nodes] == ["pointwise"]
    np.testing.assert_array_equal(sigdnn.Executor().run(graph, {"x": x})["y"], x + np.pad(w, 1, mode="reflect"))


@pytest.mark.parametrize(
    ("mode", "pads", "message"),
    [
        ("reflect", [0, 0, 4, 0, 0, 0, 0, 0], "at most 3"),
        ("wrap", [0, 0, 0, 6, 0, 0, 0, 0], "exceed its size 5"),
        ("constant", [0, 0, -3, 0, 0, 0, -1, 0], "crop all of axis 2"),
        ("constant", [0, 0, 1, 1], "a begin and an end"),
        ("symmetric", [0] * 8, "mode 'symmetric'"),
        ("edge", [0, 0, 0, 257, 0, 0, 0, 0], "at most 256"),
        (
            "constant",
            [0, 0, 0, 10**12, 0, 0, 0, 0],
            r"would make 24000000000000 elements at import time \(limit 16777216\)",
        ),
        ("constant", [0, 0, 0, 2**21, 0, 0, 0, 0], r"a constant pad of \[2, 3, 4, 2097152\] would make 50331648"),
    ],
)
def test_pads_it_cannot_take_are_refused_naming_the_node(mode: str, pads: list[int], message: str) -> None:
    with pytest.raises(GraphError, match=f"Pad_node.*{message}"):
        node = pad_node(mode, pads)
        node.name = "Pad_node"
        onnx_import.load(model(node, {"x": X}, pad_known(pads, None, None)))


def test_a_constant_pad_of_up_to_the_one_value_limit_is_built() -> None:
    """2^24 elements (64 MiB of float32): built; one more row would be refused (the cases above)."""
    x = np.zeros((1, 1), np.float32)
    pads = [0, 2**24, 0, 0]
    graph = onnx_import.load(model(pad_node("constant", pads), {"x": x}, pad_known(pads, None, None)))
    assert [t.dims for t in graph.tensors.values() if t.data is not None] == [(1, 2**24)]


def test_constant_pads_count_against_the_limits_before_they_are_built() -> None:
    """Under the one-value limit, a pad's constant still counts against Limits.max_total_bytes (93.8 KiB here)."""
    from sigdnn.graph.limits import Limits

    pads = [0, 0, 0, 1000, 0, 0, 0, 0]
    node = pad_node("constant", pads)
    with pytest.raises(GraphError, match=r"Pad_0.*would take 93.8 KiB, over the 64 KiB limit \(Limits.max_total_bytes"):
        onnx_import.load(model(node, {"x": X}, pad_known(pads, None, None)), limits=Limits(max_total_bytes=1 << 16))


def test_an_attribute_outside_the_ops_schema_is_refused_before_the_pad_is_built(monkeypatch) -> None:
    """A fuzzed model (seed 2051, case 662): a Pad of 2^25 rows whose mode attribute's name was mangled. The
    mapping refuses attributes it did not read only after it ran, so the 2 GiB constant was built first (27 s);
    the op's ONNX schema now refuses the attribute before anything is built."""
    from sigdnn.importers.onnx_node import OnnxNode

    def built(*args, **kwargs):
        raise AssertionError("a constant was built for a node that is refused")

    monkeypatch.setattr(OnnxNode, "materialize", built)
    pads = [2**25, 0, 0, 0, 0, 0, 0, 0]
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="Pad_node", **{"mod\x08": "reflect"})
    with pytest.raises(GraphError, match=r"Pad_node.*unsupported attribute\(s\) \['mod\\x08'\]"):
        onnx_import.load(model(node, {"x": X}, pad_known(pads, None, None)))
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="Pad_node", mode="constant")
    with pytest.raises(AssertionError, match="a constant was built"):  # the same pad, well spelt: it is built
        onnx_import.load(model(node, {"x": X}, pad_known([1, 0, 0, 0, 0, 0, 0, 0], None, None)))


def einsum_case(equation: str, *shapes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(len(equation))
    operands = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    got = run(node, dict(zip(names, operands)))
    want = np.einsum(equation.replace(" ", ""), *(o.astype(np.float64) for o in operands))
    return got, want


EINSUMS = [
    ("B G H I D, B G H J D -> B G H I J", (2, 3, 2, 5, 4), (2, 3, 2, 6, 4)),  # MaxViT's attention scores
    ("bgij,bgjd->bgid", (2, 3, 5, 6), (2, 3, 6, 4)),
    ("ij,jk->ki", (3, 4), (4, 5)),
    ("ij,kj->ik", (3, 4), (5, 4)),
    ("ij,jk", (3, 4), (4, 5)),  # implicit output: the indices used once, sorted
    ("ik,k->i", (3, 4), (4,)),
    ("i,j->ij", (3,), (4,)),
    ("i,i->", (7,), (7,)),
    ("abc,ab->c", (2, 3, 4), (2, 3)),
    ("abc,cd->dba", (2, 3, 4), (4, 5)),
    ("ij,kl->il", (2, 3), (4, 5)),  # j summed in the first operand alone, k in the second
    ("ij->ji", (3, 4)),
    ("ijk->ki", (2, 3, 4)),
    ("ij->", (3, 4)),
]


@pytest.mark.parametrize("case", EINSUMS, ids=[c[0] for c in EINSUMS])
def test_einsum_equals_numpys_float64_rounded_once_to_float32(case: tuple) -> None:
    got, want = einsum_case(case[0], *case[1:])
    assert got.size == want.size
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=2e-7, atol=1e-6)


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("...ij->...ji", [(2, 3, 4)], "ellipsis"),
        ("ii->i", [(3, 3)], "repeated index"),
        ("ij,jk->ik", [(3, 4), (5, 6)], "index 'j' is 4 in one operand, 5"),
        ("ij,jk,kl->il", [(2, 2), (2, 2), (2, 2)], "3 operands"),
        ("ij->ik", [(3, 4)], "output 'ik'"),
        ("ij->i", [(3, 4), (4,)], "does not name one index per dim of its 2"),
        ("i1,j->ij", [(3, 4), (4,)], "does not name one index per dim"),
    ],
)
def test_einsums_it_cannot_take_are_refused_naming_the_node(equation: str, shapes: list, message: str) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation, name="Einsum_node")
    inputs = {n: np.zeros(s, np.float32) for n, s in zip(names, shapes)}
    with pytest.raises(GraphError, match=f"Einsum_node.*{message}"):
        onnx_import.load(model(node, inputs))


def test_einsum_nodes_are_named_for_what_they_do() -> None:
    """Every node an Einsum makes is named after it and its step (what validation reports name)."""
    node = helper.make_node("Einsum", ["x0", "x1"], ["y"], equation="kxyb,zwkb->zbywx", name="E")
    inputs = {"x0": np.zeros((2, 3, 4, 5), np.float32), "x1": np.zeros((6, 7, 2, 5), np.float32)}
    graph = onnx_import.load(model(node, inputs))
    names = [n.name for n in graph.nodes]
    steps = ["a_order", "b_order", "a_matrix", "b_matrix", "matmul", "product", "out_order"]
    assert all(any(n.startswith(f"E/{s}") for n in names) for s in steps), names


LETTERS = "abcd"


@st.composite
def einsum_cases(draw):  # type: ignore[no-untyped-def]
    """One or two operands of 0-3 distinct indices over a, b, c, d (sizes 1-3), an explicit or implicit output,
    sometimes a repeated index or a stray character: what the importer must take or refuse by name."""
    sizes = {c: draw(st.integers(1, 3)) for c in LETTERS}
    count = draw(st.integers(1, 2))
    terms = [draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3)) for _ in range(count)]
    used = sorted({c for t in terms for c in t})
    out = draw(st.one_of(st.none(), st.lists(st.sampled_from(used), max_size=3)))
    equation = ",".join("".join(t) for t in terms) + ("" if out is None else "->" + "".join(out))
    equation = draw(st.sampled_from([equation, equation, equation.replace(",", ".", 1), " " + equation]))
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    return equation, shapes


@settings(max_examples=150, deadline=None)
@given(einsum_cases())
def test_random_einsums_equal_numpys_or_are_refused_by_name(case) -> None:  # type: ignore[no-untyped-def]
    equation, shapes = case
    rng = np.random.default_rng(0)
    operands = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation, name="E")
    try:
        want = np.einsum(equation.replace(" ", ""), *(o.astype(np.float64) for o in operands))
    except ValueError:
        want = None
    try:
        got = run(node, dict(zip(names, operands)))
    except GraphError as e:
        assert "E" in str(e)
        return
    assert want is not None, f"{equation}: imported what NumPy refuses"
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6)
