"""Batchnorm training forward with CuTe DSL kernels in place of cuTile's: each pass, or the node in one launch.

cuTile's batchnorm (NHWC 64x256x56x56 bf16) reads x at 3.5 TB/s in its
statistics pass (a CUDA C kernel reads it at 4.15) and writes y at torch's
copy rate; #7 asks 2.5 TB/s for the node (82.2 us), cuTile's reaches 2.38.
The kernels (``cute_bn_kernels.py``) are plain 16-byte loads, several in
flight a thread. Against cuTile's node, in one run:

* ``STATS``: the CuTe partial-sum pass, then cuTile's finalize and
  elementwise pass; ``APPLY``: cuTile's first two launches, then the CuTe
  elementwise pass; every pairing of the two;
* ``ONE_PASS``: the whole node in one cooperative launch (x kept in shared
  memory where it fits, a grid barrier), run twice to check that its
  accumulator and counters come back to zero; ``TRACED``: the same with
  each block's phase ends recorded (globaltimer).

Each variant's outputs are compared with cuTile's node, then the kernels
alone and the node are timed interleaved (median of 15 samples of 10
runs). On the H200 (CuTe DSL and cuTile both installed):

    python3 benchmarks/cute_bn_train.py [--stats LABELS] [--apply LABELS] [--one-pass LABELS]
"""

from __future__ import annotations

import argparse

import attrs
import torch
from cute_bn_kernels import (
    ChannelGeometry,
    DerivedSpec,
    OnePassSpec,
    compiled_apply,
    compiled_derived,
    compiled_one_pass,
    compiled_stats,
    compiled_stats_atomics,
)
from cutile_bn_stats_pass import NODE_BYTES, ROWS, X_BYTES, C, Node, launcher, timed

from sigdnn.plan_builders.cute.kernels.launch import PackedLaunch, int32_cells

STATS = {
    f"s{b}t{t}u{u}": ChannelGeometry("bfloat16", C, b, t, u)
    for b, t, u in ((528, 256, 4), (528, 256, 8), (264, 256, 8), (132, 1024, 4), (396, 256, 8), (264, 512, 4))
}
APPLY = {
    f"a{b}t{t}u{u}": ChannelGeometry("bfloat16", C, b, t, u)
    for b, t, u in ((528, 256, 4), (528, 256, 8), (1056, 256, 4), (264, 512, 8), (792, 256, 4), (1056, 256, 2))
}

ONE_PASS = {
    f"one{b}t{t}u{u}c{k}": OnePassSpec(
        "bfloat16", C, "bfloat16", "float32", True, 1e-5, 0.1, b, threads=t, unroll=u, cache_bytes=k * 1024, fold=f
    )
    for b, t, u, k, f in ((132, 512, 8, 200, 4), (132, 512, 16, 200, 4), (132, 1024, 8, 200, 8), (132, 512, 8, 8, 4))
}
TRACED = {f"trace{name[3:]}": attrs.evolve(spec, trace=True) for name, spec in ONE_PASS.items()}
PHASES = {1: "statistics read", 5: "sums added", 2: "barrier passed", 3: "uncached y", 4: "cached y"}


NODE_PORTS = ("x", "y", "scale", "bias", "mean", "inv", "rm", "rv", "nrm", "nrv")  # the CuTe node kernels' pointers


def _ptr(a) -> int:
    """A torch tensor's or a DeviceArray's address."""
    return a.data_ptr() if isinstance(a, torch.Tensor) else a.ptr


TWO_LAUNCH = {
    f"two{t}u{u}{'pdl' if pdl else ''}": DerivedSpec(
        ChannelGeometry("bfloat16", C, 1, t, u), "bfloat16", "float32", True, 1e-5, 0.1, pdl
    )
    for t, u in ((512, 4), (512, 8), (256, 8), (256, 4))
    for pdl in (False, True)
}


def stateful_check(name: str, node: Node, run, stats_out: list[torch.Tensor], state: torch.Tensor) -> None:
    """Run twice: the per-channel outputs and y against cuTile's node, and the accumulator and counters left."""
    for k in range(2):
        node.y.zero_()
        run()
        torch.cuda.synchronize()
        got = dict(zip(("mean", "inv", "nrm", "nrv"), stats_out, strict=True))
        want = dict(zip(("mean", "inv", "nrm", "nrv"), (node.want[i] for i in (0, 1, 6, 7)), strict=True))
        rel = {key: ((got[key].double() - want[key].double()).abs() / want[key].double().abs().clamp_min(1e-30))
               .max().item() for key in got}  # fmt: skip
        dy = (node.y.float() - node.want_y.float()).abs().max().item()
        left = state[: 2 * C].abs().max().item(), state[2 * C :].view(torch.int32).tolist()
        print(f"{name} run {k}: relative differences {rel}, largest |y| difference {dy}, state left {left}", flush=True)


