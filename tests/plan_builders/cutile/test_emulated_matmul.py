"""The cuTile matmul builder on the CPU: its generated GEMM kernel run through the emulator.

Shapes are awkward on purpose (M, N, K not multiples of the tile, so every
edge tile is partial), with small tiles so that a problem spans many blocks
of the grouped order; batches broadcast every way the layout folds or
collapses them; operands are column-major, padded or batched with gaps.
Results are judged by the float64 reference (``validate``), by torch in
float64 where the answer is exact, and against the unfused nodes bit for bit.
"""

from __future__ import annotations

import attrs
import ml_dtypes  # noqa: F401  (names bfloat16 for np.dtype)
import numpy as np
import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.errors import NoPlanError, NotSupported
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.plan_builders.cutile.matmul import CutileMatmulBuilder, parse_config
from sigdnn.plan_builders.cutile.matmul_codegen import MatmulConfig
from sigdnn.validation import random_inputs

SMALL = MatmulConfig(16, 32, 16, 2)  # many blocks, and group rows that do not divide the tile rows


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (SMALL,))
    monkeypatch.setattr(cutile_matmul, "FLOAT32_CONFIGS", (MatmulConfig(16, 16, 16, 3),))


def matmul_graph(a_dims, b_dims, dtype="bfloat16", out=None, compute="float32", a_strides=None, b_strides=None,
                 c_strides=None) -> sigdnn.Graph:  # fmt: skip
    g = sigdnn.Graph("mm", io_dtype=dtype, compute_dtype=compute)
    c = g.matmul(g.tensor("a", a_dims, a_strides), g.tensor("b", b_dims, b_strides), name="mm")
    c.set_output(True).set_name("c")
    if out:
        c.set_data_type(out)
    if c_strides:
        c.set_stride(c_strides)
    return g


def validated(g: sigdnn.Graph, seed: int = 0) -> sigdnn.ExecutionPlan:
    ex = emulated_executor(engine="cutile.matmul")
    report = sigdnn.validate(g, seed=seed, executor=ex)
    assert report.passed, report.table()
    plan = ex.prepare(g)
    assert all(s.builder.name == "cutile.matmul" for s in plan.steps if s.node.op.kind == "matmul")
    return plan


SHAPES = {
    # name: (a dims, b dims, io dtype, out dtype, a strides, b strides, c strides)
    "tails": ((70, 50), (50, 90), "bfloat16", None, None, None, None),
    "f16_f32_out": ((33, 47), (47, 65), "float16", "float32", None, None, None),
    "one_block": ((5, 7), (7, 3), "bfloat16", None, None, None, None),
    "m_is_1": ((1, 40), (40, 70), "float16", None, None, None, None),
    "k_is_1": ((20, 1), (1, 40), "bfloat16", "float32", None, None, None),
    "batched": ((3, 20, 30), (3, 30, 40), "bfloat16", None, None, None, None),
    "x_at_w_folds": ((2, 3, 17, 30), (30, 40), "bfloat16", None, None, None, None),
    "shared_a": ((20, 30), (4, 30, 40), "float16", None, None, None, None),
    "b_broadcast_batch": ((4, 20, 30), (1, 30, 40), "bfloat16", None, None, None, None),
    "a_col_major": ((40, 30), (30, 50), "bfloat16", None, (1, 41), None, None),
    "b_col_major": ((40, 30), (30, 50), "float16", None, None, (1, 30), None),
    "c_col_major": ((40, 30), (30, 50), "bfloat16", "float32", None, None, (1, 40)),
    "padded_rows": ((40, 30), (30, 50), "bfloat16", None, (37, 1), (53, 1), (51, 1)),
    "no_contiguous_dim": ((20, 10), (10, 30), "bfloat16", None, (20, 2), None, None),
    "batch_gaps": ((3, 20, 30), (3, 30, 40), "float16", None, (700, 30, 1), (1300, 1, 30), None),
    "batched_c_col_major": ((3, 20, 30), (3, 30, 40), "bfloat16", None, None, None, (800, 1, 20)),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_validates_against_the_reference(name):
    a, b, dt, out, a_st, b_st, c_st = SHAPES[name]
    validated(matmul_graph(a, b, dt, out, a_strides=a_st, b_strides=b_st, c_strides=c_st), seed=len(name))


def test_matches_torch_float64_where_the_sum_is_exact():
    """Small integers in bfloat16: every product and partial sum is exact in float32, so the result is too."""
    torch = pytest.importorskip("torch")
    g = matmul_graph((2, 37, 45), (45, 29), "bfloat16", "float32")
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, (2, 37, 45)).astype(np.float64)
    b = rng.integers(-8, 9, (45, 29)).astype(np.float64)
    dt = g.dtype_of(g.tensor_by_name("a")).numpy
    got = emulated_executor(engine="cutile.matmul").run(g, {"a": a.astype(dt), "b": b.astype(dt)})["c"]
    want = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()
    assert np.array_equal(got, want)


