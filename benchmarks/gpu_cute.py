"""CuTe DSL GEMM, convolution and measured builder choice against torch (cuBLAS / cuDNN) on one GPU.

Same run, same stream, same buffers; CUDA events around back-to-back
launches (median of repeats, implementations interleaved). Every CuTe kernel
runs at its default configuration, the one a plan uses without tuning
(tile-configuration sweeps: docs/experiments.md). Parts (``--parts``):

* sizes: bf16 / f16 GEMMs (M = N = K) against torch.matmul, each checked
  against a float32 cuBLAS product (TF32 off);
* fused: gelu(A @ B + bias) as one launch against torch eager and addmm + gelu;
* fp8: descaled fp8 GEMMs (bf16 out) against ``torch._scaled_mm`` (partial
  sums promoted), and their error against a float32 product;
* convi / dgrad / wgrad: bf16 NHWC conv fprop (implicit GEMM through the
  launch handle, it and the builder the registry ranks first through
  ``Executor.execute``, and fused with bias + relu), dgrad and wgrad on
  ResNet-50 layers at batch 64 against cuDNN's forward, backward data and
  backward filter;
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

from sigdnn.plan_builders.cute.gemm_layout import default_config, plan_gemm
from sigdnn.plan_builders.gpu_properties import device_properties

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
NAMES = {"bf16": "bfloat16", "f16": "float16"}
FP8_TORCH = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def default_launch(spec, problem, sm_count: int, ptrs: tuple) -> tuple[str, Callable[[], None]]:
    """The GEMM's default configuration (``default_config``, what a plan runs without tuning): its label and
    one launch of its compiled handle on ``ptrs``."""
    from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

    config = default_config(spec, problem, sm_count)
    launch = GemmLaunch(spec, config, problem, sm_count)
    return config.label, lambda: launch(*ptrs)


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
    for r in rows:
        err = "" if r["rel_err"] is None else f"  rel_err {r['rel_err']:.2e}"
        print(f"{r['dtype']:>4} {r['size']!s:>6} {r['impl']:<26} {r['ms']:9.4f} ms (spread {r['spread']:5.1%}) "
              f"{r['tflops']:8.1f} TFLOP/s {r['ratio']:6.3f}x torch{err}", flush=True)  # fmt: skip
    return rows


def bench_gemm(args: argparse.Namespace, sm_count: int, rows: list[dict], fused: bool = False) -> None:
    """The sizes part (C = A @ B against torch.matmul) or the fused part (gelu(A @ B + bias) as one launch
    against torch eager doing matmul, add and gelu, and addmm + gelu): bf16 / f16, row-major, M = N = K,
    at the default configuration, checked against a float32 cuBLAS product (TF32 off)."""
    for dt in args.dtypes:
        for size in args.sizes:
            rows += gemm_rows(args, sm_count, dt, size, fused)


def gemm_rows(args: argparse.Namespace, sm_count: int, dt: str, size: int, fused: bool) -> list[dict]:
    """bench_gemm's rows for one dtype and size."""
    import attrs

    tdt, gelu = TORCH_DTYPES[dt], torch.nn.functional.gelu
    gen = torch.Generator(device="cuda").manual_seed(size + int(fused))
    a = torch.randn(size, size, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(size, size, device="cuda", dtype=tdt, generator=gen)
    bias = torch.randn(size, device="cuda", dtype=tdt, generator=gen)
    c = torch.empty(size, size, device="cuda", dtype=tdt)
    spec, problem = plan_gemm(*(((size, size), t.stride(), NAMES[dt]) for t in (a, b, c)))
    want = torch.matmul(a.float(), b.float())
    if fused:
        spec = attrs.evolve(spec, bias_dtype=NAMES[dt], activation="gelu")
        impls = {"torch eager matmul+add+gelu": lambda: gelu(torch.matmul(a, b) + bias),
                 "torch addmm+gelu": lambda: gelu(torch.addmm(bias, a, b))}  # fmt: skip
        want = gelu(want + bias.float())
        print("(ratios against torch eager matmul+add+gelu)")
    else:
        impls = {"torch.matmul": lambda: torch.matmul(a, b, out=c)}
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), stream, bias.data_ptr() if fused else 0)
    label, launch = default_launch(spec, problem, sm_count, ptrs)
    impls[f"cute bias+gelu {label}" if fused else f"cute {label}"] = launch
    errors = cute_errors(impls, c, want)
    flops = 2.0 * size**3
    iters = max(3, int(args.sample_ms * 1e-3 / (flops / 700e12)))
    return timed_rows(args, impls, errors, iters, next(iter(impls)), flops, dt, size, warmup=3, gate=True)


