"""CuTe plans bind once: the addresses, stream and launch order each plan hands its compiled kernels.

The compiled handles are replaced by recorders, so this runs without a GPU
or the DSL: a bound launch must pass exactly the operands' addresses (not
stale ones, not swapped), in the kernels' order, and a misaligned operand
must be refused by name when binding, before anything is enqueued.
"""

from __future__ import annotations

import types

import pytest

from sigdnn.errors import VariantPackError
from sigdnn.plan_builders.cute.bound import BindsLaunches
from sigdnn.plan_builders.cute.conv import CuteConvFpropPlan
from sigdnn.plan_builders.cute.conv_dgrad import CuteConvDgradPhasePlan, CuteConvDgradPlan
from sigdnn.plan_builders.cute.conv_folded import CuteConvFoldedPlan, folded_conv
from sigdnn.plan_builders.cute.conv_implicit import CuteConvEpiloguePlan, CuteConvPlan
from sigdnn.plan_builders.cute.conv_wgrad import CuteConvWgradImplicitPlan, CuteConvWgradPlan
from sigdnn.plan_builders.cute.matmul import CuteEpiloguePlan, CuteMatmulPlan
from sigdnn.plan_builders.cute.sdpa import CuteSdpaPlan
from sigdnn.runtime.device import ExecutionContext

STREAM = 0x5EED
WORKSPACE = 0x90000


class Recorder:
    """Stands in for a compiled handle: records each launch's arguments in one shared log."""

    def __init__(self, name: str, log: list) -> None:
        self.name = name
        self.log = log

    def __call__(self, *args):
        self.log.append((self.name, *args))


def buf(ptr: int):
    return types.SimpleNamespace(ptr=ptr)


def context(workspace: bool = False) -> ExecutionContext:
    return ExecutionContext(stream=STREAM, workspace=buf(WORKSPACE) if workspace else None)


def test_matmul_binds_its_operands_and_launches_only_when_called():
    log: list = []
    plan = CuteMatmulPlan(Recorder("gemm", log), "node 'mm'")
    launch = plan.bind({"a": buf(0x1000), "b": buf(0x2000), "c": buf(0x3000)}, context())
    assert log == []
    launch()
    launch()
    assert log == [("gemm", 0x1000, 0x2000, 0x3000, STREAM, 0, ())] * 2


def test_matmul_execute_is_one_bound_launch():
    log: list = []
    CuteMatmulPlan(Recorder("gemm", log), "n").execute({"a": buf(16), "b": buf(32), "c": buf(48)}, context())
    assert log == [("gemm", 16, 32, 48, STREAM, 0, ())]


def test_epilogue_passes_bias_and_scales_by_uid():
    log: list = []
    plan = CuteEpiloguePlan(Recorder("gemm", log), "region", a=1, b=2, out=3, bias=4, scales=(5, 6))
    buffers = {1: buf(0x100), 2: buf(0x200), 3: buf(0x300), 4: buf(0x400), 5: buf(0x500), 6: buf(0x600)}
    plan.bind(buffers, context())()
    assert log == [("gemm", 0x100, 0x200, 0x300, STREAM, 0x400, (0x500, 0x600))]


def test_epilogue_without_bias_passes_a_null_bias():
    log: list = []
    plan = CuteEpiloguePlan(Recorder("gemm", log), "region", a=1, b=2, out=3, bias=None, scales=())
    plan.execute({1: buf(16), 2: buf(32), 3: buf(64)}, context())
    assert log == [("gemm", 16, 32, 64, STREAM, 0, ())]


@pytest.mark.parametrize(
    ("operand", "message"),
    [("a", "node 'mm': a not 16-byte aligned"), ("b", "node 'mm': b not"), ("c", "node 'mm': c not")],
)
def test_matmul_refuses_a_misaligned_operand_by_name_before_launching(operand, message):
    log: list = []
    buffers = {"a": buf(0x1000), "b": buf(0x2000), "c": buf(0x3000)}
    buffers[operand] = buf(buffers[operand].ptr + 8)
    with pytest.raises(VariantPackError, match=message):
        CuteMatmulPlan(Recorder("gemm", log), "node 'mm'").bind(buffers, context())
    assert log == []


def test_every_misaligned_operand_is_named():
    with pytest.raises(VariantPackError, match="x, y not 16-byte aligned"):
        CuteConvPlan(Recorder("conv", []), "node 'c'").bind({"x": buf(2), "w": buf(16), "y": buf(18)}, context())


