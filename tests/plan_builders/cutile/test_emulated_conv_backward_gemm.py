"""cuTile implicit-GEMM conv_dgrad and conv_wgrad through the emulator, against torch's float64 autograd.

The cases of tests/conv_backward_cases.py: small-integer inputs must give
torch's float64 gradient rounded once to its dtype bit for bit; normal
inputs must stay within float32 summation's bound of it and pass
``sigdnn.validate``. Planted bugs in the kernel text fail both (blocks run
last to first, as valid a schedule as any).
"""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from conv_backward_cases import CASES, dgrad_graph, dy_dims, torch_dgrad, torch_wgrad, wgrad_graph, within_float32_bound
from conv_grouped_cases import Case
from emulated import emulated_executor, make_available, planted, run_blocks_in_reverse
from oracles_conv import exact_round

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import conv_gemm
from sigdnn.plan_builders.cutile.conv_gemm import CutileConvDgradGemmBuilder, CutileConvWgradGemmBuilder
from sigdnn.registry.ranking import rank
from sigdnn.registry.registry import DEFAULT_REGISTRY
from sigdnn.signature_keys import key_for


@attrs.frozen
class Kind:
    graph: object  # Case -> Graph
    output: str
    operands: tuple[str, str]
    oracle: object  # (case, a, b) -> float64 gradient
    builder: type
    terms: object  # Case -> products summed per element

    @property
    def name(self) -> str:
        return self.builder.name


KINDS = {
    "dgrad": Kind(dgrad_graph, "dx", ("dy", "w"), torch_dgrad, CutileConvDgradGemmBuilder,
                  lambda c: c.w_dims[0] // c.groups * math.prod(c.w_dims[2:])),
    "wgrad": Kind(wgrad_graph, "dw", ("x", "dy"), torch_wgrad, CutileConvWgradGemmBuilder,
                  lambda c: c.dims[0] * math.prod(dy_dims(c)[2:])),
}  # fmt: skip
PAIRS = [(k, c) for k in KINDS for c in CASES]
IDS = [f"{k}-{c.name}" for k, c in PAIRS]


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def exact_inputs(g: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.integers(-4, 5, size=t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}


def run(kind: Kind, g: sigdnn.Graph, inputs: dict, executor: sigdnn.Executor | None = None) -> np.ndarray:
    executor = executor or emulated_executor()
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == [kind.name]
    return executor.execute(plan, inputs)[kind.output]


def within(kind: Kind, case: Case, got: np.ndarray, inputs: dict) -> np.ndarray:
    a, b = (inputs[p] for p in kind.operands)
    return within_float32_bound(lambda u, v: kind.oracle(case, u, v), a, b, got, kind.terms(case), case.dtype)


@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=IDS)
def test_small_integers_give_torchs_gradient_rounded_once(kind: str, case: Case) -> None:
    k = KINDS[kind]
    g = k.graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    got = run(k, g, inputs)
    want = exact_round(k.oracle(case, *(inputs[p] for p in k.operands)), case.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=IDS)
def test_normal_inputs_stay_within_float32_summation_of_torchs_gradient(kind: str, case: Case) -> None:
    k = KINDS[kind]
    g = k.graph(case)
    inputs = random_inputs(g, seed=3 + len(case.name))
    assert within(k, case, run(k, g, inputs), inputs).all()


@pytest.mark.parametrize(("kind", "case"), [(k, c) for k in KINDS for c in CASES[-3:]])
def test_validation_against_the_reference_passes(kind: str, case: Case) -> None:
    k = KINDS[kind]
    g = k.graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=emulated_executor())
    assert set(report.builders.values()) == {k.name}, report.builders
    assert report.passed, report.table()


def test_a_hand_worked_strided_dgrad_and_wgrad() -> None:
    """Forward y[o] = x[2o] + 10 x[2o + 1] (stride 2, taps [1, 10]): dx[2o] = dy[o], dx[2o + 1] = 10 dy[o];
    dw[t] = sum_o dy[o] x[2o + t] = 1 * 1 + 2 * 3 and 1 * 2 + 2 * 4 for x = [1 2 3 4], dy = [1 2]."""
    case = Case("hand", (1, 1, 4), (1, 1, 2), "NCW", (0,), (0,), (2,), (1,))
    dy, w, x = (np.array([[v]], np.float32) for v in ([1, 2], [1, 10], [1, 2, 3, 4]))
    np.testing.assert_array_equal(run(KINDS["dgrad"], dgrad_graph(case), {"dy": dy, "w": w}), [[[1, 10, 2, 20]]])
    np.testing.assert_array_equal(run(KINDS["wgrad"], wgrad_graph(case), {"x": x, "dy": dy}), [[[7, 10]]])