def test_float32_is_exact_with_float32_compute_and_tf32_with_16_bit_compute():
    g32 = matmul_graph((30, 40), (40, 20), "float32")
    data = random_inputs(g32, seed=2)
    want = data["a"].astype(np.float64) @ data["b"].astype(np.float64)
    plan = validated(g32)
    assert plan.steps[0].plan.spec.mma == "float32" and plan.steps[0].plan.config == cutile_matmul.FLOAT32_CONFIGS[0]
    assert CutileMatmulBuilder().configs([g32.nodes[0]], g32) == ["16x16x16g3"]  # the float32 list (patched)
    exact = emulated_executor(engine="cutile.matmul").run(g32, data)["c"]
    assert np.max(np.abs(exact - want)) < 1e-5
    g_tf32 = matmul_graph((30, 40), (40, 20), "float32", compute="bfloat16")
    plan = validated(g_tf32)
    assert plan.steps[0].plan.spec.mma == "tf32"
    tf32 = emulated_executor(engine="cutile.matmul").run(g_tf32, data)["c"]
    error = np.max(np.abs(tf32 - want))
    assert 1e-4 < error < 40 * 2**-11  # TF32 keeps 10 mantissa bits: visibly less exact, within its bound


MIXED = [("float32", "bfloat16", "float32"), ("bfloat16", "float32", "float32"), ("float16", "bfloat16", "float32"),
         ("float32", "float16", "bfloat16")]  # fmt: skip


@pytest.mark.parametrize(("a_dt", "b_dt", "compute"), MIXED, ids=[f"{a}_x_{b}_{c}" for a, b, c in MIXED])
def test_operands_of_two_dtypes_widen_to_float32(a_dt: str, b_dt: str, compute: str) -> None:
    """float32 activations times bf16 weights (a transformer block's projections), f16 times bf16: both tiles
    widen to float32, exact products with float32 compute (TF32 with 16-bit compute); column-major b and
    partial edge tiles. Small integers make the float32 sum exact: equal to torch's float64 product."""
    torch = pytest.importorskip("torch")
    g = sigdnn.Graph("mixed", io_dtype="float32", compute_dtype=compute)
    a = g.tensor("a", (2, 37, 45)).set_data_type(a_dt)
    b = g.tensor("b", (45, 29), (1, 45)).set_data_type(b_dt)
    g.matmul(a, b, name="mm").set_output(True).set_name("c")
    plan = validated(g, seed=5)
    spec = plan.steps[0].plan.spec
    assert spec.mma == ("float32" if compute == "float32" else "tf32")
    widened = {x for x, dt in (("a", a_dt), ("b", b_dt)) if dt != "float32"}  # only the 16-bit tiles widen
    assert {x for x in "ab" if f"{x} = ct.astype({x}, ct.float32)" in spec.source()} == widened
    rng = np.random.default_rng(3)
    x, w = rng.integers(-8, 9, (2, 37, 45)).astype(np.float64), rng.integers(-8, 9, (45, 29)).astype(np.float64)
    inputs = {"a": x.astype(np.dtype(a_dt)), "b": w.astype(np.dtype(b_dt))}
    got = emulated_executor(engine="cutile.matmul").run(g, inputs)["c"]
    assert np.array_equal(got, (torch.from_numpy(x) @ torch.from_numpy(w)).numpy())


