"""The GPU reference: agreement with the CPU reference, its float64 rates, validation at model size (issue #31).

Parts (``--parts``), each a claim:
- ``agreement``: >= 10,000 random one-node cases of every op and dtype (``gpu_reference.cases``), in ``--workers``
  processes sharing the GPU: counts per op of exact / 1 ulp (and its elements) / beyond / declined / failed; the
  last three must be 0 (1 ulp: float64 sums in another order, the GPU's float64 libm).
- ``gemm``: a float64 matmul node at 4096^3, TFLOP/s against the 67 TFLOP/s float64 tensor-core peak (target 50%).
- ``conv``: its convolution (im2col + float64 GEMM) on ResNet-50 layers at batch 64 (target: within 3x of gemm).
- ``validate``: ``validate(truth="gpu")`` of a ResNet-50 training step (``--batch``) and a Llama layer's forward +
  backward (d 4096, ``--seq``), seconds (target <= 30 s each); ``--cpu-truth``: judged by the CPU reference too.

    PYTHONPATH=. python benchmarks/gpu_reference.py --workers 8 --out gpu_reference.md
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import multiprocessing
import time
from typing import Any

import numpy as np

PARTS = ("agreement", "gemm", "conv", "validate")
FP64_TENSOR_PEAK_TFLOPS = 67.0
COLUMNS = {"exact": "exact", "1 ulp": "at 1 ulp", "1-ulp elements": "1-ulp elements", "beyond": "beyond 1 ulp",
           "declined": "declined", "failed": "failed"}  # agreement's counts per op: their headings  # fmt: skip


def agreement_counts(cases_wanted: int, size: int, seed: int, seconds: float) -> tuple[dict, dict[str, str]]:
    """Random cases round-robin over ops and dtypes until ``cases_wanted`` ran or ``seconds`` passed: counts per op,
    and each op's first case beyond 1 ulp or failing named (its seed and generator index, to rerun it)."""
    import sigdnn
    from sigdnn.errors import GraphError, NoPlanError
    from sigdnn.plan_builders.gpu_reference import cases
    from sigdnn.plan_builders.gpu_reference.agreement import agreement_ulps
    from sigdnn.validation import random_inputs

    gpu, cpu, rng = sigdnn.Executor("gpu-reference"), sigdnn.Executor("reference"), np.random.default_rng(seed)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    draws = [(op, dtype) for op in sorted(cases.BUILDERS) for dtype in cases.dtypes_of(op)]
    started, ran, i = time.perf_counter(), 0, 0
    firsts: dict[str, str] = {}
    while ran < cases_wanted and time.perf_counter() - started < seconds:
        op, dtype = draws[i % len(draws)]
        i += 1
        try:
            graph = cases.random_case(op, rng, dtype, size)
        except GraphError:
            continue
        inputs = random_inputs(graph, i)
        try:
            got = gpu.execute(gpu.prepare(graph), inputs)
        except NoPlanError:
            counts[op]["declined"], ran = counts[op]["declined"] + 1, ran + 1
            continue
        except Exception as e:  # a campaign counts a failing case and goes on
            counts[op]["failed"], ran = counts[op]["failed"] + 1, ran + 1
            firsts.setdefault(op, f"{op} {dtype} seed {seed} case {i}: {type(e).__name__}: {str(e)[:200]}")
            continue
        want = cpu.execute(cpu.prepare(graph), inputs)
        worst, ones = 0, 0
        for name in want:
            u = agreement_ulps(np.asarray(got[name]), want[name])
            worst, ones = max(worst, int(u.max(initial=0))), ones + int((u == 1).sum())
        counts[op]["exact" if worst == 0 else "1 ulp" if worst == 1 else "beyond"] += 1
        counts[op]["1-ulp elements"], ran = counts[op]["1-ulp elements"] + ones, ran + 1
        if worst > 1:
            firsts.setdefault(op, f"{op} {dtype} seed {seed} case {i}: {worst} ulps")
    return dict(counts), firsts


def agreement(cases_wanted: int, size: int, seed: int, seconds: float, workers: int) -> list[str]:
    """``agreement_counts`` in ``workers`` processes (seeds seed, seed + 1, ...; the GPU shared), merged."""
    started, share = time.perf_counter(), -(-cases_wanted // workers)
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(agreement_counts, *zip(*[(share, size, seed + w, seconds) for w in range(workers)])))
    counts = {op: sum((r[0].get(op, collections.Counter()) for r in runs), collections.Counter())
              for op in sorted({op for r in runs for op in r[0]})}  # fmt: skip
    total = sum(counts.values(), collections.Counter())
    ran = sum(total[k] for k in COLUMNS if k != "1-ulp elements")
    head = f"{ran} cases in {time.perf_counter() - started:.0f} s ({workers} processes, size {size}, seed {seed}..)"
    lines = [head, "", "| op | " + " | ".join(COLUMNS.values()) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    for op, c in [*counts.items(), ("all", total)]:
        lines.append(f"| {op} | " + " | ".join(str(c[k]) for k in COLUMNS) + " |")
    return lines + [""] + [f"- {line}" for _, firsts in runs for line in firsts.values()]


def _seconds(graph: Any) -> float:
    """Median seconds of one execute on the GPU reference: inputs on the device in the graph's strides (NHWC convs,
    which a plan is made for), outputs left there."""
    import torch

    import sigdnn
    from benchmarks.cuda_timing import median_ms
    from sigdnn.validation import random_inputs

    strides, ex = {t.name: t.strides for t in graph.inputs}, sigdnn.Executor("gpu-reference")
    host = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in random_inputs(graph, 0).items()}
    inputs = {
        k: torch.empty_strided(v.shape, strides[k], dtype=v.dtype, device="cuda").copy_(v) for k, v in host.items()
    }
    plan = ex.prepare(graph)
    return median_ms(lambda: ex.execute(plan, inputs, to_host=False), iters=1, repeats=5) / 1e3


