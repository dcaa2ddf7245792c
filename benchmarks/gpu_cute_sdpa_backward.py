"""CuTe DSL flash-attention backward against torch's cuDNN SDPA backward on one GPU: same run, same inputs.

For each shape (bf16, head dim 128, causal and not), the forward's o and
logsumexp come from the CuTe forward (cute.sdpa with stats); then times the
cute.sdpa_backward launch (preprocess, main kernel, dq conversion: the
builder's compiled handles) and the backward of
``torch.nn.functional.scaled_dot_product_attention`` under the cuDNN and
the flash backends (``torch.autograd.grad`` of the forward's output, graph
retained, so only the backward is timed), with CUDA events (median of
repeats of back-to-back launches after a warm-up), and each of the CuTe
backward's three kernels alone. The CuTe dq, dk, dv are compared with
cuDNN's first (max |diff| over max |cuDNN's|), and both with the backward of
float32 math attention where it fits (``--f32-limit``). TFLOP/s counts the
five products of the backward, 10 B H S^2 D (halved when causal).

    PYTHONPATH=. python benchmarks/gpu_cute_sdpa_backward.py --json $OUT/sdpa_bwd.json

Needs torch with CUDA and nvidia-cutlass-dsl on an sm_90 GPU; the kernels it
loads are precompiled by ``tests/gpu/precompile_cute.py CACHE --only sdpa_bwd``
and ``--only sdpa`` (the forward). Record results under
benchmarks/results/gpu_cute_sdpa_backward_<date>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch
from cuda_timing import interleaved_samples
from torch.nn.attention import SDPBackend, sdpa_kernel

from sigdnn.plan_builders.cute.sdpa_backward_layout import plan_sdpa_backward
from sigdnn.plan_builders.cute.sdpa_layout import default_config, plan_sdpa

# (label, batch, heads, seq, head dim, causal): batch x heads x seq^2 large enough to be compute bound
SHAPES = [
    ("s4096 d128", 4, 16, 4096, 128, False),
    ("s4096 d128 causal", 4, 16, 4096, 128, True),
    ("s16384 d128", 1, 16, 16384, 128, False),
    ("s16384 d128 causal", 1, 16, 16384, 128, True),
]


def view(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), str(t.dtype).removeprefix("torch.")


def cute_forward(q, k, v, o, stats, causal: bool) -> None:
    """o and stats (natural-log logsumexp) from the CuTe forward."""
    from sigdnn.plan_builders.cute.kernels.fmha_launch import FmhaLaunch

    spec, problem = plan_sdpa(view(q), view(k), view(v), view(o), view(stats), q.shape[-1] ** -0.5, causal)
    launch = FmhaLaunch(spec, default_config(spec), problem, torch.cuda.get_device_properties(0).multi_processor_count)
    launch(
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        o.data_ptr(),
        stats.data_ptr(),
        torch.cuda.current_stream().cuda_stream,
    )


def cute_backward(tensors: dict[str, torch.Tensor], causal: bool) -> dict[str, Callable[[], None]]:
    """The whole backward ("cute"), and each of its three kernels alone."""
    from sigdnn.plan_builders.cute.kernels.fmha_bwd_launch import KERNELS, FmhaBwdLaunch

    d = tensors["q"].shape[-1]
    spec, problem = plan_sdpa_backward({n: view(t) for n, t in tensors.items()}, d**-0.5, causal)
    launch = FmhaBwdLaunch(spec, problem)
    workspace = torch.empty(problem.workspace_bytes, dtype=torch.uint8, device="cuda")
    ptrs = {n: t.data_ptr() for n, t in tensors.items()}
    stream = torch.cuda.current_stream().cuda_stream
    runs = {"cute": lambda: launch(ptrs, workspace.data_ptr(), stream)}
    for kernel in KERNELS:
        runs[f"  cute {kernel}"] = lambda kernel=kernel: launch.run(kernel, ptrs, workspace.data_ptr(), stream)
    return runs


def float32_errors(q, k, v, d_o, causal: bool, grads: dict[str, list[torch.Tensor]]) -> dict[str, float]:
    """max |g - g32| / max |g32| of each implementation's dq, dk, dv (the worst of the three) against the
    backward of torch's float32 math attention on the same (bf16-valued) inputs."""
    q32, k32, v32 = (t.float().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, is_causal=causal)
    truth = torch.autograd.grad(out, (q32, k32, v32), d_o.float())
    errors = {}
    for name, got in grads.items():
        errors[name] = max(((g.float() - t).abs().max() / t.abs().max()).item() for g, t in zip(got, truth))
    del q32, k32, v32, out, truth
    torch.cuda.empty_cache()
    return errors