@pytest.mark.parametrize(
    "a, b, why",
    [
        (((2, 3, 20, 30), "bfloat16"), ((3, 30, 40), "bfloat16"), "do not collapse"),
        (((20, 30), "fp8_e4m3"), ((30, 40), "fp8_e4m3"), "operand dtypes"),
        (((20, 30), "int8"), ((30, 40), "int8"), "operand dtypes"),
        (((20, 30), "bfloat16"), ((30, 40), "fp8_e4m3"), "operand dtypes"),
        (((20, 30), "fp8_e5m2"), ((30, 40), "float32"), "operand dtypes"),
    ],
)
def test_declines_with_the_reason(a, b, why):
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", a[0]).set_data_type(a[1]), g.tensor("b", b[0]).set_data_type(b[1]), name="mm").set_output(
        True
    )
    with pytest.raises(NotSupported, match=why):
        CutileMatmulBuilder().check(g.nodes[0], g, None)
    served = CutileMatmulBuilder().serves(sigdnn.signature_keys.key_for(g.nodes[0], g))
    assert served == (why == "do not collapse")
    with pytest.raises(NoPlanError, match=why if served else "no plan") as refused:
        emulated_executor(engine="cutile.matmul").prepare(g)
    if not served:  # no other GPU builder runs here (fp8 has CuTe's, unavailable without a GPU): none is offered
        assert "cutile.matmul" not in str(refused.value)


def test_declines_float64_compute():
    g = matmul_graph((20, 30), (30, 40), "float32", compute="float64")
    with pytest.raises(NotSupported, match="compute dtype float64"):
        CutileMatmulBuilder().check(g.nodes[0], g, None)


def epilogue_graph(steps, dtype="bfloat16", mid=None, a_dims=(2, 37, 45), b_dims=(45, 70)):
    g = sigdnn.Graph("epi", io_dtype=dtype, intermediate_dtype=mid, compute_dtype="float32")
    y = g.matmul(g.tensor("a", a_dims), g.tensor("b", b_dims), name="mm")
    out_dims = (*a_dims[:-1], b_dims[-1])
    for k, step in enumerate(steps):
        if step == "bias":
            y = g.pointwise("add", y, g.tensor(f"bias{k}", (1, out_dims[-1])), name=f"s{k}")
        elif step == "residual":
            y = g.pointwise("add", g.tensor(f"res{k}", out_dims), y, name=f"s{k}")
        else:
            y = g.pointwise(step, y, name=f"s{k}")
    y.set_output(True).set_name("out")
    return g


EPILOGUES = {
    "bias_gelu": (["bias", "gelu_fwd"], None),
    "bias_gelu_bf16_mid": (["bias", "gelu_fwd"], "bfloat16"),
    "relu": (["relu_fwd"], None),
    "bias_relu_residual": (["bias", "relu_fwd", "residual"], "bfloat16"),
    "residual_tanh_gelu_tanh": (["residual", "gelu_approx_tanh_fwd"], "float16"),
    "swish_sigmoid": (["swish_fwd", "sigmoid_fwd"], None),
}


@pytest.mark.parametrize("name", list(EPILOGUES))
def test_epilogue_is_one_region_equal_to_the_nodes_bit_for_bit(name):
    steps, mid = EPILOGUES[name]
    g = epilogue_graph(steps, mid=mid)
    data = random_inputs(g, seed=7)
    ex = emulated_executor(engine="cutile.matmul")
    plan = ex.prepare(g)
    assert len(plan.steps) == 1 and plan.steps[0].region is not None
    assert plan.steps[0].builder.name == "cutile.matmul"
    fused = ex.execute(plan, data)["out"]
    unfused = emulated_executor(fusion=False, pins={"mm": "cutile.matmul"}).run(g, data)["out"]
    assert np.array_equal(fused.view(np.uint8), unfused.view(np.uint8))
    report = sigdnn.validate(g, data, executor=ex)
    assert report.passed, report.table()


def test_chain_stops_where_a_tensor_is_read_twice_or_broadcast_grows():
    g = sigdnn.Graph("epi", io_dtype="bfloat16", compute_dtype="float32")
    y = g.matmul(g.tensor("a", (20, 30)), g.tensor("b", (30, 40)), name="mm")
    y = g.pointwise("add", y, g.tensor("bias", (1, 40)), name="bias")
    r = g.pointwise("relu_fwd", y, name="relu")
    g.pointwise("add", r, y, name="skip").set_output(True).set_name("out")  # y read twice: the chain ends at it
    g.pointwise("add", g.matmul(g.tensor("a2", (20, 30)), g.tensor("b2", (30, 40)), name="mm2"),
                g.tensor("big", (3, 20, 40)), name="grow").set_output(True).set_name("out2")  # fmt: skip
    plan = emulated_executor(engine="cutile.matmul").prepare(g)
    regions = {s.name: [n.name for n in s.nodes] for s in plan.steps if s.region is not None}
    assert regions == {"region(mm..bias)": ["mm", "bias"]}
    assert sigdnn.validate(g, seed=1, executor=emulated_executor(engine="cutile.matmul")).passed