def test_implicit_conv_and_its_epilogue():
    log: list = []
    CuteConvPlan(Recorder("conv", log), "c").bind({"x": buf(16), "w": buf(32), "y": buf(48)}, context())()
    epilogue = CuteConvEpiloguePlan(Recorder("conv+bias", log), "r", x=7, w=8, out=9, bias=10)
    epilogue.bind({7: buf(160), 8: buf(176), 9: buf(192), 10: buf(208)}, context())()
    assert log == [("conv", 16, 32, 48, STREAM, 0), ("conv+bias", 160, 176, 192, STREAM, 208)]


def conv_view(workspace: int = 4096, a_bytes: int = 4096, slices: int = 1, slice_bytes=(0, 0)):
    return types.SimpleNamespace(workspace_bytes=workspace, a_bytes=a_bytes, slices=slices, slice_bytes=slice_bytes)


def test_im2col_conv_reads_x_through_the_workspace():
    log: list = []
    plan = CuteConvFpropPlan(conv_view(), Recorder("gemm", log), Recorder("im2col", log), "c")
    plan.bind({"x": buf(16), "w": buf(32), "y": buf(48)}, context(workspace=True))()
    assert log == [("im2col", 16, WORKSPACE, STREAM), ("gemm", WORKSPACE, 32, 48, STREAM)]


def test_narrow_conv_pads_the_filter_after_a():
    log: list = []
    plan = CuteConvFpropPlan(
        conv_view(4096, 3072), Recorder("gemm", log), Recorder("im2col", log), "c", Recorder("pad", log)
    )
    assert plan.workspace_bytes == 4096
    with pytest.raises(VariantPackError, match="c: x not 16-byte aligned"):
        plan.bind({"x": buf(18), "w": buf(32), "y": buf(48)}, context(workspace=True))
    plan.bind({"x": buf(16), "w": buf(32), "y": buf(48)}, context(workspace=True))()
    assert log == [
        ("pad", 32, WORKSPACE + 3072, STREAM),
        ("im2col", 16, WORKSPACE, STREAM),
        ("gemm", WORKSPACE, WORKSPACE + 3072, 48, STREAM),
    ]


def test_a_folded_conv_copies_the_filter_once_then_gathers_and_convolves_each_slice(monkeypatch):
    import sigdnn
    from sigdnn.plan_builders.cute import batch_slices

    monkeypatch.setattr(batch_slices, "IM2COL_BUDGET", 1)  # every image its own slice

    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (3, 3, 9, 10), layout="NHWC"), g.tensor("w", (8, 3, 5, 5), layout="NHWC")
    g.conv_fprop(x, w, padding=(2, 2), stride=(2, 2), name="conv").set_output(True).set_name("y")
    view = folded_conv(g.node_by_name("conv"), g)
    assert view.slices == 3
    log: list = []
    conv = Recorder("conv", log)
    conv.config = "the conv's config"
    plan = CuteConvFoldedPlan(view, conv, Recorder("gather_x", log), Recorder("gather_w", log), "c")
    assert plan.config == "the conv's config"
    assert plan.workspace_bytes == 9 * 5 * 16 * 2 + 8 * 5 * 16 * 2  # one image's x' (rows 9, columns 5), then w'
    with pytest.raises(VariantPackError, match="c: y not 16-byte aligned"):
        plan.bind({"x": buf(16), "w": buf(32), "y": buf(56)}, context(workspace=True))
    plan.bind({"x": buf(16), "w": buf(32), "y": buf(48)}, context(workspace=True))()
    filt = WORKSPACE + 9 * 5 * 16 * 2
    assert log == [
        ("gather_w", 32, filt, STREAM),
        *[
            entry
            for i in range(3)
            for entry in (
                ("gather_x", 16 + 3 * 9 * 10 * 2 * i, WORKSPACE, STREAM),
                ("conv", WORKSPACE, filt, 48 + 8 * 5 * 5 * 2 * i, STREAM, 0),
            )
        ],
    ]


def test_a_sliced_conv_runs_each_batch_slice_through_one_workspace():
    log: list = []
    view = conv_view(4096, 3072, slices=3, slice_bytes=(1600, 4800))
    plan = CuteConvFpropPlan(view, Recorder("gemm", log), Recorder("im2col", log), "c", Recorder("pad", log))
    plan.bind({"x": buf(16), "w": buf(32), "y": buf(48)}, context(workspace=True))()
    assert log == [
        ("pad", 32, WORKSPACE + 3072, STREAM),
        *[
            entry
            for i in range(3)
            for entry in (
                ("im2col", 16 + 1600 * i, WORKSPACE, STREAM),
                ("gemm", WORKSPACE, WORKSPACE + 3072, 48 + 4800 * i, STREAM),
            )
        ],
    ]


