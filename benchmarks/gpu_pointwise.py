"""cuTile pointwise add / relu against torch on large tensors, same run, same stream.

Times each with CUDA events after a warm-up (median of several repeats of a
batch of launches), checks the cuTile result against torch's, and reports
time, ratio to torch, and GB/s against a device-to-device copy measured in
the same run (the memory roofline: bytes read + bytes written).

    PYTHONPATH=. python benchmarks/gpu_pointwise.py --log2n 28 --json $OUT/pointwise.json

Needs torch with CUDA, cuda.core and cuda.tile; writes nothing but stdout and
the optional JSON file. Record results under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from sigdnn.plan_builders.cutile.pointwise import prepare
from sigdnn.runtime.cuda import GpuContext

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def time_ms(fn: Callable[[], None], iters: int, repeats: int) -> float:
    """Median per-call milliseconds of ``iters`` back-to-back calls, ``repeats`` times."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def host_us(fn: Callable[[], None], n: int) -> float:
    """Host microseconds per call of a tiny launch (queue stays short: sync every 100)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        fn()
        if i % 100 == 99:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def copy_roofline(nbytes: int, iters: int, repeats: int) -> tuple[float, float]:
    """(ms, GB/s) of a device-to-device copy of ``nbytes``, counting read + write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), iters, repeats)
    return ms, 2 * nbytes / ms / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=28)
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--ops", default="add,relu")
    ap.add_argument("--tiles", default="1024,2048,4096,8192,16384")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    n = 1 << args.log2n
    tiles = [int(t) for t in args.tiles.split(",")]
    ctx = GpuContext(0)
    stream = torch.cuda.current_stream().cuda_stream  # cuTile and torch share it
    gpu = torch.cuda.get_device_name()
    print(f"# {gpu}, n = 2^{args.log2n} = {n}, torch {torch.__version__}", flush=True)

    copy_ms, roof = copy_roofline(4 * n, args.iters, args.repeats)
    print(f"copy roofline: {roof:.0f} GB/s ({copy_ms:.3f} ms for 2 x {n >> 18} MiB)", flush=True)

    rows = []
    for dname in args.dtypes.split(","):
        tdt = TORCH_DTYPES[dname]
        a = torch.randn(n, device="cuda", dtype=tdt)
        b = torch.randn(n, device="cuda", dtype=tdt)
        c_ref = torch.empty_like(a)
        c = torch.empty_like(a)
        da, db, dc = ctx.wrap(a), ctx.wrap(b), ctx.wrap(c)
        for op in args.ops.split(","):
            if op == "add":
                mode, ins, nbytes = "add", [da, db], 3 * n * a.element_size()

                def torch_fn(a=a, b=b, c_ref=c_ref) -> None:
                    torch.add(a, b, out=c_ref)
            else:
                mode, ins, nbytes = "relu_fwd", [da], 2 * n * a.element_size()

                def torch_fn(a=a, c_ref=c_ref) -> None:
                    torch.clamp_min(a, 0, out=c_ref)

            t_torch = time_ms(torch_fn, args.iters, args.repeats)
            for tile in tiles:
                t0 = time.perf_counter()
                launch = prepare(mode, ins, dc, tile=tile)
                c.fill_(float("nan"))
                launch(ins, dc, stream)
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                torch_fn()
                torch.cuda.synchronize()
                exact = bool(torch.equal(c, c_ref))

                def cutile_fn(launch=launch, ins=ins, dc=dc) -> None:
                    launch(ins, dc, stream)

                t = time_ms(cutile_fn, args.iters, args.repeats)
                gbs = nbytes / t / 1e6
                row = {
                    "dtype": dname,
                    "op": op,
                    "tile": tile,
                    "cutile_ms": t,
                    "torch_ms": t_torch,
                    "ratio_to_torch": t / t_torch,
                    "cutile_GBps": gbs,
                    "torch_GBps": nbytes / t_torch / 1e6,
                    "of_copy_roofline": gbs / roof,
                    "equal_to_torch": exact,
                    "first_launch_s": first_s,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
        del a, b, c, c_ref, da, db, dc
        torch.cuda.empty_cache()

    small = torch.randn(4096, device="cuda")
    out = torch.empty_like(small)
    ds, do = ctx.wrap(small), ctx.wrap(out)
    launch = prepare("add", [ds, ds], do)
    us_cutile = host_us(lambda: launch([ds, ds], do, stream), 5000)
    us_torch = host_us(lambda: torch.add(small, small, out=out), 5000)
    import cuda.tile as ct

    raw_args = (ds.flat(), ds.flat(), do.flat(), *launch.consts)
    us_raw = host_us(lambda: ct.launch(stream, launch.grid, launch.kernel, raw_args), 5000)
    overhead = {
        "cutile_host_us_per_launch": us_cutile,
        "ct_launch_prebuilt_args_us": us_raw,
        "torch_host_us_per_add": us_torch,
    }
    print(json.dumps(overhead), flush=True)

    print("\n| dtype | op | tile | cuTile ms | torch ms | ratio | cuTile GB/s | torch GB/s | % copy | == torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dtype']} | {r['op']} | {r['tile']} | {r['cutile_ms']:.3f} | {r['torch_ms']:.3f} | "
            f"{r['ratio_to_torch']:.3f} | {r['cutile_GBps']:.0f} | {r['torch_GBps']:.0f} | "
            f"{100 * r['of_copy_roofline']:.1f} | {r['equal_to_torch']} |"
        )
    print(
        f"\ncopy roofline {roof:.0f} GB/s; host cost per launch: cuTile plan {us_cutile:.1f} us "
        f"(bare ct.launch {us_raw:.1f} us), torch.add {us_torch:.1f} us"
    )
    if args.json:
        args.json.write_text(json.dumps({"gpu": gpu, "n": n, "copy_GBps": roof, "rows": rows, **overhead}, indent=1))


if __name__ == "__main__":
    main()
