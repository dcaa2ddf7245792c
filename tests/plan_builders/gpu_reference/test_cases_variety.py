"""The agreement campaign's random one-node graphs (gpu_reference/cases.py) span what they promise: every op and
dtype, ranks, extents scaled by ``size``, broadcasting, modes, axes, variable lengths and the data-movement
variants, each seen over a few hundred seeded draws. The expected ranges are the campaign's design, written
out here by hand (docs/gpu_reference.md), not read from the module."""

from __future__ import annotations

import contextlib
import itertools
from collections import defaultdict

import numpy as np
import pytest

from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.plan_builders.gpu_reference import cases

FLOATS = ("float32", "float16", "bfloat16", "float64")
NARROW = ("fp8_e4m3", "fp8_e5m2")
INTEGERS = ("int8", "uint8", "int32", "int64", "bool")
OPS = {
    "pointwise", "matmul", "conv_fprop", "conv_dgrad", "conv_wgrad", "batchnorm", "batchnorm_inference",
    "batchnorm_backward", "layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward", "softmax", "reduction",
    "sdpa", "sdpa_backward", "pooling", "pooling_backward", "resample", "resample_backward", "reshape", "transpose",
    "slice", "concatenate", "gdn", "gdn_bwd", "kda", "kda_bwd",
}  # fmt: skip
ANY_DTYPE = {"pointwise", "reduction", "reshape", "transpose", "slice", "concatenate", "matmul"}


def draws(op: str, n: int, size: int = 1, dtype: str = "float32", seed: int = 0) -> list[Graph]:
    """n draws, less those the op refuses (as the agreement tests skip them: a gen_index case whose axis was
    also drawn as a float parameter)."""
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(n):
        with contextlib.suppress(GraphError):
            found.append(cases.random_case(op, rng, dtype, size))
    assert len(found) > n * 0.9
    return found


def dims(g: Graph, name: str) -> tuple[int, ...]:
    return next(t.dims for t in g.tensors.values() if t.name == name)


def names(g: Graph) -> set[str]:
    return {t.name for t in g.tensors.values()}


def outputs_all_marked(g: Graph) -> bool:
    node = g.nodes[0]
    return all(not g.tensors[uid].is_virtual for uid in node.op.outputs().values() if uid is not None)


def test_extents_and_dims_cover_their_ranges_scaled_by_size() -> None:
    rng = np.random.default_rng(0)
    assert {cases._extent(rng, 1, 6, 1) for _ in range(400)} == set(range(1, 7))
    assert {cases._extent(rng, 1, 3, 2) for _ in range(400)} == set(range(1, 7))
    assert {cases._extent(rng, 0, 4, 1) for _ in range(400)} == set(range(0, 5))
    found = [cases._dims(rng, 3, 1) for _ in range(300)]
    assert {len(d) for d in found} == {3} and set(itertools.chain(*found)) == set(range(1, 7))
    assert set(itertools.chain(*(cases._dims(rng, 2, 2, 3) for _ in range(300)))) == set(range(1, 7))
    assert cases._dims(rng, 0, 1) == ()


def test_axes_are_every_nonempty_subset_and_never_empty() -> None:
    rng = np.random.default_rng(0)
    found = [cases._axes(rng, 3) for _ in range(400)]
    subsets = {c for r in (1, 2, 3) for c in itertools.combinations(range(3), r)}
    assert set(found) == subsets
    assert {cases._axes(rng, 1) for _ in range(50)} == {(0,)}


def test_every_op_is_drawn_in_its_dtypes_with_its_compute_type() -> None:
    assert set(cases.BUILDERS) == OPS
    assert cases.FLOAT_DTYPES == FLOATS and cases.NARROW_FLOATS == NARROW and cases.INTEGER_DTYPES == INTEGERS
    for op in OPS:
        assert cases.dtypes_of(op) == FLOATS + NARROW + (INTEGERS if op in ANY_DTYPE else ()), op
    rng = np.random.default_rng(0)
    for op, dtype in (("pointwise", "int8"), ("reduction", "bool"), ("matmul", "float16"), ("conv_fprop", "float32")):
        g = cases.random_case(op, rng, dtype)
        assert g.name == f"{op}_{dtype}" and len(g.nodes) == 1 and g.nodes[0].op.kind == op
        assert g.io_dtype.value == dtype
        assert g.compute_dtype.value == ("int32" if dtype in INTEGERS else "float32"), (op, dtype)


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_output_of_a_case_is_a_graph_output(op: str) -> None:
    for g in draws(op, 12):
        assert outputs_all_marked(g), op