def test_direct_conv_gemm_reads_x_itself():
    log: list = []
    plan = CuteConvFpropPlan(conv_view(0, 0), Recorder("gemm", log), None, "c")
    plan.bind({"x": buf(16), "w": buf(32), "y": buf(48)}, context())()
    assert log == [("gemm", 16, 32, 48, STREAM)]


def test_dgrad_flips_the_filter_into_the_workspace_first():
    log: list = []
    plan = CuteConvDgradPlan(Recorder("flip", log), Recorder("conv", log), 4096, "d")
    assert plan.workspace_bytes == 4096
    launch = plan.bind({"dy": buf(16), "w": buf(32), "dx": buf(48)}, context(workspace=True))
    launch()
    assert log == [("flip", 32, WORKSPACE, STREAM), ("conv", 16, WORKSPACE, 48, STREAM)]
    with pytest.raises(VariantPackError, match="d: dx not 16-byte aligned"):
        plan.bind({"dy": buf(16), "w": buf(32), "dx": buf(40)}, context(workspace=True))


def test_strided_dgrad_gathers_then_runs_each_phase_into_the_workspace_then_interleaves():
    log: list = []
    convs = [(Recorder("phase0", log), 0, 1024), (Recorder("phase3", log), 512, 3072)]
    plan = CuteConvDgradPhasePlan(Recorder("gather", log), convs, Recorder("interleave", log), 8192, "d")
    assert plan.workspace_bytes == 8192
    plan.bind({"dy": buf(16), "w": buf(32), "dx": buf(48)}, context(workspace=True))()
    assert log == [
        ("gather", 32, WORKSPACE, STREAM),
        ("phase0", 16, WORKSPACE, WORKSPACE + 1024, STREAM),
        ("phase3", 16, WORKSPACE + 512, WORKSPACE + 3072, STREAM),
        ("interleave", WORKSPACE, 48, STREAM),
    ]
    with pytest.raises(VariantPackError, match="d: w not 16-byte aligned"):
        plan.bind({"dy": buf(16), "w": buf(40), "dx": buf(48)}, context(workspace=True))


def test_a_strided_dgrad_no_tap_reaches_only_interleaves_zeros():
    log: list = []
    plan = CuteConvDgradPhasePlan(None, [], Recorder("interleave", log), 256, "d")
    assert plan.config is None
    plan.bind({"dy": buf(16), "w": buf(32), "dx": buf(48)}, context(workspace=True))()
    assert log == [("interleave", WORKSPACE, 48, STREAM)]


def wgrad_view(im2col: bool, splits: int, waves: int = 1):
    return types.SimpleNamespace(
        workspace_bytes=4096 if (im2col or splits > 1) else 0,
        im2col_bytes=1024 * im2col,
        parts_bytes=0,
        waves=waves,
        wave_bytes=(160, 320),
        wave_parts_bytes=2048,
    )


@pytest.mark.parametrize(
    ("im2col", "splits", "want"),
    [
        (False, 1, [("gemm", 32, 16, 48, STREAM)]),
        (True, 1, [("im2col", 16, WORKSPACE, STREAM), ("gemm", 32, WORKSPACE, 48, STREAM)]),
        (False, 4, [("gemm", 32, 16, WORKSPACE, STREAM), ("reduce", WORKSPACE, 48, STREAM)]),
        (
            True,
            4,
            [
                ("im2col", 16, WORKSPACE, STREAM),
                ("gemm", 32, WORKSPACE, WORKSPACE + 1024, STREAM),
                ("reduce", WORKSPACE + 1024, 48, STREAM),
            ],
        ),
    ],
)
def test_wgrad_launch_sequence(im2col, splits, want):
    log: list = []
    plan = CuteConvWgradPlan(
        wgrad_view(im2col, splits),
        Recorder("im2col", log) if im2col else None,
        Recorder("gemm", log),
        Recorder("reduce", log) if splits > 1 else None,
        "w",
    )
    ctx = context(workspace=plan.workspace_bytes > 0)
    plan.bind({"x": buf(16), "dy": buf(32), "dw": buf(48)}, ctx)()
    assert log == want


@pytest.mark.parametrize("splits", [1, 4])
def test_narrow_wgrad_writes_a_padded_dw_then_copies_it_out(splits):
    log: list = []
    view = types.SimpleNamespace(
        workspace_bytes=8192,
        im2col_bytes=1024,
        parts_bytes=2048 if splits > 1 else 0,
        waves=1,
        wave_bytes=(0, 0),
        wave_parts_bytes=2048,
    )
    plan = CuteConvWgradPlan(
        view,
        Recorder("im2col", log),
        Recorder("gemm", log),
        Recorder("reduce", log) if splits > 1 else None,
        "w",
        Recorder("unpad", log),
    )
    plan.bind({"x": buf(16), "dy": buf(32), "dw": buf(48)}, context(workspace=True))()
    padded = WORKSPACE + 1024 + view.parts_bytes
    if splits == 1:
        middle = [("gemm", 32, WORKSPACE, padded, STREAM)]
    else:
        middle = [("gemm", 32, WORKSPACE, WORKSPACE + 1024, STREAM), ("reduce", WORKSPACE + 1024, padded, STREAM)]
    assert log == [("im2col", 16, WORKSPACE, STREAM), *middle, ("unpad", padded, 48, STREAM)]


