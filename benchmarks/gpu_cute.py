"""CuTe DSL GEMM, convolution and measured builder choice against torch (cuBLAS / cuDNN) on one GPU.

Same run, same stream, same buffers; CUDA events around back-to-back
launches (median of repeats, implementations interleaved). Parts (``--parts``):

* sizes: bf16 / f16 GEMMs (M = N = K) per kernel configuration against
  torch.matmul, each checked against a float32 cuBLAS product (TF32 off);
* fused: act(A @ B + bias) as one launch against torch eager and addmm + act;
* fp8: descaled fp8 GEMMs (bf16 out) against ``torch._scaled_mm``, with and
  without fast accumulation, and their error against a float32 product;
* convi / dgrad / wgrad: bf16 NHWC conv fprop (implicit GEMM, per tile
  config, through the launch handle and ``Executor.execute``, and fused
  with bias + relu), dgrad and wgrad on ResNet-50 layers at batch 64
  against cuDNN's forward, backward data and backward filter;
* autotune: ``Executor(autotune=True)`` on a bf16 4096^3 matmul and a
  matmul + bias + gelu region (cuTile and CuTe both serve them): each
  candidate's time, the choice, and a second process that reuses it.

    PYTHONPATH=. python benchmarks/gpu_cute.py --parts sizes fused --json $OUT/gemm.json

Needs torch with CUDA and nvidia-cutlass-dsl on an sm_90 GPU. Results:
benchmarks/results/gpu_cute.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from cuda_timing import interleaved_samples

from sigdnn.plan_builders.cute.gemm_layout import plan_gemm
from sigdnn.plan_builders.cute.matmul import parse_config
from sigdnn.plan_builders.gpu_properties import device_properties

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
NAMES = {"bf16": "bfloat16", "f16": "float16"}
ACTIVATION_REFS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": lambda x: x,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}
CONFIGS = [
    "coop128x256c1x1s1",
    "coop128x256c2x1s1",
    "coop128x256c2x1s4",
    "coop256x128c2x1s1",
    "pp128x192c1x1s1",
    "pp128x192c2x1s1",
    "pp128x128c2x1s1",
    "coop128x256c2x1s8",
    "coop128x256c2x1s4n",
    "coop128x256c1x2s4",
    "coop256x128c2x1s4",
    "coop128x192c2x1s4",
    "pp128x192c2x1s4",
]


def gemm_launch(config: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, sm_count: int):
    from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

    spec, problem = plan_gemm(
        (tuple(a.shape), a.stride(), str(a.dtype).removeprefix("torch.")),
        (tuple(b.shape), b.stride(), str(b.dtype).removeprefix("torch.")),
        (tuple(c.shape), c.stride(), str(c.dtype).removeprefix("torch.")),
    )
    return GemmLaunch(spec, parse_config(config), problem, sm_count), spec, problem


def cute_errors(impls: dict, out: torch.Tensor, want: torch.Tensor | Callable[[str], torch.Tensor]) -> dict[str, float]:
    """Each CuTe implementation run once into a NaN-filled ``out``: its relative Frobenius distance to
    ``want`` (or ``want(name)``; NaN if an element was not written)."""
    errors = {}
    for n, fn in impls.items():
        if n.startswith("cute"):
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            ref = want(n) if callable(want) else want
            errors[n] = float((out.float() - ref).norm() / ref.norm())
    return errors


def timed_rows(
    args,
    impls: dict,
    errors: dict,
    iters: int,
    baseline: str | Callable[[str], str],
    flops: float,
    dtype: str,
    size,
    warmup: int = 1,
    gate: bool = False,
) -> list[dict]:
    """Every implementation timed in turn, ``args.repeats`` rounds (clock drift spreads over all of them); a
    row each, its ratio against the time of ``baseline`` (or ``baseline(name)``), printed. ``gate``: a row 1e-2 or more off counts
    0 TFLOP/s and ratio 0."""
    samples = interleaved_samples(impls, iters, args.repeats, warmup=warmup)
    rows = []
    for n, ts in samples.items():
        t = statistics.median(ts)
        rel = errors.get(n)
        ok = not gate or rel is None or rel < 1e-2
        rows.append({"dtype": dtype, "size": size, "impl": n, "ms": t, "spread": (max(ts) - min(ts)) / t,
                     "tflops": flops / t / 1e9 if ok else 0.0,
                     "ratio": statistics.median(samples[baseline(n) if callable(baseline) else baseline]) / t if ok else 0.0, "rel_err": rel})  # fmt: skip
    print_rows(rows)
    return rows


def bench_sizes(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """Every implementation timed in turn, ``repeats`` rounds: clock drift spreads over all of them."""
    stream = torch.cuda.current_stream().cuda_stream
    for dt in args.dtypes:
        tdt = TORCH_DTYPES[dt]
        for size in args.sizes:
            m = n = k = size
            gen = torch.Generator(device="cuda").manual_seed(size)
            a = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
            b = torch.randn(k, n, device="cuda", dtype=tdt, generator=gen)
            c = torch.empty(m, n, device="cuda", dtype=tdt)
            ref = torch.matmul(a.float(), b.float())
            flops = 2.0 * m * n * k
            iters = max(3, int(args.sample_ms * 1e-3 / (flops / 700e12)))
            impls: dict[str, Callable[[], None]] = {"torch.matmul": lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)}
            errors: dict[str, float] = {}
            for config in args.configs:
                launch, _, _ = gemm_launch(config, a, b, c, sm_count)
                c.fill_(float("nan"))
                launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), stream)
                torch.cuda.synchronize()
                rel = float((c.float() - ref).norm() / ref.norm())
                errors[f"cute {config}"] = rel if bool(torch.isfinite(c).all()) else float("nan")
                impls[f"cute {config}"] = lambda launch=launch, a=a, b=b, c=c: launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), stream)  # fmt: skip
            rows += timed_rows(args, impls, errors, iters, "torch.matmul", flops, dt, size, warmup=3, gate=True)


def bench_fused(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """act(A @ B + bias) as one CuTe launch against torch eager (matmul, add, gelu) and addmm + gelu.

    ``--fused-acts`` adds the other epilogues (bias alone, relu, tanh-gelu) to show what each costs.
    """
    import attrs

    from sigdnn.plan_builders.cute.gemm_layout import default_config
    from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

    gelu = torch.nn.functional.gelu
    stream = torch.cuda.current_stream().cuda_stream
    for dt in args.dtypes:
        tdt = TORCH_DTYPES[dt]
        for size in args.sizes:
            m = n = k = size
            gen = torch.Generator(device="cuda").manual_seed(size + 1)
            a = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
            b = torch.randn(k, n, device="cuda", dtype=tdt, generator=gen)
            bias = torch.randn(n, device="cuda", dtype=tdt, generator=gen)
            c = torch.empty(m, n, device="cuda", dtype=tdt)
            spec, problem = plan_gemm(
                ((m, k), a.stride(), NAMES[dt]), ((k, n), b.stride(), NAMES[dt]), ((m, n), c.stride(), NAMES[dt])
            )
            flops = 2.0 * m * n * k
            iters = max(3, int(args.sample_ms * 1e-3 / (flops / 700e12)))
            ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), stream, bias.data_ptr())
            impls = {
                "torch eager matmul+add+gelu": lambda a=a, b=b, bias=bias: gelu(torch.matmul(a, b) + bias),
                "torch addmm+gelu": lambda a=a, b=b, bias=bias: gelu(torch.addmm(bias, a, b)),
            }
            errors = {}
            product = torch.matmul(a.float(), b.float()) + bias.float()
            for act in args.fused_acts:
                spec_act = attrs.evolve(spec, bias_dtype=NAMES[dt], activation=act)
                ref = ACTIVATION_REFS[act](product)
                configs = [default_config(spec_act, problem, sm_count).label, *args.fused_configs]
                for label in dict.fromkeys(configs):
                    launch = GemmLaunch(spec_act, parse_config(label), problem, sm_count)
                    c.fill_(float("nan"))
                    launch(*ptrs)
                    torch.cuda.synchronize()
                    ok = bool(torch.isfinite(c).all())
                    name = f"cute bias+{act} {label}"
                    errors[name] = float((c.float() - ref).norm() / ref.norm()) if ok else float("nan")
                    impls[name] = lambda launch=launch, ptrs=ptrs: launch(*ptrs)
            print("(ratios against torch eager matmul+add+gelu)")
            rows += timed_rows(
                args, impls, errors, iters, "torch eager matmul+add+gelu", flops, dt, size, warmup=3, gate=True
            )


FP8_CONFIGS = [
    "coop128x128c1x2s4",  # promoted (the default)
    "coop128x192c2x1s4n",
    "coop128x128c2x1s4n",
    "coop128x256c2x1s4nf",  # fast accumulation
    "coop128x128c2x1s4nf",
    "pp128x128c1x1s1f",
]
FP8_TORCH = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def bench_fp8(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """C = sa * sb * (A @ B) in bfloat16 from fp8 A (row-major) and B (column-major), per-tensor scales.

    cuDNN-frontend's fp8 graph (matmul, two descale multiplies) as one CuTe
    launch against ``torch._scaled_mm`` (cuBLASLt) with use_fast_accum off
    (cuBLAS promotes partial sums, as the CuTe default does) and on. Errors
    are relative Frobenius distances to a float32 cuBLAS product of the same
    fp8 values (TF32 off), scaled.
    """
    import attrs

    from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

    stream = torch.cuda.current_stream().cuda_stream
    for pair in args.fp8_pairs:
        a_name, b_name = pair.split("x")
        for size in args.sizes:
            m = n = k = size
            gen = torch.Generator(device="cuda").manual_seed(size + 7)
            a = torch.randn(m, k, device="cuda", generator=gen).to(FP8_TORCH[a_name])
            b_nk = torch.randn(n, k, device="cuda", generator=gen).to(FP8_TORCH[b_name])
            b = b_nk.t()  # K x N, column-major: what _scaled_mm and wgmma's fp8 path read
            sa = torch.tensor(0.5, device="cuda")
            sb = torch.tensor(0.75, device="cuda")
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.matmul(a.float(), b.float()) * 0.375
            flops = 2.0 * m * n * k
            iters = max(3, int(args.sample_ms * 1e-3 / (flops / 1400e12)))
            impls: dict[str, Callable[[], None]] = {}
            errors: dict[str, float] = {}
            for fast in (False, True):
                name = f"torch._scaled_mm{' fast' if fast else ''}"
                scaled_mm = functools.partial(
                    torch._scaled_mm, a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast
                )
                errors[name] = float((scaled_mm().float() - ref).norm() / ref.norm())
                impls[name] = scaled_mm
            spec, problem = plan_gemm(
                ((m, k), a.stride(), f"fp8_{a_name}"), ((k, n), b.stride(), f"fp8_{b_name}"),
                ((m, n), c.stride(), "bfloat16"),
            )  # fmt: skip
            spec = attrs.evolve(spec, scale_dtypes=("float32", "float32"), round_s=("float32", "bfloat16"))
            configs = args.fp8_configs if pair == args.fp8_pairs[0] else args.fp8_configs[:1] + args.fp8_configs[3:4]
            for label in configs:
                launch = GemmLaunch(spec, parse_config(label), problem, sm_count)
                ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), stream, 0, (sa.data_ptr(), sb.data_ptr()))
                c.fill_(float("nan"))
                launch(*ptrs)
                torch.cuda.synchronize()
                ok = bool(torch.isfinite(c).all())
                errors[f"cute {label}"] = float((c.float() - ref).norm() / ref.norm()) if ok else float("nan")
                impls[f"cute {label}"] = lambda launch=launch, ptrs=ptrs: launch(*ptrs)
            print("(fp8: ratios against torch._scaled_mm without fast accumulation)")
            rows += timed_rows(args, impls, errors, iters, "torch._scaled_mm", flops, pair, size, warmup=3, gate=True)


LAUNCH_FLOOR_S = 10e-6  # the convi part's least time a launch counts for when it sizes a sample

RESNET50_LAYERS = {
    # name: (C, H = W, K, R = S, stride), batch 64, padding R // 2: the 3x3 layers of each stage (the
    # stride-2 ones as torchvision places them), and the 1x1 reduce / expand layers around them
    "conv2_3x3": (64, 56, 64, 3, 1),
    "conv3_3x3": (128, 28, 128, 3, 1),
    "conv4_3x3": (256, 14, 256, 3, 1),
    "conv5_3x3": (512, 7, 512, 3, 1),
    "conv3_3x3_s2": (128, 56, 128, 3, 2),
    "conv4_3x3_s2": (256, 28, 256, 3, 2),
    "conv2_1x1_expand": (64, 56, 256, 1, 1),
    "conv2_1x1_reduce": (256, 56, 64, 1, 1),
    "conv4_1x1_expand": (256, 14, 1024, 1, 1),
    "conv5_1x1_reduce": (2048, 7, 512, 1, 1),
}
# The dgrad part's layers besides RESNET50_LAYERS (same fields): stage 3's stride-2 1x1 shortcut, three of
# whose four stride phases no tap reaches.
DGRAD_SHORTCUTS = {"conv3_1x1_s2_shortcut": (256, 56, 512, 1, 2)}


def conv_layer_graph(c: int, hw: int, k: int, r: int, stride: int, fused: bool, batch: int = 64):
    """A bf16 NHWC ResNet layer (and with fused: + bias + relu, bf16 intermediates)."""
    import sigdnn

    g = sigdnn.Graph("layer", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (batch, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, r, r), layout="NHWC")
    y = g.conv_fprop(x, w, padding=(r // 2, r // 2), stride=(stride, stride), name="conv")
    if fused:
        y = g.pointwise("add", y, g.tensor("bias", (1, k, 1, 1), layout="NHWC"), name="bias")
        y = g.pointwise("relu_fwd", y, name="act")
    y.set_output(True).set_name("y")
    return g


def variant_impls(variant, view, fview, sm_count: int, ptrs: tuple, bias: torch.Tensor, g, pack: dict) -> dict:
    """A transposed-GEMM conv builder's kernel on the layer, fused with bias + relu, and through its Executor."""
    import sigdnn
    from sigdnn.plan_builders.cute.conv_transposed import transposed_view
    from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch

    label = variant.name.removeprefix("cute.conv_fprop_")
    tview, tfview = transposed_view(view), transposed_view(fview)
    plain = ConvLaunch(tview.spec, variant.config, tview.geometry, sm_count, variant.kind)
    fused = ConvLaunch(tfview.spec, variant.config, tfview.geometry, sm_count, variant.kind)
    ex = sigdnn.Executor("gpu", engine=variant.name)
    plan = ex.prepare(g)
    return {
        f"cute {label}": lambda: plain(*ptrs),
        f"cute {label} fused bias + relu": lambda: fused(*ptrs, bias_ptr=bias.data_ptr()),
        f"cute {label} via Executor.execute": lambda: ex.execute(plan, pack, to_host=False),
    }