def test_every_config_and_hint_label_round_trips_and_validates(monkeypatch):
    g = epilogue_graph(["bias", "gelu_fwd"], a_dims=(50, 33), b_dims=(33, 70))
    for config, decorator in (  # the hints cuTile compiles with (the emulator ignores them)
        (MatmulConfig(16, 16, 16, 1), "@ct.kernel\n"),
        (MatmulConfig(32, 16, 32, 3, num_ctas=2, occupancy=2, latency=4), "@ct.kernel(num_ctas=2, occupancy=2)\n"),
        (MatmulConfig(16, 32, 16, 2, warps=8, persistent=True), "@ct.kernel(num_worker_warps=8)\n"),
    ):
        assert parse_config(config.label) == config
        monkeypatch.setattr(cutile_matmul, "CONFIGS", (config,))
        plan = validated(g, seed=4)
        assert plan.steps[0].plan.config == config
        assert decorator in plan.steps[0].plan.spec.source()
    listed = [parse_config(c).label for c in CutileMatmulBuilder().configs([g.nodes[0]], g)]
    assert listed == ["16x32x16g2", config.label]  # 12 tiles fill under half of 132 SMs: the plain form first
    with pytest.raises(ValueError, match="bad cuTile matmul config"):
        parse_config("128x128")