@pytest.mark.parametrize("splits", [1, 3])
def test_implicit_wgrad_reduces_split_partials(splits):
    log: list = []
    view = types.SimpleNamespace(workspace_bytes=4096 if splits > 1 else 0)
    plan = CuteConvWgradImplicitPlan(view, Recorder("conv", log), Recorder("reduce", log) if splits > 1 else None, "w")
    plan.bind({"x": buf(16), "dy": buf(32), "dw": buf(48)}, context(workspace=splits > 1))()
    if splits == 1:
        assert log == [("conv", 32, 16, 48, STREAM)]
    else:
        assert log == [("conv", 32, 16, WORKSPACE, STREAM), ("reduce", WORKSPACE, 48, STREAM)]


@pytest.mark.parametrize("with_stats", [False, True])
def test_sdpa_binds_stats_when_given(with_stats):
    log: list = []
    buffers = {"q": buf(16), "k": buf(32), "v": buf(48), "o": buf(64)}
    if with_stats:
        buffers["stats"] = buf(80)
    CuteSdpaPlan(Recorder("fmha", log), "s").bind(buffers, context())()
    assert log == [("fmha", 16, 32, 48, 64, 80 if with_stats else 0, STREAM)]


def test_sdpa_refuses_misaligned_value():
    with pytest.raises(VariantPackError, match="s: v not 16-byte aligned"):
        CuteSdpaPlan(Recorder("fmha", []), "s").bind(
            {"q": buf(16), "k": buf(32), "v": buf(50), "o": buf(64)}, context()
        )


def test_sdpa_backward_binds_every_port_and_the_workspace():
    from sigdnn.plan_builders.cute.sdpa_backward import PORTS, CuteSdpaBackwardPlan

    log: list = []
    plan = CuteSdpaBackwardPlan(Recorder("bwd", log), types.SimpleNamespace(workspace_bytes=4096), "sb")
    buffers = {p: buf(16 * (i + 1)) for i, p in enumerate(PORTS)}
    launch = plan.bind(buffers, context(workspace=True))
    assert log == []
    launch()
    assert log == [("bwd", {p: 16 * (i + 1) for i, p in enumerate(PORTS)}, WORKSPACE, STREAM)]
    buffers["d_o"] = buf(24)
    with pytest.raises(VariantPackError, match="sb: d_o not 16-byte aligned"):
        plan.bind(buffers, context(workspace=True))


def test_a_plan_must_define_bind():
    class Unbound(BindsLaunches):
        pass

    with pytest.raises(NotImplementedError):
        Unbound().execute({}, context())


def test_gemm_plans_ask_no_workspace_and_report_their_launch_config():
    """The executor sizes the shared workspace from workspace_bytes; describe() prints the launch's config."""
    launch = Recorder("gemm", [])
    launch.config = "coop128x128c1x1s1"
    plans = (
        CuteMatmulPlan(launch, "n"),
        CuteEpiloguePlan(launch, "r", a=1, b=2, out=3, bias=None, scales=()),
        CuteConvPlan(launch, "c"),
        CuteConvEpiloguePlan(launch, "r", x=1, w=2, out=3, bias=None),
    )
    assert [(p.workspace_bytes, p.config) for p in plans] == [(0, "coop128x128c1x1s1")] * 4


def test_a_wgrad_in_waves_runs_each_batch_slice_into_its_own_partials_then_one_reduction():
    log: list = []
    plan = CuteConvWgradPlan(
        wgrad_view(True, 4, waves=2), Recorder("im2col", log), Recorder("gemm", log), Recorder("reduce", log), "w"
    )
    plan.bind({"x": buf(16), "dy": buf(32), "dw": buf(48)}, context(workspace=True))()
    parts = WORKSPACE + 1024
    assert log == [
        ("im2col", 16, WORKSPACE, STREAM),
        ("gemm", 32, WORKSPACE, parts, STREAM),
        ("im2col", 16 + 160, WORKSPACE, STREAM),
        ("gemm", 32 + 320, WORKSPACE, parts + 2048, STREAM),
        ("reduce", parts, 48, STREAM),
    ]