def gemm(n: int) -> list[str]:
    import sigdnn

    g = sigdnn.Graph("gemm", io_dtype="float64", compute_dtype="float64")
    g.matmul(g.tensor("a", (n, n)), g.tensor("b", (n, n)), name="mm").set_output(True).set_name("c")
    tflops = 2 * n**3 / (seconds := _seconds(g)) / 1e12
    return [f"float64 GEMM {n}^3: {seconds * 1e3:.1f} ms, {tflops:.1f} TFLOP/s = "
            f"{tflops / FP64_TENSOR_PEAK_TFLOPS:.0%} of the {FP64_TENSOR_PEAK_TFLOPS:.0f} TFLOP/s peak (target >= 50%)"]  # fmt: skip


def conv(batch: int) -> list[str]:
    import sigdnn
    from benchmarks.gpu_cute import RESNET50_LAYERS

    lines = ["| layer | ms | TFLOP/s |", "|---|---|---|"]
    for name, (c, hw, k, r, stride) in RESNET50_LAYERS.items():
        g = sigdnn.Graph(name, io_dtype="float64", compute_dtype="float64")
        x, w = g.tensor("x", (batch, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, r, r), layout="NHWC")
        y = g.conv_fprop(x, w, padding=(r // 2, r // 2), stride=(stride, stride), dilation=(1, 1), name="conv")
        y.set_output(True)
        seconds = _seconds(g)
        lines.append(f"| {name} | {seconds * 1e3:.1f} | {2 * y.size * c * r * r / seconds / 1e12:.1f} |")
        print(lines[-1], flush=True)  # a layer at a time: a run that dies names the last layer done
    return lines


def validate_models(batch: int, seq: int, cpu_truth: bool) -> list[str]:
    import sigdnn.validation  # (binds sigdnn too)
    from sigdnn.models import llama_layer, resnet50_training

    lines = ["| graph | truth | seconds | verdict |", "|---|---|---|---|"]
    for label, graph in ((f"ResNet-50 training step, batch {batch}", resnet50_training(batch)),
                         (f"Llama layer fwd + bwd, d 4096, seq {seq}", llama_layer(seq=seq, backward=True))):  # fmt: skip
        inputs = sigdnn.validation.initialized_inputs(graph)  # one draw serves every run (it is not validation's time)
        for run in ("gpu", "gpu, again", "cpu") if cpu_truth else ("gpu", "gpu, again"):
            started, executor = time.perf_counter(), sigdnn.Executor("gpu", fallback="reference")
            report = sigdnn.validate(graph, inputs, executor=executor, truth=run[:3])
            lines.append(f"| {label} | {run} | {time.perf_counter() - started:.1f} | {report.verdict} |")
            print("\n".join([lines[-1], *report.details()]), flush=True)  # a failure names its tensors
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--cases", type=int, default=10_000, help="agreement: cases to run (default 10,000)")
    parser.add_argument("--seconds", type=float, default=1e9, help="agreement: stop after this long")
    parser.add_argument("--size", type=int, default=8, help="agreement: extent scale of the random cases")
    parser.add_argument("--seed", type=int, default=0, help="agreement: the case generator's seed")
    parser.add_argument("--workers", type=int, default=1, help="agreement: processes sharing the GPU (seed + i each)")
    parser.add_argument("--gemm-n", type=int, default=4096, help="gemm: M = N = K (default 4096)")
    parser.add_argument("--batch", type=int, default=64, help="conv / validate: ResNet-50 batch (default 64)")
    parser.add_argument("--seq", type=int, default=4096, help="validate: the Llama layer's sequence length")
    parser.add_argument("--cpu-truth", action="store_true", help="validate: also judge by the CPU reference")
    parser.add_argument("--out", help="also write the results (markdown) to this file")
    args = parser.parse_args()
    lines = [f"# GPU reference ({time.strftime('%Y-%m-%d')})", "", f"command: {' '.join(__import__('sys').argv)}"]
    for part in args.parts:
        shown, lines = len(lines), [*lines, "", f"## {part}", "", *{"agreement": lambda: agreement(args.cases, args.size, args.seed, args.seconds, args.workers),
                  "gemm": lambda: gemm(args.gemm_n), "conv": lambda: conv(args.batch),
                  "validate": lambda: validate_models(args.batch, args.seq, args.cpu_truth)}[part]()]  # fmt: skip
        print("\n".join(lines[shown:]), flush=True)  # the whole part: a log keeps every row
        if args.out:  # after every part: a run cut short keeps what it measured
            with open(args.out, "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
