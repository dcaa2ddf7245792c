"""Host overhead of a cached sigdnn torch op against calling the executor directly (target: at most 1.5x).

Each row runs one prepared plan three ways on the same small torch tensors (the kernel identical, the difference
the op's own cost): ``torch.ops`` calls ``torch.ops.sigdnn.<op>`` (torch's dispatcher, the op's Autograd kernel,
its Python CPU / CUDA kernel: the cached graph's lookup, its outputs' allocation); ``entry`` the op's Python entry
(``sigdnn.torch.ops.layer_norm`` / ``ops.sdpa`` / ``delta_rule.gdn``), which skips the dispatcher here
(sigdnn/torch/eager.py); ``executor`` the executor on the plan with preallocated outputs. Rows: layer_norm (8 x
64), sdpa (1 x 2 x 16 x 16), gdn (2 sequences of 8 tokens, 2 heads, K = V = 16), float32, no gradient, on the
reference backend (``--device cuda``: the GPU backend's host time); the median per call (process time, or wall
time) over batches of back-to-back calls, the three interleaved batch by batch so a noisy moment hits all.

Run: PYTHONPATH=. python benchmarks/torch_ops.py [--calls 400] [--batches 15] [--device cuda] [--clock wall]
"""

from __future__ import annotations

import argparse
import functools
import platform
import statistics
import time
from collections.abc import Callable

import torch

from sigdnn.torch import delta_rule, ops
from sigdnn.torch.cache import _CACHE

TARGET = 1.5
Clock = Callable[[], float]
CLOCKS: dict[str, Clock] = {"process": time.process_time, "wall": time.perf_counter}


def per_call(fn: Callable[[], object], calls: int, clock: Clock) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def compare(name: str, entry: Callable, args: tuple, calls: int, batches: int, clock: Clock) -> list[float]:
    """Median seconds per call: the torch op ``name``, its Python ``entry``, the executor given the same plan
    with preallocated outputs."""
    op = getattr(torch.ops.sigdnn, name)
    outputs = op(*args)  # builds and caches the graph
    cached = next(c for k, c in _CACHE.items() if k[0] == name)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    pack = dict(zip(cached.inputs, tensors)) | dict(zip((output[0] for output in cached.outputs), outputs))
    sides = (lambda: op(*args), lambda: entry(*args), lambda: cached.executor.execute(cached.plan, pack, to_host=False))
    times: list[list[float]] = [[] for _ in sides]
    for _ in range(batches):
        for side, fn in zip(times, sides):
            side.append(per_call(fn, calls, clock))
    return [statistics.median(side) for side in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--clock", default="process", choices=tuple(CLOCKS),
                        help="process CPU time (default; on a GPU machine it also counts the driver's threads) or wall time")  # fmt: skip
    args = parser.parse_args()
    torch.manual_seed(0)  # tensors made on the device, not by torch.set_default_device: its mode taxes each torch call
    randn, rand = (functools.partial(draw, device=args.device) for draw in (torch.randn, torch.rand))
    q, k, v = (randn(1, 2, 16, 16) for _ in range(3))
    lq, lk, lv = (randn(16, 2, 16) for _ in range(3))
    gate, beta, cu = -rand(16, 2), rand(16, 2), torch.tensor([0, 8, 16], dtype=torch.int32, device=args.device)
    rows = {
        "layer_norm 8x64 f32": ("layer_norm", ops.layer_norm, (randn(8, 64), randn(64), randn(64), 1e-5)),
        "sdpa 1x2x16x16 f32": ("sdpa", ops.sdpa, (q, k, v, 0.25, False)),
        "gdn 2x8 tok h2 d16 f32": ("gdn", delta_rule.gdn, (lq, lk, lv, gate, beta, cu, None, None, False, False)),
    }
    print(f"machine: {platform.machine()}, torch {torch.__version__}; calls {args.calls} x batches {args.batches}; "
          f"{args.clock} time")  # fmt: skip
    print(f"{'op':<24}{'torch.ops':>11}{'entry':>11}{'executor':>11}{'ratios (torch.ops, entry)':>27}")
    worst = [0.0, 0.0]
    for label, (name, entry, inputs) in rows.items():
        op, mine, direct = compare(name, entry, inputs, args.calls, args.batches, CLOCKS[args.clock])
        worst = [max(w, t / direct) for w, t in zip(worst, (op, mine))]
        print(f"{label:<24}" + "".join(f"{t * 1e6:>9.1f}us" for t in (op, mine, direct)) +
              f"{op / direct:>19.2f}x{mine / direct:>7.2f}x")  # fmt: skip
    if args.device == "cuda":
        torch.cuda.synchronize()
    verdict = ", ".join(
        f"{path} {w:.2f}x ({'met' if w <= TARGET else 'not met'})" for path, w in zip(("torch.ops", "entry"), worst)
    )
    print(f"worst ratio (target <= {TARGET}x): {verdict}; {'gpu' if args.device == 'cuda' else 'reference'} backend")


if __name__ == "__main__":
    main()
