"""Whole models through sigdnn's GPU backend against torch in the same run (issue #30's model benchmark).

    python benchmarks/models.py --dry-run     # no GPU: every model planned at full size (steps, memory, declines)
    python benchmarks/models.py               # on the GPU: vs torch eager and torch.compile (needs Triton)
    python benchmarks/models.py --models resnet50 --iters 20 --no-compile --profile   # + the slowest steps
    python benchmarks/models.py --onnx DIR [--dry-run] [--onnx-models NAME ...] [--profile]   # vs onnxruntime

Per model on the GPU: time per execute (CUDA events, median after warm-up) of sigdnn, torch eager (cudnn.benchmark
on) and torch.compile on the same inputs (models_torch.py), and one call's kernel time each (torch's profiler: eager
is host-bound); steps, views, launches, fallbacks (a strict Executor("gpu") first, else fallback="reference"); peak
memory (sigdnn's arena + workspace + outputs + guests no output hosts; torch's allocator peak); validate, small sizes.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sigdnn
from sigdnn.errors import NoPlanError, NotSupported
from sigdnn.executor.executor import GPU_REFERENCE_LIBRARY
from sigdnn.graph.limits import DEFAULT_LIMITS
from sigdnn.models import llama_layer, resnet50, resnet50_training, vit
from sigdnn.registry.registry import DEFAULT_REGISTRY
from sigdnn.signature_keys import key_for

LIMITS = attrs.evolve(DEFAULT_LIMITS, max_work=2**45)  # a full decoder layer's backward does ~2^41 operations


@attrs.frozen
class Model:
    build: Callable[..., sigdnn.Graph]
    full: dict[str, Any]  # the sizes
    small: dict[str, Any]  # validation sizes: the same graph, a smaller batch / sequence
    torch_name: str  # the function of models_torch that computes it
    heads: int = 0  # what that function needs to split heads


LLAMA_SIZES = ({"batch": 1, "seq": 4096}, {"batch": 1, "seq": 128})  # full, validation
MODELS = {
    "resnet50": Model(resnet50, {"batch": 64}, {"batch": 2, "image": 64}, "resnet50"),
    "resnet50_training": Model(resnet50_training, {"batch": 64}, {"batch": 2, "image": 64}, "resnet50_training"),
    "llama_layer": Model(llama_layer, *LLAMA_SIZES, "llama_layer", 32),
    "llama_layer_backward": Model(
        lambda **kw: llama_layer(backward=True, **kw), *LLAMA_SIZES, "llama_layer_backward", 32
    ),
    "vit_b16": Model(vit, {"batch": 64}, {"batch": 2}, "vit", 12),
}
ONNX_MODELS = ("resnet50", "resnext50_32x4d", "wide_resnet50_2", "densenet121", "inception_v3", "googlenet", "vgg11",
               "alexnet", "squeezenet1_0", "mobilenet_v2", "mobilenet_v3_small", "mnasnet0_5", "shufflenet_v2_x1_0",
               "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "convnext_tiny", "vit_b_16", "swin_t",
               "maxvit_t", "fcn_resnet50", "deeplabv3_resnet50", "deeplabv3_mobilenet_v3_large",
               "lraspp_mobilenet_v3_large", "r3d_18", "mc3_18", "r2plus1d_18", "swin3d_t")  # fmt: skip
VIDEO = dict.fromkeys(("r3d_18", "mc3_18", "r2plus1d_18", "swin3d_t"), (1, 3, 16, 112, 112))


def torchvision_net(name: str) -> Any:
    """A torchvision model (untrained) whose forward returns one tensor: a segmentation model's "out" map."""
    import torch
    import torchvision

    if not hasattr(torchvision.models.segmentation, name):
        return getattr(torchvision.models.video if name in VIDEO else torchvision.models, name)().eval()
    wrapper = type("Out", (torch.nn.Module,), {"forward": lambda self, x: self.net(x)["out"]})()
    wrapper.net = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None).eval()
    return wrapper


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


