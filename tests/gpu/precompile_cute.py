"""Compile, without a GPU, every CuTe GEMM and SDPA (forward and backward) specialization the GPU tests and benchmarks load.

Device minutes are scarce and a specialization costs 2-7 s to trace and
compile; the compiled objects are valid for any sm_90 device with the same
SM count, so they can be built here and carried to the device in the disk
cache (``SIGDNN_CUTE_CACHE``). With nvidia-cutlass-dsl installed (Python 3.12):

    CUTE_DSL_ARCH=sm_90a PYTHONPATH=$PWD python3.12 tests/gpu/precompile_cute.py CACHE_DIR [--jobs 2]

The test modules are imported with the GPU checks answered as an H200's
(sm_90, 132 SMs) so their case tables are read, not copied. Not a pytest
module.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.plan_builders import cute, gpu_properties
from sigdnn.plan_builders.cute import (
    conv_dgrad,
    conv_geometry,
    conv_implicit,
    conv_implicit_configs,
    conv_transposed,
    conv_wgrad,
)
from sigdnn.plan_builders.cute import matmul as cute_matmul
from sigdnn.plan_builders.cute.conv import conv_gemm
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig, GemmSpec, default_config, plan_gemm
from sigdnn.plan_builders.cute.sdpa_backward_layout import BwdSpec
from sigdnn.plan_builders.cute.sdpa_layout import FmhaConfig, FmhaSpec
from sigdnn.plan_builders.cute.sdpa_layout import default_config as sdpa_default_config
from sigdnn.plan_builders.cute.sdpa_layout import parse_config as parse_sdpa_config
from sigdnn.registry.regions import Dataflow

SM_COUNT = 132
PINGPONG = ("pp64x256c2x1s4n", "pp64x256c1x1s1")  # measured against the default for fused epilogues
HERE = Path(__file__).parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def graph_specs(g: Graph, config: str | None) -> list[tuple[GemmSpec, GemmConfig]]:
    """What Executor("gpu", engine="cute.matmul") would compile for each matmul of ``g``."""
    builder = cute_matmul.CuteMatmulBuilder()
    flow = Dataflow(g, list(range(len(g.nodes))))
    found = []
    for i, node in enumerate(g.nodes):
        if isinstance(node.op, ConvFprop):
            view = conv_gemm(node, g)
            found.append((view.spec, default_config(view.spec, view.problem, SM_COUNT)))
            continue
        if not isinstance(node.op, Matmul):
            continue
        chain = cute_matmul.epilogue_chain(g, flow, i)
        try:
            spec, problem = builder.plan(node, g, chain)
        except NotSupported:
            spec, problem = builder.plan(node, g)
        found.append((spec, cute_matmul.parse_config(config) if config else default_config(spec, problem, SM_COUNT)))
    return found


def test_specs() -> list[tuple[GemmSpec, GemmConfig]]:
    cute_matmul.unavailable_reason = lambda: None
    cute.unavailable_reason = lambda: None  # what tests/gpu/cute_skip.py reads when the test modules load
    for module in (cute_matmul, gpu_properties):  # the builder's own reads, and require_hopper's
        module.device_properties = lambda device_id: ((9, 0), SM_COUNT)
    mm, fp8, tail = _load("test_cute_matmul"), _load("test_cute_fp8"), _load("test_cute_gelu_tail")
    conv = _load("test_cute_conv")
    found = []
    for case in conv.CASES.values():
        found += graph_specs(conv.conv_graph(*case), None)
    for case in mm.SHAPES.values():
        a_dims, b_dims, dt, out, a_st, b_st, c_st = case
        g = mm.matmul_graph(a_dims, b_dims, dt, out, a_strides=a_st, b_strides=b_st, c_strides=c_st)
        found += graph_specs(g, None)
    for name in ("tails", "batched_f32_out", "c_col_major"):
        a_dims, b_dims, dt, out, a_st, b_st, c_st = mm.SHAPES[name]
        g = mm.matmul_graph(a_dims, b_dims, dt, out, a_strides=a_st, b_strides=b_st, c_strides=c_st)
        for config in mm.CONFIGS:
            found += graph_specs(g, config)
    for case in mm.FUSED.values():
        found += graph_specs(mm.fused_graph(*case), None)
    for name in ("bias_gelu_bf16_mid", "relu_batched"):
        for config in ("coop128x256c2x1s4n", "pp128x192c1x1s1", "coop128x128c1x2s4", "pp64x256c2x1s4n"):
            found += graph_specs(mm.fused_graph(*mm.FUSED[name]), config)
    for case in fp8.CASES.values():
        found += graph_specs(fp8.fp8_graph(*case), None)
    for name in ("descaled_bf16", "e5m2_x_e4m3_f32_plain"):
        for config in fp8.CONFIGS:
            found += graph_specs(fp8.fp8_graph(*fp8.CASES[name]), config)
    for dtype in ("bfloat16", "float16", "float32"):
        for act in ("gelu_fwd", "gelu_approx_tanh_fwd"):
            found += graph_specs(tail.tail_graph(act, dtype), None)
    return found


def benchmark_specs() -> list[tuple[GemmSpec, GemmConfig]]:
    """benchmarks/gpu_cute.py's parts sizes, fused and fp8 at their default configs, and the pingpong ones."""
    found = []
    size = 8192
    for dt in ("bfloat16", "float16"):
        spec, problem = plan_gemm(
            ((size, size), (size, 1), dt), ((size, size), (size, 1), dt), ((size, size), (size, 1), dt)
        )
        found.append((spec, default_config(spec, problem, SM_COUNT)))
        found += [(spec, cute_matmul.parse_config(label)) for label in PINGPONG]
        for act in ("none", "relu", "gelu", "gelu_tanh"):
            fused = attrs.evolve(spec, bias_dtype=dt, activation=act)
            found.append((fused, default_config(fused, problem, SM_COUNT)))
            if act != "relu":
                found += [(fused, cute_matmul.parse_config(label)) for label in PINGPONG]
    for pair in ("e4m3xe4m3", "e4m3xe5m2"):
        a_name, b_name = pair.split("x")
        spec, problem = plan_gemm(
            ((size, size), (size, 1), f"fp8_{a_name}"), ((size, size), (1, size), f"fp8_{b_name}"),
            ((size, size), (size, 1), "bfloat16"),
        )  # fmt: skip
        spec = attrs.evolve(spec, scale_dtypes=("float32", "float32"), round_s=("float32", "bfloat16"))
        found.append((spec, default_config(spec, problem, SM_COUNT)))
    return found