def bench_conv_implicit(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """bf16 NHWC conv fprop, implicit GEMM (cute.conv_fprop_implicit) against torch conv2d (cuDNN).

    Each ResNet-50 layer at ``--batch`` (64 by default; other batches label
    the layer ``name_nB``): torch's channels-last conv2d (cudnn.benchmark on);
    the builder's launch with its default config and with every config of
    ``--conv-configs`` (the compiled handle: what a plan's execute costs);
    the default through ``Executor.execute`` (host cost included); the
    builder the registry ranks first, through its Executor; and the fused
    conv + bias + relu launch against torch eager conv2d(bias) + relu.
    """
    import sigdnn
    from sigdnn.plan_builders.cute.conv_implicit import epilogue_chain, plan_conv
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config
    from sigdnn.plan_builders.cute.conv_transposed import CuteConvRowsBuilder, CuteConvTransposedBuilder
    from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch
    from sigdnn.plan_builders.cute.matmul import parse_config
    from sigdnn.registry.regions import Dataflow

    torch.backends.cudnn.benchmark = True
    stream = torch.cuda.current_stream().cuda_stream
    for name, (c, hw, k, r, stride) in RESNET50_LAYERS.items():
        if args.layers and name not in args.layers:
            continue
        pad = r // 2
        size = name if args.batch == 64 else f"{name}_n{args.batch}"
        gen = torch.Generator(device="cuda").manual_seed(c + hw + k)
        x = torch.randn(args.batch, c, hw, hw, device="cuda", generator=gen).to(torch.bfloat16)
        x = x.to(memory_format=torch.channels_last)
        w = (torch.randn(k, c, r, r, device="cuda", generator=gen) / (c * r * r) ** 0.5).to(torch.bfloat16)
        w = w.to(memory_format=torch.channels_last)
        bias = torch.randn(k, device="cuda", generator=gen).to(torch.bfloat16)
        g = conv_layer_graph(c, hw, k, r, stride, fused=False, batch=args.batch)
        view = plan_conv(g.node_by_name("conv"), g)
        gf = conv_layer_graph(c, hw, k, r, stride, fused=True, batch=args.batch)
        chain = epilogue_chain(gf, Dataflow(gf, list(range(len(gf.nodes)))), 0)
        fview = plan_conv(gf.node_by_name("conv"), gf, chain)
        y = torch.empty(g.tensor_by_name("y").dims, device="cuda", dtype=torch.bfloat16)
        y = y.to(memory_format=torch.channels_last)
        ptrs = (x.data_ptr(), w.data_ptr(), y.data_ptr(), stream)
        default = default_conv_config(view, sm_count)
        launches = {f"cute {default.label} (default)": ConvLaunch(view.spec, default, view.geometry, sm_count)}
        for label in args.conv_configs:
            if label != default.label:
                launches[f"cute {label}"] = ConvLaunch(view.spec, parse_config(label), view.geometry, sm_count)
        fused = ConvLaunch(fview.spec, default_conv_config(fview, sm_count), fview.geometry, sm_count)
        ex = sigdnn.Executor("gpu", engine="cute.conv_fprop_implicit")
        plan = ex.prepare(g)
        pack = {"x": x, "w": w, "y": y}

        def conv_torch(x=x, w=w, pad=pad, stride=stride):
            return torch.nn.functional.conv2d(x, w, padding=pad, stride=stride)

        def fused_torch(x=x, w=w, bias=bias, pad=pad, stride=stride):
            return torch.relu(torch.nn.functional.conv2d(x, w, bias, padding=pad, stride=stride))

        impls = {"torch conv2d (cuDNN)": conv_torch}
        impls.update({n: (lambda la=la, ptrs=ptrs: la(*ptrs)) for n, la in launches.items()})
        impls["cute default via Executor.execute"] = lambda ex=ex, plan=plan, pack=pack: ex.execute(
            plan, pack, to_host=False
        )
        ranked = sigdnn.Executor("gpu")  # the registry's own choice among the builders that take the conv
        ranked_plan = ranked.prepare(g)
        impls[f"cute ranked ({ranked_plan.steps[0].builder.name}) via Executor.execute"] = (
            lambda ex=ranked, plan=ranked_plan, pack=pack: ex.execute(plan, pack, to_host=False)
        )
        impls["torch conv2d(bias) + relu"] = fused_torch
        impls["cute fused bias + relu"] = lambda fused=fused, ptrs=ptrs, bias=bias: fused(
            *ptrs, bias_ptr=bias.data_ptr()
        )
        for variant in (CuteConvTransposedBuilder, CuteConvRowsBuilder):  # where each applies
            if variant.reason(view) is None:
                impls.update(variant_impls(variant, view, fview, sm_count, ptrs, bias, g, pack))
        want = torch.nn.functional.conv2d(x.float(), w.float(), padding=pad, stride=stride)
        want_fused = torch.relu(want + bias.float().view(1, k, 1, 1))
        errors = cute_errors(impls, y, lambda n, want=want, fused=want_fused: fused if "fused" in n else want)
        flops = 2.0 * want.numel() * c * r * r
        # launches a sample: its GPU time at 400 TFLOP/s, each launch at least LAUNCH_FLOOR_S (small batches are
        # host-bound, and a sample of tens of thousands of 3-us launches would take seconds of host time)
        iters = max(3, int(args.sample_ms * 1e-3 / max(flops / 400e12, LAUNCH_FLOOR_S)))

        def base(n: str) -> str:
            return "torch conv2d(bias) + relu" if "bias" in n else "torch conv2d (cuDNN)"

        rows += timed_rows(args, impls, errors, iters, base, flops, "bf16", size)


def bench_dgrad(args: argparse.Namespace, rows: list[dict]) -> None:
    """bf16 NHWC conv dgrad (cute.conv_dgrad: filter flip + implicit GEMM over dy) against cuDNN's, batch 64.

    The ResNet-50 layers of RESNET50_LAYERS. torch's
    ``torch.nn.grad.conv2d_input`` (cuDNN backward data, channels-last); the
    plan's launches (flip into a workspace, then the conv; strided: the
    sub-filter gather, one conv per stride phase, the interleave into dx)
    bound once to the tensors and the workspace, as the executor binds them;
    and the same through ``Executor.execute``.
    """
    import numpy as np

    import sigdnn
    from sigdnn.runtime.device import ExecutionContext
    from sigdnn.runtime.device_array import BFLOAT16, DeviceArray

    torch.backends.cudnn.benchmark = True
    stream = torch.cuda.current_stream().cuda_stream
    for name, (c, hw, k, r, stride) in {**RESNET50_LAYERS, **DGRAD_SHORTCUTS}.items():
        if args.layers and name not in args.layers:
            continue
        pad, out = r // 2, -(-hw // stride)
        gen = torch.Generator(device="cuda").manual_seed(c + hw + k + 1)
        dy = torch.randn(64, k, out, out, device="cuda", generator=gen).to(torch.bfloat16)
        dy = dy.to(memory_format=torch.channels_last)
        w = (torch.randn(k, c, r, r, device="cuda", generator=gen) / (k * r * r) ** 0.5).to(torch.bfloat16)
        w = w.to(memory_format=torch.channels_last)
        dx = torch.empty(64, c, hw, hw, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        g = sigdnn.Graph(name, io_dtype="bfloat16", compute_dtype="float32")
        tdy, tw = g.tensor("dy", dy.shape, layout="NHWC"), g.tensor("w", w.shape, layout="NHWC")
        dx_t = g.conv_dgrad(tdy, tw, padding=(pad, pad), stride=(stride, stride), dims=(64, c, hw, hw), name="dgrad")
        dx_t.set_output(True).set_name("dx")
        ex = sigdnn.Executor("gpu", engine="cute.conv_dgrad")
        plan = ex.prepare(g)
        step = plan.steps[0].plan
        work = torch.empty(max(1, step.workspace_bytes), device="cuda", dtype=torch.uint8)
        arrays = {
            port: DeviceArray(t.data_ptr(), t.shape, None, BFLOAT16) for port, t in (("dy", dy), ("w", w), ("dx", dx))
        }
        context = ExecutionContext(stream=stream, workspace=DeviceArray(work.data_ptr(), work.shape, None, np.uint8))
        launches = step.bind(arrays, context)

        def dgrad_torch(dy=dy, w=w, pad=pad, c=c, hw=hw, stride=stride):
            return torch.nn.grad.conv2d_input((64, c, hw, hw), w, dy, padding=pad, stride=stride)

        steps = f"gather + {len(step._convs)} phase convs + interleave" if stride > 1 else "flip + conv"
        impls = {
            "torch conv2d_input (cuDNN)": dgrad_torch,
            f"cute {steps} {step.config.label}": launches,
            "cute via Executor.execute": lambda ex=ex, plan=plan, p={"dy": dy, "w": w, "dx": dx}: ex.execute(
                plan, p, to_host=False
            ),
        }
        want = torch.nn.grad.conv2d_input((64, c, hw, hw), w.float(), dy.float(), padding=pad, stride=stride)
        errors = cute_errors(impls, dx, want)
        flops = 2.0 * dy.numel() * c * r * r  # the strided products only
        iters = max(3, int(args.sample_ms * 1e-3 / (flops / 300e12)))
        rows += timed_rows(args, impls, errors, iters, "torch conv2d_input (cuDNN)", flops, "bf16", f"dgrad {name}")


def wgrad_layer(name: str, gen: torch.Generator | None = None):
    """A unit-stride RESNET50_LAYERS layer's wgrad at batch 64: x and dy (bf16 NHWC, dy / 64), an empty dw,
    the graph and its node."""
    import sigdnn

    c, hw, k, r, _ = RESNET50_LAYERS[name]
    x = torch.randn(64, c, hw, hw, device="cuda", generator=gen).to(torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    dy = (torch.randn(64, k, hw, hw, device="cuda", generator=gen) / 64).to(torch.bfloat16)
    dy = dy.to(memory_format=torch.channels_last)
    dw = torch.empty(k, c, r, r, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    g = sigdnn.Graph(name, io_dtype="bfloat16", compute_dtype="float32")
    tx, tdy = g.tensor("x", x.shape, layout="NHWC"), g.tensor("dy", dy.shape, layout="NHWC")
    g.conv_wgrad(tx, tdy, padding=(r // 2, r // 2), dims=(k, c, r, r), name="wgrad").set_output(True).set_name("dw")
    return x, dy, dw, g, g.node_by_name("wgrad")


def bench_wgrad(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """bf16 NHWC conv wgrad against cuDNN's, batch 64, on the unit-stride layers of RESNET50_LAYERS.

    torch's ``torch.nn.grad.conv2d_weight`` (cuDNN backward filter,
    channels-last) against each CuTe wgrad builder that takes the layer
    (the row wgrad, the implicit GEMM, im2col + GEMM) at its default through
    ``Executor.execute`` (host cost included).
    """
    import sigdnn
    from sigdnn.errors import NotSupported
    from sigdnn.plan_builders.cute.conv_wgrad import plan_wgrad_rows

    torch.backends.cudnn.benchmark = True
    for name, (c, hw, k, r, stride) in RESNET50_LAYERS.items():
        if stride != 1 or (args.layers and name not in args.layers):
            continue
        pad = r // 2
        gen = torch.Generator(device="cuda").manual_seed(c + hw + k + 2)
        x, dy, dw, g, node = wgrad_layer(name, gen)

        def wgrad_torch(x=x, dy=dy, pad=pad, shape=(k, c, r, r)):
            return torch.nn.grad.conv2d_weight(x, shape, dy, padding=pad)

        impls = {"torch conv2d_weight (cuDNN)": wgrad_torch}
        engines = ["cute.conv_wgrad_implicit", "cute.conv_wgrad"]
        try:
            plan_wgrad_rows(node, g, sm_count)
            engines.insert(0, "cute.conv_wgrad_rows")
        except NotSupported:
            pass
        for engine in engines:
            ex = sigdnn.Executor("gpu", engine=engine)
            plan = ex.prepare(g)
            label = f"{engine} {plan.steps[0].plan.config.label} via Executor"
            impls[label] = lambda ex=ex, plan=plan, p={"x": x, "dy": dy, "dw": dw}: ex.execute(plan, p, to_host=False)
        want = torch.nn.grad.conv2d_weight(x.float(), (k, c, r, r), dy.float(), padding=pad)
        errors = cute_errors(impls, dw, want)
        flops = 2.0 * dy.numel() * c * r * r
        iters = max(3, int(args.sample_ms * 1e-3 / (flops / 200e12)))
        rows += timed_rows(args, impls, errors, iters, "torch conv2d_weight (cuDNN)", flops, "bf16", f"wgrad {name}")


AUTOTUNE_SECOND = """
import sys, time, sigdnn
from sigdnn.executor.autotune import Tuner
def refuse(label, run, sync):
    raise AssertionError("timed " + label)
size = int(sys.argv[1])
g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
y = g.matmul(g.tensor("a", (size, size)), g.tensor("b", (size, size)), name="mm")
if sys.argv[2] == "fused":
    y = g.pointwise("gelu_fwd", g.pointwise("add", y, g.tensor("bias", (1, size))))
y.set_output(True).set_name("y")
t = Tuner(measure=False, timer=refuse)
t0 = time.perf_counter()
plan = sigdnn.Executor("gpu", autotune=t).prepare(g)
print(f"second process: {plan.steps[0].builder.name}, steps timed {t.measured}, prepare {time.perf_counter() - t0:.2f} s; "
      f"chosen by {plan.steps[0].choice}")
"""


def bench_autotune(sizes=(4096,)) -> list[dict]:
    """Executor(autotune=True) on a bf16 matmul node and a matmul + bias + gelu region that cuTile and CuTe both
    serve: every candidate's time, the choice, then a second process that must take it from the cache."""
    import os
    import subprocess
    import sys

    import sigdnn
    from sigdnn.executor.autotune import Tuner, TuningCache

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for size in sizes:
            for kind in ("plain", "fused"):
                g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
                y = g.matmul(g.tensor("a", (size, size)), g.tensor("b", (size, size)), name="mm")
                if kind == "fused":
                    y = g.pointwise("gelu_fwd", g.pointwise("add", y, g.tensor("bias", (1, size))))
                y.set_output(True).set_name("y")
                tuner = Tuner(cache=TuningCache(Path(cache) / "autotune.json"))
                t0 = time.perf_counter()
                plan = sigdnn.Executor("gpu", autotune=tuner).prepare(g)
                tuning_s = time.perf_counter() - t0
                step = plan.steps[0]
                (record,) = [r for r in json.loads((Path(cache) / "autotune.json").read_text()).values()
                             if r["nodes"] == [n.name for n in step.nodes]]  # fmt: skip
                print(
                    f"autotune {kind} bf16 {size}^3 ({tuning_s:.1f} s): {step.builder.name}; {step.choice}", flush=True
                )
                for label, seconds, note in record["trials"]:
                    tf = 2 * size**3 / seconds / 1e12 if seconds else 0.0
                    print(f"    {label:<34} {seconds * 1e3 if seconds else float('nan'):8.3f} ms {tf:6.1f} TFLOP/s {note}",
                          flush=True)  # fmt: skip
                env = {**os.environ, "SIGDNN_CACHE_DIR": cache}
                r = subprocess.run([sys.executable, "-c", AUTOTUNE_SECOND, str(size), kind], env=env, capture_output=True,
                                   text=True, check=False)  # fmt: skip
                print("    " + (r.stdout.strip() or r.stderr[-2000:]), flush=True)
                rows.append({"size": size, "kind": kind, "chosen": record["label"], "trials": record["trials"],
                             "tuning_s": tuning_s, "second_process": r.stdout.strip(), "rc": r.returncode})  # fmt: skip
    return rows


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        err = "" if r["rel_err"] is None else f"  rel_err {r['rel_err']:.2e}"
        print(f"{r['dtype']:>4} {r['size']!s:>6} {r['impl']:<26} {r['ms']:9.4f} ms (spread {r['spread']:5.1%}) "
              f"{r['tflops']:8.1f} TFLOP/s {r['ratio']:6.3f}x torch{err}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "f16"], choices=list(TORCH_DTYPES))
    parser.add_argument("--configs", nargs="+", default=CONFIGS)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sample-ms", type=float, default=100.0, help="GPU time of back-to-back launches per sample")
    parser.add_argument("--fp8-configs", nargs="+", default=FP8_CONFIGS)
    parser.add_argument("--fp8-pairs", nargs="+", default=["e4m3xe4m3", "e4m3xe5m2"])
    parser.add_argument("--fused-configs", nargs="*", default=[])
    parser.add_argument("--fused-acts", nargs="+", default=["gelu"], choices=list(ACTIVATION_REFS))
    parser.add_argument(
        "--conv-configs", nargs="*", default=[], help="the convi part: configs timed beside the default"
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["sizes", "fused", "fp8"],
        choices=["sizes", "fused", "fp8", "convi", "dgrad", "wgrad", "autotune"],
    )
    parser.add_argument(
        "--layers", nargs="*", default=[], help="the convi, dgrad and wgrad parts: only these layers (default all)"
    )
    parser.add_argument("--batch", type=int, default=64, help="the convi part: the layers' batch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.init()
    capability, sm_count = device_properties(torch.cuda.current_device())
    print(f"device: {torch.cuda.get_device_name()} sm_{capability[0]}{capability[1]}, {sm_count} SMs; "
          f"torch {torch.__version__}", flush=True)  # fmt: skip
    rows: list[dict] = []
    fused_rows: list[dict] = []
    fp8_rows: list[dict] = []
    if "sizes" in args.parts:
        bench_sizes(args, sm_count, rows)
    if "fused" in args.parts:
        bench_fused(args, sm_count, fused_rows)
    if "fp8" in args.parts:
        bench_fp8(args, sm_count, fp8_rows)
    conv_rows: list[dict] = []
    if "convi" in args.parts:
        bench_conv_implicit(args, sm_count, conv_rows)
    if "dgrad" in args.parts:
        bench_dgrad(args, conv_rows)
    if "wgrad" in args.parts:
        bench_wgrad(args, sm_count, conv_rows)
    from sigdnn.plan_builders.cute.kernels import launch as launch_mod

    tuned = bench_autotune() if "autotune" in args.parts else []
    print(f"specializations this process compiled / loaded from disk: {launch_mod.STATS}")
    print("\nsummary (best config per dtype/size):")
    for dt in args.dtypes if rows else ():
        for size in args.sizes:
            sel = [r for r in rows if r["dtype"] == dt and r["size"] == size and r["impl"].startswith("cute")]
            best = max(sel, key=lambda r: r["tflops"])
            torch_row = next(r for r in rows if r["dtype"] == dt and r["size"] == size and r["impl"] == "torch.matmul")
            print(f"{dt:>4} {size:>6} torch {torch_row['tflops']:6.1f} TFLOP/s | best {best['impl']:<24} "
                  f"{best['tflops']:6.1f} TFLOP/s = {best['ratio']:.3f}x torch")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "fused": fused_rows,
                    "fp8": fp8_rows,
                    "autotune": tuned,
                    "conv": conv_rows,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