# -- the CPU part: graphs at full size ------------------------------------------------------------------
def gpu_declines(graph: sigdnn.Graph, plan: sigdnn.ExecutionPlan) -> tuple[Counter, dict[str, str]]:
    """Per op, the nodes no GPU builder's check accepts (run without a device: shape and dtype declines only;
    a check that needs the GPU says so), and one reason per op."""
    registry = DEFAULT_REGISTRY
    counts: Counter = Counter()
    reasons: dict[str, str] = {}
    for step in plan.steps:
        if step.builder.name == "view":
            continue
        node = step.node
        why = []
        gpu_builders = [b for b in registry.serving(key_for(node, graph), "gpu") if b.library != GPU_REFERENCE_LIBRARY]
        for builder in gpu_builders:  # what Executor("gpu") chooses among (the GPU reference is its own backend)
            try:
                builder.check(node, graph, None)
            except NotSupported as e:
                why.append(f"{builder.name}: {e}")
                continue
            except Exception as e:  # a check that reads the device
                why.append(f"{builder.name}: check needs the GPU ({type(e).__name__})")
                continue
            why = []
            break
        else:
            counts[node.op.kind] += 1
            reasons.setdefault(node.op.kind, "; ".join(why) or "no GPU builder serves this op")
    return counts, reasons


def dry_run(names: list[str]) -> None:
    print(f"sigdnn {sigdnn.__version__}: model graphs at full size, planned on the reference (no GPU needed)\n")
    for name in names:
        model = MODELS[name]
        started = time.perf_counter()
        graph = model.build(**model.full)
        built = time.perf_counter() - started
        plan = sigdnn.Executor(limits=LIMITS).prepare(graph)
        prepared = time.perf_counter() - started - built
        views = [s for s in plan.steps if s.builder.name == "view"]
        copies = Counter(s.node.op.kind for s in plan.steps if s.node.op.moves_data and s.builder.name != "view")
        params = sum(t.size * graph.dtype_of(t).itemsize for t in graph.inputs)
        outputs = sum(t.size * graph.dtype_of(t).itemsize for t in graph.outputs)
        m = plan.memory
        print(f"{name} {model.full}: {len(graph.nodes)} nodes, {len(plan.steps)} steps "
              f"({len(views)} views, {len(plan.steps) - len(views)} run); built {built:.2f} s, prepared {prepared:.2f} s")  # fmt: skip
        print(f"  data movement left as copies: {dict(copies) or 'none'}")
        print(f"  inputs {mib(params)}, outputs {mib(outputs)}, intermediates: peak {mib(m.peak_bytes)} "
              f"(without reuse {mib(m.total_bytes)}), workspace {mib(plan.workspace_bytes)}")  # fmt: skip
        counts, reasons = gpu_declines(graph, plan)
        print(f"  steps no GPU builder's check takes (would fall back): {sum(counts.values())} {dict(counts)}")
        for op, why in reasons.items():
            print(f"    {op}: {why[:300]}")
        print()


# -- the GPU part ------------------------------------------------------------------------------------------
def kernel_launches(torch: Any, run: Callable[[], Any]) -> tuple[int, float]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return len(kernels), sum(e.device_time_total for e in kernels) / 1e3


def torch_peak(torch: Any, run: Callable[[], Any]) -> int:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def device_inputs(torch: Any, graph: sigdnn.Graph, grad: bool) -> dict[str, Any]:
    from models_torch import parameter_like

    return {t.name: parameter_like(torch, t, str(graph.dtype_of(t)), grad) for t in graph.inputs}


def host_inputs(graph: sigdnn.Graph) -> dict[str, Any]:
    """validate's inputs: the timed run's initialization on the host (unit variance overflows bf16 in ResNet-50)."""
    import torch
    from models_torch import parameter_like

    arrays = {t.name: parameter_like(torch, t, "float32", False, device="cpu").numpy() for t in graph.inputs}
    return {t.name: arrays[t.name].astype(graph.dtype_of(t).numpy) for t in graph.inputs}


def slowest_steps(executor: Any, plan: Any, pack: dict[str, Any], count: int = 12) -> list[str]:
    """The ``count`` slowest steps of one execute run step by step (the device synchronized after each)."""
    times: list[tuple[float, str, str]] = []
    executor.execute(plan, pack, to_host=False, on_step=lambda _, st, s: times.append((s, st.name, st.builder.name)))
    total = sum(t[0] for t in times)
    return [f"    {s * 1e3:8.3f} ms {s / total:5.1%}  {n} ({b})" for s, n, b in sorted(times, reverse=True)[:count]]


