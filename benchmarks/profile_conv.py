"""Conv kernels to profile under Nsight Compute: cuDNN's and the CuTe implicit GEMM's, side by side.

Each layer's torch conv (cuDNN, channels-last, ``cudnn.benchmark``: conv2d,
or with ``--wgrad`` ``torch.nn.grad.conv2d_weight``) and each CuTe launch
(the default config and those of ``--configs``, for wgrad LABEL:SLICES pairs; for an fprop also the
transposed and row kernels where they apply, plain and fused with bias + relu)
run a few times to warm up, then once inside an NVTX range ``prof`` (around
one named after the layer and kernel), so Nsight Compute profiles only those
launches:

    ncu --nvtx --nvtx-include "prof/" --section SpeedOfLight ... \\
        python3 benchmarks/profile_conv.py --layers conv5_3x3 conv3_3x3_s2

Needs torch with CUDA and nvidia-cutlass-dsl on an sm_90 GPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from gpu_cute import RESNET50_LAYERS, conv_layer_graph, variant_impls, wgrad_launch, wgrad_layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", default=["conv5_3x3", "conv3_3x3", "conv3_3x3_s2"])
    parser.add_argument("--configs", nargs="*", default=[], help="CuTe config labels besides each default")
    parser.add_argument("--wgrad", action="store_true", help="the weight gradient instead of the forward conv")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    kernels_of = wgrad_kernels if args.wgrad else fprop_kernels
    for name in args.layers:
        for tag, run in kernels_of(name, args.configs).items():
            for _ in range(5):
                run()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("prof")
            torch.cuda.nvtx.range_push(f"{name}:{tag}")
            run()
            torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            print(f"{name}: profiled {tag}")


def fprop_kernels(name: str, configs: list[str]) -> dict[str, Callable[[], object]]:
    """cuDNN's conv2d and the CuTe implicit GEMM's launches (default config, then ``configs``), then the
    transposed and row kernels' (plain and fused with bias + relu) where they apply."""
    from sigdnn.plan_builders.cute.conv_implicit import default_conv_config, epilogue_chain, plan_conv
    from sigdnn.plan_builders.cute.conv_transposed import CuteConvRowsBuilder, CuteConvTransposedBuilder
    from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch
    from sigdnn.plan_builders.cute.matmul import parse_config
    from sigdnn.registry.regions import Dataflow

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    stream = torch.cuda.current_stream().cuda_stream
    c, hw, k, r, stride = RESNET50_LAYERS[name]
    x = torch.randn(64, c, hw, hw, device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, r, r, device="cuda") / (c * r * r) ** 0.5).to(torch.bfloat16)
    w = w.to(memory_format=torch.channels_last)
    g = conv_layer_graph(c, hw, k, r, stride, fused=False)
    view = plan_conv(g.node_by_name("conv"), g)
    y = torch.empty(g.tensor_by_name("y").dims, device="cuda", dtype=torch.bfloat16)
    y = y.to(memory_format=torch.channels_last)
    default = default_conv_config(view, sm_count)
    labels = [default.label, *(c_ for c_ in configs if c_ != default.label)]
    kernels = {"cudnn": lambda: torch.nn.functional.conv2d(x, w, padding=r // 2, stride=stride)}
    for label in labels:
        launch = ConvLaunch(view.spec, parse_config(label), view.geometry, sm_count)
        kernels[label] = lambda la=launch: la(x.data_ptr(), w.data_ptr(), y.data_ptr(), stream)
    gf = conv_layer_graph(c, hw, k, r, stride, fused=True)
    fview = plan_conv(gf.node_by_name("conv"), gf, epilogue_chain(gf, Dataflow(gf, list(range(len(gf.nodes)))), 0))
    bias = torch.randn(k, device="cuda").to(torch.bfloat16)
    ptrs = (x.data_ptr(), w.data_ptr(), y.data_ptr(), stream)
    for variant in (CuteConvTransposedBuilder, CuteConvRowsBuilder):
        if variant.reason(view) is None:
            found = variant_impls(variant, view, fview, sm_count, ptrs, bias, g, {"x": x, "w": w, "y": y})
            kernels.update({tag: run for tag, run in found.items() if "Executor" not in tag})
    return kernels


def wgrad_kernels(name: str, pairs: list[str]) -> dict[str, Callable[[], object]]:
    """cuDNN's conv2d_weight and the CuTe implicit wgrad's launches (the default tile and slices, then each
    LABEL:SLICES of ``pairs``): the conv into dw or float32 partials, then the reduction."""
    from sigdnn.plan_builders.cute.conv_wgrad import plan_wgrad_implicit

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    stream = torch.cuda.current_stream().cuda_stream
    c, _, k, r, stride = RESNET50_LAYERS[name]
    if stride != 1:
        raise SystemExit(f"{name}: the implicit wgrad profiles unit-stride layers")
    x, dy, dw, g, node = wgrad_layer(name)
    default = plan_wgrad_implicit(node, g, sm_count)
    kernels = {"cudnn": lambda: torch.nn.grad.conv2d_weight(x, (k, c, r, r), dy, padding=r // 2)}
    for pair in [f"{default.config.label}:{default.splits}", *pairs]:
        label, splits = pair.split(":")
        kernels[pair] = wgrad_launch(g, label, int(splits), (x, dy, dw), sm_count, stream)[1]
    return kernels


if __name__ == "__main__":
    main()
