"""sigdnn's one-launch CuTe batchnorm training forward kernel (kernels/batchnorm_sm90.py) by itself: geometries,
correctness against float64 torch, time against torch.

The kernel keeps x in registers and shared memory across a grid barrier
(its docstring says how). This runs each ``LABELS`` geometry on NHWC
64x256x56x56 bf16 (the shape #7 measures), three times in a row (its
accumulators and barrier must reset themselves), checks mean, inv_variance,
the running statistics and y against float64 torch, then times every
geometry interleaved with torch's ``batch_norm`` and torch's copy of x
(median of 15 samples of 10 runs). On the H200 (CuTe DSL only):

    python3 benchmarks/cute_bn_one_launch.py [LABEL,...]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from bn_reference import bf16_ulps, float64_batchnorm
from cuda_timing import interleaved_samples

from sigdnn.plan_builders.cute.batchnorm import BatchnormSpec
from sigdnn.plan_builders.cute.kernels.batchnorm_launch import BatchnormLaunch

N, C, H, W = 64, 256, 56, 56
ROWS = N * H * W
EPS, MOMENTUM = 1e-5, 0.1
LABELS = {
    f"t{t}r{r}u{u}{'p' if p else ''}": dict(threads=t, registers=r, step=u, policy=p)
    for t, r, u in ((512, 10, 4), (512, 8, 4), (512, 0, 4), (512, 12, 2))
    for p in (False, True)
}  # p: L2 hints through an explicit evict-first policy and non-coherent loads (BatchnormSpec.policy)


def reference(x: torch.Tensor, scale, bias, rm, rv) -> tuple[torch.Tensor, ...]:
    """float64 batchnorm of (rows, C) x: mean, inv_variance, next running mean and variance, y."""
    mu, var, inv, y = float64_batchnorm(x, scale, bias, EPS)
    nrm = (1 - MOMENTUM) * rm.double() + MOMENTUM * mu
    nrv = (1 - MOMENTUM) * rv.double() + MOMENTUM * var * ROWS / (ROWS - 1)
    return mu, inv, nrm, nrv, y


def check(got: list[torch.Tensor], want: tuple[torch.Tensor, ...], bias: torch.Tensor) -> str:
    rel = [((g.double() - w).abs() / w.abs().clamp_min(1e-3)).max().item() for g, w in zip(got[:4], want[:4])]
    return f"mean / inv / running relative {max(rel):.1e}, y within {bf16_ulps(got[4], want[4], bias):.2f} bf16 ulps"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="?", default=",".join(LABELS))
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.empty(ROWS, C, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2) + 0.5
    scale, bias = (torch.empty(C, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2) for _ in range(2))
    rm, rv = torch.rand(C, device="cuda"), torch.rand(C, device="cuda") + 0.5
    want = reference(x, scale, bias, rm, rv)
    y = torch.empty_like(x)
    outs = [torch.empty(C, device="cuda") for _ in range(4)]  # mean, inv, next running mean and variance
    stream = torch.cuda.current_stream().cuda_stream
    table = {}
    for label in args.labels.split(","):
        try:
            spec = BatchnormSpec("bfloat16", C, ROWS, "bfloat16", "float32", True, EPS, MOMENTUM, sms, **LABELS[label])
            launch = BatchnormLaunch(spec)
            ptrs = tuple(t.data_ptr() for t in (x, y, scale, bias, outs[0], outs[1], rm, rv, outs[2], outs[3]))

            def run(launch=launch, ptrs=ptrs) -> None:
                launch(*ptrs, stream)

            for k in range(3):
                y.zero_()
                for t in outs:
                    t.zero_()
                run()
                torch.cuda.synchronize()
                print(f"{label} (kept {spec.kept_registers} + {spec.kept_shared}) run {k}: "
                      f"{check([*outs, y], want, bias)}", flush=True)  # fmt: skip
            table[label] = run
        except Exception as e:  # report every variant
            print(f"{label}: FAILED {type(e).__name__}: {str(e)[:800]}", flush=True)
    xt = x.view(N, H, W, C).permute(0, 3, 1, 2)
    trm, trv = rm.clone(), rv.clone()
    table["torch batch_norm"] = lambda: torch.nn.functional.batch_norm(xt, trm, trv, scale, bias, True, MOMENTUM, EPS)
    table["torch copy of x"] = lambda: y.copy_(x)
    samples = interleaved_samples(table, iters=10, repeats=15)
    print("== median us (min-max), TB/s (x read + y written)", flush=True)
    for name, ms in samples.items():
        times = [t * 1e3 for t in ms]
        us = statistics.median(times)
        print(f"  {name:20s} {us:7.1f} ({min(times):.1f}-{max(times):.1f})  {4 * ROWS * C / us / 1e6:.2f}", flush=True)


if __name__ == "__main__":
    main()