def conv_implicit_specs(g: Graph, config: str | None) -> list[tuple[str, GemmSpec, GemmConfig, int]]:
    """What the implicit-GEMM conv builders (fprop, fused where it claims; dgrad) would compile for ``g``."""
    flow = Dataflow(g, list(range(len(g.nodes))))
    found = []
    for i, node in enumerate(g.nodes):
        if isinstance(node.op, ConvWgrad):  # a GEMM after im2col, and the implicit GEMM where it applies
            wgrad = conv_wgrad.plan_wgrad(node, g, SM_COUNT)
            found.append(("gemm", wgrad.spec, cute_matmul.parse_config(config or "coop128x128c1x1s1"), 2))
            try:
                chosen = cute_matmul.parse_config(config) if config else None
                implicit = conv_wgrad.plan_wgrad_implicit(node, g, SM_COUNT, chosen)
                found.append(("wgrad", implicit.spec, implicit.config, 2))
            except NotSupported:
                pass
            try:
                for splits in (None, 1):  # the row wgrad's default, and unsplit (dw directly)
                    rows = conv_wgrad.plan_wgrad_rows(node, g, SM_COUNT, splits)
                    found.append(("wgrad_rows", rows.spec, rows.config, 2))
            except NotSupported:
                pass
            continue
        if isinstance(node.op, ConvDgrad):
            plan = conv_dgrad.plan_dgrad(node, g)
            views = [plan] if isinstance(plan, conv_geometry.ImplicitConv) else plan.views  # strided: its phases
        elif isinstance(node.op, ConvFprop):
            views = [conv_implicit.plan_conv(node, g, conv_implicit.epilogue_chain(g, flow, i))]
        else:
            continue
        for view in views:
            if isinstance(node.op, ConvFprop) and conv_transposed.transposed_reason(view) is None:
                transposed = conv_transposed.transposed_view(view)
                found.append(("fprop_t", transposed.spec, conv_transposed.TRANSPOSED_CONFIG, 2))
                if conv_transposed.rows_reason(view) is None:
                    found.append(("fprop_rows", transposed.spec, conv_transposed.ROWS_CONFIG, 2))
            chosen = (
                cute_matmul.parse_config(config)
                if config
                else conv_implicit_configs.default_conv_config(view, SM_COUNT)
            )
            found.append(("conv", view.spec, chosen, view.rank))
    return found


