"""Host overhead of a cached sigdnn torch op against calling the executor directly (target: at most 1.5x).

Both sides run the same prepared plan on the same small torch tensors, so the kernel is identical and the
difference is the torch op's own cost: the torch.library dispatch, the signature lookup of the cached graph
and the allocation of its outputs (the direct call is handed preallocated outputs). Rows: layer_norm (8 x 64),
sdpa (1 x 2 x 16 x 16) and gdn (2 sequences of 8 tokens, 2 heads, K = V = 16), float32, on the reference
backend (``--device cuda``: the GPU backend, whose launches are asynchronous: host time is measured); the
median time per call (process time: other sessions on a shared machine count less; or wall time) over
batches of back-to-back calls, the two sides interleaved batch by batch so a noisy moment hits both.

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

import sigdnn.torch  # noqa: F401 (importing it registers the torch.ops.sigdnn ops)
from sigdnn.torch.cache import _CACHE

TARGET = 1.5
Clock = Callable[[], float]
CLOCKS: dict[str, Clock] = {"process": time.process_time, "wall": time.perf_counter}


def per_call(fn: Callable[[], object], calls: int, clock: Clock) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def compare(name: str, op: Callable[[], tuple], calls: int, batches: int, clock: Clock) -> tuple[float, float]:
    """Median seconds per call: the torch op ``name``, the executor given the same plan with preallocated outputs."""
    outputs = op()  # builds and caches the graph
    cached = next(c for k, c in _CACHE.items() if k[0] == name)
    inputs = cached_inputs[name]
    pack = dict(zip(cached.inputs, inputs)) | dict(zip((output[0] for output in cached.outputs), outputs))

    def direct() -> None:
        cached.executor.execute(cached.plan, pack, to_host=False)

    ours, theirs = [], []
    for _ in range(batches):
        ours.append(per_call(op, calls, clock))
        theirs.append(per_call(direct, calls, clock))
    return statistics.median(ours), statistics.median(theirs)


cached_inputs: dict[str, list[torch.Tensor]] = {}


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
    x, w, b = randn(8, 64), randn(64), randn(64)
    q, k, v = (randn(1, 2, 16, 16) for _ in range(3))
    lq, lk, lv = (randn(16, 2, 16) for _ in range(3))
    gate, beta, cu = -rand(16, 2), rand(16, 2), torch.tensor([0, 8, 16], dtype=torch.int32, device=args.device)
    cached_inputs.update(layer_norm=[x, w, b], sdpa=[q, k, v], gdn=[lq, lk, lv, gate, beta, cu])
    gdn = torch.ops.sigdnn.gdn
    rows = {
        "layer_norm 8x64 f32": ("layer_norm", lambda: torch.ops.sigdnn.layer_norm(x, w, b, 1e-5)),
        "sdpa 1x2x16x16 f32": ("sdpa", lambda: torch.ops.sigdnn.sdpa(q, k, v, 0.25, False)),
        "gdn 2x8 tok h2 d16 f32": ("gdn", lambda: gdn(lq, lk, lv, gate, beta, cu, None, None, False, False)),
    }
    print(f"machine: {platform.machine()}, torch {torch.__version__}; calls {args.calls} x batches {args.batches}; "
          f"{args.clock} time")  # fmt: skip
    print(f"{'op':<24}{'torch op':>12}{'executor':>12}{'ratio':>8}")
    worst = 0.0
    for label, (name, op) in rows.items():
        ours, theirs = compare(name, op, args.calls, args.batches, CLOCKS[args.clock])
        worst = max(worst, ours / theirs)
        print(f"{label:<24}{ours * 1e6:>10.1f}us{theirs * 1e6:>10.1f}us{ours / theirs:>7.2f}x")
    verdict, backend = "met" if worst <= TARGET else "not met", "gpu" if args.device == "cuda" else "reference"
    if args.device == "cuda":
        torch.cuda.synchronize()
    print(f"worst ratio {worst:.2f}x (target <= {TARGET}x: {verdict}); {backend} backend")


if __name__ == "__main__":
    main()
