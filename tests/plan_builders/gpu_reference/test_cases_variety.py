"""The agreement campaign's random one-node graphs (gpu_reference/cases.py) span what they promise: every op and
dtype, ranks, extents scaled by ``size``, broadcasting, modes, axes, variable lengths and the data-movement
variants, each seen over a few hundred seeded draws. The expected ranges are the campaign's design, written
out here by hand (docs/gpu_reference.md), not read from the module."""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter, defaultdict

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
    """n draws, less those the op refuses (as the agreement tests skip them)."""
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
            if any(e > 1 for e in out):
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
                seen["upper clip below 1"].add(value < 1.0)
            elif value is not None:
                assert value == round(value, 2)
                seen["param sign"].add(value > 0)
    assert seen["mode"] == set(MODES)
    assert seen["rank"] == {1, 2, 3, 4} and seen["extent"] == set(range(1, 7))
    assert seen["broadcast"] == {True, False}
    assert all(axis < rank for rank, axis in seen["axis"]) and {a for _, a in seen["axis"]} == {0, 1, 2, 3}
    assert all(seen[k] == {True, False} for k in seen if k.startswith("set "))
    assert "set relu_upper_clip" in seen and seen["param sign"] == {True, False}
    assert seen["upper clip below 1"] == {True, False}  # drawn over [0.5, 3)


def test_matmul_cases_draw_batches_broadcast_a_and_extents_to_24() -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws("matmul", 400):
        assert g.nodes[0].name == "mm" and names(g) >= {"a", "b"}
        a, b = dims(g, "a"), dims(g, "b")
        assert len(a) == len(b) and a[-1] == b[-2]
        seen["batch rank"].add(len(b) - 2)
        seen["batch"].update(b[:-2])
        if any(d > 1 for d in b[:-2]):
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
    kinds = []
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
        kinds.append("ragged" if ragged else "padded")
        seen["packed count"].add(len(ragged))
    assert seen["kind"] == {"none", "padded", "ragged"} and seen["ragged"] == set("qkvo")
    # lengths alone in 2 of 5 cases with lengths, and when none of q, k, v, o happens to be drawn packed
    assert 0.3 < kinds.count("padded") / len(kinds) < 0.6
    assert seen["packed count"] == {0, 1, 2, 3, 4}  # each of q, k, v, o packed or not on its own
    assert seen["length dtype"] == {"int32", "int64"}