def test_pointwise_cases_draw_every_mode_rank_broadcast_and_parameter() -> None:
    found = draws("pointwise", 1500)
    seen: dict[str, set] = defaultdict(set)
    for g in found:
        node = g.nodes[0]
        op = node.op
        out = g.tensors[op.out_0].dims
        assert node.name == "pw" and dims(g, "in_0") == out
        seen["mode"].add(op.mode)
        seen["rank"].add(len(out))
        seen["extent"].update(out)
        ports = [p for p in ("in_0", "in_1", "in_2") if getattr(op, p) is not None]
        assert [g.tensors[getattr(op, p)].name for p in ports] == [f"in_{i}" for i in range(MODES[op.mode].arity)]
        for p in ports[1:]:
            d = g.tensors[getattr(op, p)].dims
            assert all(a in (1, b) for a, b in zip(d, out, strict=True))
            seen["broadcast"].add(d != out)
        if op.mode == "gen_index":
            seen["axis"].add((len(out), op.axis))
        else:
            assert op.axis is None
        for p in set(MODES[op.mode].params) - {"axis"}:  # gen_index's axis: drawn as a position above
            value = getattr(op, p)
            seen[f"set {p}"].add(value is not None)
            if value is not None and p == "relu_upper_clip":
                assert 0.5 <= value < 3.0
            elif value is not None:
                assert value == round(value, 2)
                seen["param sign"].add(value > 0)
    assert seen["mode"] == set(MODES)
    assert seen["rank"] == {1, 2, 3, 4} and seen["extent"] == set(range(1, 7))
    assert seen["broadcast"] == {True, False}
    assert all(axis < rank for rank, axis in seen["axis"]) and {a for _, a in seen["axis"]} == {0, 1, 2, 3}
    assert all(seen[k] == {True, False} for k in seen if k.startswith("set "))
    assert "set relu_upper_clip" in seen and seen["param sign"] == {True, False}


def test_matmul_cases_draw_batches_broadcast_a_and_extents_to_24() -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws("matmul", 400):
        assert g.nodes[0].name == "mm" and names(g) >= {"a", "b"}
        a, b = dims(g, "a"), dims(g, "b")
        assert len(a) == len(b) and a[-1] == b[-2]
        seen["batch rank"].add(len(b) - 2)
        seen["batch"].update(b[:-2])
        seen["broadcast"].add(a[:-2] != b[:-2])
        assert all(x in (1, y) for x, y in zip(a[:-2], b[:-2], strict=True))
        seen["mkn"].update((a[-2], a[-1], b[-1]))
    assert seen["batch rank"] == {0, 1, 2} and seen["batch"] == {1, 2, 3}
    assert seen["broadcast"] == {True, False} and seen["mkn"] == set(range(1, 25))


@pytest.mark.parametrize("op", ["softmax", "reduction"])
def test_softmax_and_reduction_cases_draw_ranks_extents_axes_and_modes(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 400):
        node = g.nodes[0]
        assert node.name == ("sm" if op == "softmax" else "red") and "x" in names(g)
        x = dims(g, "x")
        seen["rank"].add(len(x))
        seen["extent"].update(x)
        if op == "softmax":
            seen["axes"].add((len(x), tuple(node.op.axes)))
            seen["log"].add(node.op.log)
            assert node.op.generate_stats and node.op.stats is not None
        else:
            seen["mode"].add(node.op.mode)
            y = g.tensors[node.op.y].dims
            seen["axes"].add((len(x), tuple(a for a in range(len(x)) if y[a] == 1 and x[a] != 1)))
    assert seen["rank"] == {1, 2, 3} and seen["extent"] == set(range(1, 9))
    if op == "softmax":
        assert seen["log"] == {True, False}
        assert {a for r, a in seen["axes"] if r == 2} == {(0,), (1,), (0, 1)}
    else:
        assert seen["mode"] == set(Reduction.enums["mode"])


