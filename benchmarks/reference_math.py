"""The reference math (sigdnn.plan_builders.reference.math) side by side with torch on the CPU.

The reference computes in float64, so the like-for-like comparison is torch
float64 on the same inputs; torch float32 is what a user could run instead.
Every case is timed in the same run, the three contenders interleaved
(sigdnn, torch f64, torch f32, repeated), and the median reported, so a
busy machine slows all three alike. Inputs are NCHW-contiguous (torch's own
layout). Target: the geometric mean of sigdnn / torch-f64 at most 1.

Run: python benchmarks/reference_math.py [--repeat 7] [--only SUBSTRING] [--cores N]
(--cores pins the process to its first N cores before NumPy, BLAS and torch
start their threads, e.g. 1 for a single-core comparison on a busy machine.)
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

# Imported in main(), after --cores has pinned the process: OpenBLAS and torch size their thread
# pools from the cores they may use when they load.
np: Any = None
ref: Any = None

# ResNet-50 (v1.5) convolutions at batch 8: name, C, K, H=W, kernel, stride, padding
RESNET50 = [
    ("stem 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 3),
    ("3x3 64->64 @56", 64, 64, 56, 3, 1, 1),
    ("1x1 64->256 @56", 64, 256, 56, 1, 1, 0),
    ("1x1 256->64 @56", 256, 64, 56, 1, 1, 0),
    ("3x3/2 128->128 @56", 128, 128, 56, 3, 2, 1),
    ("1x1/2 256->512 @56", 256, 512, 56, 1, 2, 0),
    ("3x3 256->256 @14", 256, 256, 14, 3, 1, 1),
    ("3x3 512->512 @7", 512, 512, 7, 3, 1, 1),
    ("1x1 2048->512 @7", 2048, 512, 7, 1, 1, 0),
]

Case = tuple[str, Callable[[], object], Callable[[], object], Callable[[], object]]


def conv_cases(torch) -> list[Case]:
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    out = []
    for name, c, k, h, r, s, p in RESNET50:
        x = rng.standard_normal((8, c, h, h))
        w = rng.standard_normal((k, c, r, r))
        o = (h + 2 * p - r) // s + 1
        dy = rng.standard_normal((8, k, o, o))
        args = ((p, p), (p, p), (s, s), (1, 1))
        t64 = [torch.from_numpy(a) for a in (x, w, dy)]
        t32 = [a.float() for a in t64]

        def fprop(t, x=x, w=w, s=s, p=p):
            return F.conv2d(t[0], t[1], stride=s, padding=p)

        def dgrad(t, s=s, p=p):
            return torch.nn.grad.conv2d_input(t[0].shape, t[1], t[2], stride=s, padding=p)

        def wgrad(t, s=s, p=p):
            return torch.nn.grad.conv2d_weight(t[0], t[1].shape, t[2], stride=s, padding=p)

        out += [
            (
                f"conv fprop {name}",
                lambda x=x, w=w, a=args: ref.conv_forward(x, w, *a),
                lambda f=fprop, t=t64: f(t),
                lambda f=fprop, t=t32: f(t),
            ),
            (
                f"conv dgrad {name}",
                lambda dy=dy, w=w, a=args, d=x.shape: ref.conv_dgrad(dy, w, *a, d),
                lambda f=dgrad, t=t64: f(t),
                lambda f=dgrad, t=t32: f(t),
            ),
            (
                f"conv wgrad {name}",
                lambda x=x, dy=dy, a=args, d=w.shape: ref.conv_wgrad(x, dy, *a, d),
                lambda f=wgrad, t=t64: f(t),
                lambda f=wgrad, t=t32: f(t),
            ),
        ]
    return out


def other_cases(torch) -> list[Case]:
    F = torch.nn.functional
    rng = np.random.default_rng(1)
    out: list[Case] = []

    x = rng.standard_normal((8, 256, 56, 56))
    s, b = rng.standard_normal((1, 256, 1, 1)), rng.standard_normal((1, 256, 1, 1))
    rm, rv = np.zeros((1, 256, 1, 1)), np.ones((1, 256, 1, 1))
    t = {
        dt: [torch.from_numpy(a).to(dt) for a in (x, s.ravel(), b.ravel(), rm.ravel(), rv.ravel())]
        for dt in (torch.float64, torch.float32)
    }

    def bn(t):
        return F.batch_norm(t[0], t[3].clone(), t[4].clone(), t[1], t[2], training=True, momentum=0.1, eps=1e-5)

    out.append(
        (
            "batchnorm train 8x256x56x56",
            lambda: ref.batchnorm_train(x, s, b, 1e-5, rm, rv, 0.1),
            lambda: bn(t[torch.float64]),
            lambda: bn(t[torch.float32]),
        )
    )

    x2 = rng.standard_normal((8192, 4096))
    s2, b2 = rng.standard_normal((1, 4096)), rng.standard_normal((1, 4096))
    t2 = {
        dt: [torch.from_numpy(a).to(dt) for a in (x2, s2.ravel(), b2.ravel())] for dt in (torch.float64, torch.float32)
    }
    out.append(
        (
            "layernorm 8192x4096",
            lambda: ref.layernorm(x2, s2, b2, 1e-5, True),
            lambda: F.layer_norm(t2[torch.float64][0], (4096,), *t2[torch.float64][1:], 1e-5),
            lambda: F.layer_norm(t2[torch.float32][0], (4096,), *t2[torch.float32][1:], 1e-5),
        )
    )
    out.append(
        (
            "softmax 8192x4096",
            lambda: ref.softmax(x2, (1,)),
            lambda: torch.softmax(t2[torch.float64][0], -1),
            lambda: torch.softmax(t2[torch.float32][0], -1),
        )
    )

    q, k, v = (rng.standard_normal((1, 8, 1024, 64)) for _ in range(3))
    tq = {dt: [torch.from_numpy(a).to(dt) for a in (q, k, v)] for dt in (torch.float64, torch.float32)}
    out.append(
        (
            "sdpa 1x8x1024x64",
            lambda: ref.sdpa(q, k, v, 0.125),
            lambda: F.scaled_dot_product_attention(*tq[torch.float64]),
            lambda: F.scaled_dot_product_attention(*tq[torch.float32]),
        )
    )
    return out


def extra_cases(torch) -> list[Case]:
    """Backward passes, reported beside the target set (not in its geometric mean)."""
    rng = np.random.default_rng(2)
    out: list[Case] = []
    x = rng.standard_normal((8, 256, 56, 56))
    dy = rng.standard_normal(x.shape)
    s, b = rng.standard_normal((1, 256, 1, 1)), rng.standard_normal((1, 256, 1, 1))
    _, mean, inv, _, _ = ref.batchnorm_train(x, s, b, 1e-5)

    def torch_bn_backward(dt):
        xt = torch.from_numpy(x).to(dt).requires_grad_()
        st, bt = (torch.from_numpy(a.ravel()).to(dt).requires_grad_() for a in (s, b))
        y = torch.nn.functional.batch_norm(xt, None, None, st, bt, training=True)
        g = torch.from_numpy(dy).to(dt)
        return lambda: torch.autograd.grad(y, (xt, st, bt), g, retain_graph=True)

    out.append(
        (
            "batchnorm backward 8x256x56x56",
            lambda: ref.batchnorm_backward(dy, x, s, mean, inv),
            torch_bn_backward(torch.float64),
            torch_bn_backward(torch.float32),
        )
    )

    x2 = rng.standard_normal((8192, 4096))
    dy2 = rng.standard_normal(x2.shape)
    s2, b2 = rng.standard_normal((1, 4096)), rng.standard_normal((1, 4096))
    _, mean2, inv2 = ref.layernorm(x2, s2, b2, 1e-5, True)

    def torch_ln_backward(dt):
        xt = torch.from_numpy(x2).to(dt).requires_grad_()
        st, bt = (torch.from_numpy(a.ravel()).to(dt).requires_grad_() for a in (s2, b2))
        y = torch.nn.functional.layer_norm(xt, (4096,), st, bt, 1e-5)
        g = torch.from_numpy(dy2).to(dt)
        return lambda: torch.autograd.grad(y, (xt, st, bt), g, retain_graph=True)

    out.append(
        (
            "layernorm backward 8192x4096",
            lambda: ref.layernorm_backward(dy2, x2, s2, mean2, inv2),
            torch_ln_backward(torch.float64),
            torch_ln_backward(torch.float32),
        )
    )

    q, k, v, do = (rng.standard_normal((1, 8, 1024, 64)) for _ in range(4))
    o, stats = ref.sdpa(q, k, v, 0.125, generate_stats=True)

    def torch_sdpa_backward(dt):
        tq, tk, tv = (torch.from_numpy(a).to(dt).requires_grad_() for a in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
        g = torch.from_numpy(do).to(dt)
        return lambda: torch.autograd.grad(y, (tq, tk, tv), g, retain_graph=True)

    out.append(
        (
            "sdpa backward 1x8x1024x64",
            lambda: ref.sdpa_backward(q, k, v, o, do, stats, 0.125),
            torch_sdpa_backward(torch.float64),
            torch_sdpa_backward(torch.float32),
        )
    )
    return out


def interleaved_medians(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    for fn in fns:  # warm up (allocator, BLAS threads, caches)
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _load(cores: int | None) -> ModuleType:
    """Pin to the first ``cores`` cores, then import NumPy, the reference math and torch."""
    global np, ref
    if cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    import numpy
    import torch

    from sigdnn.plan_builders.reference import math as reference_math

    np, ref = numpy, reference_math
    return torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--cores", type=int, default=None, help="pin to this many cores first")
    args = parser.parse_args()
    torch = _load(args.cores)

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(cores or 1)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {cores} cores; python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    header = (
        f"| {'case':<40} | {'sigdnn f64':>11} | {'torch f64':>10} | {'torch f32':>10} | {'/ f64':>6} | {'/ f32':>6} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    groups = {"target": conv_cases(torch) + other_cases(torch), "extra": extra_cases(torch)}
    ratios: dict[str, list[float]] = {"target": [], "extra": [], "conv": [], "other": []}
    for group, cases in groups.items():
        for name, mine, t64, t32 in cases:
            if args.only not in name:
                continue
            a, b, c = interleaved_medians([mine, t64, t32], args.repeat)
            ratios[group].append(a / b)
            if group == "target":
                ratios["conv" if name.startswith("conv") else "other"].append(a / b)
            print(
                f"| {name:<40} | {a * 1e3:>9.1f}ms | {b * 1e3:>8.1f}ms | {c * 1e3:>8.1f}ms | {a / b:>6.2f} | {a / c:>6.2f} |",
                flush=True,
            )
    print()
    for key in ("target", "conv", "other", "extra"):
        if ratios[key]:
            print(f"geometric mean sigdnn / torch f64, {key} ({len(ratios[key])} cases): {geomean(ratios[key]):.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
