"""The GPU reference agrees with the CPU reference: bit for bit, or by 1 ulp where summation order can tell.

Every kernel runs through the cuTile emulator (host memory presented as a
GPU). Cases: each op's conformance sample in every dtype it takes, and
random one-node graphs of every op (``gpu_reference.cases``) over every
dtype. Ops without a sum (pointwise, data movement, batchnorm inference)
must agree exactly; ops that sum may differ by 1 ulp of the output where
two float64 sums in different orders land on either side of a rounding
boundary (counted, and rare); nothing may differ by more. A planted bug in a
GPU reference kernel or formula is caught by the same comparison.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from gpu_reference_emulation import agreement_ulps, make_available, run_both, worst_ulps

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import GraphError, NoPlanError
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.plan_builders.gpu_reference import cases, normalization, windows

EXACT_OPS = {"pointwise", "reshape", "transpose", "slice", "concatenate", "batchnorm_inference", "resample"}
# pointwise modes whose float64 form differs from NumPy's function (Kahan's expm1 / log1p): within an ulp
REFORMULATED = {"elu_fwd", "softplus_fwd", "erf", "gelu_fwd", "gelu_bwd"}  # other formulas than the CPU reference's
DTYPES = cases.FLOAT_DTYPES + cases.NARROW_FLOATS + cases.INTEGER_DTYPES
# sigdnn's own ops: a test elsewhere defines a plugin op (tests/conformance/minimal_op.py) that lands in
# OP_CLASSES too when both run in one process, and no library of sigdnn's serves a plugin's op.
SHIPPED_OPS = {kind: cls for kind, cls in OP_CLASSES.items() if cls.__module__.startswith("sigdnn.")}


@pytest.fixture(autouse=True)
def _available(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)


def allowed(graph: sigdnn.Graph) -> int:
    node = graph.nodes[0]
    if node.op.kind in EXACT_OPS and getattr(node.op, "mode", None) not in REFORMULATED:
        return 0
    return 1


def check(graph: sigdnn.Graph, seed: int) -> dict[str, tuple[int, int]]:
    found = worst_ulps(graph, random_inputs(graph, seed))
    limit = allowed(graph)
    assert all(worst <= limit for worst, _ in found.values()), (graph.nodes[0].op, found)
    return found


def test_every_op_has_a_gpu_reference_builder_and_random_cases() -> None:
    served = {op for b in sigdnn.registry.DEFAULT_REGISTRY.builders() if b.library == "gpu_reference" for op in b.ops}
    assert served == set(SHIPPED_OPS) == set(cases.BUILDERS)


@pytest.mark.parametrize("kind", sorted(SHIPPED_OPS))
def test_every_op_sample_agrees_in_every_dtype(kind: str) -> None:
    ran = 0
    for dtype in DTYPES:
        graph = sigdnn.Graph(f"{kind}_{dtype}", io_dtype=dtype, compute_dtype="float32")
        try:
            SHIPPED_OPS[kind].sample(graph)
        except GraphError:
            continue  # the op takes no such tensors
        try:
            check(graph, 0)
        except NoPlanError as e:
            assert "floating point only" in str(e), e
            continue
        ran += 1
    assert ran >= 4  # every op takes the float dtypes at least


@pytest.mark.parametrize("op", sorted(cases.BUILDERS))
def test_random_cases_of_every_op_agree(op: str) -> None:
    rng = np.random.default_rng(sum(map(ord, op)))
    ran, one_ulp = 0, 0
    for dtype in cases.dtypes_of(op):
        for seed in range(2):
            try:
                graph = cases.random_case(op, rng, dtype)
            except GraphError:
                continue  # a drawn combination the op refuses (an integer dtype for a float mode)
            try:
                found = check(graph, seed)
            except NoPlanError as e:
                assert "floating point only" in str(e), e
                continue
            ran += 1
            one_ulp += sum(count for _, count in found.values())
    assert ran >= 10


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_every_pointwise_mode_agrees(mode: str, dtype: str) -> None:
    """Each mode over values that reach its branches (signs, zeros, ties of floor / ceil, large magnitudes)."""
    info = MODES[mode]
    g = sigdnn.Graph(mode, io_dtype=dtype, compute_dtype="int32" if dtype == "int32" else "float32")
    ports = [g.tensor(f"in_{i}", (4, 16)) for i in range(info.arity)]
    params = {"axis": 1} if mode == "gen_index" else {}
    try:
        g.pointwise(mode, *ports, name="pw", **params).set_output(True)
    except GraphError:
        return  # a float-only mode over integers
    values = np.concatenate([np.arange(-8, 8) * 0.75, [0.0, -0.0, 2.5, -2.5, 40.0, -40.0, 1e-3, -1e-3]])
    rng = np.random.default_rng(len(mode))
    inputs = {
        f"in_{i}": rng.choice(values, (4, 16)).astype(
            g.tensors[t.uid].dtype.numpy if dtype != "bfloat16" else np.float32
        )
        for i, t in enumerate(ports)
    }
    if dtype == "bfloat16":
        import ml_dtypes

        inputs = {k: v.astype(ml_dtypes.bfloat16) for k, v in inputs.items()}
    found = worst_ulps(g, inputs)
    assert found["pw::out_0"][0] <= (1 if mode in REFORMULATED else 0), found


def test_integer_pow_wraps_as_int64_at_every_exponent_bit() -> None:
    """Exponents up to 2^63 - 1 (each bit of the exponent is one squaring pass) and negative ones (C's truncation)."""
    bases = np.array([-3, -2, -1, 0, 1, 2, 3, 7], np.int64)
    exponents = np.array([-5, -2, 0, 1, 2, 31, 62, 63, 64, 2**62 + 1, 2**63 - 1, 2**63 - 2], np.int64)
    g = sigdnn.Graph("pow", io_dtype="int64", compute_dtype="int64")
    a, b = g.tensor("a", (bases.size, 1)), g.tensor("b", (1, exponents.size))
    g.pointwise("pow", a, b, name="pw").set_output(True)
    assert worst_ulps(g, {"a": bases[:, None], "b": exponents[None, :]})["pw::out_0"][0] == 0


@pytest.mark.parametrize("mode", Reduction.enums["mode"])
def test_a_reduction_over_unit_axes_still_applies_its_mode(mode: str) -> None:
    """y's dims equal x's where x has 1s: nothing is summed, but the norms still take |x| (found by the
    agreement campaign: the GPU reference had returned x as it was)."""
    g = sigdnn.Graph("red", io_dtype="float32", compute_dtype="float32")
    g.reduction(g.tensor("x", (3, 1)), mode, axes=(1,), name="red").set_output(True)
    inputs = {"x": np.array([[-2.0], [0.0], [1.5]], np.float32)}
    assert worst_ulps(g, inputs)["red::y"][0] == 0


def _conv_case() -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", (2, 4, 7, 6)), g.tensor("w", (6, 2, 3, 3))
    g.conv_fprop(x, w, padding=(1, 1), stride=(2, 1), dilation=(1, 1), name="conv").set_output(True)
    return g


def _layernorm_case() -> sigdnn.Graph:
    g = sigdnn.Graph("ln", io_dtype="bfloat16", compute_dtype="float32")
    x, s, b = g.tensor("x", (4, 32)), g.tensor("s", (1, 32)), g.tensor("b", (1, 32))
    for t in g.layernorm("training", x, s, b, epsilon=1e-2, name="ln"):
        t.set_output(True)
    return g


def test_a_planted_off_by_one_window_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _conv_case()
    assert max(w for w, _ in worst_ulps(graph, random_inputs(graph, 0)).values()) == 0
    honest = windows.forward

    def shifted(*args, **kwargs):  # every tap one position to the right
        window = honest(*args, **kwargs)
        return np.where(window >= 0, np.minimum(window + 1, window.max()), -1)

    monkeypatch.setattr(windows, "forward", shifted)
    assert max(w for w, _ in worst_ulps(graph, random_inputs(graph, 0)).values()) > 1


def test_a_planted_wrong_epsilon_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _layernorm_case()
    honest = normalization.statistics
    monkeypatch.setattr(normalization, "statistics", lambda x, axes, eps, center: honest(x, axes, eps * 2, center))
    found = worst_ulps(graph, random_inputs(graph, 0))
    assert found["ln::inv_variance"][0] > 1 and found["ln::y"][0] > 1


def test_a_planted_kernel_bug_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong line in the kernel file itself: tiles.py's elementwise SUB computing y - x."""
    from sigdnn.plan_builders.gpu_reference import backend

    g = sigdnn.Graph("sub", io_dtype="float16", compute_dtype="float32")
    g.pointwise("sub", g.tensor("a", (3, 5)), g.tensor("b", (3, 5)), name="sub").set_output(True)
    assert worst_ulps(g, random_inputs(g, 0))["sub::out_0"][0] == 0
    text = backend.KERNEL_FILE.read_text()
    assert text.count("r = x - y") == 1
    monkeypatch.setitem(backend._modules, True, backend.emulated_module(text.replace("r = x - y", "r = y - x")))
    assert worst_ulps(g, random_inputs(g, 0))["sub::out_0"][0] > 1


def test_the_float64_output_comparison_rounds_to_float32() -> None:
    from gpu_reference_emulation import agreement_ulps

    a = np.array([1.0, 2.0, math.nan])
    b = np.array([1.0 + 2.0**-52, 2.0 + 2.0**-22, math.nan])  # 1 float64 ulp: 0; one float32 ulp: 1
    assert agreement_ulps(a, b).tolist() == [0, 1, 0]


@pytest.mark.parametrize("op", ["sdpa", "sdpa_backward"])
def test_variable_length_attention_agrees(op: str) -> None:
    """Padding lengths and ragged (token-packed) tensors: masks and index maps made from the lengths and
    offsets the GPU reference reads back, against the CPU reference's unpack / pack (0 outside every sequence
    on both sides, so whole outputs compare)."""
    rng = np.random.default_rng(35)
    ragged = padded = 0
    placed: Counter[str] = Counter()  # how often each tensor was token-packed in a case of two or more sequences
    while ragged < 6 or padded < 3 or min(placed[p] for p in "qkvo") < 3:
        graph = cases.random_case(op, rng, str(rng.choice(["float32", "bfloat16", "float64"])))
        ports = graph.nodes[0].op.ports()
        if "seq_len_q" not in ports:
            continue
        check(graph, int(rng.integers(100)))
        offsets = {p.removesuffix("_ragged_offset") for p in ports if p.endswith("_ragged_offset")}
        ragged, padded = ragged + bool(offsets), padded + (not offsets)
        placed.update(offsets if graph.tensors[ports["q"]].dims[0] > 1 else ())


@pytest.mark.parametrize("backward", [False, True], ids=["sdpa", "sdpa_backward"])
def test_padding_rows_holding_nan_do_not_reach_the_sequences(backward: bool) -> None:
    """Rows past each length hold NaN and inf (a caller's uninitialized padding): they are read as 0, as the CPU
    reference reads them, so no product of a masked 0 with them leaks a NaN into a sequence."""
    g = sigdnn.Graph("padded", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (2, 2, 5, 4)), g.tensor("k", (2, 1, 6, 4)), g.tensor("v", (2, 1, 6, 3))
    lengths = {n: g.tensor(n, (2,), dtype="int32") for n in ("seq_len_q", "seq_len_kv")}
    if backward:
        o, do = g.tensor("o", (2, 2, 5, 3)), g.tensor("d_o", (2, 2, 5, 3))
        stats = g.tensor("stats", (2, 2, 5, 1))
        for t in g.sdpa_backward(q, k, v, o, do, stats, 0.5, None, False, name="bwd", **lengths):
            t.set_output(True)
    else:
        for t in g.sdpa(q, k, v, 0.5, None, False, True, name="sdpa", **lengths):
            t.set_output(True)
    inputs = random_inputs(g, 3)
    inputs["seq_len_q"], inputs["seq_len_kv"] = np.array([3, 5], np.int32), np.array([4, 2], np.int32)
    for name, length in (("q", 3), ("k", 4), ("v", 4), ("o", 3), ("d_o", 3), ("stats", 3)):
        if name in inputs:
            inputs[name][0, :, length:] = np.nan
            inputs[name][0, :, -1] = np.inf
    got, want = run_both(g, inputs)
    for name in want:
        assert not np.isnan(want[name]).any() and not np.isnan(got[name]).any(), name
        assert agreement_ulps(got[name], want[name]).max() <= 1, name


@pytest.mark.parametrize("backward", [False, True], ids=["sdpa", "sdpa_backward"])
def test_token_packed_sequences_agree_and_the_buffer_past_them_is_never_read(backward: bool) -> None:
    """q, k, v, o (and d_o, dq, dk, dv) all token-packed: a full sequence, a single query, one with no key; NaN past
    the last sequence, which neither reference may read."""
    pytest.importorskip("torch")
    from ragged_attention_cases import arrays, graph_inputs, ragged_graph

    g = ragged_graph(backward, True, "float32")
    inputs = graph_inputs(g, arrays(True, "float32")[0])
    if backward:  # o off the forward's: with o exact, dq of a row seeing one key cancels to a float64 residue
        o = inputs["o"]  # whose value depends on summation order (docs/gpu_reference.md, "Cancellation")
        inputs["o"] = (o + np.random.default_rng(1).standard_normal(o.shape) / 64).astype(o.dtype)
    got, want = run_both(g, inputs)
    for name in want:
        assert not np.isnan(got[name]).any() and not np.isnan(want[name]).any(), name
        assert agreement_ulps(got[name], want[name]).max() <= 1, name


def test_an_integer_matmul_runs_in_int64_and_wraps_as_the_cpu_reference() -> None:
    """int64 operands under an int64 compute type: taken (no floating-point-only decline), every product and sum
    wrapping in int64 (values near 2^40: float64 sums would round them, products wrap past 2^63)."""
    rng = np.random.default_rng(7)
    g = sigdnn.Graph("imm", io_dtype="int64", compute_dtype="int64")
    g.matmul(g.tensor("a", (2, 5, 9)), g.tensor("b", (2, 9, 4)), name="mm").set_output(True)
    inputs = {"a": rng.integers(-(2**40), 2**40, (2, 5, 9)), "b": rng.integers(-(2**40), 2**40, (2, 9, 4))}
    found, _ = run_both(g, inputs)
    with np.errstate(over="ignore"):
        want = inputs["a"] @ inputs["b"]
    np.testing.assert_array_equal(found["mm::c"], want)


def test_a_matmul_of_integers_and_floats_computes_in_floats() -> None:
    """Integer compute with one float operand is float64 math (as the CPU reference): 3 x 0.5 stays 1.5 and rounds
    to 1 in the int64 output; an integer product would have truncated 0.5 to 0 first."""
    g = sigdnn.Graph("mixed", io_dtype="int64", compute_dtype="int64")
    b = g.tensor("b", (2, 2)).set_data_type("float32")
    g.matmul(g.tensor("a", (2, 2)), b, name="mm").set_output(True)
    inputs = {"a": np.array([[3, 0], [1, 1]], np.int64), "b": np.array([[0.5, 1.0], [0.25, 2.5]], np.float32)}
    assert worst_ulps(g, inputs)["mm::c"][0] == 0
    found, _ = run_both(g, inputs)
    np.testing.assert_array_equal(found["mm::c"], [[1, 3], [0, 3]])


def test_max_pooling_backward_sends_a_window_led_by_its_only_nan_to_that_tap() -> None:
    """A NaN is a new maximum (docs/ops.md): a window whose NaN is its first tap sends dy there, even though no
    tap equals the window's (NaN) maximum; windows [nan, 5] and [1, 2] send 10 to tap 0 and 20 to tap 3."""
    g = sigdnn.Graph("maxpool_bwd", io_dtype="float32", compute_dtype="float32")
    dy, x = g.tensor("dy", (1, 1, 1, 2)), g.tensor("x", (1, 1, 1, 4))
    g.pooling_backward(dy, x, "max", (1, 2), (1, 2), name="pb").set_output(True)
    inputs = {"dy": np.array([[[[10.0, 20.0]]]], np.float32), "x": np.array([[[[np.nan, 5.0, 1.0, 2.0]]]], np.float32)}
    found, want = run_both(g, inputs)
    np.testing.assert_array_equal(want["pb::dx"], [[[[10.0, 0.0, 0.0, 20.0]]]])
    np.testing.assert_array_equal(found["pb::dx"], want["pb::dx"])


@pytest.mark.parametrize("backward", [False, True], ids=["sdpa", "sdpa_backward"])
@pytest.mark.parametrize(
    "band",
    [
        {"diagonal_bottom_right": True},
        {"diagonal_bottom_right": True, "left_bound": 2},
        {"left_bound": 3, "right_bound": 1},
        {"right_bound": -1},
    ],
    ids=["bottom_right_causal", "bottom_right_window", "band", "negative_right"],
)
def test_a_diagonal_band_agrees_with_padding(backward: bool, band: dict) -> None:
    """The GPU reference's mask (Band.visible over the whole score matrix) against the CPU reference's (per
    block), with lengths that shift a bottom-right diagonal per sequence and rows that see no key."""
    g = sigdnn.Graph("band", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (3, 2, 5, 4)), g.tensor("k", (3, 1, 7, 4)), g.tensor("v", (3, 1, 7, 3))
    lengths = {n: g.tensor(n, (3,), dtype="int32") for n in ("seq_len_q", "seq_len_kv")}
    causal = "right_bound" not in band
    if backward:
        o, do, stats = g.tensor("o", (3, 2, 5, 3)), g.tensor("d_o", (3, 2, 5, 3)), g.tensor("stats", (3, 2, 5, 1))
        outs = g.sdpa_backward(q, k, v, o, do, stats, 0.5, None, causal, name="bwd", **lengths, **band)
    else:
        outs = g.sdpa(q, k, v, 0.5, None, causal, True, name="sdpa", **lengths, **band)
    for t in outs:
        t.set_output(True)
    inputs = random_inputs(g, 7)
    inputs["seq_len_q"], inputs["seq_len_kv"] = np.array([5, 2, 4], np.int32), np.array([7, 6, 2], np.int32)
    got, want = run_both(g, inputs)
    for name in want:
        assert agreement_ulps(got[name], want[name]).max() <= 1, name
