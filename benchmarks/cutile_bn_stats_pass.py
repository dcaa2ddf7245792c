"""Batchnorm training forward's statistics pass and finalize in cuTile: variants against sigdnn's own kernels.

sigdnn's cuTile batchnorm (NHWC 64x256x56x56 bf16) runs three launches: a
persistent partial-sum pass reading x through TMA, a finalize (about 5 us in
sequence) and the elementwise pass (about 54 us alone). When this was
written the partial pass ran in 262 blocks, 2 a SM, with cuTile's 5 TMA
stages (30-31 us, 3.3-3.4 TB/s; ``Variant``'s defaults), and #7 asks 2.5
TB/s (82.2 us) where the node ran 88 us. A CUDA C read kernel reads the same
x at 4.15 TB/s (``read_roofline.py``), so this asks whether another cuTile
statistics pass, or a finalize folded into it, gets closer. Each variant
(``LABELS``) replaces the node's first one or two launches; the elementwise
pass stays sigdnn's:

* persistent TMA geometry: more pipeline stages (cuTile's ``latency`` hint
  sets them: 5 by default, 10-12 at 6-10), 132 or 198 blocks, each block
  reading one contiguous chunk instead of bands, 8-row tiles at occupancy 4;
* register prefetch: loads without TMA, the next ``prefetch`` tiles loaded
  before the current one is summed (tileiras then keeps 4-7 tiles in flight
  a thread);
* one tile a block (not persistent), float32 partial rows, a finalize over
  their 1568-12544 rows;
* partials transposed to (C, S) so the finalize reads contiguous rows;
* the finalize folded into the statistics pass: float64 atomics into a
  (2, C) accumulator, a ticket counter, and the last block to arrive
  finalizes and zeroes both (``+memset``: zeroed before every run instead).

The fastest here, ``blocks132stages10``, became sigdnn's default
(gpu_cutile_2026-12-02b.md), so later runs compare against it.

Per variant: its per-channel outputs and y against sigdnn's own (relative
error, largest |y| difference), then the median of 15 samples of 10 runs
back to back, interleaved with sigdnn's kernels, for the statistics kernel
alone and for the whole node in sequence. On the H200:

    python3 benchmarks/cutile_bn_stats_pass.py [LABEL,...]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import attrs
import gpu_cutile as gc
import torch
from cuda_timing import interleaved_samples

import sigdnn
from sigdnn.plan_builders.cutile.kernels import CUTILE
from sigdnn.plan_builders.cutile.source import KernelSource

ROWS, C = 64 * 56 * 56, 256
COUNT, EPS, MOMENTUM = float(ROWS), 1e-5, 0.1  # as gpu_cutile's batchnorm graph
X_BYTES, NODE_BYTES = 2 * ROWS * C, 4 * ROWS * C
ZERO = "padding_mode=ct.PaddingMode.ZERO"
RELAXED = "memory_order=ct.MemoryOrder.RELAXED"


@attrs.frozen
class Variant:
    """A statistics pass over (rows, C) tiles of x and where its sums go."""

    rows: int = 16
    occupancy: int | None = 2
    warps: int | None = None
    splits: int = 262  # persistent blocks; 0: one tile a block
    order: str = "bands"  # persistent blocks read tiles sp, sp + splits, ... ("bands") or one run each ("chunks")
    prefetch: int = 0  # tiles loaded ahead without TMA (0: as sigdnn, TMA pipelined by cuTile)
    tma: bool = True
    latency: int | None = None
    sums: str = "rows"  # partials: float64 (S, C) "rows", (C, S) "columns", float32 "rows32", or "atomics"
    final_tile: int = 8  # channels a finalize block (columns and rows32)

    @property
    def blocks(self) -> int:
        return self.splits or ROWS // self.rows


def _load(index: str, v: Variant) -> str:
    hints = ("" if v.tma and not v.prefetch else ", allow_tma=False") + (f", latency={v.latency}" if v.latency else "")
    return f"ct.load(x, index=({index}, 0), shape=({v.rows}, {C}), check_bounds=False{hints})"


def _add(tile: str) -> list[str]:
    return [f"d = ct.astype({tile}, ct.float32) - p", "s0 = s0 + d", "s1 = s1 + d * d"]


def _walk(v: Variant) -> list[str]:
    """Lines summing this block's tiles into s0, s1 (of d = x - p, p the first row of x)."""
    tiles, s = ROWS // v.rows, v.splits
    if v.order == "bands":
        count, at = f"({tiles} - sp + {s - 1}) // {s}", lambda i: f"{i} * {s} + sp"
    else:
        per = -(-tiles // s)
        count, at = f"ct.minimum({per}, {tiles} - sp * {per})", lambda i: f"sp * {per} + {i}"
    lines = [f"s0 = ct.full(({v.rows}, {C}), 0.0, dtype=ct.float32)", "s1 = s0", f"n = {count}"]
    if not v.prefetch:
        return [*lines, "for i in range(n):", *(f"    {line}" for line in _add(_load(at("i"), v)))]
    lines += [f"t{k} = {_load(at(str(k)), v)}" for k in range(v.prefetch)]
    lines += [f"for i in range(n - {v.prefetch}):", f"    ahead = {_load(at(f'(i + {v.prefetch})'), v)}"]
    lines += [f"    {line}" for line in _add("t0")]
    lines += [f"    t{k} = t{k + 1}" for k in range(v.prefetch - 1)] + [f"    t{v.prefetch - 1} = ahead"]
    return lines + [line for k in range(v.prefetch) for line in _add(f"t{k}")]


def _finalize_lines(s0: str, s1: str, tk: str, at: str) -> list[str]:
    """mean, inv_variance, the float32 coefficients and running statistics from float64 sums s0, s1."""
    lines = [
        f"p64 = ct.reshape(ct.astype(ct.load(x, index=(0, {at}), shape=(1, {tk}), {ZERO}), ct.float64), ({tk},))",
        f"mu = p64 + {s0} / {COUNT!r}",
        f"var = ct.maximum(({s1} - {s0} * ({s0} / {COUNT!r})) / {COUNT!r}, 0.0)",
        f"r = 1.0 / ct.sqrt(var + {EPS!r})",
        f"ct.store(mean, index=({at},), tile=ct.astype(mu, mean.dtype))",
        f"ct.store(inv, index=({at},), tile=ct.astype(r, inv.dtype))",
        f"ct.store(wmean, index=({at},), tile=ct.astype(mu, ct.float32))",
        f"ct.store(winv, index=({at},), tile=ct.astype(r, ct.float32))",
    ]
    for src, dst, value in (("rm", "nrm", "mu"), ("rv", "nrv", f"var * {COUNT / (COUNT - 1)!r}")):
        old = f"ct.astype(ct.load({src}, index=({at},), shape=({tk},), {ZERO}), ct.float64)"
        new = f"{1 - MOMENTUM!r} * {old} + {MOMENTUM!r} * {value}"
        lines.append(f"ct.store({dst}, index=({at},), tile=ct.astype({new}, {dst}.dtype))")
    return lines


FINAL_PARAMS = "mean, inv, wmean, winv, rm, rv, nrm, nrv"  # the finalize's outputs and inputs after x, p0, p1


def _kernel(params: str, body: list[str], v: Variant | None = None) -> str:
    hints = "" if v is None else ", ".join(f"{k}={h}" for k, h in (("occupancy", v.occupancy), ("num_worker_warps", v.warps)) if h)  # fmt: skip
    deco = f"@ct.kernel({hints})" if hints else "@ct.kernel"
    return f"{deco}\ndef kernel({params}):\n" + "".join(f"    {line}\n" for line in body)


def stats_source(v: Variant) -> str:
    """The statistics kernel: (x, p0, p1), or (x, the finalize's vectors, acc, ticket) when it finalizes."""
    first = f"p = ct.astype(ct.load(x, index=(0, 0), shape=(1, {C}), {ZERO}), ct.float32)"
    if not v.splits:  # one tile a block: float32 partial rows
        tile = f"ct.astype(ct.load(x, index=(sp, 0), shape=({v.rows}, {C}), check_bounds=False), ct.float32)"
        body = ["sp = ct.bid(0)", first, f"d = {tile} - p", "s0 = d", "s1 = d * d"]
    else:
        body = ["sp = ct.bid(1)", first, *_walk(v)]
    total = [f"t{k} = ct.sum(ct.astype(s{k}, ct.float64), axis=0)" for k in range(2)]
    if v.sums == "atomics":
        body += [*total, f"c = ct.arange({C}, dtype=ct.int32)", f"ct.atomic_add(acc, c, t0, {RELAXED})"]
        body += [f"ct.atomic_add(acc, c + {C}, t1, {RELAXED})", f"if ct.atomic_add(ticket, 0, 1) == {v.blocks - 1}:"]
        last = ["a0 = ct.atomic_xchg(acc, c, 0.0)", f"a1 = ct.atomic_xchg(acc, c + {C}, 0.0)"]
        last += ["ct.atomic_xchg(ticket, 0, 0)", *_finalize_lines("a0", "a1", str(C), "0")]
        return _kernel(f"x, {FINAL_PARAMS}, acc, ticket", body + [f"    {line}" for line in last], v)
    if v.sums == "ticket":  # float64 rows as sigdnn's, then the last block to arrive adds them and finalizes
        body += [*total, *(f"ct.store(p{k}, index=(sp, 0), tile=ct.reshape(t{k}, (1, {C})))" for k in range(2))]
        body.append(f"if ct.atomic_add(ticket, 0, 1) == {v.blocks - 1}:")
        rows = v.final_tile
        last = [
            f"a0 = ct.full(({rows}, {C}), 0.0, dtype=ct.float64)",
            "a1 = a0",
            f"for i in range({-(-v.blocks // rows)}):",
        ]
        last += [f"    a{k} = a{k} + ct.load(p{k}, index=(i, 0), shape=({rows}, {C}), {ZERO})" for k in range(2)]
        last += ["s0 = ct.sum(a0, axis=0)", "s1 = ct.sum(a1, axis=0)", "ct.atomic_xchg(ticket, 0, 0)"]
        last += _finalize_lines("s0", "s1", str(C), "0")
        return _kernel(f"x, {FINAL_PARAMS}, p0, p1, ticket", body + [f"    {line}" for line in last], v)
    if v.sums == "rows32":
        stores = [f"ct.store(p{k}, index=(sp, 0), tile=ct.reshape(ct.sum(s{k}, axis=0), (1, {C})))" for k in range(2)]
    elif v.sums == "columns":
        stores = [*total, *(f"ct.store(p{k}, index=(0, sp), tile=ct.reshape(t{k}, ({C}, 1)))" for k in range(2))]
    else:
        stores = [*total, *(f"ct.store(p{k}, index=(sp, 0), tile=ct.reshape(t{k}, (1, {C})))" for k in range(2))]
    return _kernel("x, p0, p1", body + stores, v)


def finalize_source(v: Variant) -> str:
    """The finalize of a variant's columns or rows32 partials: ``final_tile`` channels a block."""
    tk, s = v.final_tile, v.blocks
    if v.sums == "columns":
        width = 1 << (s - 1).bit_length()
        sums = [f"s{k} = ct.sum(ct.load(p{k}, index=(kt, 0), shape=({tk}, {width}), {ZERO}), axis=1)" for k in range(2)]
    else:
        ts = max(1, 2048 // tk)
        sums = [f"a0 = ct.full(({ts}, {tk}), 0.0, dtype=ct.float64)", "a1 = a0", f"for i in range({-(-s // ts)}):"]
        sums += [f"    a{k} = a{k} + ct.astype(ct.load(p{k}, index=(i, kt), shape=({ts}, {tk}), {ZERO}), ct.float64)"
                 for k in range(2)]  # fmt: skip
        sums += ["s0 = ct.sum(a0, axis=0)", "s1 = ct.sum(a1, axis=0)"]
    return _kernel(f"x, p0, p1, {FINAL_PARAMS}", ["kt = ct.bid(0)", *sums, *_finalize_lines("s0", "s1", str(tk), "kt")])


LABELS = {
    # persistent, TMA (sigdnn's loop): stages, blocks, order
    "stages10": Variant(latency=6), "stages12": Variant(latency=10), "blocks132": Variant(occupancy=1, splits=132),
    "blocks132stages10": Variant(occupancy=1, splits=132, latency=6), "blocks198stages12": Variant(splits=198, latency=10),
    "blocks132stages8": Variant(occupancy=1, splits=132, latency=5),
    "blocks132stages12": Variant(occupancy=1, splits=132, latency=7),
    "rows32w8blocks132stages10": Variant(rows=32, occupancy=1, warps=8, splits=132, latency=6),
    "chunks": Variant(order="chunks"), "rows8o4blocks528": Variant(rows=8, occupancy=4, splits=528, latency=10),
    # persistent, register prefetch (no TMA)
    "noTMA": Variant(tma=False), "prefetch1": Variant(prefetch=1), "prefetch2": Variant(prefetch=2),
    "prefetch1o3": Variant(occupancy=3, prefetch=1), "prefetch1rows8": Variant(rows=8, prefetch=1),
    "prefetch3rows8": Variant(rows=8, prefetch=3),
    # one tile a block, float32 partial rows
    **{f"tile{r}o{o}": Variant(rows=r, occupancy=o, splits=0, sums="rows32", final_tile=2)
       for r, o in ((16, 8), (32, 4), (32, 8), (64, 2), (64, 4), (128, 1), (128, 2))},
    "tile128w8": Variant(rows=128, occupancy=None, warps=8, splits=0, sums="rows32", final_tile=2),
    # partials as (C, S), the finalize reading rows
    "columns8": Variant(sums="columns"), "columns4": Variant(sums="columns", final_tile=4),
    # the finalize folded into the statistics pass
    "ticket8": Variant(occupancy=1, splits=132, latency=6, sums="ticket"),
    "ticket2": Variant(occupancy=1, splits=132, latency=6, sums="ticket", final_tile=2),
    "ticket16": Variant(occupancy=1, splits=132, latency=6, sums="ticket", final_tile=16),
    "atomics": Variant(sums="atomics"), "atomicsPrefetch1": Variant(prefetch=1, sums="atomics"),
}  # fmt: skip


def launcher(calls: list[tuple], zero: torch.Tensor | None = None) -> Callable[[], None]:
    """A run of recorded ``CUTILE.launch`` calls (``zero`` zeroed first)."""

    def run() -> None:
        if zero is not None:
            zero.zero_()
        for c in calls:
            CUTILE.launch(*c)

    return run


class Node:
    """sigdnn's batchnorm node on the benchmark's tensors, bound; its three launches as recorded."""

    def __init__(self) -> None:
        g = gc._norm_graph("batchnorm")
        self.data = data = gc._norm_inputs(g, "batchnorm")
        self.ex = ex = sigdnn.Executor("gpu")
        self.plan = ex.prepare(g)
        outs = gc._norm_outputs(g, "batchnorm")
        self.y = outs[g.outputs[0].name]
        ex.execute(self.plan, {**data, **outs}, to_host=False)
        torch.cuda.synchronize()
        (launch,) = ex.memory.bound(self.plan, False)._launches
        self.calls = gc._recorded_calls(launch)
        self.final_args = self.calls[1][3]  # x, p0, p1, mean, inv, wmean, winv, rm, rv, nrm, nrv
        self.vectors = [torch.as_tensor(a, device="cuda") for a in self.final_args[3:]]
        self.written = [self.vectors[i] for i in (0, 1, 2, 3, 6, 7)]  # all but rm and rv
        self.want = [t.clone() for t in self.vectors]
        self.want_y = self.y.clone()

    def stream(self):
        return gc.on_stream(self.ex, self.plan)

    def check(self, run: Callable[[], None]) -> str:
        """A variant's per-channel outputs and y against sigdnn's, after one ``run`` of it."""
        for t in (*self.written, self.y):
            t.zero_()
        run()
        torch.cuda.synchronize()
        rel = [((got.double() - w.double()).abs() / w.double().abs().clamp_min(1e-30)).max().item()
               for got, w in zip(self.vectors, self.want, strict=True)]  # fmt: skip
        dy = (self.y.float() - self.want_y.float()).abs().max().item()
        return f"vectors' largest relative difference {max(rel):.1e}, largest |y| difference {dy}"


def variant_runs(node: Node, v: Variant) -> tuple[list[tuple], list[tuple], torch.Tensor | None]:
    """(the statistics launch alone, the node's launches with it, what a memset would zero) for variant ``v``."""
    stream, _, _, args = node.calls[0]
    kernel = CUTILE.kernel(KernelSource("bn_stats", stats_source(v)))
    grid = (v.blocks,) if not v.splits else (1, v.blocks)
    if v.sums == "ticket":
        p = [torch.zeros((v.blocks, C), device="cuda", dtype=torch.float64) for _ in range(2)]
        ticket = torch.zeros(1, device="cuda", dtype=torch.int32)
        first = (stream, grid, kernel, (args[0], *node.final_args[3:], *p, ticket))
        return [first], [first, node.calls[2]], None
    if v.sums == "atomics":
        state = torch.zeros(2 * C + 2, device="cuda", dtype=torch.float64)  # acc, then the ticket's 8 bytes
        first = (
            stream,
            grid,
            kernel,
            (args[0], *node.final_args[3:], state[: 2 * C], state[2 * C :].view(torch.int32)),
        )
        return [first], [first, node.calls[2]], state
    shape = (C, v.blocks) if v.sums == "columns" else (v.blocks, C)
    dtype = torch.float32 if v.sums == "rows32" else torch.float64
    p = [torch.zeros(shape, device="cuda", dtype=dtype) for _ in range(2)]
    first = (stream, grid, kernel, (args[0], *p))
    if v.sums == "rows":  # sigdnn's finalize reads as many rows as p0 has
        final = (stream, node.calls[1][1], node.calls[1][2], (args[0], *p, *node.final_args[3:]))
    else:
        blocks = (C // v.final_tile,)
        final_kernel = CUTILE.kernel(KernelSource("bn_final", finalize_source(v)))
        final = (stream, blocks, final_kernel, (args[0], *p, *node.final_args[3:]))
    return [first], [first, final, node.calls[2]], None


def timed(table: dict[str, Callable[[], None]], title: str, nbytes: int) -> None:
    """Median microseconds of 15 interleaved samples of 10 runs each, and the rate over ``nbytes``."""
    samples = interleaved_samples(table, iters=10, repeats=15)
    print(f"== {title}: median us (min-max), TB/s", flush=True)
    for name, ms in samples.items():
        times = [t * 1e3 for t in ms]
        us = statistics.median(times)
        print(f"  {name:22s} {us:7.1f} ({min(times):.1f}-{max(times):.1f})  {nbytes / us / 1e6:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="?", default=",".join(LABELS), help="comma-separated LABELS")
    args = parser.parse_args()
    node = Node()
    alone, whole = {"sigdnn": launcher(node.calls[:1])}, {"sigdnn": launcher(node.calls)}
    whole["sigdnn, no finalize"] = launcher([node.calls[0], node.calls[2]])
    with node.stream():
        for label in args.labels.split(","):
            try:
                first, runs, state = variant_runs(node, LABELS[label])
                print(f"{label}: {node.check(launcher(runs))}", flush=True)
            except Exception as e:  # report every variant
                print(f"{label}: FAILED {type(e).__name__}: {str(e)[:500]}", flush=True)
                continue
            alone[label], whole[label] = launcher(first), launcher(runs)
            if state is not None:
                whole[f"{label}+memset"] = launcher(runs, state)
        timed(alone, "statistics kernel alone (rate: x read)", X_BYTES)
        timed(whole, "node in sequence (rate: x read + y written)", NODE_BYTES)


if __name__ == "__main__":
    main()