def plant(kind: Kind, old: str, new: str) -> tuple[sigdnn.Registry, str]:
    """A registry whose one builder runs ``kind``'s kernel with ``old`` replaced by ``new`` in it (not in the
    other kernels of the same file), or in the helper it calls where its body does not hold ``old``."""
    text = conv_gemm.kernel_source(kind.name.split(".")[1]).text
    start = text.index(f"def {kind.name.split('.')[1]}")
    end = text.find("@ct.kernel", start)
    body = text[start : end if end > 0 else len(text)]
    if old not in body:  # scatter_pixels, defined first in the file
        assert old in text[: text.index("@ct.kernel")], old
        return planted(kind.builder, lambda t: t.replace(old, new, 1))
    return planted(kind.builder, lambda t: t.replace(body, body.replace(old, new, 1)))


PLANTED = {
    ("dgrad", "stride_divisibility_ignored"): ("(q_h % sh == 0) & ", "", "stride3_dilation2_nchw_f32"),
    ("dgrad", "tap_direction_flipped"): ("i_w - ct.reshape(e * dw", "i_w + ct.reshape(e * dw", "nchw_f32_3x3"),
    ("dgrad", "padding_dropped"): ("% xh + ph", "% xh", "nchw_f32_3x3"),
    ("dgrad", "group_offset_dropped"): (" + g * k_per_group * k_stride", "", "g2_c20_nchw"),
    ("dgrad", "partial_channel_tile_written"): ("ct.where(k_local < k_per_group, g * k_per_group + k_local, k_total)",
                                                "g * k_per_group + k_local", "g2_c20_nchw"),  # scatter_pixels
    ("dgrad", "last_k_step_dropped"): ("range(ct.cdiv(reduction, TK))", "range(reduction // TK)", "nchw_f32_3x3"),
    ("wgrad", "last_pixel_step_dropped"): ("range(ct.cdiv(pixels, TK))", "range(pixels // TK)", "nchw_f32_3x3"),
    ("wgrad", "padding_dropped"): ("o_h * sh - ph", "o_h * sh", "nchw_f32_3x3"),
    ("wgrad", "group_offset_dropped"): ("(g * c_per_group + ct.minimum", "(ct.minimum", "g2_c20_nchw"),
    ("wgrad", "partial_row_tile_written"): ("ct.where(k_local < k_per_group, g * k_per_group + k_local, k_total)",
                                            "g * k_per_group + k_local", "g2_c20_nchw"),
    ("wgrad", "stride_dropped"): ("o_w * sw - pw", "o_w - pw", "stride3_dilation2_nchw_f32"),
}  # fmt: skip


