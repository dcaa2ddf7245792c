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
from emulated import emulated_executor, make_available
from oracles_conv import exact_round

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.plan_builders.cutile import conv_gemm, emulator
from sigdnn.plan_builders.cutile.conv_gemm import CutileConvDgradGemmBuilder, CutileConvWgradGemmBuilder


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


def plant(kind: Kind, old: str, new: str) -> sigdnn.Registry:
    """A registry whose one builder runs ``kind``'s kernel with ``old`` replaced by ``new`` in it."""
    text = conv_gemm.kernel_source(kind.name.split(".")[1]).text
    start = text.index(f"def {kind.name.split('.')[1]}")
    end = text.find("@ct.kernel", start)
    body = text[start : end if end > 0 else len(text)]
    assert old in body, old

    class Planted(kind.builder):  # type: ignore[misc, valid-type]
        name = f"planted.{kind.name.split('.')[1]}"
        engine_id = 30052
        library = "planted"

        def launches(self, node, graph):  # type: ignore[no-untyped-def]
            launches, nbytes = super().launches(node, graph)
            swap = lambda t: t.replace(body, body.replace(old, new, 1))  # noqa: E731
            return [
                attrs.evolve(la, source=attrs.evolve(la.source, text=swap(la.source.text))) for la in launches
            ], nbytes

    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(Planted())
    return registry


PLANTED = {
    ("dgrad", "stride_divisibility_ignored"): ("(q_h % sh == 0) & ", "", "stride3_dilation2_nchw_f32"),
    ("dgrad", "tap_direction_flipped"): ("i_w - ct.reshape(e * dw", "i_w + ct.reshape(e * dw", "nchw_f32_3x3"),
    ("dgrad", "padding_dropped"): ("% xh + ph", "% xh", "nchw_f32_3x3"),
    ("dgrad", "group_offset_dropped"): (" + g * k_per_group * k_stride", "", "g2_c20_nchw"),
    ("dgrad", "partial_channel_tile_written"): ("ct.where(c_local < c_per_group, g * c_per_group + c_local, c_total)",
                                                "g * c_per_group + c_local", "g2_c20_nchw"),
    ("dgrad", "last_k_step_dropped"): ("range(ct.cdiv(reduction, TK))", "range(reduction // TK)", "nchw_f32_3x3"),
    ("wgrad", "last_pixel_step_dropped"): ("range(ct.cdiv(pixels, TK))", "range(pixels // TK)", "nchw_f32_3x3"),
    ("wgrad", "padding_dropped"): ("o_h * sh - ph", "o_h * sh", "nchw_f32_3x3"),
    ("wgrad", "group_offset_dropped"): ("(g * c_per_group + ct.minimum", "(ct.minimum", "g2_c20_nchw"),
    ("wgrad", "partial_row_tile_written"): ("ct.where(k_local < k_per_group, g * k_per_group + k_local, k_total)",
                                            "g * k_per_group + k_local", "g2_c20_nchw"),
    ("wgrad", "stride_dropped"): ("o_w * sw - pw", "o_w - pw", "stride3_dilation2_nchw_f32"),
}  # fmt: skip


def blocks_in_reverse(k, args, gx: int, gy: int, gz: int) -> None:  # type: ignore[no-untyped-def]
    for z, y, x in reversed([(z, y, x) for z in range(gz) for y in range(gy) for x in range(gx)]):
        token = emulator._BID.set((x, y, z))
        try:
            k.fn(*args)
        finally:
            emulator._BID.reset(token)


@pytest.mark.parametrize("bug", PLANTED, ids=[f"{k}-{b}" for k, b in PLANTED])
def test_a_planted_bug_fails_the_oracle_and_validation(bug: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulator, "_run_blocks", blocks_in_reverse)
    kind = KINDS[bug[0]]
    old, new, case_name = PLANTED[bug]
    registry = plant(kind, old, new)
    case = next(c for c in CASES if c.name == case_name)
    g = kind.graph(case)
    inputs = random_inputs(g, seed=5)
    executor = emulated_executor(registry=registry, engine=f"planted.{kind.name.split('.')[1]}")
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