def bench_fp8(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """C = sa * sb * (A @ B) in bfloat16 from fp8 A (row-major) and B (column-major), per-tensor scales.

    cuDNN-frontend's fp8 graph (matmul, two descale multiplies) as one CuTe launch at the default configuration
    (partial sums promoted) against ``torch._scaled_mm`` (cuBLASLt) with use_fast_accum off (cuBLAS promotes
    partial sums too). Errors are relative Frobenius distances to a float32 cuBLAS product of the same fp8
    values (TF32 off), scaled."""
    import attrs

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
            scaled_mm = functools.partial(torch._scaled_mm, a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            impls: dict[str, Callable[[], object]] = {"torch._scaled_mm": scaled_mm}
            errors = {"torch._scaled_mm": float((scaled_mm().float() - ref).norm() / ref.norm())}
            spec, problem = plan_gemm(
                ((m, k), a.stride(), f"fp8_{a_name}"), ((k, n), b.stride(), f"fp8_{b_name}"),
                ((m, n), c.stride(), "bfloat16"),
            )  # fmt: skip
            spec = attrs.evolve(spec, scale_dtypes=("float32", "float32"), round_s=("float32", "bfloat16"))
            ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), stream, 0, (sa.data_ptr(), sb.data_ptr()))
            label, launch = default_launch(spec, problem, sm_count, ptrs)
            impls[f"cute {label}"] = launch
            errors |= cute_errors(impls, c, ref)
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