@pytest.mark.parametrize("name", ["tails", "batched", "c_col_major"])  # one tile: the plain form (split_config)
def test_persistent_blocks_walk_every_tile(name, monkeypatch):
    """3 resident blocks (the emulated GPU's count) over up to 24 tiles a batch: each block walks several."""
    config = MatmulConfig(16, 32, 16, 2, persistent=True)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (config,))
    a_dims, b_dims = SHAPES[name][:2]
    tiles = -(-a_dims[-2] // 16) * -(-b_dims[-1] // 32)
    plan = validated(matmul_graph(*SHAPES[name]), seed=6)
    step = plan.steps[0].plan
    assert step.config == config and step.grid[0] == min(3, tiles)
    assert "for bid in range(ct.bid(0), " in step.spec.source()


def test_one_kernel_per_specialization():
    g = sigdnn.Graph("two", io_dtype="bfloat16", compute_dtype="float32")
    for k, (m, n) in enumerate(((20, 40), (70, 90))):
        g.matmul(g.tensor(f"a{k}", (m, 30)), g.tensor(f"b{k}", (30, n)), name=f"mm{k}").set_output(True)
    ex = emulated_executor(engine="cutile.matmul")
    plan = ex.prepare(g)
    backend = ex.memory.context.kernel_backend
    assert backend.compiled == 1  # sizes are launch arguments, not part of the kernel
    assert plan.steps[0].plan.kernels == (plan.steps[1].plan.kernels[0],)


def test_one_16_bit_dtype_goes_to_the_tensor_cores_as_it_is() -> None:
    for dtype in ("bfloat16", "float16"):
        spec = validated(matmul_graph((20, 30), (30, 40), dtype)).steps[0].plan.spec
        assert spec.mma == "native" and "ct.astype(a, " not in spec.source() and "ct.astype(b, " not in spec.source()


def test_an_output_dtype_it_cannot_store_and_a_node_not_a_matmul_are_declined() -> None:
    g = matmul_graph((20, 30), (30, 40), "float32", out="float64")
    with pytest.raises(NotSupported, match="output dtype float64"):
        CutileMatmulBuilder().check(g.nodes[0], g, None)
    h = sigdnn.Graph("sm", io_dtype="float32")
    h.softmax(h.tensor("x", (2, 8)), name="sm")[0].set_output(True)
    with pytest.raises(NotSupported, match="node 'sm': not a matmul"):
        CutileMatmulBuilder().check(h.nodes[0], h, None)


def test_epilogue_operands_enter_the_float32_math_as_float32_rows_the_emulator_cannot_tell() -> None:
    """The emulator's NumPy broadcasts a [TN] bias over [TM, TN] and promotes bf16 + float32 by itself; cuTile
    needs both said: the kernel text reshapes the bias to one row and widens 16-bit operands (and only those)."""
    for dtype, widened in (("bfloat16", True), ("float32", False)):
        g = epilogue_graph(["bias", "residual"], dtype=dtype, a_dims=(37, 45))
        source = validated(g, seed=2).steps[0].plan.spec.source()
        assert "e0 = ct.reshape(e0, (1, " in source
        assert ("e0 = ct.astype(e0, ct.float32)" in source) == widened
        assert ("e1 = ct.astype(e1, ct.float32)" in source) == widened


SPLIT = MatmulConfig(16, 32, 16, 2, split_k=3)  # 3 blocks share a tile's K steps; with 4 steps the last has none
SPLIT_SHAPES = {
    **{name: SHAPES[name] for name in ("tails", "m_is_1", "x_at_w_folds", "c_col_major", "padded_rows", "f16_f32_out")},
    "no_contiguous_dim_deep": ((20, 40), (40, 30), "bfloat16", None, (80, 2), None, None),
}


@pytest.mark.parametrize("name", list(SPLIT_SHAPES))
def test_split_k_validates_against_the_reference(name, monkeypatch):
    a, b, dt, out, a_st, b_st, c_st = SPLIT_SHAPES[name]
    splits = min(3, -(-a[-1] // 16))  # K of 30 is 2 steps: 2 splits
    config = attrs.evolve(SPLIT, split_k=splits)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (config,))
    plan = validated(matmul_graph(a, b, dt, out, "float32", a_st, b_st, c_st), seed=3)
    step = plan.steps[0].plan
    m, n = a[-2] * (a[0] * a[1] if name == "x_at_w_folds" else 1), b[-1]
    assert step.config == config and step.workspace_bytes == splits * m * n * 4 and len(step.kernels) == 2
    tiles = -(-m // 16) * -(-n // 32)
    assert step.grids == ((tiles, 1, splits), (tiles, 1, 1)) == ((step.grid[0], 1, splits), step.grid)


@pytest.mark.parametrize("name", ["bias_gelu_bf16_mid", "bias_relu_residual", "residual_tanh_gelu_tanh"])
def test_split_k_runs_the_epilogue_once_on_the_summed_partials(name, monkeypatch):
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (SPLIT,))
    steps, mid = EPILOGUES[name]
    g = epilogue_graph(steps, mid=mid, a_dims=(37, 100), b_dims=(100, 70))  # 7 K steps: splits of 3, 3 and 1
    plan = validated(g, seed=5)
    assert plan.steps[0].region is not None and plan.steps[0].plan.config == SPLIT


def test_split_k_declines_a_batch_it_cannot_fold(monkeypatch):
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (attrs.evolve(SPLIT, split_k=2),))
    g = matmul_graph((2, 20, 30), (2, 30, 40))
    with pytest.raises(NoPlanError, match=r"split-K \(16x32x16g2s2\) runs unbatched GEMMs only"):
        emulated_executor(engine="cutile.matmul").prepare(g)


def test_split_counts_past_the_k_steps_or_a_grid_are_refused(monkeypatch):
    """A configuration named from outside (a tuning cache) cannot ask for an empty split or a grid CUDA refuses."""
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (attrs.evolve(SPLIT, split_k=5),))
    g = matmul_graph((20, 64), (64, 40))  # K = 64: 4 steps of 16
    with pytest.raises(NoPlanError, match=r"16x32x16g2s5 splits K = 64 into more parts than its K steps"):
        emulated_executor(engine="cutile.matmul").prepare(g)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (attrs.evolve(SPLIT, split_k=4),))
    assert validated(g).steps[0].plan.config.split_k == 4  # one step each
    with pytest.raises(ValueError, match=r"split_k=65536: 1\.\.65535"):
        parse_config("16x32x16g2s65536")
    assert parse_config("16x32x16g2s65535").split_k == 65535


