"""CuTe DSL flash attention against torch's cuDNN SDPA on one GPU: same run, same buffers.

Forward (default): for each sequence length, head dim and mask, times the
cute.sdpa kernel (the builder's compiled handle at its default tile
configuration, with and without the logsumexp output; tile sweeps:
docs/experiments.md) and torch's scaled_dot_product_attention under the
cuDNN and the flash backends, checks the CuTe output against cuDNN's, and
reports TFLOP/s (4 B H Sq Skv D multiply-adds x 2 / 2 when causal) and the
ratio to cuDNN.

``--backward``: for each shape (bf16, head dim 128, causal and not), the
forward's o and logsumexp come from the CuTe forward; then times the
cute.sdpa_backward launch (preprocess, main kernel, dq conversion: the
builder's compiled handles) and the backward of both torch backends
(``torch.autograd.grad`` of the forward's output, graph retained, so only
the backward is timed). The CuTe dq, dk, dv are compared with cuDNN's (max
|diff| over max |cuDNN's|). TFLOP/s counts the five products of the
backward, 10 B H S^2 D (halved when causal).

CUDA events around back-to-back launches (median of repeats after a warm-up,
implementations interleaved).

    PYTHONPATH=. python benchmarks/gpu_cute_sdpa.py --json $OUT/sdpa.json
    PYTHONPATH=. python benchmarks/gpu_cute_sdpa.py --backward --json $OUT/sdpa_bwd.json

Needs torch with CUDA and nvidia-cutlass-dsl on an sm_90 GPU; the kernels it
loads are precompiled by ``tests/gpu/precompile_cute.py CACHE --only sdpa``
(and ``--only sdpa_bwd``). Results: benchmarks/results/gpu_cute_sdpa.md and
gpu_cute_sdpa_backward.md.
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
    ("s4096 d64", 4, 32, 4096, 64, False),
    ("s4096 d64 causal", 4, 32, 4096, 64, True),
]
BACKWARD_SHAPES = SHAPES[:4]  # head dim 128


def view(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), str(t.dtype).removeprefix("torch.")


def cute_forward(q, k, v, o, stats, causal: bool, with_stats: bool = True) -> tuple[str, Callable[[], None]]:
    """The default configuration's label and one launch of the CuTe forward writing o (and, ``with_stats``,
    stats: the natural-log logsumexp)."""
    from sigdnn.plan_builders.cute.kernels.fmha_launch import FmhaLaunch

    st = view(stats) if with_stats else None
    spec, problem = plan_sdpa(view(q), view(k), view(v), view(o), st, q.shape[-1] ** -0.5, causal)
    config = default_config(spec)
    launch = FmhaLaunch(spec, config, problem, torch.cuda.get_device_properties(0).multi_processor_count)
    stream = torch.cuda.current_stream().cuda_stream
    return config.label, lambda: launch(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), stats.data_ptr(), stream
    )


def cute_backward(tensors: dict[str, torch.Tensor], causal: bool) -> Callable[[], None]:
    """One launch of the whole CuTe backward (its three kernels)."""
    from sigdnn.plan_builders.cute.kernels.fmha_bwd_launch import FmhaBwdLaunch

    d = tensors["q"].shape[-1]
    spec, problem = plan_sdpa_backward({n: view(t) for n, t in tensors.items()}, d**-0.5, causal)
    launch = FmhaBwdLaunch(spec, problem)
    workspace = torch.empty(problem.workspace_bytes, dtype=torch.uint8, device="cuda")
    ptrs = {n: t.data_ptr() for n, t in tensors.items()}
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: launch(ptrs, workspace.data_ptr(), stream)


def forward_impls(label: str, q, k, v, causal: bool) -> tuple[dict[str, Callable[[], object]], dict[str, float]]:
    """torch's two backends and the CuTe default, with and without stats; each CuTe row's max |o - cuDNN's o|
    (timed but marked WRONG when far off)."""
    o = torch.empty_like(q)
    stats = torch.empty(*q.shape[:3], 1, device="cuda", dtype=torch.float32)

    def torch_sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run

    impls: dict[str, Callable[[], object]] = {
        "torch cudnn": torch_sdpa(SDPBackend.CUDNN_ATTENTION),
        "torch flash": torch_sdpa(SDPBackend.FLASH_ATTENTION),
    }
    errors: dict[str, float] = {}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for with_stats in (False, True):
        config, run = cute_forward(q, k, v, o, stats, causal, with_stats)
        name = f"cute {config}" + (" +stats" if with_stats else "")
        impls[name] = run
        o.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        errors[name] = (o.float() - want.float()).abs().max().item()
        print(f"{label} {name}: max |cute - cudnn| = {errors[name]:.3e}", flush=True)
    return impls, errors


def backward_impls(label: str, q, k, v, causal: bool) -> tuple[dict[str, Callable[[], object]], dict[str, float]]:
    """torch's two backends' backward and the CuTe backward; the CuTe row's worst max |g - cuDNN's g| /
    max |cuDNN's g| over dq, dk, dv."""
    d_o = torch.randn_like(q)
    o = torch.empty_like(q)
    stats = torch.empty(*q.shape[:3], 1, device="cuda", dtype=torch.float32)
    cute_forward(q, k, v, o, stats, causal)[1]()
    grads = {n: torch.full_like(q, float("nan")) for n in ("dq", "dk", "dv")}
    cute = cute_backward({"q": q, "k": k, "v": v, "o": o, "d_o": d_o, "stats": stats, **grads}, causal)

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
        "cute": cute,
    }
    want = impls["torch cudnn"]()
    cute()
    torch.cuda.synchronize()
    errors = []
    for name, ref in zip(("dq", "dk", "dv"), want, strict=True):
        errors.append(((grads[name].float() - ref.float()).abs().max() / ref.float().abs().max()).item())
        print(f"{label} {name}: max |cute - cudnn| / max |cudnn| = {errors[-1]:.3e}", flush=True)
    return impls, {"cute": max(errors)}