def two_launches(node: Node, names: list[str], ptrs: dict[str, int], stats_out: list[torch.Tensor]) -> None:
    """The CuTe partial pass adding into a (2, C) accumulator, then an elementwise pass deriving the coefficients
    (a programmatic dependent launch with ``pdl``), on a side stream against cuTile's node re-pointed there."""
    side = torch.cuda.Stream()
    handle = side.cuda_stream
    table = {"cutile": launcher([(handle, *c[1:]) for c in node.calls])}
    g = STATS["s264t512u4"]
    for name in names:
        try:
            spec = TWO_LAUNCH[name]
            state = torch.zeros(2 * C + 2, device="cuda", dtype=torch.float64)
            stats = PackedLaunch(compiled_stats_atomics(g, spec.pdl), 3, int32_cells(ROWS), f"{name} statistics")
            apply = PackedLaunch(compiled_derived(spec), 12, int32_cells(ROWS), f"{name} elementwise")
            acc, count = state.data_ptr(), state.data_ptr() + 16 * C
            apply_ptrs = (*(ptrs[k] for k in NODE_PORTS), acc, count)

            def run(stats=stats, apply=apply, acc=acc, apply_ptrs=apply_ptrs) -> None:
                stats((ptrs["x"], acc, acc), handle)
                apply(apply_ptrs, handle)

            with torch.cuda.stream(side):
                stateful_check(name, node, run, stats_out, state)
            table[name] = run
        except Exception as e:  # report every variant
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:600]}", flush=True)
    with torch.cuda.stream(side):
        timed(table, "two launches on a side stream (rate: x read + y written)", NODE_BYTES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stats", default=",".join(STATS))
    parser.add_argument("--apply", default=",".join(APPLY))
    parser.add_argument("--one-pass", default=",".join([*ONE_PASS, *TRACED]))
    parser.add_argument("--two-launch", default=",".join(TWO_LAUNCH))
    args = parser.parse_args()
    node = Node()
    stream = node.calls[0][0]
    handle = int(getattr(stream, "handle", stream))
    x = node.calls[0][3][0]
    final = node.calls[1]
    _, wmean, winv, scale, bias, _ = node.calls[2][3]
    apply_ptrs = tuple(_ptr(a) for a in (x, wmean, winv, scale, bias, node.y))
    stats_out = [torch.zeros(C, device="cuda", dtype=torch.float32) for _ in range(4)]  # mean, inv, nrm, nrv
    rm, rv = node.vectors[4], node.vectors[5]
    ptrs = dict(zip(NODE_PORTS, map(_ptr, (x, node.y, scale, bias, stats_out[0], stats_out[1], rm, rv,
                                           stats_out[2], stats_out[3])), strict=True))  # fmt: skip

    def cute_stats(name: str):
        g = STATS[name]
        p = [torch.zeros((g.blocks, C), device="cuda", dtype=torch.float64) for _ in range(2)]
        launch = PackedLaunch(compiled_stats(g), 3, int32_cells(ROWS), name)
        fin = (final[0], final[1], final[2], (x, *p, *node.final_args[3:]))
        return (lambda: launch((ptrs["x"], _ptr(p[0]), _ptr(p[1])), handle)), launcher([fin])

    def cute_apply(name: str):
        launch = PackedLaunch(compiled_apply(APPLY[name], "bfloat16"), 6, int32_cells(ROWS), name)
        return lambda: launch(apply_ptrs, handle)

    cutile = [launcher([c]) for c in node.calls]
    alone, whole, applied = {"cutile": cutile[0]}, {"cutile": launcher(node.calls)}, {"cutile": cutile[2]}

    def check(name: str, steps) -> None:
        def run() -> None:
            for step in steps:
                step()

        print(f"{name}: {node.check(run)}", flush=True)
        whole[name] = run

    with node.stream():
        for name in filter(None, args.stats.split(",")):
            try:
                stats, fin = cute_stats(name)
                check(name, [stats, fin, cutile[2]])
                alone[name] = stats
            except Exception as e:  # report every variant
                print(f"{name}: FAILED {type(e).__name__}: {str(e)[:400]}", flush=True)
        for name in filter(None, args.apply.split(",")):
            try:
                applied[name] = cute_apply(name)
                check(name, [cutile[0], cutile[1], applied[name]])
            except Exception as e:  # report every variant
                print(f"{name}: FAILED {type(e).__name__}: {str(e)[:400]}", flush=True)
        for s in filter(None, args.stats.split(",")):
            for a in filter(None, args.apply.split(",")):
                if s in alone and a in whole:
                    stats, fin = cute_stats(s)
                    check(f"{s}+{a}", [stats, fin, cute_apply(a)])
        for name in filter(None, args.one_pass.split(",")):
            try:
                spec = {**ONE_PASS, **TRACED}[name]
                state = torch.zeros(2 * C + 2, device="cuda", dtype=torch.float64)
                launch = PackedLaunch(compiled_one_pass(spec), 13, int32_cells(ROWS), name)
                trace = torch.zeros((spec.blocks, 8), device="cuda", dtype=torch.int64)
                cells = (*(ptrs[k] for k in NODE_PORTS), _ptr(state), _ptr(state) + 16 * C, _ptr(trace))
                one = lambda launch=launch, cells=cells: launch(cells, handle)  # noqa: E731
                stateful_check(name, node, one, stats_out, state)
                if spec.trace:
                    t = trace.cpu().double()
                    start = t[:, 0].min()
                    print(f"{name}: us from the first block's start, per phase end (min / median / max over blocks):")
                    for k, phase in PHASES.items():
                        e = (t[:, k] - start) / 1e3
                        print(f"  {phase:22s} {e.min():7.1f} {e.median():7.1f} {e.max():7.1f}", flush=True)
                    continue
                whole[name] = one
            except Exception as e:  # report every variant
                print(f"{name}: FAILED {type(e).__name__}: {str(e)[:600]}", flush=True)
        two_launches(node, list(filter(None, args.two_launch.split(","))), ptrs, stats_out)
        timed(alone, "statistics kernel alone (rate: x read)", X_BYTES)
        timed(applied, "elementwise kernel alone (rate: x read + y written)", NODE_BYTES)
        timed(whole, "node in sequence (rate: x read + y written)", NODE_BYTES)


if __name__ == "__main__":
    main()
