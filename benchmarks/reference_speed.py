"""Reference speed, side by side with PyTorch on the CPU in the same run.

sigdnn's reference computes in float64 and rounds once per tensor; the fair
comparison is torch in float64 on the same inputs (plus torch in the io
dtype, the fastest thing a user could run instead). Times are medians.

Run: python benchmarks/reference_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

import sigdnn
from sigdnn.validation import random_inputs


def median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cases() -> list[tuple[str, sigdnn.Graph, Callable[[dict, object], object]]]:
    out = []
    g = sigdnn.Graph("gelu", io_dtype="float32", compute_dtype="float32")
    g.pointwise("gelu_fwd", g.tensor("x", dims=(1 << 20,)), name="gelu").set_output(True).set_name("y")
    out.append(("gelu_fwd 1M f32", g, lambda t, x: t.nn.functional.gelu(x["x"])))
    g = sigdnn.Graph("add", io_dtype="float16", compute_dtype="float32")
    g.pointwise("add", g.tensor("a", dims=(1 << 22,)), g.tensor("b", dims=(1 << 22,)), name="add").set_output(True)
    out.append(("add 4M f16", g, lambda t, x: x["a"] + x["b"]))
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", dims=(512, 512)), g.tensor("b", dims=(512, 512)), name="mm").set_output(True)
    out.append(("matmul 512^3 bf16", g, lambda t, x: x["a"] @ x["b"]))
    g = sigdnn.Graph("conv", io_dtype="float16", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 64, 56, 56), layout="NHWC")
    w = g.tensor("w", dims=(64, 64, 3, 3), layout="NHWC")
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True)
    out.append(("conv 8x64x56x56 k64 3x3 f16 NHWC", g, lambda t, x: t.nn.functional.conv2d(x["x"], x["w"], padding=1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(
        f"machine: {platform.machine()} python {platform.python_version()} numpy {np.__version__} torch {torch.__version__} threads {torch.get_num_threads()}"
    )
    print(f"{'case':<36} {'sigdnn ref':>11} {'torch f64':>11} {'torch io':>11} {'ref/f64':>8}")
    for name, graph, torch_fn in cases():
        ex = sigdnn.Executor()
        plan = ex.prepare(graph)
        inputs = random_inputs(graph, seed=0)
        ref = median_time(lambda ex=ex, plan=plan, inputs=inputs: ex.execute(plan, inputs), args.repeat)
        as64 = {k: torch.from_numpy(v.astype(np.float64)) for k, v in inputs.items()}
        f64 = median_time(lambda fn=torch_fn, x=as64: fn(torch, x), args.repeat)
        io_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[str(graph.io_dtype)]
        asio = {k: v.to(io_dtype) for k, v in as64.items()}
        try:
            io = median_time(lambda fn=torch_fn, x=asio: fn(torch, x), args.repeat)
        except RuntimeError:
            io = float("nan")
        print(f"{name:<36} {ref * 1e3:>9.1f}ms {f64 * 1e3:>9.1f}ms {io * 1e3:>9.1f}ms {ref / f64:>8.2f}")


if __name__ == "__main__":
    main()