@pytest.mark.parametrize("bug", PLANTED, ids=[f"{k}-{b}" for k, b in PLANTED])
def test_a_planted_bug_fails_the_oracle_and_validation(bug: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    run_blocks_in_reverse(monkeypatch)
    kind = KINDS[bug[0]]
    old, new, case_name = PLANTED[bug]
    registry, name = plant(kind, old, new)
    case = next(c for c in CASES if c.name == case_name)
    g = kind.graph(case)
    inputs = random_inputs(g, seed=5)
    executor = emulated_executor(registry=registry, engine=name)
    got = executor.run(g, inputs)[kind.output]
    assert not within(kind, case, got, inputs).all()
    assert not sigdnn.validate(g, inputs, executor=executor).passed


def test_an_infinity_in_x_reaches_dw_as_the_references_not_as_nan_from_tail_lanes() -> None:
    """Lanes past the last dy pixel read the last pixel's x and multiply a zero dy: an Inf there must not make
    0 * Inf = NaN of the sums it does not belong to."""
    k = KINDS["wgrad"]
    case = next(c for c in CASES if c.name == "g2_c20_nchw")
    g = k.graph(case)
    inputs = random_inputs(g, seed=9)
    inputs["x"].reshape(-1)[-1] = np.inf
    got = run(k, g, inputs)
    want = sigdnn.Executor().run(g, inputs)["dw"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_an_infinite_filter_of_one_group_leaves_the_other_groups_dx_finite() -> None:
    """Reduction lanes past a group's K/G x taps would read the next group's filters (times a zero dy): an Inf
    there must not reach this group's dx as NaN. (Within its own group an Inf meets padding zeros, as in every
    implicit GEMM, so only the other group is checked.)"""
    k = KINDS["dgrad"]
    case = next(c for c in CASES if c.name == "g2_c20_nchw")  # reduction 12 x 9 = 108: 4 steps of 32, 20 past it
    g = k.graph(case)
    inputs = random_inputs(g, seed=9)
    inputs["w"][12:] = np.inf  # every filter of the second group
    got = run(k, g, inputs)
    first = case.dims[1] // 2
    assert np.isfinite(got[:, :first]).all()
    want = sigdnn.Executor().run(g, inputs)["dx"][:, :first]
    assert within_float32_bound(lambda u, v: torch_dgrad(case, u, v), inputs["dy"], np.where(np.isinf(inputs["w"]),
                                0, inputs["w"]), got, 108, case.dtype)[:, :first].all()  # fmt: skip
    assert np.isfinite(want).all()


# -- what the builders decline, read from dims and strides alone (nothing is allocated) -------------------------
BIG = 2**31 - 1  # int32's largest


def backward_node(kind: str, x_dims, w_dims, y_dims, stride=None, pad=(0, 0), dtype="float32", compute="float32"):  # type: ignore[no-untyped-def]
    """A conv_dgrad or conv_wgrad node of a 1-D conv with these dims (pad: pre, post)."""
    g = sigdnn.Graph("decline", io_dtype=dtype, compute_dtype=compute)
    stride = stride or (1,) * (len(x_dims) - 2)
    spatial = len(x_dims) - 2
    pads = {"pre_padding": (pad[0],) * spatial, "post_padding": (pad[1],) * spatial}
    if kind == "dgrad":
        g.conv_dgrad(g.tensor("dy", y_dims), g.tensor("w", w_dims), stride=stride, dims=x_dims, name="n", **pads)
    else:
        g.conv_wgrad(g.tensor("x", x_dims), g.tensor("dy", y_dims), stride=stride, dims=w_dims, name="n", **pads)
    return g, g.nodes[-1]


def accepts(kind: str, g: sigdnn.Graph, node: sigdnn.Node) -> bool:
    try:
        KINDS[kind].builder().check(node, g)
    except NotSupported:
        return False
    return True


def launch_of(kind: str, g: sigdnn.Graph, node: sigdnn.Node):  # type: ignore[no-untyped-def]
    (launch,), workspace = KINDS[kind].builder().launches(node, g)
    assert workspace == 0  # both operands are gathered in the kernel: nothing is staged
    return launch


@pytest.mark.parametrize("kind", KINDS)
def test_a_float64_compute_dtype_is_declined(kind: str) -> None:
    g, node = backward_node(kind, (1, 4, 9), (4, 4, 3), (1, 4, 7), compute="float64")
    for uid in node.op.outputs().values():  # a virtual output would take the compute dtype
        g.tensors[uid].set_data_type("float32")
    with pytest.raises(NotSupported, match=r"node 'n'.*compute dtype float64"):
        KINDS[kind].builder().check(node, g)


@pytest.mark.parametrize("kind", KINDS)
def test_strides_negative_are_declined_and_a_size_one_axis_may_have_stride_zero(kind: str) -> None:
    g, node = backward_node(kind, (1, 4, 9), (4, 4, 3), (1, 4, 7))
    dy = g.tensor_by_name("dy")
    dy.set_stride((0, 7, 1))  # batch of one: its stride addresses nothing
    assert accepts(kind, g, node)
    dy.set_stride((28, -7, 1))
    assert not accepts(kind, g, node)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("span", "accepted"), [(BIG, True), (BIG + 1, False)])
def test_a_tensor_spanning_past_int32_is_declined(kind: str, span: int, accepted: bool) -> None:
    """dy of two batch entries whose batch stride puts its last element at span - 1."""
    g, node = backward_node(kind, (2, 1, 1), (1, 1, 1), (2, 1, 1))
    g.tensor_by_name("dy").set_stride((span - 1, 1, 1))
    assert accepts(kind, g, node) == accepted


@pytest.mark.parametrize(("kind", "x_dims", "w_dims", "accepted"), [
    ("dgrad", (1, 65535 * 64, 1), (1, 65535 * 64, 1), True),  # 65,535 tiles of 64 dx channels
    ("dgrad", (1, 65535 * 64 + 1, 1), (1, 65535 * 64 + 1, 1), False),
    ("dgrad", (1, 65535, 1), (65535, 1, 1), True),  # 65,535 groups
    ("dgrad", (1, 65536, 1), (65536, 1, 1), False),
    ("wgrad", (1, 65535 * 64, 1), (1, 65535 * 64, 1), True),  # 65,535 tiles of 64 filter columns
    ("wgrad", (1, 65535 * 64 + 1, 1), (1, 65535 * 64 + 1, 1), False),
    ("wgrad", (1, 65535, 1), (65535, 1, 1), True),
    ("wgrad", (1, 65536, 1), (65536, 1, 1), False),
])  # fmt: skip
def test_grids_past_cudas_limits_are_declined(kind: str, x_dims, w_dims, accepted: bool) -> None:
    g, node = backward_node(kind, x_dims, w_dims, (1, w_dims[0], 1))
    assert accepts(kind, g, node) == accepted
    if not accepted and x_dims[1] > 65536:  # the message names what overflowed the grid, by its count
        what = "input channels" if kind == "dgrad" else "filter columns"
        with pytest.raises(NotSupported, match=rf"node 'n': {x_dims[1]} {what} a group in 1 groups"):
            KINDS[kind].builder().check(node, g)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("stride", "accepted"), [(BIG, True), (BIG + 1, False)])