@pytest.mark.parametrize("op", ["reshape", "transpose", "slice", "concatenate"])
def test_data_movement_cases_draw_each_variant(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    ends: list[bool] = []
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
                if d == 5:
                    ends.append(limit == d)
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
        # the end drawn uniformly past the start: over an extent of 5 it is the last with odds
        # (1/5 + 1/4 + 1/3 + 1/2 + 1) / 5 = 0.457 (an end drawn past the extent, then clipped, would give 0.58)
        assert 0.39 < sum(ends) / len(ends) < 0.52, sum(ends) / len(ends)
    else:
        assert seen["other extent"] == {1, 2, 3, 4} and {a for r, a in seen["axis"] if r == 4} == {0, 1, 2, 3}


def test_cases_grow_with_size() -> None:
    """size scales every drawn extent's upper bound: size 2 reaches twice the extents of size 1, the default."""
    largest = {1: 0, 2: 0, None: 0}
    for size in (1, 2, None):
        rng = np.random.default_rng(0)
        for _ in range(300):
            g = cases.random_case("reduction", rng, "float32", *([] if size is None else [size]))
            largest[size] = max(largest[size], *dims(g, "x"))
    assert largest == {1: 8, 2: 16, None: 8}


def channels_last(g: Graph, name: str) -> bool | None:
    """Whether a 4-d tensor is laid out NHWC (True) or NCHW (False); None where its dims make the two one."""
    t = next(t for t in g.tensors.values() if t.name == name)
    _, c, h, w = t.dims
    nchw, nhwc = (c * h * w, h * w, w, 1), (h * w * c, 1, w * c, c)
    return None if nchw == nhwc else {nchw: False, nhwc: True}[t.strides]


@pytest.mark.parametrize(("op", "node", "first", "second"), [("conv_fprop", "conv", "x", "w"),
                         ("conv_dgrad", "dgrad", "dy", "w"), ("conv_wgrad", "wgrad", "x", "dy")])  # fmt: skip
def test_convolution_cases_draw_groups_windows_paddings_and_layouts(
    op: str, node: str, first: str, second: str
) -> None:
    seen: dict[str, set] = defaultdict(set)
    groups_of = []
    for g in draws(op, 400):
        n = g.nodes[0]
        assert n.name == node and names(g) >= {first, second}
        x = n.op.dims if op == "conv_dgrad" else dims(g, "x")
        w = n.op.dims if op == "conv_wgrad" else dims(g, "w")
        dy = dims(g, "dy") if op != "conv_fprop" else g.tensors[n.op.y].dims
        groups = x[1] // w[1]
        seen["spatial"].add(len(x) - 2)
        seen["groups"].add(groups)
        seen["c per group"].add(w[1])
        seen["k per group"].add(w[0] // groups)
        seen["n"].add(x[0])
        assert dy[:2] == (x[0], w[0])
        for r, st, d, a, b, s in zip(w[2:], n.op.stride, n.op.dilation, n.op.pre_padding, n.op.post_padding, x[2:]):
            seen["kernel"].add(r)
            seen["stride"].add(st)
            seen["dilation"].add(d)
            assert a < r and b < r
            seen["padding"].update((a, b))
            seen["image beyond the window"].add(s - d * (r - 1))
        if len(x) == 4:
            seen["layout"].add(channels_last(g, first))
        groups_of.append(groups)
    assert seen["spatial"] == {1, 2} and seen["groups"] == {1, 2} and seen["n"] == {1, 2}
    assert seen["c per group"] == seen["k per group"] == seen["kernel"] == {1, 2, 3}
    assert seen["stride"] == seen["dilation"] == {1, 2} and seen["padding"] == {0, 1, 2}
    assert seen["image beyond the window"] == {1, 2, 3, 4, 5} and {True, False} <= seen["layout"]
    assert 0.55 < groups_of.count(1) / len(groups_of) < 0.8  # one group two times in three


@pytest.mark.parametrize("op", ["batchnorm", "batchnorm_inference", "batchnorm_backward"])
def test_batchnorm_cases_draw_ranks_layouts_and_running_statistics(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    params = {"batchnorm": ("scale", "bias"), "batchnorm_inference": ("scale", "bias", "mean", "inv_variance"),
              "batchnorm_backward": ("scale", "mean", "inv_variance")}[op]  # fmt: skip
    for g in draws(op, 300):
        n = g.nodes[0]
        x = dims(g, "x")
        assert n.name == ("bn_bwd" if op == "batchnorm_backward" else "bn")
        seen["rank"].add(len(x))
        seen["n"].add(x[0])
        seen["c"].add(x[1])
        seen["spatial"].update(x[2:])
        for p in params:
            assert dims(g, p) == (1, x[1]) + (1,) * (len(x) - 2), p
        if op == "batchnorm_backward":
            assert dims(g, "dy") == x
        if len(x) == 4:
            seen["layout"].add(channels_last(g, "x"))
        if op == "batchnorm":
            running = n.op.in_running_mean is not None
            assert running == (n.op.in_running_var is not None) and n.op.epsilon == 1e-5
            if running:
                assert dims(g, "running_mean") == dims(g, "running_var") == dims(g, "scale")
                assert n.op.momentum == 0.1 and n.op.next_running_mean is not None
            seen["running"].add(running)
    assert seen["rank"] == {2, 3, 4} and seen["n"] == {1, 2, 3} and seen["c"] == {1, 2, 3, 4}
    assert seen["spatial"] == {1, 2, 3, 4, 5} and {True, False} <= seen["layout"]
    if op == "batchnorm":
        assert seen["running"] == {True, False}


@pytest.mark.parametrize("op", ["layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward"])
def test_row_norm_cases_draw_the_normalized_trailing_axes(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 300):
        n = g.nodes[0]
        assert n.name == {"layernorm": "ln", "layernorm_backward": "ln_bwd", "rmsnorm": "rms"}.get(op, "rms_bwd")
        x = dims(g, "x")
        scale = dims(g, "scale")
        # normalized: the trailing axes from ``kept`` on, 1 <= kept < rank (ambiguous where x has 1s)
        fits = [k for k in range(1, len(x)) if scale == (1,) * k + x[k:]]
        assert fits, (x, scale)
        kept = fits[0]
        seen["rank"].add(len(x))
        seen["extent"].update(x)
        if len(fits) == 1:
            seen["kept"].add((len(x), kept))
        stat = x[:kept] + (1,) * (len(x) - kept)
        if op in ("layernorm", "rmsnorm"):
            assert n.op.epsilon == 1e-5 and n.op.phase == "training"
        if op == "layernorm":
            assert dims(g, "bias") == scale
        elif op == "rmsnorm":
            seen["bias"].add(n.op.bias is not None)
            assert n.op.bias is None or dims(g, "bias") == scale
        elif op == "layernorm_backward":
            assert dims(g, "dy") == x and dims(g, "mean")[:kept] == dims(g, "inv_variance")[:kept] == stat[:kept]
        else:
            assert dims(g, "dy") == x and dims(g, "inv_variance")[:kept] == stat[:kept]
            seen["dbias"].add(n.op.has_dbias)
    assert seen["rank"] == {2, 3} and seen["extent"] == set(range(1, 9))
    assert {k for r, k in seen["kept"] if r == 3} == {1, 2}
    assert seen.get("bias", {True, False}) == seen.get("dbias", {True, False}) == {True, False}


@pytest.mark.parametrize("op", ["sdpa", "sdpa_backward"])
def test_attention_cases_draw_heads_extents_bias_masks_and_token_major_tensors(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 300):
        n = g.nodes[0]
        assert n.name == ("sdpa" if op == "sdpa" else "sdpa_bwd")
        q, k, v = dims(g, "q"), dims(g, "k"), dims(g, "v")
        b, hq, sq, d = q
        hkv, skv, dv = k[1], k[2], v[3]
        assert k == (b, hkv, skv, d) and v == (b, hkv, skv, dv)
        seen["b"].add(b)
        seen["hkv"].add(hkv)
        seen["groups"].add(hq // hkv)
        seen["extent"].update((sq, skv, d, dv))
        seen["causal"].add(n.op.use_causal_mask)
        seen["bottom_right"].add(n.op.diagonal_bottom_right)
        seen["left_bound"].add(n.op.left_bound)
        seen["right_bound"].add(n.op.right_bound)
        assert 0.1 <= n.op.attn_scale < 1.0
        seen["bias"].add(n.op.bias is not None)
        if n.op.bias is not None:
            assert g.tensors[n.op.bias].dims == (1, 1, sq, skv) and g.tensors[n.op.bias].name == "bias"
        if op == "sdpa":
            assert n.op.generate_stats and n.op.stats is not None
            outs = {"o": n.op.o}
        else:
            assert dims(g, "o") == dims(g, "d_o") == (b, hq, sq, dv)
            stats = next(t for t in g.tensors.values() if t.name == "stats")
            assert stats.dims == (b, hq, sq, 1) and stats.dtype.value == "float32"
            outs = {"q": n.op.dq, "k": n.op.dk, "v": n.op.dv}
        for p in "qkvo":  # a token-packed port's tensor and its output (o, or its gradient) laid out token-major
            packed = getattr(n.op, f"{p}_ragged_offset") is not None
            tensors = [next(t for t in g.tensors.values() if t.name == p)] if p != "o" or op != "sdpa" else []
            tensors += [g.tensors[outs[p]]] if p in outs else []
            for t in tensors:  # (an output not packed may follow its input's layout)
                if t.dims[1] > 1 and t.dims[2] > 1 and (packed or t.name == p):  # heads and tokens: the order shows
                    assert (t.strides[2] > t.strides[1]) == packed, (p, t.dims, t.strides)
                    if packed:
                        seen["token major"].add(p)
    assert seen["b"] == seen["hkv"] == seen["groups"] == {1, 2} and seen["extent"] == set(range(1, 10))
    assert seen["causal"] == seen["bias"] == seen["bottom_right"] == {True, False}
    assert seen["left_bound"] == {None, 1, 2, 3, 4} and seen["right_bound"] == {None, -1, 0, 1, 2}
    assert seen["token major"] == set("qkvo")


@pytest.mark.parametrize("op", ["pooling", "pooling_backward"])
def test_pooling_cases_draw_windows_strides_paddings_and_modes(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 300):
        n = g.nodes[0]
        assert n.name == ("pool" if op == "pooling" else "pool_bwd")
        x = dims(g, "x")
        seen["spatial"].add(len(x) - 2)
        seen["n"].add(x[0])
        seen["c"].add(x[1])
        seen["mode"].add(n.op.mode)
        for w, st, a, b, s in zip(n.op.window, n.op.stride, n.op.pre_padding, n.op.post_padding, x[2:], strict=True):
            assert a < w and b < w
            seen["window"].add(w)
            seen["stride"].add(st)
            seen["padding"].update((a, b))
            seen["image beyond the window"].add(s - w)
        if op == "pooling_backward":
            out = tuple((s + a + b - w) // st + 1 for s, a, b, w, st in
                        zip(x[2:], n.op.pre_padding, n.op.post_padding, n.op.window, n.op.stride))  # fmt: skip
            assert dims(g, "dy") == (*x[:2], *out)
    assert seen["spatial"] == {1, 2} and seen["n"] == {1, 2} and seen["c"] == {1, 2, 3}
    assert seen["mode"] == {"max", "average_count_include_pad", "average_count_exclude_pad"}
    assert seen["window"] == {1, 2, 3} and seen["stride"] == {1, 2} and seen["padding"] == {0, 1, 2}
    assert seen["image beyond the window"] == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("op", ["resample", "resample_backward"])
def test_resample_cases_draw_modes_coordinates_and_both_directions(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 300):
        n = g.nodes[0]
        assert n.name == ("rs" if op == "resample" else "rs_bwd")
        small = dims(g, "x") if op == "resample" else n.op.dims
        large = n.op.dims if op == "resample" else dims(g, "dy")
        assert small[:2] == large[:2] and len(small) == len(large)
        seen["spatial"].add(len(small) - 2)
        seen["n"].add(small[0])
        seen["c"].add(small[1])
        seen["extent"].update(small[2:] + large[2:])
        seen["mode coordinates"].add((n.op.mode, n.op.coordinates))
        seen["shrinks"].add(any(a > b for a, b in zip(small[2:], large[2:])))
    assert seen["spatial"] == {1, 2, 3} and seen["n"] == seen["c"] == {1, 2} and seen["extent"] == {1, 2, 3, 4, 5}
    assert seen["mode coordinates"] == {("nearest", "half_pixel"), ("nearest", "asymmetric"),
                                        ("bilinear", "half_pixel"), ("bilinear", "asymmetric"),
                                        ("bilinear", "align_corners")}  # fmt: skip
    assert seen["shrinks"] == {True, False}


@pytest.mark.parametrize("op", ["gdn", "gdn_bwd", "kda", "kda_bwd"])
def test_delta_rule_cases_draw_sequences_gates_states_and_options(op: str) -> None:
    seen: dict[str, set] = defaultdict(set)
    for g in draws(op, 300):
        n = g.nodes[0]
        assert n.name == op
        t, h, kd = dims(g, "q")
        vd = dims(g, "v")[2]
        cu = next(x for x in g.tensors.values() if x.name == "cu_seqlens")
        seqs = cu.dims[0] - 1
        assert dims(g, "k") == (t, h, kd) and dims(g, "beta") == (t, h)
        gate = next(x for x in g.tensors.values() if x.name == "g")
        assert gate.dims == ((t, h, kd) if op.startswith("kda") else (t, h)) and gate.dtype.value == "float32"
        seen["tokens"].add(t)
        seen["heads"].add(h)
        seen["sequences"].add(seqs)
        seen["kd"].add(kd)
        seen["vd"].add(vd)
        seen["cu dtype"].add(cu.dtype.value)
        seen["initial"].add(n.op.initial_state is not None)
        if n.op.initial_state is not None:
            assert dims(g, "h0") == (seqs, h, kd, vd)
        seen["scale"].add(n.op.scale is not None)
        assert n.op.scale is None or 0.3 <= n.op.scale < 1.0
        seen["l2norm"].add(n.op.use_qk_l2norm)
        if op.endswith("_bwd"):
            assert dims(g, "d_o") == (t, h, vd)
            seen["d final"].add(n.op.d_final_state is not None)
            if n.op.d_final_state is not None:
                assert dims(g, "d_final") == (seqs, h, kd, vd)
        else:
            seen["final"].add(n.op.output_final_state)
    assert seen["tokens"] == set(range(1, 7)) and seen["heads"] == seen["sequences"] == {1, 2}
    assert seen["kd"] == seen["vd"] == {1, 2, 3, 4} and seen["cu dtype"] == {"int32", "int64"}
    assert seen["initial"] == seen["scale"] == seen["l2norm"] == {True, False}
    assert seen["d final" if op.endswith("_bwd") else "final"] == {True, False}


def test_pointwise_cases_are_never_refused() -> None:
    """Every draw is a graph the op takes, so the agreement tests skip none unseen: gen_index's axis (a position
    within the rank) is not overwritten by the float parameters drawn after it (half its cases were refused),
    and relu's lower clip slope is never negative (1% of relu cases were)."""
    rng = np.random.default_rng(7)
    graphs = [cases.random_case("pointwise", rng, "float32", 1) for _ in range(1500)]
    modes = Counter(g.nodes[0].op.mode for g in graphs)
    assert modes["gen_index"] >= 10 and modes["relu_fwd"] >= 10 and modes["relu_bwd"] >= 10
    assert any(g.nodes[0].op.relu_lower_clip_slope for g in graphs if g.nodes[0].op.mode == "relu_fwd")