def bench_shape(args: argparse.Namespace, label: str, b: int, h: int, s: int, d: int, causal: bool) -> list[dict]:
    """Every implementation timed in turn, ``repeats`` rounds: clock drift spreads over all of them."""
    torch.manual_seed(0)
    q, k, v, d_o = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q)
    stats = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    cute_forward(q, k, v, o, stats, causal)
    grads = {n: torch.full_like(q, float("nan")) for n in ("dq", "dk", "dv")}
    tensors = {"q": q, "k": k, "v": v, "o": o, "d_o": d_o, "stats": stats, **grads}
    cute_runs = cute_backward(tensors, causal)
    flops = 10 * b * h * s * s * d / (2 if causal else 1)

    def torch_backward(backend):
        qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        with sdpa_kernel(backend):
            out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)

        def run():
            with sdpa_kernel(backend):
                return torch.autograd.grad(out, (qq, kk, vv), d_o, retain_graph=True)

        return run

    impls: dict[str, Callable[[], object]] = {
        "torch cudnn": torch_backward(SDPBackend.CUDNN_ATTENTION),
        "torch flash": torch_backward(SDPBackend.FLASH_ATTENTION),
        **cute_runs,
    }
    want = impls["torch cudnn"]()
    cute_runs["cute"]()
    torch.cuda.synchronize()
    if b * h * s * s <= args.f32_limit:
        f32 = float32_errors(
            q, k, v, d_o, causal, {"torch cudnn": want, "cute": [grads[n] for n in ("dq", "dk", "dv")]}
        )
        for name, err in f32.items():
            print(f"{label} {name}: max |g - float32 math| / max |float32 math| = {err:.3e}", flush=True)
    errors = []
    for name, ref in zip(("dq", "dk", "dv"), want, strict=True):
        err = ((grads[name].float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        errors.append(err)
        print(f"{label} {name}: max |cute - cudnn| / max |cudnn| = {err:.3e}", flush=True)
    iters = max(2, int(args.iters * 4096 * 4096 / (s * s)))
    samples = interleaved_samples(impls, iters, args.repeats, warmup=2)
    base = statistics.median(samples["torch cudnn"])
    rows = []
    for n, ts in samples.items():
        ms = statistics.median(ts)
        row = {"shape": label, "impl": n.strip(), "ms": round(ms, 4)}
        if n.startswith(" "):  # one kernel of the CuTe backward: its share of the time only
            rows.append(row)
            print(f"{label:20s} {n:12s} {ms:8.3f} ms", flush=True)
            continue
        row |= {"tflops": round(flops / ms / 1e9, 1), "vs_cudnn": round(base / ms, 3)}
        if n == "cute":
            row["max_rel_err_vs_cudnn"] = max(errors)
        rows.append(row)
        wrong = n == "cute" and max(errors) > 0.02
        print(
            f"{label:20s} {n:12s} {ms:8.3f} ms {row['tflops']:7.1f} TFLOP/s  x{row['vs_cudnn']:.3f}"
            + ("  WRONG" if wrong else ""),
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=5, help="launches per sample at seq 4096 (scaled by 1/s^2)")
    parser.add_argument("--only", default="", help="run the shapes whose label contains this")
    parser.add_argument("--json", default="")
    parser.add_argument(
        "--f32-limit", type=float, default=2**30, help="largest B H S^2 checked against float32 math attention"
    )
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
    rows = []
    for shape in SHAPES:
        if not args.only or args.only in shape[0]:
            rows += bench_shape(args, *shape)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