def test_scalars_past_int32_are_declined(kind: str, stride: int, accepted: bool) -> None:
    g, node = backward_node(kind, (1, 1, 1), (1, 1, 1), (1, 1, 1), stride=(stride,))
    assert accepts(kind, g, node) == accepted


@pytest.mark.parametrize(("kind", "x_dims", "w_dims", "y_dims", "stride", "pad"), [
    ("dgrad", (1, 1, 1), (1, 1, BIG - 20), (1, 1, 23), (1,), (2**30, 2**30)),  # the reduction's last tile
    ("dgrad", (1, 1, BIG - 10), (1, 1, 1), (1, 1, 2048), (2**20,), (0, 0)),  # dx's pixels and a tile
    ("dgrad", (1, 1, BIG - 64), (1, 1, 1), (1, 1, 2049), (2**20,), (100, 0)),  # a position plus its padding
    ("wgrad", (1, 1, BIG - 10), (1, 1, 1), (1, 1, BIG - 10), (1,), (0, 0)),  # dy's pixels and a tile
])  # fmt: skip
def test_indices_a_tail_tile_forms_past_int32_are_declined(kind: str, x_dims, w_dims, y_dims, stride, pad) -> None:
    """No tensor spans 2^31 elements, but the indices the last tile (or a padded position) forms do."""
    g, node = backward_node(kind, x_dims, w_dims, y_dims, stride=stride, pad=pad)
    with pytest.raises(NotSupported, match="int32"):
        KINDS[kind].builder().check(node, g)


@pytest.mark.parametrize(("reach", "accepted"), [(BIG, True), (BIG + 1, False)])
def test_wgrad_declines_an_x_whose_padded_extent_passes_int32(reach: int, accepted: bool) -> None:
    """x [1, 1, 2] padded 2^30 before and reach - 2^30 - 1 after: its padded extent reaches reach - 1."""
    pre = 2**30
    outputs = (2 + reach - 1 - 1) // 2**30 + 1
    g, node = backward_node("wgrad", (1, 1, 2), (1, 1, 1), (1, 1, outputs), stride=(2**30,), pad=(pre, reach - pre - 1))
    assert accepts("wgrad", g, node) == accepted


@pytest.mark.parametrize("kind", KINDS)
def test_launches_gather_from_exact_spans_with_power_of_two_tiles(kind: str) -> None:
    g, node = backward_node(kind, (2, 3, 9), (5, 3, 3), (2, 5, 7))
    launch = launch_of(kind, g, node)
    tiles = launch.constants[-6:-3] if kind == "dgrad" else launch.constants[-5:-2]
    assert all(t >= 16 and t & (t - 1) == 0 for t in tiles), tiles
    flat = [a for a in launch.args if len(a.shape) == 1]
    assert [a.shape for a in flat] == ([(70,)] if kind == "dgrad" else [(54,), (70,)])


@pytest.mark.parametrize("kind", KINDS)
def test_it_ranks_below_the_cute_builders(kind: str) -> None:
    g, node = backward_node(kind, (2, 16, 9, 9), (16, 16, 3, 3), (2, 16, 7, 7), dtype="bfloat16")
    serving = [b for b in DEFAULT_REGISTRY.serving(key_for(node, g), "gpu") if b.library != "gpu_reference"]
    names = [b.name for b in rank(serving, node, g)]
    assert names[-1] == KINDS[kind].name and any(n.startswith("cute.") for n in names), names