def conv_implicit_test_specs() -> list[tuple[str, GemmSpec, GemmConfig, int]]:
    conv = _load("test_cute_conv_implicit")
    found = []
    for case in [*conv.CASES.values(), *conv.CASES_3D.values()]:
        found += conv_implicit_specs(conv.conv_graph(*case), None)
    for name in ("stride2_channel_tails", "strided_dilated_asymmetric_f32"):
        for config in conv.CONFIGS + conv.CLUSTER_CONFIGS:
            found += conv_implicit_specs(conv.conv_graph(*conv.CASES[name]), config)
    for name in ("resnet_like_3x3", "deep_k", "split_many_units"):
        for config in conv.CLUSTER_CONFIGS:
            found += conv_implicit_specs(conv.conv_graph(*conv.case(name)), config)
    for case in conv.FUSED.values():
        found += conv_implicit_specs(conv.fused_graph(*case), None)
    for config, name in conv.SPLIT_CASES:
        found += conv_implicit_specs(conv.conv_graph(*conv.case(name)), config)
    for name in conv.SPLIT_FUSED:
        found += conv_implicit_specs(conv.fused_graph(*conv.FUSED[name]), conv.SPLIT_FUSED_CONFIG)
    found += conv_implicit_specs(conv.conv_graph(*conv.CASES["3x3_pad1"]), conv.SPLIT_FUSED_CONFIG)  # planted bug
    dgrad = _load("test_cute_conv_dgrad")
    for case in dgrad.CASES.values():
        found += conv_implicit_specs(dgrad.dgrad_graph(*case), None)
    wgrad = _load("test_cute_conv_wgrad")
    for case in [*wgrad.CASES.values(), *wgrad.IMPLICIT_CASES.values()]:
        found += conv_implicit_specs(wgrad.wgrad_graph(*case), None)
    for case, configs in wgrad.CONFIG_CASES.values():
        for config in configs:
            found += conv_implicit_specs(wgrad.wgrad_graph(*case), config)
    for case, config, _ in wgrad.UNEVEN_CASES.values():
        found += conv_implicit_specs(wgrad.wgrad_graph(*case), config)
    for case in wgrad.ROWS_CASES.values():
        found += conv_implicit_specs(wgrad.wgrad_graph(*case), None)
    transposed = _load("test_cute_conv_transposed")
    for case in transposed.CASES.values():
        found += conv_implicit_specs(conv.conv_graph(*case), None)
    for case in [*transposed.FUSED.values(), *transposed.ROWS_FUSED.values()]:
        found += conv_implicit_specs(conv.fused_graph(*case), None)
    for case in transposed.ROWS_CASES.values():
        found += conv_implicit_specs(conv.conv_graph(*case), None)
    return found