def gpu_run(name: str, iters: int, compile_too: bool, validate_scale: bool, profile: bool = False) -> None:
    import models_torch
    import torch
    from cuda_timing import median_ms  # each call timed alone by CUDA events: median of iters, after 3 warm-ups

    torch.backends.cudnn.benchmark = True  # eager at its best: cuDNN times its algorithms (23.3 -> 18.0 ms, run I)
    model = MODELS[name]
    graph = model.build(**model.full)
    inputs = device_inputs(torch, graph, grad=name in ("resnet50_training", "llama_layer_backward"))
    try:
        executor = sigdnn.Executor("gpu", limits=LIMITS)
        plan = executor.prepare(graph)
        strict = "strict: yes"
    except NoPlanError as e:
        strict = f"strict: NO ({str(e)[:200]})"
        executor = sigdnn.Executor("gpu", fallback="reference", limits=LIMITS)
        plan = executor.prepare(graph)
    outputs = {t.name: torch.empty_strided(t.dims, t.strides, dtype=getattr(torch, str(graph.dtype_of(t))), device="cuda")
               for t in graph.outputs}  # fmt: skip
    pack = {**inputs, **outputs}

    def ours() -> None:
        executor.execute(plan, pack, to_host=False)

    fallbacks = Counter(s.node.op.kind for s in plan.steps if s.builder.name.endswith("(fallback)"))
    views = sum(s.builder.name == "view" for s in plan.steps)
    sigdnn_ms = median_ms(ours, 1, iters, 3)
    launches, ours_kernels = kernel_launches(torch, ours)
    out_bytes = sum(o.numel() * o.element_size() for o in outputs.values())
    spare = executor.memory.bound(plan, executor.cuda_graphs).spare_bytes  # guests whose output lent nothing
    ours_bytes = plan.memory.peak_bytes + plan.workspace_bytes + out_bytes + spare
    function = getattr(models_torch, model.torch_name)

    def eager(p: dict[str, Any]) -> dict[str, Any]:
        return function(torch, p, heads=model.heads) if model.heads else function(torch, p)

    eager_ms = median_ms(lambda: eager(inputs), 1, iters, 3)
    eager_kernels = kernel_launches(torch, lambda: eager(inputs))[1]
    eager_bytes = torch_peak(torch, lambda: eager(inputs))
    line = (f"{name}: {len(plan.steps)} steps ({views} views), {launches} launches, fallbacks {dict(fallbacks)}, "
            f"{strict}\n  sigdnn {sigdnn_ms:.3f} ms, torch eager {eager_ms:.3f} ms ({eager_ms / sigdnn_ms:.2f}x); kernels "
            f"{ours_kernels:.3f} / {eager_kernels:.3f} ms ({eager_kernels / ours_kernels:.2f}x)")  # fmt: skip
    if compile_too and importlib.util.find_spec("triton") is not None:
        compiled = torch.compile(eager)
        compiled_ms = median_ms(lambda: compiled(inputs), 1, iters, 3)
        line += f", torch.compile {compiled_ms:.3f} ms ({compiled_ms / sigdnn_ms:.2f}x)"
    elif compile_too:
        line += ", torch.compile skipped: Triton is not installed"
    print(line)
    print(f"  peak device memory: sigdnn {mib(ours_bytes)}, torch eager {mib(eager_bytes)} (inputs excluded)")
    if profile:
        print("  slowest steps, run one by one:\n" + "\n".join(slowest_steps(executor, plan, pack)))
    if validate_scale:
        from sigdnn.validation import validate

        small = model.build(**model.small)
        report = validate(small, host_inputs(small), executor=sigdnn.Executor("gpu", fallback="reference"))
        print(
            f"  validate --backend gpu at {model.small}, truth {report.truth}: {'passed' if report.passed else 'FAILED'}"
        )
        if not report.passed:
            print("\n".join(f"    {row}" for row in report.table().splitlines() if "FAIL" in row or "worst" in row))


