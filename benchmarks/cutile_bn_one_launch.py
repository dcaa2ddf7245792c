"""Batchnorm training forward as ONE cuTile launch with grid barriers: measured, not adopted.

sigdnn's cuTile batchnorm (NHWC 64x256x56x56 bf16) is three launches: partial
sums, a finalize, the elementwise pass (87.6-88.2 us, 2.33-2.35 TB/s against
#7's 2.5). This experiment asks whether one persistent launch gets there:
each of P blocks sums its tiles (bands a P-tile stride apart, as the partial
pass), stores a partial row, meets the others at a grid barrier (an atomic
counter), C/8 blocks finalize 8 channels each, a second barrier, then every
block runs the elementwise pass over its own tiles last first, the last K of
them kept on chip since they were summed. P must not exceed the blocks the
device holds at once (the occupancy hint, checked offline with
``cutile_offline_norms.compile_one``), or the barrier never opens.

A label names a variant: ``ta16k4p264o2`` (tile rows, kept tiles, blocks,
occupancy hint), then ``w8`` (worker warps), ``ns1`` / ``nl1`` (the elementwise
pass's stores / loads without TMA), ``bar0`` / ``bar1`` (stop after the
statistics / after the first barrier: timing only), ``so1`` (both barriers and
the finalize, no elementwise pass), ``pr1`` (poll the counter with relaxed
atomics, then one acquire), ``pl1`` (poll with an acquire ``ct.load``: hung
on the H200, 8 of 8 variants). Each label runs in its own process under a
timeout, so a hang costs its timeout. On the H200:

    python3 benchmarks/cutile_bn_one_launch.py ta16k0p264o2bar0,ta16k0p264o2bar1,ta16k0p264o2so1,ta16k0p264o2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

ROWS, C, EPS = 64 * 56 * 56, 256, 1e-5


def _probe(poll: str) -> str:
    """An expression reading the barrier counter."""
    if poll == "load":
        order = "memory_order=ct.MemoryOrder.ACQUIRE, memory_scope=ct.MemoryScope.DEVICE"
        return f"ct.reshape(ct.load(sync, index=(0,), shape=(1,), {order}), ())"
    if poll == "relaxed":
        return "ct.atomic_or(sync, 0, 0, memory_order=ct.MemoryOrder.RELAXED)"
    return "ct.atomic_or(sync, 0, 0)"


def _barrier(target: str, poll: str) -> list[str]:
    acquire = ["ct.atomic_or(sync, 0, 0)"] if poll == "relaxed" else []
    return [f"while {_probe(poll)} < {target}:", "    pass", *acquire]


def _finalize(p: int, fk: int, rows: int = 64) -> list[str]:
    """Blocks below C / fk: mean and inv_variance of their fk channels from the P partial rows (float64)."""
    count = float(ROWS)
    body = [
        f"a0 = ct.full(({rows}, {fk}), 0.0, dtype=ct.float64)",
        "a1 = a0",
        f"for row in range({-(-p // rows)}):",
        f"    a0 = a0 + ct.load(p0, index=(row, bid), shape=({rows}, {fk}), padding_mode=ct.PaddingMode.ZERO)",
        f"    a1 = a1 + ct.load(p1, index=(row, bid), shape=({rows}, {fk}), padding_mode=ct.PaddingMode.ZERO)",
        "t0 = ct.sum(a0, axis=0)",
        "t1 = ct.sum(a1, axis=0)",
        f"first = ct.reshape(ct.astype(ct.load(x, index=(0, bid), shape=(1, {fk})), ct.float64), ({fk},))",
        f"mu = first + t0 / {count!r}",
        f"r = 1.0 / ct.sqrt(ct.maximum((t1 - t0 * (t0 / {count!r})) / {count!r}, 0.0) + {EPS!r})",
        "ct.store(mean, index=(bid,), tile=ct.astype(mu, mean.dtype))",
        "ct.store(inv, index=(bid,), tile=ct.astype(r, inv.dtype))",
        f"ct.store(coef, index=(0, bid), tile=ct.reshape(ct.astype(mu, ct.float32), (1, {fk})))",
        f"ct.store(coef, index=(1, bid), tile=ct.reshape(ct.astype(r, ct.float32), (1, {fk})))",
    ]
    return [f"if bid < {C // fk}:", *(f"    {line}" for line in body)]


def source(v: dict) -> str:
    """The kernel text of variant ``v`` (``parse``)."""
    ta, k, p, bars = v["ta"], v["k"], v["p"], v["bar"]
    tiles = ROWS // ta
    assert ROWS % ta == 0 and tiles >= p * (k + 1)
    tile = f"shape=({ta}, {C}), check_bounds=False"
    body = [
        "bid = ct.bid(0)",
        f"n = ({tiles} - bid + {p - 1}) // {p}",
        f"shift = ct.astype(ct.load(x, index=(0, 0), shape=(1, {C})), ct.float32)",
        f"s0 = ct.full(({ta}, {C}), 0.0, dtype=ct.float32)",
        "s1 = s0",
        f"for i in range(n - {k}):",
        f"    d = ct.astype(ct.load(x, index=(i * {p} + bid, 0), {tile}), ct.float32) - shift",
        "    s0 = s0 + d",
        "    s1 = s1 + d * d",
    ]
    for j in range(k):
        body += [
            f"k{j} = ct.load(x, index=((n - {k - j}) * {p} + bid, 0), {tile})",
            f"d = ct.astype(k{j}, ct.float32) - shift",
            "s0 = s0 + d",
            "s1 = s1 + d * d",
        ]
    for q in range(2):
        total = f"ct.sum(ct.astype(s{q}, ct.float64), axis=0)"
        body.append(f"ct.store(p{q}, index=(bid, 0), tile=ct.reshape({total}, (1, {C})))")
    if bars:
        body += ["old = ct.atomic_add(sync, 0, 1)", f"base = old - old % {bars * p}"]
        body += _barrier(f"base + {p}", v["poll"])
    if bars == 2:
        body += [*_finalize(p, 8), "ct.atomic_add(sync, 0, 1)", *_barrier(f"base + {2 * p}", v["poll"])]
    if bars == 2 and not v["stats_only"]:
        vector = f"ct.reshape(ct.astype(ct.load({{}}, index=(0,), shape=({C},)), ct.float32), (1, {C}))"
        store = ", check_bounds=False" + ("" if v["store_tma"] else ", allow_tma=False")
        body += [
            f"mu = ct.load(coef, index=(0, 0), shape=(1, {C}))",
            f"g = ct.load(coef, index=(1, 0), shape=(1, {C})) * {vector.format('scale')}",
            f"b = {vector.format('bias')}",
        ]
        for j in reversed(range(k)):
            out = f"ct.astype((ct.astype(k{j}, ct.float32) - mu) * g + b, y.dtype)"
            body.append(f"ct.store(y, index=((n - {k - j}) * {p} + bid, 0), tile={out}{store})")
        load = "" if v["load_tma"] else ", allow_tma=False"
        body += [
            f"for i in range(n - {k}):",
            f"    at = (n - {k + 1} - i) * {p} + bid",
            f"    xt = ct.astype(ct.load(x, index=(at, 0), {tile}{load}), ct.float32)",
            f"    ct.store(y, index=(at, 0), tile=ct.astype((xt - mu) * g + b, y.dtype){store})",
        ]
    hints = ", ".join(f"{n}={h}" for n, h in (("occupancy", v["o"]), ("num_worker_warps", v["w"])) if h)
    params = "x, y, scale, bias, mean, inv, p0, p1, coef, sync"
    return f"@ct.kernel({hints})\ndef kernel({params}):\n" + "".join(f"    {line}\n" for line in body)


def parse(label: str) -> dict:
    """A label's variant: ``ta16k4p264o2`` and the flags of the module's docstring."""
    d = {key: int(n) for key, n in re.findall(r"([a-z]+)(\d+)", label)}
    poll = "load" if "pl" in d else "relaxed" if "pr" in d else "atomic"
    return {"ta": d.get("ta", 16), "k": d.get("k", 0), "p": d["p"], "o": d.get("o"), "w": d.get("w"), "poll": poll,
            "bar": d.get("bar", 2), "stats_only": "so" in d, "store_tma": "ns" not in d, "load_tma": "nl" not in d}  # fmt: skip


def measure(label: str) -> dict:
    """Run variant ``label``: its outputs against torch in float64, then its time (10 launches back to back)."""
    import cuda.tile as ct
    import torch
    from cuda_timing import median_ms

    v = parse(label)
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "bn_one_launch.py")
    with open(path, "w") as f:
        f.write("import cuda.tile as ct\n" + source(v))
    spec = importlib.util.spec_from_file_location("bn_one_launch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    x = (torch.randn(ROWS, C, device="cuda") * 1.5 + 3.0).to(torch.bfloat16)
    scale, bias = (torch.empty(C, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2) for _ in range(2))
    y, mean, inv = torch.empty_like(x), torch.empty(C, device="cuda"), torch.empty(C, device="cuda")
    p0 = torch.empty(v["p"], C, device="cuda", dtype=torch.float64)
    args = (x, y, scale, bias, mean, inv, p0, torch.empty_like(p0), torch.empty(2, C, device="cuda"),
            torch.zeros(1, device="cuda", dtype=torch.int32))  # fmt: skip
    stream = torch.cuda.current_stream()

    def run() -> None:
        ct.launch(stream, (v["p"],), module.kernel, args)

    run()
    torch.cuda.synchronize()
    xd = x.double()
    mu, r = xd.mean(0), 1 / torch.sqrt(xd.var(0, unbiased=False) + EPS)
    want = (xd - mu) * (r * scale.double()) + bias.double()
    ms = median_ms(run)
    return {"label": label, "us": ms * 1e3, "tb_s": 4 * x.numel() / ms / 1e9,
            "y_error": ((y.double() - want).abs() / (want.abs() + 1e-2)).max().item(),  # bf16: 2^-8 = 0.0039
            "mean_error": ((mean.double() - mu).abs() / mu.abs()).max().item(),
            "inv_error": ((inv.double() - r).abs() / r).max().item()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", help="comma-separated variants")
    parser.add_argument("--timeout", type=int, default=40, help="seconds a variant may take (a hang is killed)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process measuring one label
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.labels)), flush=True)
        return
    for label in args.labels.split(","):
        try:
            child = [sys.executable, __file__, label, "--one"]
            done = subprocess.run(child, capture_output=True, text=True, timeout=args.timeout)
            print(done.stdout.strip() or f"{label}: exit {done.returncode}\n{done.stderr[-2000:]}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{label}: no result in {args.timeout} s (a barrier that never opened?)", flush=True)


if __name__ == "__main__":
    main()
