"""CuTe DSL flash-attention backward against torch's cuDNN SDPA backward on one GPU: same run, same inputs.

For each shape (bf16, head dim 128, causal and not), the forward's o and
logsumexp come from the CuTe forward (cute.sdpa with stats); then times the
cute.sdpa_backward launch (preprocess, main kernel, dq conversion: the
builder's compiled handles) and the backward of
``torch.nn.functional.scaled_dot_product_attention`` under the cuDNN and
the flash backends (``torch.autograd.grad`` of the forward's output, graph
retained, so only the backward is timed), with CUDA events (median of
repeats of back-to-back launches after a warm-up). The CuTe dq, dk, dv are
compared with cuDNN's first (max |diff| over max |cuDNN's|). TFLOP/s counts
the five products of the backward, 10 B H S^2 D (halved when causal).

    PYTHONPATH=. python benchmarks/gpu_cute_sdpa_backward.py --json $OUT/sdpa_bwd.json

Needs torch with CUDA and nvidia-cutlass-dsl on an sm_90 GPU. Record
results under benchmarks/results/gpu_cute_sdpa_backward_<date>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch
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


def time_ms(fn: Callable[[], None], iters: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


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


def cute_backward(tensors: dict[str, torch.Tensor], causal: bool) -> tuple[Callable[[], None], torch.Tensor]:
    from sigdnn.plan_builders.cute.kernels.fmha_bwd_launch import FmhaBwdLaunch

    d = tensors["q"].shape[-1]
    spec, problem = plan_sdpa_backward({n: view(t) for n, t in tensors.items()}, d**-0.5, causal)
    launch = FmhaBwdLaunch(spec, problem)
    workspace = torch.empty(problem.workspace_bytes, dtype=torch.uint8, device="cuda")
    ptrs = {n: t.data_ptr() for n, t in tensors.items()}
    stream = torch.cuda.current_stream().cuda_stream
    return (lambda: launch(ptrs, workspace.data_ptr(), stream)), workspace


def bench_shape(args: argparse.Namespace, label: str, b: int, h: int, s: int, d: int, causal: bool) -> list[dict]:
    """Every implementation timed in turn, ``repeats`` rounds: clock drift spreads over all of them."""
    torch.manual_seed(0)
    q, k, v, d_o = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q)
    stats = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    cute_forward(q, k, v, o, stats, causal)
    grads = {n: torch.full_like(q, float("nan")) for n in ("dq", "dk", "dv")}
    tensors = {"q": q, "k": k, "v": v, "o": o, "d_o": d_o, "stats": stats, **grads}
    run_cute, _workspace = cute_backward(tensors, causal)
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
        "cute": run_cute,
    }
    want = impls["torch cudnn"]()
    run_cute()
    torch.cuda.synchronize()
    errors = []
    for name, ref in zip(("dq", "dk", "dv"), want, strict=True):
        err = ((grads[name].float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        errors.append(err)
        print(f"{label} {name}: max |cute - cudnn| / max |cudnn| = {err:.3e}", flush=True)
    for fn in impls.values():
        fn()
        fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {n: [] for n in impls}
    iters = max(2, int(args.iters * 4096 * 4096 / (s * s)))
    for _ in range(args.repeats):
        for n, fn in impls.items():
            samples[n].append(time_ms(fn, iters))
    base = statistics.median(samples["torch cudnn"])
    rows = []
    for n, ts in samples.items():
        ms = statistics.median(ts)
        row = {"shape": label, "impl": n, "ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1)}
        row["vs_cudnn"] = round(base / ms, 3)
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