def onnx_models(directory: Path, on_gpu: bool, iters: int, names: list[str], profile: bool) -> None:
    """torchvision's models as torch.onnx.export writes them (opset 17, batch 1, 224x224 or a video's 16 x 112x112,
    into DIR when torchvision is installed; else the .onnx files already there): imported, run against onnxruntime
    (CPU) on the reference (with the steps no GPU builder takes) or strict on the GPU, timed against torch eager."""
    import numpy as np
    import onnxruntime as ort

    from sigdnn.importers import onnx as onnx_import

    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        x = np.random.default_rng(0).standard_normal(VIDEO.get(name, (1, 3, 224, 224))).astype(np.float32)
        path = directory / f"{name}.onnx"
        if not path.exists() and importlib.util.find_spec("torchvision") is not None:
            import torch

            net = torchvision_net(name)
            for p in net.parameters():  # untrained weights; ViT's head starts at zero, which would make its output 0
                if not p.any():
                    torch.nn.init.normal_(p, std=0.02)
            torch.onnx.export(net, torch.from_numpy(x), path, opset_version=17, dynamo=False)
        if not path.exists():
            print(f"{name}: skipped: no {path}, and no torchvision to export it")
            continue
        graph = onnx_import.load(path, max_bytes=2**31)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        want = session.run(None, {session.get_inputs()[0].name: x})[0].astype(np.float64)
        executor = sigdnn.Executor("gpu" if on_gpu else "reference")
        plan = executor.prepare(graph)  # strict on the GPU: NoPlanError names a node no GPU builder takes
        if on_gpu:
            import torch
            from cuda_timing import median_ms

            xt, net = torch.from_numpy(x).cuda(), torchvision_net(name).cuda()
        pack = {graph.inputs[0].name: xt if on_gpu else x}
        got = np.asarray(executor.execute(plan, pack)[graph.outputs[0].name], np.float64)
        error = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
        views = sum(s.builder.name == "view" for s in plan.steps)
        line = f"{name}: {len(graph.nodes)} nodes, {len(plan.steps)} steps ({views} views), {executor.backend} vs "
        line += f"onnxruntime: max |diff| / max |y| {error:.1e}"
        if on_gpu:  # torch eager on the same input: its convs as TF32 (torch's default), then as float32
            pack[graph.outputs[0].name] = torch.empty(got.shape, device="cuda")  # given: a CUDA graph can replay runs
            ms = median_ms(lambda e=executor, p=plan, k=pack: e.execute(p, k, to_host=False), 1, iters, 3)
            with torch.no_grad():
                tf32 = median_ms(lambda n=net, i=xt: n(i), 1, iters, 3)
                torch.backends.cudnn.allow_tf32 = False
                f32 = median_ms(lambda n=net, i=xt: n(i), 1, iters, 3)
                torch.backends.cudnn.allow_tf32 = True
            line += f"; sigdnn {ms:.3f} ms, torch eager {tf32:.3f} ms TF32 ({tf32 / ms:.2f}x), {f32:.3f} ms f32 ({f32 / ms:.2f}x)"
            sigdnn.allow_tf32(fast := onnx_import.load(path, max_bytes=2**31))  # sigdnn's convs and GEMMs as TF32 too
            for ex in (executor, sigdnn.Executor("gpu", cuda_graphs=True)):  # then replayed as one CUDA graph
                ms = median_ms(lambda e=ex, p=ex.prepare(fast), k=pack: e.execute(p, k, to_host=False), 1, iters, 3)  # noqa: B008
                line += f"; sigdnn --tf32{' + CUDA graph' * ex.cuda_graphs} {ms:.3f} ms ({tf32 / ms:.2f}x torch's TF32)"
            line += "".join("\n" + s for s in slowest_steps(ex, ex.prepare(fast), pack, 8)) if profile else ""
        else:
            counts, _ = gpu_declines(graph, plan)
            line += f"; steps no GPU builder takes: {sum(counts.values())} {dict(counts) or ''}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="build and plan every model at full size on the CPU")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--iters", type=int, default=10, help="timed runs per measurement (median reported)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-validate", action="store_true", help="skip validate at the validation sizes")
    parser.add_argument("--profile", action="store_true", help="also list each model's slowest steps")
    parser.add_argument("--onnx", type=Path, metavar="DIR", help="torchvision's ONNX exports in DIR (see onnx_models)")
    parser.add_argument("--onnx-models", nargs="+", choices=ONNX_MODELS, default=ONNX_MODELS, metavar="NAME")
    args = parser.parse_args()
    if args.onnx:
        onnx_models(args.onnx, not args.dry_run, args.iters, args.onnx_models, args.profile)
        return
    if args.dry_run:
        dry_run(args.models)
        return
    for name in args.models:
        gpu_run(name, args.iters, not args.no_compile, not args.no_validate, args.profile)


if __name__ == "__main__":
    main()
