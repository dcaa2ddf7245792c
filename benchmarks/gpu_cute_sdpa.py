"""CuTe DSL flash-attention forward against torch's cuDNN SDPA on one GPU: same run, same buffers.

For each sequence length, head dim and mask, times the cute.sdpa kernel
(the builder's compiled handle, every tile configuration listed) and
``torch.nn.functional.scaled_dot_product_attention`` under the cuDNN and
the flash backends, with CUDA events (median of repeats of back-to-back
launches after a warm-up), checks the CuTe output against cuDNN's, and
reports TFLOP/s (4 B H Sq Skv D multiply-adds x 2 / 2 when causal) and the
ratio to cuDNN. Also the host microseconds of one launch through the plan.

    PYTHONPATH=. python benchmarks/gpu_cute_sdpa.py --json $OUT/sdpa.json

Needs torch with CUDA and nvidia-cutlass-dsl on an sm_90 GPU. Record
results under benchmarks/results/gpu_cute_sdpa_<date>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from cuda_timing import interleaved_samples
from torch.nn.attention import SDPBackend, sdpa_kernel

from sigdnn.plan_builders.cute.sdpa_layout import check_config, parse_config, plan_sdpa

# (label, batch, heads, seq, head dim, causal)
SHAPES = [
    ("s4096 d128", 4, 16, 4096, 128, False),
    ("s4096 d128 causal", 4, 16, 4096, 128, True),
    ("s16384 d128", 1, 16, 16384, 128, False),
    ("s16384 d128 causal", 1, 16, 16384, 128, True),
    ("s4096 d64", 4, 32, 4096, 64, False),
    ("s4096 d64 causal", 4, 32, 4096, 64, True),
]
# b (balanced causal pairs) is skipped without the mask; m128n128s2b (no turn-taking) is left out:
# ptxas serializes its wgmma (C7511, register resources).
CONFIGS = [
    "m128n128s2",
    "m128n128s2x",
    "m128n128s2p",
    "m128n128s2px",
    "m128n128s3px",
    "m128n176s2p",
    "m128n176s2px",
    "m128n128s2pb",
    "m128n128s2pbx",
    "m128n128s3pbx",
]


def cute_launch(q, k, v, o, stats, causal: bool, config: str):
    from sigdnn.plan_builders.cute.kernels.fmha_launch import FmhaLaunch

    def view(t):
        return tuple(t.shape), t.stride(), str(t.dtype).removeprefix("torch.")

    st = None if stats is None else view(stats)
    spec, problem = plan_sdpa(view(q), view(k), view(v), view(o), st, q.shape[-1] ** -0.5, causal)
    cfg = parse_config(config)
    check_config(spec, cfg)
    return FmhaLaunch(spec, cfg, problem, torch.cuda.get_device_properties(0).multi_processor_count)


def bench(args: argparse.Namespace) -> list[dict]:
    rows: list[dict] = []
    for shape in SHAPES:
        if not args.only or args.only in shape[0]:
            rows += bench_shape(args, *shape)
    return rows


def bench_shape(args: argparse.Namespace, label: str, b: int, h: int, s: int, d: int, causal: bool) -> list[dict]:
    """Every implementation timed in turn, ``repeats`` rounds: clock drift spreads over all of them."""
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    stats = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)

    def torch_sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run

    impls: dict[str, Callable[[], None]] = {
        "torch cudnn": torch_sdpa(SDPBackend.CUDNN_ATTENTION),
        "torch flash": torch_sdpa(SDPBackend.FLASH_ATTENTION),
    }
    errors: dict[str, float] = {}  # max |o - cuDNN's o|: a row far off is timed but marked WRONG
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for config in CONFIGS:
        for with_stats in (False, True):
            if with_stats and config != CONFIGS[0]:
                continue
            try:
                launch = cute_launch(q, k, v, o, stats if with_stats else None, causal, config)
            except ValueError as exc:
                print(f"{label} {config}: skipped ({exc})")
                continue
            name = f"cute {config}" + (" +stats" if with_stats else "")
            impls[name] = lambda launch=launch: launch(
                q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), stats.data_ptr(), stream
            )
            o.fill_(float("nan"))
            impls[name]()
            torch.cuda.synchronize()
            err = (o.float() - want.float()).abs().max().item()
            errors[name] = err
            print(f"{label} {name}: max |cute - cudnn| = {err:.3e}", flush=True)
    iters = max(2, int(args.iters * 4096 * 4096 / (s * s)))
    samples = interleaved_samples(impls, iters, args.repeats, warmup=2)
    base = statistics.median(samples["torch cudnn"])
    for n, ts in samples.items():
        ms = statistics.median(ts)
        row = {
            "shape": label,
            "impl": n,
            "ms": round(ms, 4),
            "tflops": round(flops / ms / 1e9, 1),
            "vs_cudnn": round(base / ms, 3),
            "max_err_vs_cudnn": errors.get(n),
        }
        rows.append(row)
        print(
            f"{label:22s} {n:26s} {ms:8.3f} ms {row['tflops']:7.1f} TFLOP/s  x{row['vs_cudnn']:.3f}"
            + ("" if errors.get(n, 0.0) <= 0.05 else "  WRONG"),
            flush=True,
        )
    return rows


def bench_host() -> float:
    """Host microseconds per launch of a tiny attention through the builder's plan."""
    import sigdnn
    from sigdnn.runtime.device import ExecutionContext
    from sigdnn.runtime.device_array import BFLOAT16, DeviceArray

    g = sigdnn.Graph("attn", io_dtype="bfloat16", compute_dtype="float32")
    q, k, v = (g.tensor(n, (1, 1, 128, 128)) for n in "qkv")
    o, _ = g.sdpa(q, k, v, 0.125, name="sdpa")
    o.set_output(True).set_name("o")
    plan = sigdnn.Executor("gpu", engine="cute.sdpa").prepare(g).steps[0].plan
    ts = {n: torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16) for n in "qkvo"}
    bufs = {n: DeviceArray(t.data_ptr(), t.shape, t.stride(), BFLOAT16) for n, t in ts.items()}
    ctx = ExecutionContext(stream=torch.cuda.current_stream().cuda_stream)
    for _ in range(20):
        plan.execute(bufs, ctx)
    torch.cuda.synchronize()
    n = 3000
    t0 = time.perf_counter()
    for i in range(n):
        plan.execute(bufs, ctx)
        if i % 100 == 99:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10, help="launches per sample at seq 4096 (scaled by 1/s^2)")
    parser.add_argument("--only", default="", help="run the shapes whose label contains this")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
    rows = bench(args)
    host = bench_host()
    print(f"host: plan.execute of a tiny sdpa {host:.2f} us per launch")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "host_us": host}, f, indent=1)


if __name__ == "__main__":
    main()