def test_attention_cases_draw_no_lengths_padding_lengths_and_each_ragged_tensor() -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws("sdpa", 300):
        op = g.nodes[0].op
        b = dims(g, "q")[0]
        if op.seq_len_q is None:
            assert op.seq_len_kv is None and not any(n.endswith("_ragged_offset") for n in names(g))
            seen["kind"].add("none")
            continue
        for port in ("seq_len_q", "seq_len_kv"):
            t = g.tensors[getattr(op, port)]
            assert t.name == port and t.dims == (b,)
            seen["length dtype"].add(t.dtype.value)
        ragged = set()
        for p in "qkvo":
            uid = getattr(op, f"{p}_ragged_offset")
            if uid is not None:
                t = g.tensors[uid]
                assert t.name == f"{p}_ragged_offset" and t.dims == (b + 1,) and t.dtype.value == "int64"
                ragged.add(p)
        seen["kind"].add("ragged" if ragged else "padded")
        seen["ragged"].update(ragged)
    assert seen["kind"] == {"none", "padded", "ragged"} and seen["ragged"] == set("qkvo")
    assert seen["length dtype"] == {"int32", "int64"}


@pytest.mark.parametrize("op", ["reshape", "transpose", "slice", "concatenate"])
def test_data_movement_cases_draw_each_variant(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 300):
        node = g.nodes[0]
        x = dims(g, "x")
        seen["rank"].add(len(x))
        seen["extent"].update(x)
        assert node.name == {"reshape": "rs", "transpose": "tr", "slice": "sl", "concatenate": "cat"}[op]
        if op == "reshape":
            seen["target"].add("flat" if node.op.dims == (int(np.prod(x)),) else "reversed")
            assert node.op.dims in ((int(np.prod(x)),), tuple(reversed(x)))
        elif op == "transpose":
            assert sorted(node.op.permutation) == list(range(len(x)))
            seen["permutation"].add(tuple(node.op.permutation))
        elif op == "slice":
            for d, start, limit, stride in zip(x, node.op.start_indices, node.op.limit_indices, node.op.strides):
                assert 0 <= start < limit <= d and stride in (1, 2)
                seen["start"].add(start)
                seen["stride"].add(stride)
                seen["full"].add(limit == d)
        else:
            assert names(g) >= {"x", "x0", "x1"} and len(node.op.x) == 3
            for other in ("x0", "x1"):
                o = dims(g, other)
                assert o[: node.op.axis] == x[: node.op.axis] and o[node.op.axis + 1 :] == x[node.op.axis + 1 :]
                seen["other extent"].add(o[node.op.axis])
            seen["axis"].add((len(x), node.op.axis))
    assert seen["rank"] == {1, 2, 3, 4} and seen["extent"] == set(range(1, 6))
    if op == "reshape":
        assert seen["target"] == {"flat", "reversed"}
    elif op == "transpose":
        assert len({p for p in seen["permutation"] if len(p) == 3}) == 6
    elif op == "slice":
        assert seen["stride"] == {1, 2} and seen["full"] == {True, False} and seen["start"] == set(range(5))
    else:
        assert seen["other extent"] == {1, 2, 3, 4} and {a for r, a in seen["axis"] if r == 4} == {0, 1, 2, 3}


def test_cases_grow_with_size() -> None:
    """size scales every drawn extent's upper bound: size 2 reaches twice the extents of size 1."""
    largest = {1: 0, 2: 0}
    for size in (1, 2):
        for g in draws("reduction", 300, size):
            largest[size] = max(largest[size], *dims(g, "x"))
    assert largest == {1: 8, 2: 16}