def conv_layer_graph(c: int, hw: int, k: int, r: int, stride: int, fused: bool):
    """A bf16 NHWC ResNet layer (and with fused: + bias + relu, bf16 intermediates)."""
    import sigdnn

    g = sigdnn.Graph("layer", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (64, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, r, r), layout="NHWC")
    y = g.conv_fprop(x, w, padding=(r // 2, r // 2), stride=(stride, stride), name="conv")
    if fused:
        y = g.pointwise("add", y, g.tensor("bias", (1, k, 1, 1), layout="NHWC"), name="bias")
        y = g.pointwise("relu_fwd", y, name="act")
    y.set_output(True).set_name("y")
    return g


def bench_conv_implicit(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """bf16 NHWC conv fprop, implicit GEMM (cute.conv_fprop_implicit) against torch conv2d (cuDNN).

    Each ResNet-50 layer at batch 64: torch's channels-last conv2d (cudnn.benchmark on); the builder's launch
    with its default config (the compiled handle: what a plan's execute costs); the default through
    ``Executor.execute`` (host cost included); the builder the registry ranks first, through its Executor;
    and the fused conv + bias + relu launch against torch eager conv2d(bias) + relu."""
    torch.backends.cudnn.benchmark = True
    for name in RESNET50_LAYERS:
        if not args.layers or name in args.layers:
            rows += conv_fprop_rows(args, sm_count, name)


def conv_fprop_rows(args: argparse.Namespace, sm_count: int, name: str) -> list[dict]:
    """The convi part's rows for one layer of RESNET50_LAYERS."""
    import sigdnn
    from sigdnn.plan_builders.cute.conv_implicit import epilogue_chain, plan_conv
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config
    from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch
    from sigdnn.registry.regions import Dataflow

    c, hw, k, r, stride = RESNET50_LAYERS[name]
    pad = r // 2
    gen = torch.Generator(device="cuda").manual_seed(c + hw + k)
    x = channels_last(torch.randn(64, c, hw, hw, device="cuda", generator=gen))
    w = channels_last(torch.randn(k, c, r, r, device="cuda", generator=gen) / (c * r * r) ** 0.5)
    bias = torch.randn(k, device="cuda", generator=gen).to(torch.bfloat16)
    g = conv_layer_graph(c, hw, k, r, stride, fused=False)
    view = plan_conv(g.node_by_name("conv"), g)
    gf = conv_layer_graph(c, hw, k, r, stride, fused=True)
    chain = epilogue_chain(gf, Dataflow(gf, list(range(len(gf.nodes)))), 0)
    fview = plan_conv(gf.node_by_name("conv"), gf, chain)
    y = channels_last(torch.empty(g.tensor_by_name("y").dims, device="cuda"))
    ptrs = (x.data_ptr(), w.data_ptr(), y.data_ptr(), torch.cuda.current_stream().cuda_stream)
    default = default_conv_config(view, sm_count)
    launch = ConvLaunch(view.spec, default, view.geometry, sm_count)
    fused = ConvLaunch(fview.spec, default_conv_config(fview, sm_count), fview.geometry, sm_count)
    ex = sigdnn.Executor("gpu", engine="cute.conv_fprop_implicit")
    plan = ex.prepare(g)
    ranked = sigdnn.Executor("gpu")  # the registry's own choice among the builders that take the conv
    ranked_plan = ranked.prepare(g)
    pack = {"x": x, "w": w, "y": y}
    conv2d = torch.nn.functional.conv2d
    impls = {
        "torch conv2d (cuDNN)": lambda: conv2d(x, w, padding=pad, stride=stride),
        f"cute {default.label} (default)": lambda: launch(*ptrs),
        "cute default via Executor.execute": lambda: ex.execute(plan, pack, to_host=False),
        f"cute ranked ({ranked_plan.steps[0].builder.name}) via Executor.execute": lambda: ranked.execute(
            ranked_plan, pack, to_host=False
        ),
        "torch conv2d(bias) + relu": lambda: torch.relu(conv2d(x, w, bias, padding=pad, stride=stride)),
        "cute fused bias + relu": lambda: fused(*ptrs, bias_ptr=bias.data_ptr()),
    }
    want = conv2d(x.float(), w.float(), padding=pad, stride=stride)
    want_fused = torch.relu(want + bias.float().view(1, k, 1, 1))
    errors = cute_errors(impls, y, lambda n: want_fused if "fused" in n else want)
    flops = 2.0 * want.numel() * c * r * r
    # launches a sample: its GPU time at 400 TFLOP/s, each launch at least LAUNCH_FLOOR_S (small layers are
    # host-bound, and a sample of tens of thousands of 3-us launches would take seconds of host time)
    iters = max(3, int(args.sample_ms * 1e-3 / max(flops / 400e12, LAUNCH_FLOOR_S)))

    def base(n: str) -> str:
        return "torch conv2d(bias) + relu" if "bias" in n else "torch conv2d (cuDNN)"

    return timed_rows(args, impls, errors, iters, base, flops, "bf16", name)


def channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` in bfloat16, NHWC in memory (the logical NCHW dims kept)."""
    return t.to(torch.bfloat16).to(memory_format=torch.channels_last)


def executor_rows(args, label: str, g, pack: dict, out: torch.Tensor, baseline: tuple[str, Callable], want,
                  flops: float, rate: float, engine: str | None = None) -> list[dict]:  # fmt: skip
    """A one-node graph through ``Executor.execute`` (``engine``, or the builder the registry ranks first)
    against torch's op (``baseline``: name, call), checked against ``want``; a sample is about
    ``args.sample_ms`` at ``rate`` FLOP/s."""
    import sigdnn

    ex = sigdnn.Executor("gpu", engine=engine)
    plan = ex.prepare(g)
    step = plan.steps[0]
    ours = f"{step.builder.name} {step.plan.config.label} via Executor.execute"
    impls = {baseline[0]: baseline[1], ours: lambda: ex.execute(plan, pack, to_host=False)}
    errors = cute_errors(impls, out, want)
    iters = max(3, int(args.sample_ms * 1e-3 / (flops / rate)))
    return timed_rows(args, impls, errors, iters, baseline[0], flops, "bf16", label)


def bench_dgrad(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """bf16 NHWC conv dgrad (cute.conv_dgrad: filter flip + implicit GEMM over dy; strided: the sub-filter
    gather, one conv per stride phase, the interleave into dx) through ``Executor.execute`` against
    ``torch.nn.grad.conv2d_input`` (cuDNN backward data, channels-last), batch 64, on the layers of
    RESNET50_LAYERS and DGRAD_SHORTCUTS."""
    import sigdnn

    torch.backends.cudnn.benchmark = True
    grad_input = torch.nn.grad.conv2d_input
    for name, (c, hw, k, r, stride) in {**RESNET50_LAYERS, **DGRAD_SHORTCUTS}.items():
        if args.layers and name not in args.layers:
            continue
        pad, out = r // 2, -(-hw // stride)
        gen = torch.Generator(device="cuda").manual_seed(c + hw + k + 1)
        dy = channels_last(torch.randn(64, k, out, out, device="cuda", generator=gen))
        w = channels_last(torch.randn(k, c, r, r, device="cuda", generator=gen) / (k * r * r) ** 0.5)
        dx = channels_last(torch.empty(64, c, hw, hw, device="cuda"))
        g = sigdnn.Graph(name, io_dtype="bfloat16", compute_dtype="float32")
        tdy, tw = g.tensor("dy", dy.shape, layout="NHWC"), g.tensor("w", w.shape, layout="NHWC")
        dx_t = g.conv_dgrad(tdy, tw, padding=(pad, pad), stride=(stride, stride), dims=(64, c, hw, hw), name="dgrad")
        dx_t.set_output(True).set_name("dx")
        dims = (64, c, hw, hw)
        cudnn = ("torch conv2d_input (cuDNN)", functools.partial(grad_input, dims, w, dy, padding=pad, stride=stride))
        want = grad_input(dims, w.float(), dy.float(), padding=pad, stride=stride)
        flops = 2.0 * dy.numel() * c * r * r  # the strided products only
        pack = {"dy": dy, "w": w, "dx": dx}
        rows += executor_rows(args, f"dgrad {name}", g, pack, dx, cudnn, want, flops, 300e12, "cute.conv_dgrad")


def bench_wgrad(args: argparse.Namespace, sm_count: int, rows: list[dict]) -> None:
    """bf16 NHWC conv wgrad, the builder the registry ranks first through ``Executor.execute`` (host cost
    included), against ``torch.nn.grad.conv2d_weight`` (cuDNN backward filter, channels-last), batch 64, on
    the unit-stride layers of RESNET50_LAYERS."""
    import sigdnn

    torch.backends.cudnn.benchmark = True
    grad_weight = torch.nn.grad.conv2d_weight
    for name, (c, hw, k, r, stride) in RESNET50_LAYERS.items():
        if stride != 1 or (args.layers and name not in args.layers):
            continue
        pad = r // 2
        gen = torch.Generator(device="cuda").manual_seed(c + hw + k + 2)
        x = channels_last(torch.randn(64, c, hw, hw, device="cuda", generator=gen))
        dy = channels_last(torch.randn(64, k, hw, hw, device="cuda", generator=gen) / 64)
        dw = channels_last(torch.empty(k, c, r, r, device="cuda"))
        g = sigdnn.Graph(name, io_dtype="bfloat16", compute_dtype="float32")
        tx, tdy = g.tensor("x", x.shape, layout="NHWC"), g.tensor("dy", dy.shape, layout="NHWC")
        g.conv_wgrad(tx, tdy, padding=(pad, pad), dims=(k, c, r, r), name="wgrad").set_output(True).set_name("dw")
        cudnn = ("torch conv2d_weight (cuDNN)", functools.partial(grad_weight, x, dw.shape, dy, padding=pad))
        want = grad_weight(x.float(), (k, c, r, r), dy.float(), padding=pad)
        flops = 2.0 * dy.numel() * c * r * r
        rows += executor_rows(args, f"wgrad {name}", g, {"x": x, "dy": dy, "dw": dw}, dw, cudnn, want, flops, 200e12)


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


def bench_autotune(size: int = 4096) -> list[dict]:
    """Executor(autotune=True) on a bf16 matmul node and a matmul + bias + gelu region that cuTile and CuTe both
    serve: every candidate's time, the choice, then a second process that must take it from the cache."""
    import os
    import subprocess
    import sys

    import sigdnn
    from sigdnn.executor.autotune import Tuner, TuningCache

    rows = []
    with tempfile.TemporaryDirectory() as cache:
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
            print(f"autotune {kind} bf16 {size}^3 ({tuning_s:.1f} s): {step.builder.name}; {step.choice}", flush=True)
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


PARTS: dict[str, Callable[[argparse.Namespace, int, list[dict]], object]] = {
    "sizes": bench_gemm,
    "fused": functools.partial(bench_gemm, fused=True),
    "fp8": bench_fp8,
    "convi": bench_conv_implicit,
    "dgrad": bench_dgrad,
    "wgrad": bench_wgrad,
    "autotune": lambda args, sm_count, rows: rows.extend(bench_autotune()),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["sizes", "fused", "fp8"], choices=list(PARTS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192], help="the GEMM parts: M = N = K")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "f16"], choices=list(TORCH_DTYPES))
    parser.add_argument("--fp8-pairs", nargs="+", default=["e4m3xe4m3", "e4m3xe5m2"])
    parser.add_argument("--layers", nargs="*", default=[], help="the conv parts: only these layers (default all)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sample-ms", type=float, default=100.0, help="GPU time of back-to-back launches per sample")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.init()
    capability, sm_count = device_properties(torch.cuda.current_device())
    print(f"device: {torch.cuda.get_device_name()} sm_{capability[0]}{capability[1]}, {sm_count} SMs; "
          f"torch {torch.__version__}", flush=True)  # fmt: skip
    result: dict[str, list[dict]] = {}
    for part in args.parts:
        PARTS[part](args, sm_count, result.setdefault(part, []))
    from sigdnn.plan_builders.cute.kernels import launch as launch_mod

    print(f"specializations this process compiled / loaded from disk: {launch_mod.STATS}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