def bench_shape(args: argparse.Namespace, label: str, b: int, h: int, s: int, d: int, causal: bool) -> list[dict]:
    """Every implementation timed in turn, ``repeats`` rounds: clock drift spreads over all of them."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if args.backward:
        impls, errors = backward_impls(label, q, k, v, causal)
        flops, err_key, wrong_above = 10 * b * h * s * s * d, "max_rel_err_vs_cudnn", 0.02
    else:
        impls, errors = forward_impls(label, q, k, v, causal)
        flops, err_key, wrong_above = 4 * b * h * s * s * d, "max_err_vs_cudnn", 0.05
    flops /= 2 if causal else 1
    iters = max(2, int(args.iters * 4096 * 4096 / (s * s)))
    samples = interleaved_samples(impls, iters, args.repeats, warmup=2)
    base = statistics.median(samples["torch cudnn"])
    rows = []
    for n, ts in samples.items():
        ms = statistics.median(ts)
        row = {"shape": label, "impl": n, "ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1),
               "vs_cudnn": round(base / ms, 3)}  # fmt: skip
        if n in errors:
            row[err_key] = errors[n]
        rows.append(row)
        print(
            f"{label:22s} {n:26s} {ms:8.3f} ms {row['tflops']:7.1f} TFLOP/s  x{row['vs_cudnn']:.3f}"
            + ("" if errors.get(n, 0.0) <= wrong_above else "  WRONG"),
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backward", action="store_true", help="time the backward (default: the forward)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--iters", type=int, help="launches per sample at seq 4096, scaled by 1/s^2 (default 10; 5 backward)"
    )
    parser.add_argument("--only", default="", help="run the shapes whose label contains this")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    args.iters = args.iters or (5 if args.backward else 10)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
    rows = []
    for shape in BACKWARD_SHAPES if args.backward else SHAPES:
        if not args.only or args.only in shape[0]:
            rows += bench_shape(args, *shape)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