def test_split_stages_are_two_kernels_of_one_spec_and_nothing_else():
    from sigdnn.plan_builders.cutile import codegen
    from sigdnn.plan_builders.cutile.matmul_codegen import EpilogueStep, MatmulSpec, Operand

    bf, split = Operand("bfloat16"), attrs.evolve(SPLIT, split_k=2)
    gelu = (EpilogueStep("unary", "gelu_fwd", "bfloat16"),)
    first, second = (MatmulSpec(bf, bf, bf, "bfloat16", "native", gelu, split, s) for s in ("split", "sum"))
    assert codegen.library() not in first.source() and codegen.library() in second.source()  # the epilogue's math
    assert "ct.mma" in first.source() and "ct.mma" not in second.source()
    for bad in (
        {"stage": "partial"},
        {"config": SPLIT.__class__(16, 32, 16, 2)},
        {"a": Operand("bfloat16", False, True)},
    ):
        with pytest.raises(ValueError, match="stage"):
            attrs.evolve(first, **bad)
    with pytest.raises(ValueError, match="not persistent"):
        MatmulConfig(16, 32, 16, 2, persistent=True, split_k=2)


def test_an_unsplit_plan_is_one_launch_without_workspace(monkeypatch):
    step = validated(matmul_graph((2, 20, 30), (2, 30, 40)), seed=1).steps[0].plan
    tiles = 2 * 2  # 20 x 40 in 16 x 32 tiles, the batch of 2 on the grid's second axis
    assert step.workspace_bytes == 0 and step.grids == (step.grid,) == ((tiles, 2, 1),) and len(step.kernels) == 1


def test_a_gemm_of_few_tiles_splits_k_by_default():
    """The emulated GPU's 3 SMs: one 16 x 32 output tile and 13 K steps of 16 split three ways (>= 4 steps each)."""
    plan = validated(matmul_graph((1, 200), (200, 32)), seed=8)
    assert plan.steps[0].plan.config == attrs.evolve(SMALL, split_k=3)
    plan = validated(matmul_graph((1, 100), (100, 32)), seed=8)  # 7 K steps: one split of 4 at most
    assert plan.steps[0].plan.config == SMALL


@pytest.mark.parametrize(
    ("m", "n", "k", "batch", "label"),
    [
        (1, 4096, 25088, 1, "64x128x64g8s5"),  # vgg11's first classifier GEMM at batch 1: 32 tiles of 132 SMs
        (197, 768, 3072, 1, "128x128x64g8s11"),  # a ViT-B/16 MLP GEMM at batch 1: 12 tiles
        (197, 2304, 768, 1, "128x128x64g8s3"),  # its qkv GEMM: 36 tiles, 12 K steps
        (49, 512, 256, 1, "64x128x64g8"),  # 4 K steps, nothing to split: the smaller tiles alone (4 blocks, not 2)
        (512, 1024, 4096, 1, "128x128x64g8s5"),  # 16 tiles of 128 x 256, 32 of 128 x 128: 160 blocks
        (8192, 8192, 8192, 1, "128x256x64g8w8p"),  # fills the SMs as it is
        (1, 4096, 25088, 2, "128x256x64g8w8p"),  # batched: the batch is the grid's second axis
        (768, 2816, 4096, 1, "128x128x64g8"),  # 6 x 11 = 66 tiles: exactly half of 132, plain; 132 tiles: no split
        (640, 3330, 4096, 1, "128x256x64g8w8p"),  # 5 x 14 tiles (3330 / 256 rounded up): past half
        (64, 1024, 4096, 1, "64x128x64g8s16"),  # 64 rows: 64-row tiles; 8 of them, 64 K steps: 16 splits
        (65, 1024, 4096, 1, "128x128x64g8s16"),
    ],
)
def test_split_config_fills_the_sms_only_where_the_tiles_cannot(m, n, k, batch, label):
    from sigdnn.plan_builders.cutile.matmul_layout import plan_views

    lead = (batch,) if batch > 1 else ()
    dense = lambda rows, cols: ((*lead, rows, cols), ((rows * cols,) if lead else ()) + (cols, 1))  # noqa: E731
    views = plan_views(dense(m, k), dense(k, n), dense(m, n))
    chosen = cutile_matmul.split_config(MatmulConfig(128, 256, 64, 8, warps=8, persistent=True), views, 132)
    assert chosen.label == label


def test_split_config_takes_tiles_of_at_most_128_rows_from_a_taller_base():
    from sigdnn.plan_builders.cutile.matmul_layout import plan_views

    views = plan_views(((300, 4096), (4096, 1)), ((4096, 512), (512, 1)), ((300, 512), (512, 1)))
    chosen = cutile_matmul.split_config(MatmulConfig(256, 128, 64, 8, num_ctas=2), views, 132)
    assert chosen.label == "128x128x64g8s11"  # 2 x 4 tiles of 256 x 128 -> 3 x 4 of 128 x 128, 11 splits