def _backward_graph(op: str, c: int, hw: int, k: int, r: int, stride: int) -> Graph:
    """A benchmark layer's dgrad or wgrad node at batch 64, padding R // 2."""
    g = Graph(op, io_dtype="bfloat16", compute_dtype="float32")
    p = -(-hw // stride)
    x, dy = g.tensor("x", (64, c, hw, hw), layout="NHWC"), g.tensor("dy", (64, k, p, p), layout="NHWC")
    if op == "dgrad":
        w = g.tensor("w", (k, c, r, r), layout="NHWC")
        g.conv_dgrad(dy, w, padding=(r // 2, r // 2), stride=(stride, stride), dims=(64, c, hw, hw))
    else:
        g.conv_wgrad(x, dy, padding=(r // 2, r // 2), dims=(k, c, r, r))
    return g


def conv_implicit_benchmark_specs() -> list[tuple[str, GemmSpec, GemmConfig, int]]:
    """The convi part of benchmarks/gpu_cute.py: every layer at its default config, plain and fused."""
    found = []
    for c, hw, k, r, stride in _benchmark_constant("RESNET50_LAYERS").values():
        for fused in (False, True):
            g = Graph("layer", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
            x, w = g.tensor("x", (64, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, r, r), layout="NHWC")
            y = g.conv_fprop(x, w, padding=(r // 2, r // 2), stride=(stride, stride), name="conv")
            if fused:
                y = g.pointwise("add", y, g.tensor("bias", (1, k, 1, 1), layout="NHWC"), name="bias")
                y = g.pointwise("relu_fwd", y, name="act")
            y.set_output(True)
            found += conv_implicit_specs(g, None)
        found += conv_implicit_specs(_backward_graph("dgrad", c, hw, k, r, stride), None)  # the dgrad part
        if stride == 1:  # the wgrad part
            found += conv_implicit_specs(_backward_graph("wgrad", c, hw, k, r, stride), None)
            for tiles in conv_wgrad.wgrad_tile_configs(k, r * r * c):  # every tile, split or not
                for out in ("float32", "bfloat16"):
                    spec = GemmSpec("bfloat16", "bfloat16", out, "m", "n", "n", True, True)
                    found.append(("wgrad", spec, tiles, 2))
    for c, hw, k, r, stride in _benchmark_constant("DGRAD_SHORTCUTS").values():
        found += conv_implicit_specs(_backward_graph("dgrad", c, hw, k, r, stride), None)
    return found


def _benchmark_constant(name: str, script: str = "gpu_cute.py"):
    """A literal table of a benchmark script, read without importing it (it imports torch)."""
    tree = ast.parse((HERE.parent.parent / "benchmarks" / script).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def sdpa_specs() -> list[tuple[FmhaSpec, FmhaConfig]]:
    """What test_cute_sdpa.py's graphs and benchmarks/gpu_cute_sdpa.py's shapes and configs compile."""
    from sigdnn.plan_builders.cute import sdpa as cute_sdpa

    for module in (cute_sdpa, cute_matmul, cute):  # the test modules loaded below skip on these answers (cute_skip)
        module.unavailable_reason = lambda: None
    for module in (cute_sdpa, cute_matmul, gpu_properties):
        module.device_properties = lambda device_id: ((9, 0), SM_COUNT)
    tests = _load("test_cute_sdpa")
    builder = cute_sdpa.CuteSdpaBuilder()
    found = []
    graphs = [tests.sdpa_graph(*case) for case in tests.CASES.values()]
    graphs.append(tests.sdpa_graph("bfloat16", 1, 2, 2, 150, 300, 64, False, True, scale=1.0))
    for g in graphs:
        spec, _ = builder.plan(g.node_by_name("sdpa"), g)
        found.append((spec, sdpa_default_config(spec)))
    for name, label in tests.CONFIG_PAIRS:
        g = tests.sdpa_graph(*tests.CASES[name])
        spec, _ = builder.plan(g.node_by_name("sdpa"), g)
        found.append((spec, parse_sdpa_config(label)))
    for _, _, _, _, d, causal in _benchmark_constant("SHAPES", "gpu_cute_sdpa.py"):
        for stats in (False, True):  # the benchmark's forward rows, at the default configs
            spec = FmhaSpec("bfloat16", d, causal, stats)
            found.append((spec, sdpa_default_config(spec)))
    return [(spec, config.kernel) for spec, config in found]  # persistence does not change the kernel


def sdpa_backward_specs() -> list[tuple[BwdSpec, str]]:
    """Every specialization of the backward (dtype, head dim, causal: the tests use them all), each kernel."""
    from sigdnn.plan_builders.cute.kernels.fmha_bwd_launch import KERNELS

    return [
        (BwdSpec(dtype, d, causal), kernel)
        for dtype in ("bfloat16", "float16")
        for d in (64, 128)
        for causal in (False, True)
        for kernel in KERNELS
    ]


def _compile(item: tuple[str, Any, Any, int]) -> tuple[str, float]:
    kind, spec, config, rank = item
    t0 = time.perf_counter()
    if kind == "sdpa_bwd":
        from sigdnn.plan_builders.cute.kernels import fmha_bwd_launch

        fmha_bwd_launch.compiled(spec, config)
        return f"sdpa_backward {config} {spec.dtype} d{spec.head_dim} causal={spec.causal}", time.perf_counter() - t0
    if kind == "sdpa":
        from sigdnn.plan_builders.cute.kernels import fmha_launch

        fmha_launch.compiled(spec, config)
        label = f"sdpa {spec.dtype} d{spec.head_dim} causal={spec.causal} stats={spec.stats} {config.label}"
        return label, time.perf_counter() - t0
    if kind == "gemm":
        from sigdnn.plan_builders.cute.kernels import launch

        launch.compiled(spec, config, SM_COUNT)
    else:
        from sigdnn.plan_builders.cute.kernels import conv_launch

        conv_launch.compiled(spec, config, SM_COUNT, "fprop" if kind == "conv" else kind, rank)
    label = f"{kind}{rank if kind != 'gemm' else ''} {spec.a_dtype}/{spec.b_dtype}->{spec.c_dtype} {spec.activation} {config.label}"
    return label, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    kinds = ["gemm", "conv", "fprop_t", "fprop_rows", "wgrad", "wgrad_rows", "sdpa", "sdpa_bwd"]
    parser.add_argument("--only", choices=kinds, help="compile one kind of kernel only")
    args = parser.parse_args()
    os.environ["SIGDNN_CUTE_CACHE"] = str(args.cache)
    # Read only when asked for: they import the tests.
    gemm_like = args.only in (None, "gemm", "conv", "fprop_t", "fprop_rows", "wgrad", "wgrad_rows")
    gemms = [("gemm", spec, config, 2) for spec, config in test_specs() + benchmark_specs()] if gemm_like else []
    convs = conv_implicit_test_specs() + conv_implicit_benchmark_specs() if gemm_like else []
    sdpas = [("sdpa", spec, config, 0) for spec, config in sdpa_specs()] if args.only in (None, "sdpa") else []
    sdpas += [("sdpa_bwd", spec, kernel, 0) for spec, kernel in sdpa_backward_specs()]
    items = list(dict.fromkeys([i for i in gemms + convs + sdpas if args.only in (None, i[0])]))
    print(f"{len(items)} specializations", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for label, seconds in pool.map(_compile, items):
            print(f"{seconds:6.1f} s  {label}", flush=True)


if __name__ == "__main__":
    main()
